/* outbox_refused.c — what the outbox refuses and says why: bad records (and
 * nothing written), bad calls, URLs it cannot open; and the schema and
 * session: an add before the schema exists, a newer schema, the database's
 * clock by default, and opts.synchronous reaching the handle's session. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "conformance/outbox_fixture.h"
#include "backends/test_control.h"
#include "conformance/outbox_cases.h"

void bad_records_are_refused_and_write_nothing(void **state)
{
    outbox_fixture *f = *state;
    f->add_opts.max_body = 16;
    char long_text[ACEMQ_OUTBOX_ID_MAX + 2];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    char body[17] = "0123456789abcdef";
    acemq_outbox_header dup[] = {{"a", "1"}, {"a", "2"}};
    acemq_outbox_header noname[] = {{NULL, "1"}};

    outbox_sql(f, NULL, "BEGIN");
    acemq_outbox_record r = outbox_rec("ok", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);

    assert_int_equal(outbox_add(f, NULL, NULL, NULL), ACEMQ_EINVAL);
    r = outbox_rec("a", NULL, "x");
    r.destination = NULL;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "destination"));
    r = outbox_rec("a", NULL, "x");
    r.routing_key = NULL;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r = outbox_rec(long_text, NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "longer than"));
    r = outbox_rec("", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r = outbox_rec("a", NULL, "x");
    r.destination = long_text;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r = outbox_rec("a", "", "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r = outbox_rec("a", NULL, NULL);
    r.body = body;
    r.body_len = 17;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_ERANGE);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "over the maximum of 16"));
    r.body = NULL;
    r.body_len = 3;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r = outbox_rec("a\xff\xfe", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "UTF-8"));
    r = outbox_rec("a", NULL, "x");
    r.headers = dup;
    r.n_headers = 2;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r.headers = noname;
    r.n_headers = 1;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r.headers = NULL;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r.n_headers = ACEMQ_OUTBOX_HEADERS_MAX + 1;
    r.headers = dup;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);

    /* A duplicate id is refused, and the transaction is still good. */
    r = outbox_rec("ok", NULL, "again");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EEXIST);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "'ok' exists"));
    r = outbox_rec("ok2", NULL, "y");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);
    outbox_sql(f, NULL, "COMMIT");
    assert_int_equal(outbox_rows(f), 2);
}

void bad_calls_get_einval(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    const acemq_outbox_msg *m;
    size_t n;
    assert_int_equal(acemq_outbox_claim_batch(h, 0, 1000, &m, &n), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_claim_batch(h, 10, 0, &m, &n), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_claim_batch(h, 10, 1000, NULL, &n), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_claim_batch(NULL, 10, 1000, &m, &n), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_mark_published(h, NULL, 1), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_mark_published(h, "", 1), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_mark_failed(h, NULL, 1, "x"), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_purge(h, -1, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_wait(h, -1), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_pending_count(h, NULL), ACEMQ_EINVAL);
    acemq_outbox_close(h);

    acemq_outbox_options o = f->opts;
    o.max_attempts = 0;
    assert_int_equal(acemq_outbox_open(&h, f->url, &o), ACEMQ_EINVAL);
    assert_null(h);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "max_attempts"));
    assert_int_equal(acemq_outbox_open(&h, "kafka://x", &f->opts), ACEMQ_EURL);
    acemq_outbox_close(NULL);
}

/* An outbox that cannot be opened says why, and hands back no handle:
 * SQLite without a file, with a parameter it does not know, in a directory
 * that does not exist; PostgreSQL where no server listens. */
void unopenable_urls_say_why(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = NULL;
    if (f->pg) {
        assert_int_equal(acemq_outbox_open(&h, "postgres://acemq@127.0.0.1:1/acemq", &f->opts),
                         ACEMQ_EIO);
        assert_null(h);
        assert_non_null(strstr(acemq_outbox_errmsg(NULL), "postgres: connecting"));
        return;
    }
    assert_int_equal(acemq_outbox_open(&h, "sqlite:", &f->opts), ACEMQ_EURL);
    assert_null(h);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "names no file"));
    char url[1100];
    snprintf(url, sizeof url, "%s?journal=off", f->url);
    assert_int_equal(acemq_outbox_open(&h, url, &f->opts), ACEMQ_EURL);
    assert_null(h);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "'journal'"));
    const char *missing = "sqlite:/nonexistent-acemq-dir/sub/outbox.db";
    assert_int_equal(acemq_outbox_open(&h, missing, &f->opts), ACEMQ_EIO);
    assert_null(h);
    assert_non_null(
        strstr(acemq_outbox_errmsg(NULL), "opening /nonexistent-acemq-dir/sub/outbox.db"));
    /* with the system's reason, which SQLite kept */
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), strerror(ENOENT)));
}

