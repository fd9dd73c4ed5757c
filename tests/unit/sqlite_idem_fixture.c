/* sqlite_idem_fixture.c — the fixture every part of test_sqlite_idem shares: a
 * fresh database file and a manual clock per test, the store opened on it,
 * and raw sqlite3 calls that fail the test when SQLite refuses them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "acemq/acemq.h"
#include "conformance/backends.h"
#include "sqlite_idem_fixture.h"

int sqlite_idem_setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(acemq_manual_clock_new(&f->clock, T0), 0);
    assert_int_equal(test_backend_fresh_url("sqlite", f->url, sizeof f->url), 0);
    f->path = f->url + strlen("sqlite:");
    *state = f;
    return 0;
}

int sqlite_idem_teardown(void **state)
{
    fixture *f = *state;
    /* Or the temporary directory cannot be removed. */
    if (f->link[0]) (void)unlink(f->link);
    acemq_manual_clock_free(f->clock);
    free(f);
    return 0;
}

void sqlite_idem_options(fixture *f, acemq_idem_options *o)
{
    acemq_idem_options_init(o);
    o->clock = acemq_manual_clock_get(f->clock);
    o->lease_ms = LEASE;
    o->retention_ms = RETENTION;
    o->synchronous = ACEMQ_SYNC_NORMAL;
}

acemq_idem *sqlite_idem_open_url(fixture *f, const char *url)
{
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    acemq_idem *h = NULL;
    int rc = acemq_idem_open(&h, url, &o);
    if (rc != 0) fail_msg("open %s: %s", url, acemq_err_name(rc));
    assert_string_equal(acemq_idem_backend(h), "sqlite");
    return h;
}

sqlite3 *sqlite_idem_raw_open(const char *path)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) fail_msg("sqlite3_open_v2 %s: %s", path, sqlite3_errstr(rc));
    return db;
}

void sqlite_idem_exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) fail_msg("%s: %s", sql, err);
}

/* First column of the first row as an integer, for pragmas and counts. */
int64_t sqlite_idem_query_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

int sqlite_idem_claim(acemq_idem *h, const char *id, acemq_claim *c)
{
    return acemq_idem_try_claim(h, id, strlen(id), NULL, c);
}
