/* test_sqlite_idem.c — what only the SQLite backend does: two processes on one
 * file, durability across reopen, the caller's connection and transaction,
 * schema versions, URL parameters, SQLite's error text, the token scheme (a
 * rolled-back claim's token is never issued again), the in-process writer
 * queue and the windowed purge of abandoned claims.
 *
 * Time moves only through a manual clock; nothing sleeps. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "acemq/acemq.h"
#include "acemq/sqlite.h"
#include "conformance/backends.h"
#include "core/url.h"
#include "idem/idem_backend.h"
#include "backends/test_control.h"

#define T0 1700000000000LL
#define LEASE 30000
#define RETENTION 3600000

typedef struct fixture {
    acemq_manual_clock *clock;
    char url[512];
    const char *path; /* inside url */
    char link[600];   /* a symlink a test made; removed in teardown, pass or fail */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(acemq_manual_clock_new(&f->clock, T0), 0);
    assert_int_equal(test_backend_fresh_url("sqlite", f->url, sizeof f->url), 0);
    f->path = f->url + strlen("sqlite:");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    /* Or the temporary directory cannot be removed. */
    if (f->link[0]) (void)unlink(f->link);
    acemq_manual_clock_free(f->clock);
    free(f);
    return 0;
}

static void options(fixture *f, acemq_idem_options *o)
{
    acemq_idem_options_init(o);
    o->clock = acemq_manual_clock_get(f->clock);
    o->lease_ms = LEASE;
    o->retention_ms = RETENTION;
    o->synchronous = ACEMQ_SYNC_NORMAL;
}

static acemq_idem *open_url(fixture *f, const char *url)
{
    acemq_idem_options o;
    options(f, &o);
    acemq_idem *h = NULL;
    int rc = acemq_idem_open(&h, url, &o);
    if (rc != 0) fail_msg("open %s: %s", url, acemq_err_name(rc));
    assert_string_equal(acemq_idem_backend(h), "sqlite");
    return h;
}

static sqlite3 *open_raw(const char *path)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) fail_msg("sqlite3_open_v2 %s: %s", path, sqlite3_errstr(rc));
    return db;
}

static void exec_ok(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) fail_msg("%s: %s", sql, err);
}

/* First column of the first row as an integer, for pragmas and counts. */
static int64_t query_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static int claim(acemq_idem *h, const char *id, acemq_claim *c)
{
    return acemq_idem_try_claim(h, id, strlen(id), NULL, c);
}

/* ---- two processes -------------------------------------------------------- */

enum { RACE_IDS = 2000 };

/* In a child: cmocka's asserts must not run here, and exit() would run the
 * parent's atexit cleanup and delete the database under the other child. */
static void race_child(const char *url, int go_fd, int report_fd)
{
    char byte;
    if (read(go_fd, &byte, 1) < 0) _exit(10);
    acemq_manual_clock *clock = NULL;
    if (acemq_manual_clock_new(&clock, T0) != 0) _exit(11);
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(clock);
    o.synchronous = ACEMQ_SYNC_NORMAL;
    o.busy_timeout_ms = 60000;
    acemq_idem *h = NULL;
    if (acemq_idem_open(&h, url, &o) != 0) _exit(12);
    static unsigned char claimed[RACE_IDS];
    for (int i = 0; i < RACE_IDS; i++) {
        char id[32];
        snprintf(id, sizeof id, "race-%d", i);
        acemq_claim c;
        int rc = acemq_idem_try_claim(h, id, strlen(id), NULL, &c);
        if (rc == ACEMQ_CLAIMED) {
            claimed[i] = 1;
            if (acemq_idem_confirm(h, id, strlen(id), c.token) != 0) _exit(13);
        } else if (rc != ACEMQ_ALREADY_CONFIRMED && rc != ACEMQ_IN_PROGRESS) {
            fprintf(stderr, "child %d: %s: %s\n", (int)getpid(), acemq_err_name(rc),
                    acemq_idem_errmsg(h));
            _exit(14);
        }
    }
    acemq_idem_close(h);
    acemq_manual_clock_free(clock);
    size_t off = 0;
    while (off < sizeof claimed) {
        ssize_t n = write(report_fd, claimed + off, sizeof claimed - off);
        if (n <= 0) _exit(15);
        off += (size_t)n;
    }
    _exit(0);
}