void add_before_the_schema_exists(void **state)
{
    outbox_fixture *f = *state;
    outbox_sql(f, NULL, "DROP TABLE acemq_outbox");
    outbox_sql(f, NULL, "BEGIN");
    acemq_outbox_record r = outbox_rec("early", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_ESCHEMA);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "acemq_outbox_open"));
    outbox_sql(f, NULL, "ROLLBACK");
}

void newer_schema_is_refused(void **state)
{
    outbox_fixture *f = *state;
    outbox_sql(f, NULL, "UPDATE acemq_schema_version SET version = 99 WHERE component = 'outbox'");
    acemq_outbox *h = NULL;
    assert_int_equal(acemq_outbox_open(&h, f->url, &f->opts), ACEMQ_ESCHEMA);
    assert_null(h);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "newer"));
}

void default_clock_is_the_database_s(void **state)
{
    /* Without an injected clock, PostgreSQL leases run on clock_timestamp()
     * and SQLite's on the machine's clock: a claim's lease must end between
     * now and now + lease as the database sees it. Bounds, not timings. */
    outbox_fixture *f = *state;
    f->opts.clock = NULL;
    f->add_opts.clock = NULL;
    acemq_outbox *h1 = outbox_fixture_open(f), *h2 = outbox_fixture_open(f);
    const char *ids[] = {"real-time"};
    outbox_add_committed(f, ids, NULL, 1);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h1, 10, 600000, &m), 1);
    uint64_t token = m[0].token;
    assert_int_equal(outbox_claim(h2, 10, 600000, &m), 0); /* held: the lease is in the future */
    const char *now_sql = f->pg
                              ? "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
                              : "CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)";
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT lease_until - %s FROM acemq_outbox", now_sql);
    long long left = outbox_scalar(f, sql);
    assert_true(left > 0 && left <= 600000);
    snprintf(sql, sizeof sql, "SELECT %s - created_at FROM acemq_outbox", now_sql);
    long long age = outbox_scalar(f, sql);
    assert_true(age >= -5 && age < 3600000);
    assert_int_equal(acemq_outbox_mark_failed(h1, "real-time", token, "nack"), 0);
    snprintf(sql, sizeof sql, "SELECT next_attempt_at - %s FROM acemq_outbox", now_sql);
    long long backoff = outbox_scalar(f, sql);
    assert_true(backoff > 0 && backoff <= 1000); /* the first delay: base 1 s less jitter */
    assert_int_equal(outbox_claim(h2, 10, 600000, &m), 0);
    acemq_outbox_close(h1);
    acemq_outbox_close(h2);
}

/* opts.synchronous reaches the handle's own session: SQLite's PRAGMA
 * synchronous; on PostgreSQL synchronous_commit stays as the server has it
 * (on) for FULL and is off below it. The handle still claims and marks. */
void synchronous_reaches_the_session(void **state)
{
    outbox_fixture *f = *state;
    static const char *const sqlite_want[] = {"0", "1", "2"};
    static const char *const pg_want[] = {"off", "off", "on"};
    for (int mode = ACEMQ_SYNC_OFF; mode <= ACEMQ_SYNC_FULL; mode++) {
        f->opts.synchronous = mode;
        acemq_outbox *h = outbox_fixture_open(f);
        char got[32] = "";
        int rc = f->pg ? acemq__pg_outbox_sync_setting(h, got, sizeof got)
                       : acemq__sqlite_outbox_sync_setting(h, got, sizeof got);
        assert_int_equal(rc, 0);
        assert_string_equal(got, f->pg ? pg_want[mode] : sqlite_want[mode]);
        acemq_outbox_close(h);
    }
    outbox_sql(f, NULL, "BEGIN");
    acemq_outbox_record r = outbox_rec("relaxed", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);
    outbox_sql(f, NULL, "COMMIT");
    f->opts.synchronous = ACEMQ_SYNC_NORMAL;
    acemq_outbox *h = outbox_fixture_open(f);
    const acemq_outbox_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(acemq_outbox_claim_batch(h, 10, 60000, &m, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(m[0].id, "relaxed");
    assert_int_equal(acemq_outbox_mark_published(h, m[0].id, m[0].token), 0);
    acemq_outbox_close(h);
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE state = 1"), 1);
}
