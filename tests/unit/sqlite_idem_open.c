/* sqlite_idem_open.c — opening and failing loudly: a newer schema refused,
 * URL parameters, an unwritable path, a file that cannot grow, and a writer
 * that holds the lock past busy_timeout_ms; each with SQLite's own text. */
#include <errno.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "acemq/acemq.h"
#include "acemq/sqlite.h"
#include "core/url.h"
#include "idem/idem_backend.h"
#include "backends/test_control.h"
#include "sqlite_idem_fixture.h"

/* ---- schema, URL, errors -------------------------------------------------- */

void newer_schema_refused(void **state)
{
    fixture *f = *state;
    sqlite3 *db = sqlite_idem_raw_open(f->path);
    sqlite_idem_exec(db, "CREATE TABLE acemq_schema_version(component TEXT PRIMARY KEY,"
                         " version INTEGER NOT NULL);"
                         "INSERT INTO acemq_schema_version VALUES('idem', 2)");
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    acemq_idem *h = (acemq_idem *)1;
    assert_int_equal(acemq_idem_open(&h, f->url, &o), ACEMQ_ESCHEMA);
    assert_null(h);
    h = (acemq_idem *)1;
    assert_int_equal(acemq_idem_open_sqlite(&h, db, &o), ACEMQ_ESCHEMA);
    assert_null(h);
    /* Nothing was created next to the newer schema. */
    assert_int_equal(
        sqlite_idem_query_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'acemq_idem'"),
        0);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* Every connection opened in this process, newest last: a caller-visible way
 * to look at the connection a URL-opened store made for itself. */
static sqlite3 *last_opened;

static int note_connection(sqlite3 *db, const char **err, const struct sqlite3_api_routines *api)
{
    (void)err;
    (void)api;
    last_opened = db;
    return SQLITE_OK;
}

void url_parameters(void **state)
{
    fixture *f = *state;
    char url[700];
    assert_int_equal(sqlite3_auto_extension((void (*)(void))note_connection), SQLITE_OK);
    snprintf(url, sizeof url, "%s?synchronous=normal&busy_timeout_ms=250", f->url);
    last_opened = NULL;
    acemq_idem *h = sqlite_idem_open_url(f, url);
    assert_non_null(last_opened);
    assert_int_equal(sqlite_idem_query_int(last_opened, "PRAGMA synchronous"), 1);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(last_opened, "PRAGMA journal_mode", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    acemq_idem_close(h);

    snprintf(url, sizeof url, "%s?synchronous=off", f->url);
    h = sqlite_idem_open_url(f, url);
    assert_int_equal(sqlite_idem_query_int(last_opened, "PRAGMA synchronous"), 0);
    acemq_idem_close(h);
    /* Without the parameter, the options decide. */
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    o.synchronous = ACEMQ_SYNC_FULL;
    assert_int_equal(acemq_idem_open(&h, f->url, &o), 0);
    assert_int_equal(sqlite_idem_query_int(last_opened, "PRAGMA synchronous"), 2);
    acemq_idem_close(h);
    assert_int_equal(sqlite3_cancel_auto_extension((void (*)(void))note_connection), 1);

    static const char *const bad[] = {"?synchronous=sometimes", "?busy_timeout_ms=soon",
                                      "?busy_timeout_ms=-1", "?journal_mode=delete",
                                      "?synchronous=full&colour=blue"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(url, sizeof url, "%s%s", f->url, bad[i]);
        h = (acemq_idem *)1;
        int rc = acemq_idem_open(&h, url, &o);
        if (rc != ACEMQ_EURL) fail_msg("%s: %s", url, acemq_err_name(rc));
        assert_null(h);
    }
    h = (acemq_idem *)1;
    assert_int_equal(acemq_idem_open(&h, "sqlite:", &o), ACEMQ_EURL);
    assert_int_equal(acemq_idem_open(&h, "sqlite://host/x.db", &o), ACEMQ_EURL);
    /* An in-memory database has no WAL and needs none: it is private. */
    assert_int_equal(acemq_idem_open(&h, "sqlite::memory:", &o), 0);
    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(h, "m", &c), ACEMQ_CLAIMED);
    assert_int_equal(sqlite_idem_claim(h, "m", &c), ACEMQ_IN_PROGRESS);
    acemq_idem_close(h);
    /* Joining a caller's transaction needs the caller's connection. */
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    assert_int_equal(acemq_idem_open(&h, f->url, &o), ACEMQ_EINVAL);
}

/* acemq_idem_open frees the handle on failure, so the message is read through
 * the backend's own entry point on a handle the test keeps. */
static int open_keeping_handle(fixture *f, const char *url, acemq_idem **out)
{
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    assert_int_equal(acemq__idem_new(out, &o), 0);
    acemq__url u;
    assert_int_equal(acemq__url_parse(&u, url), 0);
    int rc = acemq__idem_open_sqlite_url(*out, &u);
    acemq__url_free(&u);
    return rc;
}

void unwritable_path(void **state)
{
    fixture *f = *state;
    char url[700];
    snprintf(url, sizeof url, "%s.d/no/such/dir/idem.db", f->url);
    acemq_idem *h = (acemq_idem *)1;
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    int rc = acemq_idem_open(&h, url, &o);
    assert_true(rc < 0);
    assert_null(h);

    rc = open_keeping_handle(f, url, &h);
    assert_int_equal(rc, ACEMQ_EIO);
    const char *msg = acemq_idem_errmsg(h);
    if (!strstr(msg, "unable to open database file")) fail_msg("errmsg: %s", msg);
    assert_non_null(strstr(msg, "no/such/dir"));
    /* and the system's reason, which SQLite kept */
    if (!strstr(msg, strerror(ENOENT))) fail_msg("errmsg without the reason: %s", msg);
    assert_null(h->self);
    acemq__idem_free(h);

    /* A file that is not a database: SQLite's words again. */
    FILE *junk = fopen(f->path, "w");
    assert_non_null(junk);
    for (int i = 0; i < 200; i++)
        fputs("this is not an sqlite database, just text. ", junk);
    fclose(junk);
    rc = open_keeping_handle(f, f->url, &h);
    assert_int_equal(rc, ACEMQ_EIO);
    msg = acemq_idem_errmsg(h);
    if (!strstr(msg, "not a database")) fail_msg("errmsg: %s", msg);
    acemq__idem_free(h);
}

/* The id of pair i in the file-size test. */
static int size_id(char *buf, size_t len, int i)
{
    return snprintf(buf, len, "order-%08d-with-some-length", i);
}

/* In a child: the store opened, then every file the process writes limited
 * to 256 KiB (RLIMIT_FSIZE, SIGXFSZ ignored: a write past it fails with
 * EFBIG, as on a file system that refuses to grow the file), claims and
 * confirms until a call fails. Reports the last confirmed pair and the one
 * that failed on fd; exits 0 when the failure was ACEMQ_EIO naming what
 * SQLite was doing. */
static void fill_under_size_limit(fixture *f, int fd)
{
    if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR) _exit(2);
    acemq_idem *h = sqlite_idem_open_url(f, f->url);
    struct rlimit limit = {256 << 10, 256 << 10};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(2);
    int report[2] = {-1, -1}, rc = 0;
    char id[64];
    for (int i = 0; i < 200000 && rc == 0; i++) {
        int n = size_id(id, sizeof id, i);
        acemq_claim c;
        rc = acemq_idem_try_claim(h, id, (size_t)n, NULL, &c);
        if (rc == ACEMQ_CLAIMED) rc = acemq_idem_confirm(h, id, (size_t)n, c.token);
        if (rc == 0)
            report[0] = i;
        else
            report[1] = i;
    }
    const char *msg = acemq_idem_errmsg(h);
    int ok = rc == ACEMQ_EIO && strstr(msg, "sqlite: disk I/O error (SQLITE_IOERR_WRITE");
    if (!ok) fprintf(stderr, "at pair %d: %s: %s\n", report[1], acemq_err_name(rc), msg);
    if (write(fd, report, sizeof report) != (ssize_t)sizeof report) _exit(2);
    _exit(ok ? 0 : 1);
}