static void two_processes_claim_each_id_once(void **state)
{
    fixture *f = *state;
    /* The schema exists before the race, so the race is about the rows. */
    acemq_idem_close(open_url(f, f->url));
    int go[2];
    assert_int_equal(pipe(go), 0);
    int report[2][2];
    pid_t pid[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(pipe(report[k]), 0);
        pid[k] = fork();
        assert_true(pid[k] >= 0);
        if (pid[k] == 0) {
            close(go[1]);
            close(report[k][0]);
            race_child(f->url, go[0], report[k][1]);
        }
        close(report[k][1]);
    }
    close(go[0]);
    close(go[1]); /* both children see EOF and start together */
    static unsigned char claimed[2][RACE_IDS];
    for (int k = 0; k < 2; k++) {
        size_t off = 0;
        while (off < RACE_IDS) {
            ssize_t n = read(report[k][0], claimed[k] + off, RACE_IDS - off);
            if (n <= 0) break;
            off += (size_t)n;
        }
        close(report[k][0]);
        int status = 0;
        assert_int_equal(waitpid(pid[k], &status, 0), pid[k]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("child %d failed: status %d", k, status);
        assert_int_equal(off, RACE_IDS);
    }
    int per_child[2] = {0, 0};
    for (int i = 0; i < RACE_IDS; i++) {
        if (claimed[0][i] + claimed[1][i] != 1)
            fail_msg("id race-%d claimed %d times", i, claimed[0][i] + claimed[1][i]);
        per_child[0] += claimed[0][i];
        per_child[1] += claimed[1][i];
    }
    print_message("claims split %d / %d\n", per_child[0], per_child[1]);
    acemq_idem *h = open_url(f, f->url);
    assert_int_equal(acemq_idem_is_confirmed(h, "race-0", 6), 1);
    assert_int_equal(acemq_idem_is_confirmed(h, "race-1999", 9), 1);
    acemq_idem_close(h);
}

/* ---- reopen --------------------------------------------------------------- */

static void reopen_keeps_state(void **state)
{
    fixture *f = *state;
    acemq_idem *h = open_url(f, f->url);
    acemq_claim c;
    assert_int_equal(claim(h, "done", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm_result(h, "done", 4, c.token, "ok", 2), 0);
    assert_int_equal(claim(h, "held", &c), ACEMQ_CLAIMED);
    uint64_t held_token = c.token;
    acemq_idem_close(h); /* a crash, as far as "held" is concerned */

    h = open_url(f, f->url);
    assert_int_equal(acemq_idem_is_confirmed(h, "done", 4), 1);
    char buf[8];
    acemq_claim_opts co = {0};
    co.result_buf = buf;
    co.result_cap = sizeof buf;
    assert_int_equal(acemq_idem_try_claim(h, "done", 4, &co, &c), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(c.has_result, 1);
    assert_int_equal(c.result_len, 2);
    assert_memory_equal(buf, "ok", 2);
    assert_int_equal(claim(h, "held", &c), ACEMQ_IN_PROGRESS);
    assert_int_equal(c.lease_until_ms, T0 + LEASE);
    acemq_manual_clock_advance(f->clock, LEASE);
    assert_int_equal(claim(h, "held", &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 1);
    assert_true(c.token > held_token);
    /* The dead holder's token is fenced off. */
    assert_int_equal(acemq_idem_confirm(h, "held", 4, held_token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(h, "held", 4, c.token), 0);
    acemq_idem_close(h);
}

/* ---- the caller's connection ---------------------------------------------- */

static void caller_transaction(void **state)
{
    fixture *f = *state;
    sqlite3 *db = open_raw(f->path);
    acemq_idem_options o;
    options(f, &o);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&h, db, &o), 0);
    assert_string_equal(acemq_idem_backend(h), "sqlite");
    /* The caller's connection keeps its own journal mode. */
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "delete");
    sqlite3_finalize(st);

    acemq_claim c;
    assert_int_equal(claim(h, "order-1", &c), ACEMQ_CLAIMED);
    /* No transaction open: refused, nothing written. */
    assert_int_equal(acemq_idem_confirm(h, "order-1", 7, c.token), ACEMQ_ENOTX);
    assert_non_null(strstr(acemq_idem_errmsg(h), "transaction"));
    assert_int_equal(acemq_idem_is_confirmed(h, "order-1", 7), 0);

    /* Rolled back with the caller's work: unconfirmed, and still held. */
    exec_ok(db, "BEGIN");
    assert_int_equal(acemq_idem_confirm(h, "order-1", 7, c.token), 0);
    exec_ok(db, "ROLLBACK");
    assert_int_equal(acemq_idem_is_confirmed(h, "order-1", 7), 0);
    acemq_claim again;
    assert_int_equal(claim(h, "order-1", &again), ACEMQ_IN_PROGRESS);

    /* Committed with the caller's work. */
    exec_ok(db, "BEGIN");
    exec_ok(db, "CREATE TABLE orders(id TEXT)");
    assert_int_equal(acemq_idem_confirm(h, "order-1", 7, c.token), 0);
    exec_ok(db, "COMMIT");
    assert_int_equal(acemq_idem_is_confirmed(h, "order-1", 7), 1);
    assert_int_equal(claim(h, "order-1", &again), ACEMQ_ALREADY_CONFIRMED);

    /* A claim that needs several statements runs in a savepoint inside the
     * caller's transaction and rolls back with it. */
    assert_int_equal(claim(h, "order-2", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_release(h, "order-2", 7, c.token), 0);
    exec_ok(db, "BEGIN");
    assert_int_equal(claim(h, "order-2", &again), ACEMQ_CLAIMED);
    assert_true(again.token > c.token);
    exec_ok(db, "ROLLBACK");
    assert_int_equal(acemq_idem_confirm(h, "order-2", 7, again.token), ACEMQ_ENOTX);
    exec_ok(db, "BEGIN");
    assert_int_equal(acemq_idem_confirm(h, "order-2", 7, again.token), ACEMQ_ESTALE);
    exec_ok(db, "COMMIT");

    acemq_idem_close(h);
    /* The library never closed db, and left no statement behind on it. */
    assert_null(sqlite3_next_stmt(db, NULL));
    assert_int_equal(query_int(db, "SELECT count(*) FROM orders"), 0);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* Opening inside the caller's transaction creates the schema in a savepoint. */
static void caller_open_inside_transaction(void **state)
{
    fixture *f = *state;
    sqlite3 *db = open_raw(f->path);
    exec_ok(db, "BEGIN");
    acemq_idem_options o;
    options(f, &o);
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&h, db, &o), 0);
    assert_int_equal(sqlite3_get_autocommit(db), 0);
    acemq_claim c;
    assert_int_equal(claim(h, "x", &c), ACEMQ_CLAIMED);
    exec_ok(db, "COMMIT");
    assert_int_equal(claim(h, "x", &c), ACEMQ_IN_PROGRESS);
    acemq_idem_close(h);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);

    assert_int_equal(acemq_idem_open_sqlite(&h, NULL, &o), ACEMQ_EINVAL);
    assert_null(h);
}

/* ---- schema, URL, errors -------------------------------------------------- */

static void newer_schema_refused(void **state)
{
    fixture *f = *state;
    sqlite3 *db = open_raw(f->path);
    exec_ok(db, "CREATE TABLE acemq_schema_version(component TEXT PRIMARY KEY,"
                " version INTEGER NOT NULL);"
                "INSERT INTO acemq_schema_version VALUES('idem', 2)");
    acemq_idem_options o;
    options(f, &o);
    acemq_idem *h = (acemq_idem *)1;
    assert_int_equal(acemq_idem_open(&h, f->url, &o), ACEMQ_ESCHEMA);
    assert_null(h);
    h = (acemq_idem *)1;
    assert_int_equal(acemq_idem_open_sqlite(&h, db, &o), ACEMQ_ESCHEMA);
    assert_null(h);
    /* Nothing was created next to the newer schema. */
    assert_int_equal(query_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'acemq_idem'"),
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

static void url_parameters(void **state)
{
    fixture *f = *state;
    char url[700];
    assert_int_equal(sqlite3_auto_extension((void (*)(void))note_connection), SQLITE_OK);
    snprintf(url, sizeof url, "%s?synchronous=normal&busy_timeout_ms=250", f->url);
    last_opened = NULL;
    acemq_idem *h = open_url(f, url);
    assert_non_null(last_opened);
    assert_int_equal(query_int(last_opened, "PRAGMA synchronous"), 1);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(last_opened, "PRAGMA journal_mode", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    acemq_idem_close(h);

    snprintf(url, sizeof url, "%s?synchronous=off", f->url);
    h = open_url(f, url);
    assert_int_equal(query_int(last_opened, "PRAGMA synchronous"), 0);
    acemq_idem_close(h);
    /* Without the parameter, the options decide. */
    acemq_idem_options o;
    options(f, &o);
    o.synchronous = ACEMQ_SYNC_FULL;
    assert_int_equal(acemq_idem_open(&h, f->url, &o), 0);
    assert_int_equal(query_int(last_opened, "PRAGMA synchronous"), 2);
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
    assert_int_equal(claim(h, "m", &c), ACEMQ_CLAIMED);
    assert_int_equal(claim(h, "m", &c), ACEMQ_IN_PROGRESS);
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
    options(f, &o);
    assert_int_equal(acemq__idem_new(out, &o), 0);
    acemq__url u;
    assert_int_equal(acemq__url_parse(&u, url), 0);
    int rc = acemq__idem_open_sqlite_url(*out, &u);
    acemq__url_free(&u);
    return rc;
}

static void unwritable_path(void **state)
{
    fixture *f = *state;
    char url[700];
    snprintf(url, sizeof url, "%s.d/no/such/dir/idem.db", f->url);
    acemq_idem *h = (acemq_idem *)1;
    acemq_idem_options o;
    options(f, &o);
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
    acemq_idem *h = open_url(f, f->url);
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
static void a_file_that_cannot_grow_fails_loudly_and_loses_nothing(void **state)
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

    acemq_idem *h = open_url(f, f->url);
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
static void busy_gives_up(void **state)
{
    fixture *f = *state;
    char url[700];
    snprintf(url, sizeof url, "%s?busy_timeout_ms=0", f->url);
    acemq_idem *h = open_url(f, url);
    snprintf(url, sizeof url, "%s?busy_timeout_ms=20", f->url);
    acemq_idem *patient = open_url(f, url);
    acemq_claim c;
    assert_int_equal(claim(h, "released", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_release(h, "released", 8, c.token), 0);

    sqlite3 *other = open_raw(f->path);
    exec_ok(other, "BEGIN IMMEDIATE");
    assert_int_equal(claim(h, "new", &c), ACEMQ_EBUSY);
    assert_non_null(strstr(acemq_idem_errmsg(h), "database is locked"));
    assert_int_equal(claim(patient, "new", &c), ACEMQ_EBUSY);
    assert_int_equal(claim(patient, "released", &c), ACEMQ_EBUSY);
    /* Reads do not wait for writers in WAL mode. */
    assert_int_equal(acemq_idem_is_confirmed(h, "new", 3), 0);
    exec_ok(other, "COMMIT");
    assert_int_equal(sqlite3_close(other), SQLITE_OK);

    assert_int_equal(claim(patient, "new", &c), ACEMQ_CLAIMED);
    assert_int_equal(claim(patient, "released", &c), ACEMQ_CLAIMED);
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(h, &s), 0);
    assert_int_equal(s.errors, 1);
    acemq_idem_close(patient);
    acemq_idem_close(h);
}

/* ---- ids and tokens ------------------------------------------------------- */

static void binary_ids_verbatim(void **state)
{
    fixture *f = *state;
    acemq_idem *h = open_url(f, f->url);
    static const char id[] = "a\0'b\"c\0;--\\\0";
    const size_t len = sizeof id - 1;
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(h, id, len, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(h, id, len, c.token), 0);
    assert_int_equal(acemq_idem_is_confirmed(h, id, len), 1);
    /* Prefixes up to a NUL are other ids. */
    assert_int_equal(acemq_idem_is_confirmed(h, id, 1), 0);
    assert_int_equal(acemq_idem_is_confirmed(h, "a", 1), 0);
    assert_int_equal(acemq_idem_try_claim(h, id, len - 1, NULL, &c), ACEMQ_CLAIMED);
    acemq_idem_close(h);

    sqlite3 *db = open_raw(f->path);
    sqlite3_stmt *st = NULL;
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT id, typeof(id) FROM acemq_idem ORDER BY id", -1, &st, NULL),
        SQLITE_OK);
    int found = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        assert_string_equal((const char *)sqlite3_column_text(st, 1), "blob");
        if ((size_t)sqlite3_column_bytes(st, 0) == len &&
            memcmp(sqlite3_column_blob(st, 0), id, len) == 0)
            found++;
    }
    sqlite3_finalize(st);
    assert_int_equal(found, 1);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void tokens_grow(void **state)
{
    fixture *f = *state;
    acemq_idem_options o;
    options(f, &o);
    o.retention_ms = 1000;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open(&h, f->url, &o), 0);
    acemq_claim c;
    assert_int_equal(claim(h, "t", &c), ACEMQ_CLAIMED);
    uint64_t t1 = c.token;
    assert_int_equal(acemq_idem_release(h, "t", 1, t1), 0);
    assert_int_equal(claim(h, "t", &c), ACEMQ_CLAIMED);
    uint64_t t2 = c.token;
    assert_true(t2 > t1);
    assert_int_equal(c.takeover, 0);
    /* The released token stays dead. */
    assert_int_equal(acemq_idem_release(h, "t", 1, t1), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_renew(h, "t", 1, t1, 0), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_release(h, "t", 1, t2), 0);

    /* Purge forgets the released row only after retention; a later claim
     * still gets a larger token. */
    uint64_t purged = 99;
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 0);
    acemq_manual_clock_advance(f->clock, 1000);
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 1);
    assert_int_equal(claim(h, "t", &c), ACEMQ_CLAIMED);
    uint64_t t3 = c.token;
    assert_true(t3 > t2);
    assert_int_equal(acemq_idem_confirm(h, "t", 1, t2), ACEMQ_ESTALE);

    /* An expired confirmation is a new claim with a larger token, as is a
     * takeover. */
    assert_int_equal(acemq_idem_confirm(h, "t", 1, t3), 0);
    acemq_manual_clock_advance(f->clock, 1000);
    assert_int_equal(claim(h, "t", &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 0);
    uint64_t t4 = c.token;
    acemq_idem_stats st;
    assert_int_equal(acemq_idem_stats_get(h, &st), 0);
    assert_int_equal(st.expirations, 2); /* one purged, one forgotten on reclaim */
    assert_true(t4 > t3);
    acemq_manual_clock_advance(f->clock, LEASE);
    assert_int_equal(claim(h, "t", &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 1);
    assert_true(c.token > t4);
    acemq_idem_close(h);
}

/* Fingerprints persist, and the abandoned-claim purge waits for retention. */
static void fingerprints_and_abandoned(void **state)
{
    fixture *f = *state;
    acemq_idem *h = open_url(f, f->url);
    acemq_claim_opts a = {0}, b = {0};
    a.fingerprint = "AAAA";
    a.fingerprint_len = 4;
    b.fingerprint = "BBBB";
    b.fingerprint_len = 4;
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &a, &c), ACEMQ_CLAIMED);
    acemq_idem_close(h);
    h = open_url(f, f->url);
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &b, &c), ACEMQ_EMISMATCH);
    acemq_manual_clock_advance(f->clock, LEASE);
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &b, &c), ACEMQ_EMISMATCH);
    /* No fingerprint given: the stored one is kept for the next claimer. */
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 1);
    acemq_manual_clock_advance(f->clock, LEASE);
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &b, &c), ACEMQ_EMISMATCH);
    /* Abandoned claims go once idle for the retention period. */
    uint64_t purged = 99;
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 0);
    acemq_manual_clock_advance(f->clock, RETENTION);
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 1);
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &b, &c), ACEMQ_CLAIMED);
    acemq_idem_close(h);
}

