/* test_sqlite_busy_wait.c — acemq_sqlite_busy_wait() on an application's own
 * connection: it waits for a lock another connection holds, within its
 * budget and no longer, and its state goes with the connection (ASan sees a
 * leak or a double free). Holders are threads on connections of their own;
 * every outcome asserted follows from who holds the lock when, not from how
 * fast anything runs. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "acemq/sqlite.h"
#include "unit/scratch_db.h"

typedef scratch_db fixture;

static int setup(void **state)
{
    return scratch_db_setup(state, "busy");
}

static int teardown(void **state)
{
    return scratch_db_teardown(state);
}

static sqlite3 *open_db(const char *path)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) fail_msg("sqlite3_open_v2 %s: %s", path, sqlite3_errstr(rc));
    return db;
}

static int exec(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* A connection that takes the write lock, says so, and gives it back when
 * told to (release_after_ms < 0) or after that many milliseconds. */
typedef struct holder {
    const char *path;
    int release_after_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int holding, release;
    const char *failed; /* what went wrong on the thread, which must not assert */
    pthread_t thread;
} holder;

static void *hold_lock(void *arg)
{
    holder *h = arg;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(h->path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
        h->failed = "open";
    else if (exec(db, "BEGIN IMMEDIATE; INSERT INTO t VALUES (1)") != SQLITE_OK)
        h->failed = "BEGIN IMMEDIATE";
    pthread_mutex_lock(&h->mu);
    h->holding = 1;
    pthread_cond_broadcast(&h->cv);
    if (h->release_after_ms < 0) {
        while (!h->release)
            pthread_cond_wait(&h->cv, &h->mu);
        pthread_mutex_unlock(&h->mu);
    } else {
        pthread_mutex_unlock(&h->mu);
        struct timespec ts = {0, (long)h->release_after_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!h->failed && exec(db, "COMMIT") != SQLITE_OK) h->failed = "COMMIT";
    sqlite3_close(db);
    return NULL;
}

static void start_holder(holder *h, const char *path, int release_after_ms)
{
    memset(h, 0, sizeof *h);
    h->path = path;
    h->release_after_ms = release_after_ms;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    assert_int_equal(pthread_create(&h->thread, NULL, hold_lock, h), 0);
    pthread_mutex_lock(&h->mu);
    while (!h->holding)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    if (h->failed) fail_msg("lock holder: %s failed", h->failed);
}

static void finish_holder(holder *h)
{
    pthread_mutex_lock(&h->mu);
    h->release = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    if (h->failed) fail_msg("lock holder: %s failed", h->failed);
}

static sqlite3 *prepared_db(const fixture *f)
{
    sqlite3 *db = open_db(f->path);
    assert_int_equal(exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS t(x)"),
                     SQLITE_OK);
    return db;
}

/* The lock is let go while the application waits: its write goes through. */
static void waits_for_a_lock_let_go(void **state)
{
    fixture *f = *state;
    sqlite3 *db = prepared_db(f);
    assert_int_equal(acemq_sqlite_busy_wait(db, 60000), 0);
    holder h;
    start_holder(&h, f->path, 30);
    assert_int_equal(exec(db, "BEGIN IMMEDIATE"), SQLITE_OK);
    assert_int_equal(exec(db, "INSERT INTO t VALUES (2); COMMIT"), SQLITE_OK);
    finish_holder(&h);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 2);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* A lock held past the budget: SQLITE_BUSY with SQLite's words, nothing
 * written; a budget of 0 does not wait at all; and without the handler
 * (the control) the same write is refused too, so the first test's success
 * is the handler's doing. */
static void gives_up_after_the_budget(void **state)
{
    fixture *f = *state;
    sqlite3 *db = prepared_db(f);
    holder h;
    start_holder(&h, f->path, -1);                              /* held until we are done */
    assert_int_equal(exec(db, "BEGIN IMMEDIATE"), SQLITE_BUSY); /* no handler yet */
    assert_int_equal(acemq_sqlite_busy_wait(db, 20), 0);
    assert_int_equal(exec(db, "BEGIN IMMEDIATE"), SQLITE_BUSY);
    assert_non_null(strstr(sqlite3_errmsg(db), "locked"));
    assert_int_equal(acemq_sqlite_busy_wait(db, 0), 0);
    assert_int_equal(exec(db, "BEGIN IMMEDIATE"), SQLITE_BUSY);
    finish_holder(&h);
    assert_int_equal(exec(db, "BEGIN IMMEDIATE; INSERT INTO t VALUES (3); COMMIT"), SQLITE_OK);
    sqlite3_close(db);
}

/* Installed again and again, then closed: each state freed once (ASan). */
static void state_goes_with_the_connection(void **state)
{
    fixture *f = *state;
    sqlite3 *db = prepared_db(f);
    for (int i = 0; i < 5; i++)
        assert_int_equal(acemq_sqlite_busy_wait(db, 1000 * i), 0);
    sqlite3_close(db);
}

/* Installed again while a statement on db runs: SQLite will not redefine
 * the function that keeps the state, so the call says EBUSY and the first
 * handler stays, still waiting for a lock let go. */
static void reinstalled_while_a_statement_runs(void **state)
{
    fixture *f = *state;
    sqlite3 *db = prepared_db(f);
    assert_int_equal(exec(db, "INSERT INTO t VALUES (7), (8)"), SQLITE_OK);
    assert_int_equal(acemq_sqlite_busy_wait(db, 60000), 0);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT x FROM t", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(acemq_sqlite_busy_wait(db, 0), ACEMQ_EBUSY);
    sqlite3_finalize(st);
    holder h;
    start_holder(&h, f->path, 30);
    assert_int_equal(exec(db, "BEGIN IMMEDIATE; INSERT INTO t VALUES (9); COMMIT"), SQLITE_OK);
    finish_holder(&h);
    sqlite3_close(db);
}

static void bad_arguments(void **state)
{
    fixture *f = *state;
    assert_int_equal(acemq_sqlite_busy_wait(NULL, 10), ACEMQ_EINVAL);
    sqlite3 *db = prepared_db(f);
    assert_int_equal(acemq_sqlite_busy_wait(db, -1), ACEMQ_EINVAL);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(waits_for_a_lock_let_go, setup, teardown),
        cmocka_unit_test_setup_teardown(gives_up_after_the_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(state_goes_with_the_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(reinstalled_while_a_statement_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_arguments, setup, teardown),
    };
    return cmocka_run_group_tests_name("acemq_sqlite_busy_wait", tests, NULL, NULL);
}