/* A file system that will not let the database grow (here a file size
 * limit; a full disk or a quota the same way): the call that meets it fails
 * with ACEMQ_EIO and says what SQLite was doing, and nothing is lost or
 * half-written: reopened without the limit, every pair confirmed before
 * is confirmed, and the one that failed is not, and can be claimed once
 * its lease (if its claim was written) runs out. */
void a_file_that_cannot_grow_fails_loudly_and_loses_nothing(void **state)
{
    fixture *f = *state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        (void)close(p[0]);
        fill_under_size_limit(f, p[1]);
    }
    assert_int_equal(close(p[1]), 0);
    int report[2] = {-1, -1}, status = 0;
    assert_int_equal(read(p[0], report, sizeof report), (ssize_t)sizeof report);
    assert_int_equal(close(p[0]), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(report[0] > 0);
    assert_int_equal(report[1], report[0] + 1);

    acemq_idem *h = sqlite_idem_open_url(f, f->url);
    char id[64];
    for (int i = 0; i <= report[0]; i++) {
        int n = size_id(id, sizeof id, i);
        if (acemq_idem_is_confirmed(h, id, (size_t)n) != 1) fail_msg("pair %d was lost", i);
    }
    int n = size_id(id, sizeof id, report[1]);
    assert_int_equal(acemq_idem_is_confirmed(h, id, (size_t)n), 0);
    acemq_manual_clock_advance(f->clock, LEASE + 1);
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(h, id, (size_t)n, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(h, id, (size_t)n, c.token), 0);
    acemq_idem_close(h);
}

/* A writer that holds the lock past busy_timeout_ms makes the call fail with
 * EBUSY and SQLite's text, and leaves nothing half-written. */
void busy_gives_up(void **state)
{
    fixture *f = *state;
    char url[700];
    snprintf(url, sizeof url, "%s?busy_timeout_ms=0", f->url);
    acemq_idem *h = sqlite_idem_open_url(f, url);
    snprintf(url, sizeof url, "%s?busy_timeout_ms=20", f->url);
    acemq_idem *patient = sqlite_idem_open_url(f, url);
    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(h, "released", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_release(h, "released", 8, c.token), 0);

    sqlite3 *other = sqlite_idem_raw_open(f->path);
    sqlite_idem_exec(other, "BEGIN IMMEDIATE");
    assert_int_equal(sqlite_idem_claim(h, "new", &c), ACEMQ_EBUSY);
    assert_non_null(strstr(acemq_idem_errmsg(h), "database is locked"));
    assert_int_equal(sqlite_idem_claim(patient, "new", &c), ACEMQ_EBUSY);
    assert_int_equal(sqlite_idem_claim(patient, "released", &c), ACEMQ_EBUSY);
    /* Reads do not wait for writers in WAL mode. */
    assert_int_equal(acemq_idem_is_confirmed(h, "new", 3), 0);
    sqlite_idem_exec(other, "COMMIT");
    assert_int_equal(sqlite3_close(other), SQLITE_OK);

    assert_int_equal(sqlite_idem_claim(patient, "new", &c), ACEMQ_CLAIMED);
    assert_int_equal(sqlite_idem_claim(patient, "released", &c), ACEMQ_CLAIMED);
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(h, &s), 0);
    assert_int_equal(s.errors, 1);
    acemq_idem_close(patient);
    acemq_idem_close(h);
}