/* ---- the writer queue ------------------------------------------------------ */

typedef struct queued_claim {
    acemq_idem *h;
    const char *id;
    int rc;
} queued_claim;

static void *claim_in_thread(void *arg)
{
    queued_claim *q = arg;
    acemq_claim c;
    q->rc = acemq_idem_try_claim(q->h, q->id, strlen(q->id), NULL, &c);
    return NULL;
}

/* Waits for a condition another thread brings about; no clock involved. */
static void wait_for_waiters(acemq_idem *h, int n)
{
    while (acemq__sqlite_idem_queue_waiters(h) != n)
        sched_yield();
}

static int64_t rows_with_id(sqlite3 *db, const char *id)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM acemq_idem WHERE id = ?1", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_bind_blob(st, 1, id, (int)strlen(id), SQLITE_STATIC), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* Handles on one file share one writer queue, whatever the path's spelling
 * and whoever opened the connection; writes wait in it, reads and the
 * caller's open transactions do not, a wait is bounded by busy_timeout_ms,
 * and the registry forgets the file when its last handle closes. */
static void writer_queue_per_file(void **state)
{
    fixture *f = *state;
    size_t files = acemq__sqlite_idem_queue_files();
    acemq_idem *h1 = open_url(f, f->url);
    const void *q = acemq__sqlite_idem_queue(h1);
    assert_non_null(q);
    assert_int_equal(acemq__sqlite_idem_queue_files(), files + 1);

    char url[700];
    snprintf(f->link, sizeof f->link, "%s.link", f->path);
    assert_int_equal(symlink(f->path, f->link), 0);
    snprintf(url, sizeof url, "sqlite:%s", f->link);
    acemq_idem *h2 = open_url(f, url);
    assert_ptr_equal(acemq__sqlite_idem_queue(h2), q);
    sqlite3 *db = open_raw(f->path);
    acemq_idem_options o;
    options(f, &o);
    acemq_idem *caller = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&caller, db, &o), 0);
    assert_ptr_equal(acemq__sqlite_idem_queue(caller), q);
    assert_int_equal(acemq__sqlite_idem_queue_files(), files + 1);

    /* Another file, another queue; an in-memory database needs none. */
    char other_url[512];
    assert_int_equal(test_backend_fresh_url("sqlite", other_url, sizeof other_url), 0);
    acemq_idem *other = open_url(f, other_url);
    assert_non_null(acemq__sqlite_idem_queue(other));
    assert_ptr_not_equal(acemq__sqlite_idem_queue(other), q);
    assert_int_equal(acemq__sqlite_idem_queue_files(), files + 2);
    acemq_idem *mem = open_url(f, "sqlite::memory:");
    assert_null(acemq__sqlite_idem_queue(mem));
    assert_int_equal(acemq__sqlite_idem_queue_files(), files + 2);

    acemq_claim c;
    assert_int_equal(claim(h1, "held", &c), ACEMQ_CLAIMED);

    /* While h1's queue is held, h2's new claim waits in it and writes
     * nothing... */
    assert_int_equal(acemq__sqlite_idem_queue_hold(h1, 1), 0);
    queued_claim qc = {h2, "queued", 99};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, claim_in_thread, &qc), 0);
    wait_for_waiters(h1, 1);
    assert_int_equal(rows_with_id(db, "queued"), 0);
    /* ...other files' writers are not held up... */
    assert_int_equal(claim(other, "elsewhere", &c), ACEMQ_CLAIMED);
    /* ...reads pass by (a claim of a known id does not: it starts with the
     * INSERT, which needs the write lock anyway)... */
    assert_int_equal(acemq_idem_is_confirmed(caller, "held", 4), 0);
    assert_int_equal(acemq_idem_is_confirmed(h1, "held", 4), 0);
    /* ...so does a caller whose transaction holds SQLite's lock: waiting
     * behind the queue's holder, which may wait for that lock, would
     * deadlock... */
    exec_ok(db, "BEGIN IMMEDIATE");
    assert_int_equal(claim(caller, "in-tx", &c), ACEMQ_CLAIMED);
    exec_ok(db, "COMMIT");
    /* ...and a writer whose busy_timeout_ms runs out in the queue goes ahead
     * without it: the queue orders writers, SQLite's locks decide. */
    snprintf(url, sizeof url, "%s?busy_timeout_ms=20", f->url);
    acemq_idem *impatient = open_url(f, url);
    assert_int_equal(claim(impatient, "impatient", &c), ACEMQ_CLAIMED);
    assert_int_equal(rows_with_id(db, "queued"), 0);
    assert_int_equal(acemq__sqlite_idem_queue_waiters(h1), 1);

    /* Given back, the queue goes to the waiter, which claims. */
    assert_int_equal(acemq__sqlite_idem_queue_hold(h1, 0), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(qc.rc, ACEMQ_CLAIMED);
    assert_int_equal(rows_with_id(db, "queued"), 1);
    assert_int_equal(acemq__sqlite_idem_queue_waiters(h1), 0);

    /* Every write path gives the queue back: if one kept it, the hold below
     * would never return. */
    assert_int_equal(claim(h2, "paths", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_renew(h2, "paths", 5, c.token, LEASE), 0);
    assert_int_equal(acemq_idem_release(h2, "paths", 5, c.token), 0);
    assert_int_equal(claim(h1, "paths", &c), ACEMQ_CLAIMED); /* the locked claim */
    assert_int_equal(acemq_idem_confirm(h1, "paths", 5, c.token), 0);
    uint64_t purged = 0;
    assert_int_equal(acemq_idem_purge(h2, &purged), 0);
    assert_int_equal(acemq__sqlite_idem_queue_hold(h1, 1), 0);
    assert_int_equal(acemq__sqlite_idem_queue_hold(h1, 0), 0);

    /* The entry lives while any handle on the file does. */
    acemq_idem_close(h1);
    acemq_idem_close(h2);
    acemq_idem_close(impatient);
    assert_int_equal(acemq__sqlite_idem_queue_files(), files + 2);
    acemq_idem_close(caller);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    assert_int_equal(acemq__sqlite_idem_queue_files(), files + 1);
    acemq_idem_close(other);
    acemq_idem_close(mem);
    assert_int_equal(acemq__sqlite_idem_queue_files(), files);
}

/* Two handles writing flat out: the WAL must still be checkpointed and start
 * over, or it grows by every frame ever written. (A checkpoint run outside
 * the writer queue is always overtaken by the other handle's commits, and
 * SQLite then never restarts the WAL; the store finishes each one with the
 * queue held.) */
enum { WAL_PAIRS = 2000 };

typedef struct pair_writer {
    acemq_idem *h;
    int index;
    int failures;
} pair_writer;

static void *write_pairs(void *arg)
{
    pair_writer *w = arg;
    for (int i = 0; i < WAL_PAIRS; i++) {
        char id[32];
        int len = snprintf(id, sizeof id, "wal-%d-%05d", w->index, i);
        acemq_claim c;
        if (acemq_idem_try_claim(w->h, id, (size_t)len, NULL, &c) != ACEMQ_CLAIMED ||
            acemq_idem_confirm(w->h, id, (size_t)len, c.token) != 0)
            w->failures++;
    }
    return NULL;
}

static void wal_bounded_with_two_writers(void **state)
{
    fixture *f = *state;
    acemq_idem_options o;
    options(f, &o);
    o.synchronous = ACEMQ_SYNC_OFF; /* fsyncs are not what this is about */
    pair_writer w[2];
    pthread_t t[2];
    for (int k = 0; k < 2; k++) {
        w[k].h = NULL;
        w[k].index = k;
        w[k].failures = 0;
        assert_int_equal(acemq_idem_open(&w[k].h, f->url, &o), 0);
    }
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_create(&t[k], NULL, write_pairs, &w[k]), 0);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(pthread_join(t[k], NULL), 0);
        assert_int_equal(w[k].failures, 0);
    }
    /* Measured while the handles are open: closing checkpoints and deletes
     * the WAL. Each pair writes about 3.4 pages, 13,600 in all; the WAL
     * starts over every 1,000, and a restart deferred by a reader only
     * waits for the next one. */
    sqlite3 *db = open_raw(f->path);
    int64_t pages = query_int(db, "PRAGMA page_size");
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    char wal[600];
    snprintf(wal, sizeof wal, "%s-wal", f->path);
    struct stat st;
    assert_int_equal(stat(wal, &st), 0);
    int64_t frames = (int64_t)st.st_size / (pages + 24);
    print_message("WAL at its largest: %lld frames\n", (long long)frames);
    if (frames > 5000) fail_msg("the WAL grew to %lld frames", (long long)frames);
    for (int k = 0; k < 2; k++)
        acemq_idem_close(w[k].h);
}

/* ---- a rolled-back claim's token --------------------------------------------- *
 *
 * Holder A claims inside its own transaction on the caller's connection (the
 * inbox pattern) and rolls back; B then claims the same id, the clock standing
 * still. A still has its token and may still call with it: B's token must not
 * be A's, or A's confirm, release or renew would land on B's claim. */

/* What the id looks like before A's claim. */
typedef enum { FROM_NEW, FROM_EXPIRED, FROM_RELEASED } claim_from;

static const char *const from_name[] = {"new", "expired", "released"};

/* The id's state before A's claim, made by `other` on the fixture's clock: a
 * lease that ran out is left behind with the clock moved past it. */
static void prepare_id(fixture *f, acemq_idem *other, const char *id, claim_from from)
{
    acemq_claim c;
    if (from == FROM_NEW) return;
    assert_int_equal(claim(other, id, &c), ACEMQ_CLAIMED);
    if (from == FROM_RELEASED)
        assert_int_equal(acemq_idem_release(other, id, strlen(id), c.token), 0);
    else
        acemq_manual_clock_advance(f->clock, LEASE);
}

/* A claims id in a transaction on db (handle a, ACEMQ_IDEM_CONFIRM_IN_CALLER_TX)
 * and rolls back; answers A's token. */
static uint64_t claim_rolled_back(sqlite3 *db, acemq_idem *a, const char *id, claim_from from)
{
    exec_ok(db, "BEGIN");
    acemq_claim c;
    assert_int_equal(claim(a, id, &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, from == FROM_EXPIRED);
    exec_ok(db, "ROLLBACK");
    return c.token;
}

/* A's calls with its rolled-back token change nothing; B's claim (token b_token)
 * still holds against a third claimer, then confirms. */
static void stale_holder_changes_nothing(sqlite3 *db, acemq_idem *a, acemq_idem *third,
                                         const char *id, uint64_t a_token, uint64_t b_token)
{
    size_t len = strlen(id);
    if (b_token == a_token)
        fail_msg("%s: B got the token %llu that A's rolled-back claim had", id,
                 (unsigned long long)a_token);
    exec_ok(db, "BEGIN");
    assert_int_equal(acemq_idem_confirm(a, id, len, a_token), ACEMQ_ESTALE);
    exec_ok(db, "COMMIT");
    assert_int_equal(acemq_idem_release(a, id, len, a_token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_renew(a, id, len, a_token, LEASE), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_is_confirmed(third, id, len), 0);
    acemq_claim c;
    assert_int_equal(claim(third, id, &c), ACEMQ_IN_PROGRESS);
    assert_int_equal(acemq_idem_confirm(third, id, len, b_token), 0);
    assert_int_equal(claim(third, id, &c), ACEMQ_ALREADY_CONFIRMED);
}

/* B is A's own handle (the consumer retrying on its connection) or another
 * handle on the file. */
static void rolled_back_token_not_reissued(void **state, claim_from from)
{
    fixture *f = *state;
    sqlite3 *db = open_raw(f->path);
    acemq_idem_options o;
    options(f, &o);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    acemq_idem *a = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&a, db, &o), 0);
    acemq_idem *other = open_url(f, f->url);
    char id[2][32];
    for (int same = 0; same < 2; same++) {
        snprintf(id[same], sizeof id[same], "%s-%s", from_name[from], same ? "same" : "other");
        prepare_id(f, other, id[same], from);
    }
    for (int same = 0; same < 2; same++) {
        uint64_t a_token = claim_rolled_back(db, a, id[same], from);
        acemq_claim b;
        assert_int_equal(claim(same ? a : other, id[same], &b), ACEMQ_CLAIMED);
        assert_int_equal(b.takeover, from == FROM_EXPIRED);
        stale_holder_changes_nothing(db, a, other, id[same], a_token, b.token);
    }
    acemq_idem_close(other);
    acemq_idem_close(a);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void rolled_back_new_id(void **state)
{
    rolled_back_token_not_reissued(state, FROM_NEW);
}

static void rolled_back_takeover(void **state)
{
    rolled_back_token_not_reissued(state, FROM_EXPIRED);
}

static void rolled_back_reclaim(void **state)
{
    rolled_back_token_not_reissued(state, FROM_RELEASED);
}

/* What the child of rolled_back_across_processes answers per id. */
typedef struct xp_answer {
    int rc;
    int takeover;
    uint64_t token;
} xp_answer;

/* In a child, on a clock of its own standing at `now`: claims "xp-<k>" for each
 * byte k the parent sends, and answers. No cmocka asserts here (see
 * race_child). */
static void claim_child(const char *url, int64_t now, int in_fd, int out_fd)
{
    acemq_manual_clock *clock = NULL;
    if (acemq_manual_clock_new(&clock, now) != 0) _exit(11);
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(clock);
    o.lease_ms = LEASE;
    o.retention_ms = RETENTION;
    o.synchronous = ACEMQ_SYNC_NORMAL;
    acemq_idem *h = NULL;
    if (acemq_idem_open(&h, url, &o) != 0) _exit(12);
    unsigned char k;
    while (read(in_fd, &k, 1) == 1) {
        char id[32];
        snprintf(id, sizeof id, "xp-%d", k);
        acemq_claim c;
        xp_answer ans = {0, 0, 0};
        ans.rc = acemq_idem_try_claim(h, id, strlen(id), NULL, &c);
        ans.takeover = c.takeover;
        ans.token = c.token;
        if (write(out_fd, &ans, sizeof ans) != (ssize_t)sizeof ans) _exit(13);
    }
    acemq_idem_close(h); /* the claims stay: held, not released */
    acemq_manual_clock_free(clock);
    _exit(0);
}

/* The same, with B in another process whose clock stands at the same
 * millisecond as A's: nothing in the database tells the two claims apart. */
static void rolled_back_across_processes(void **state)
{
    fixture *f = *state;
    sqlite3 *db = open_raw(f->path);
    acemq_idem_options o;
    options(f, &o);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    acemq_idem *a = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&a, db, &o), 0);
    acemq_idem *other = open_url(f, f->url);
    /* FROM_EXPIRED last: it moves the clock, to T0 + LEASE. */
    static const claim_from from[3] = {FROM_NEW, FROM_RELEASED, FROM_EXPIRED};
    char id[3][32];
    for (int k = 0; k < 3; k++) {
        snprintf(id[k], sizeof id[k], "xp-%d", k);
        prepare_id(f, other, id[k], from[k]);
    }

    int to_child[2], from_child[2];
    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(from_child), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(to_child[1]);
        close(from_child[0]);
        claim_child(f->url, T0 + LEASE, to_child[0], from_child[1]);
    }
    close(to_child[0]);
    close(from_child[1]);
    for (int k = 0; k < 3; k++) {
        uint64_t a_token = claim_rolled_back(db, a, id[k], from[k]);
        unsigned char byte = (unsigned char)k;
        assert_int_equal(write(to_child[1], &byte, 1), 1);
        xp_answer b;
        assert_int_equal(read(from_child[0], &b, sizeof b), (ssize_t)sizeof b);
        assert_int_equal(b.rc, ACEMQ_CLAIMED);
        assert_int_equal(b.takeover, from[k] == FROM_EXPIRED);
        stale_holder_changes_nothing(db, a, other, id[k], a_token, b.token);
    }
    close(to_child[1]);
    close(from_child[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("child failed: status %d", status);
    acemq_idem_close(other);
    acemq_idem_close(a);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* Claims `id` in a transaction on a connection of its own, `rounds` times,
 * rolling each back, with the clock standing at `now`; writes each token to
 * out_fd. For a forked child: no cmocka asserts (see race_child). */
static int rolled_back_rounds(const char *path, int64_t now, const char *id, int rounds, int out_fd)
{
    acemq_manual_clock *clock = NULL;
    sqlite3 *db = NULL;
    acemq_idem *h = NULL;
    if (acemq_manual_clock_new(&clock, now) != 0) return 11;
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(clock);
    o.lease_ms = LEASE;
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    if (sqlite3_open(path, &db) != SQLITE_OK || sqlite3_busy_timeout(db, 10000) != SQLITE_OK)
        return 12;
    if (acemq_idem_open_sqlite(&h, db, &o) != 0) return 13;
    for (int i = 0; i < rounds; i++) {
        acemq_claim c;
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) return 14;
        if (acemq_idem_try_claim(h, id, strlen(id), NULL, &c) != ACEMQ_CLAIMED) return 15;
        if (sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK) return 16;
        if (write(out_fd, &c.token, sizeof c.token) != (ssize_t)sizeof c.token) return 17;
    }
    acemq_idem_close(h);
    acemq_manual_clock_free(clock);
    return sqlite3_close(db) == SQLITE_OK ? 0 : 18;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Two processes, each on a connection of its own, claim one id in turns of
 * rolled-back transactions with their clocks standing at the same ms: every
 * claim reads the same row, so only the file's shared counter keeps their
 * tokens apart; none of the 4,000 repeats. */
static void processes_never_share_a_token(void **state)
{
    fixture *f = *state;
    enum { ROUNDS = 2000, ALL = 2 * ROUNDS };
    acemq_idem *init = open_url(f, f->url); /* makes the schema */
    acemq_idem_close(init);
    int pipes[2][2];
    pid_t pid[2];
    for (int p = 0; p < 2; p++) {
        assert_int_equal(pipe(pipes[p]), 0);
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0) {
            close(pipes[p][0]);
            _exit(rolled_back_rounds(f->path, T0, "shared", ROUNDS, pipes[p][1]));
        }
        close(pipes[p][1]);
    }
    static uint64_t tokens[ALL];
    for (int p = 0; p < 2; p++) {
        size_t want = ROUNDS * sizeof(uint64_t), got = 0;
        char *at = (char *)&tokens[(size_t)p * ROUNDS];
        while (got < want) {
            ssize_t n = read(pipes[p][0], at + got, want - got);
            if (n <= 0) break;
            got += (size_t)n;
        }
        close(pipes[p][0]);
        int status = 0;
        assert_int_equal(waitpid(pid[p], &status, 0), pid[p]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("child %d failed: status %d", p, status);
        assert_int_equal(got, want);
    }
    qsort(tokens, ALL, sizeof tokens[0], cmp_u64);
    for (size_t i = 1; i < ALL; i++)
        if (tokens[i] == tokens[i - 1])
            fail_msg("token %llu issued twice", (unsigned long long)tokens[i]);
}

/* A token's milliseconds have 42 bits (above 21 of issue number): a clock past
 * them counts as their end, and an id whose token reached it cannot be claimed
 * again. */
static void token_range_ends(void **state)
{
    fixture *f = *state;
    acemq_idem *h = open_url(f, f->url);
    sqlite3 *db = open_raw(f->path);
    exec_ok(db, "INSERT INTO acemq_idem(id, state, token, expires_at)"
                " VALUES(CAST('end' AS BLOB), 0, 9223372036854775807, 9223372036854775807)");
    acemq_claim c;
    assert_int_equal(claim(h, "end", &c), ACEMQ_ERANGE);
    assert_non_null(strstr(acemq_idem_errmsg(h), "exhausted"));
    acemq_manual_clock_set(f->clock, INT64_MAX / 2);
    assert_int_equal(claim(h, "late", &c), ACEMQ_CLAIMED);
    assert_true(c.token >> 21 == (uint64_t)INT64_MAX >> 21);
    assert_int_equal(acemq_idem_release(h, "late", 4, c.token), 0);
    assert_int_equal(claim(h, "late", &c), ACEMQ_ERANGE);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    acemq_idem_close(h);
}

/* ---- purge ---------------------------------------------------------------- */

/* Abandoned claims have no index; purge walks the primary key in windows.
 * Several windows' worth of rows, of every kind, interleaved in key order:
 * exactly the abandoned claims (and expired records) go. */
static void purge_walks_every_window(void **state)
{
    fixture *f = *state;
    acemq_idem *h = open_url(f, f->url);
    sqlite3 *db = open_raw(f->path);
    /* The schema has the expires_at index and no other. */
    assert_int_equal(query_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                                   " AND tbl_name = 'acemq_idem' AND sql IS NOT NULL"),
                     1);
    assert_int_equal(query_int(db, "SELECT count(*) FROM sqlite_master"
                                   " WHERE name = 'acemq_idem_expires'"),
                     1);
    /* i % 4: 0 abandoned past retention, 1 lease ran out within retention,
     * 2 live claim, 3 confirmed and not expired. Ids are blobs with a NUL
     * and a 0xff byte, so the walk's order is memcmp's. */
    char sql[1024];
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 9999)"
             " INSERT INTO acemq_idem(id, state, token, lease_until, expires_at)"
             " SELECT CAST(printf('w%%05d', (i * 7919) %% 10000) || x'00ff' AS BLOB),"
             " CASE i %% 4 WHEN 3 THEN 2 ELSE 1 END, 1,"
             " CASE i %% 4 WHEN 0 THEN %lld WHEN 1 THEN %lld WHEN 2 THEN %lld END,"
             " CASE i %% 4 WHEN 3 THEN %lld END FROM n",
             (long long)(T0 - RETENTION - 1), (long long)(T0 - 1), (long long)(T0 + LEASE),
             (long long)(T0 + 1));
    exec_ok(db, sql);
    /* Expired records go by the index, the same call. */
    acemq_claim c;
    assert_int_equal(claim(h, "done", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(h, "done", 4, c.token), 0);
    acemq_manual_clock_advance(f->clock, RETENTION);

    uint64_t purged = 0;
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    /* Now is T0 + RETENTION: kinds 0 and 1 are past retention, kind 3
     * expired, kind 2 a claim abandoned only RETENTION - LEASE ago. */
    assert_int_equal(purged, 2500 + 2500 + 2500 + 1);
    assert_int_equal(query_int(db, "SELECT count(*) FROM acemq_idem"), 2500);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM acemq_idem WHERE lease_until <> %lld",
             (long long)(T0 + LEASE));
    assert_int_equal(query_int(db, sql), 0);
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 0);
    acemq_manual_clock_advance(f->clock, LEASE);
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 2500);
    assert_int_equal(query_int(db, "SELECT count(*) FROM acemq_idem"), 0);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    acemq_idem_close(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(two_processes_claim_each_id_once, setup, teardown),
        cmocka_unit_test_setup_teardown(reopen_keeps_state, setup, teardown),
        cmocka_unit_test_setup_teardown(caller_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(caller_open_inside_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(newer_schema_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(url_parameters, setup, teardown),
        cmocka_unit_test_setup_teardown(unwritable_path, setup, teardown),
        cmocka_unit_test_setup_teardown(a_file_that_cannot_grow_fails_loudly_and_loses_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(busy_gives_up, setup, teardown),
        cmocka_unit_test_setup_teardown(binary_ids_verbatim, setup, teardown),
        cmocka_unit_test_setup_teardown(tokens_grow, setup, teardown),
        cmocka_unit_test_setup_teardown(fingerprints_and_abandoned, setup, teardown),
        cmocka_unit_test_setup_teardown(writer_queue_per_file, setup, teardown),
        cmocka_unit_test_setup_teardown(wal_bounded_with_two_writers, setup, teardown),
        cmocka_unit_test_setup_teardown(purge_walks_every_window, setup, teardown),
        cmocka_unit_test_setup_teardown(rolled_back_new_id, setup, teardown),
        cmocka_unit_test_setup_teardown(rolled_back_takeover, setup, teardown),
        cmocka_unit_test_setup_teardown(rolled_back_reclaim, setup, teardown),
        cmocka_unit_test_setup_teardown(rolled_back_across_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(token_range_ends, setup, teardown),
        cmocka_unit_test_setup_teardown(processes_never_share_a_token, setup, teardown),
    };
    return cmocka_run_group_tests_name("sqlite idem", tests, NULL, NULL);
}
