/* outbox_wait.c — writers and waiters: a slow writer's record is never
 * skipped, a lock another connection holds costs a relay only its budget,
 * a wait wakes on a commit, and (SQLite) an idle wait sleeps until a write. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "conformance/outbox_fixture.h"
#include "backends/test_control.h"
#include "conformance/outbox_cases.h"

void a_slow_writer_is_not_skipped(void **state)
{
    /* The hazard of draining by "everything after the last id seen": a
     * transaction that took its sequence number early and commits late would
     * be passed over for good. PostgreSQL commits transactions in any order;
     * SQLite has one writer at a time, so there the late commit cannot
     * happen, and the case shows the same rows in its own order. */
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    void *slow = outbox_fixture_connect(f);
    const acemq_outbox_msg *m;
    if (f->pg) {
        outbox_sql(f, slow, "BEGIN");
        acemq_outbox_record r = outbox_rec("slow", NULL, "x");
        assert_int_equal(outbox_add(f, slow, &r, NULL), 0); /* takes the lower seq */
        const char *ids[] = {"fast1", "fast2"};
        outbox_add_committed(f, ids, NULL, 2);
        outbox_advance(f, 2000);
        assert_int_equal(outbox_claim(h, 10, 30000, &m), 2);
        assert_string_equal(m[0].id, "fast1");
        assert_int_equal(acemq_outbox_mark_published(h, "fast1", m[0].token), 0);
        assert_int_equal(acemq_outbox_mark_published(h, "fast2", m[1].token), 0);
        outbox_sql(f, slow, "COMMIT"); /* two seconds later */
    } else {
        const char *ids[] = {"fast1", "fast2"};
        outbox_add_committed(f, ids, NULL, 2);
        assert_int_equal(outbox_claim(h, 10, 30000, &m), 2);
        assert_int_equal(acemq_outbox_mark_published(h, "fast1", m[0].token), 0);
        outbox_sql(f, slow, "BEGIN IMMEDIATE");
        acemq_outbox_record r = outbox_rec("slow", NULL, "x");
        assert_int_equal(outbox_add(f, slow, &r, NULL), 0);
        outbox_advance(f, 2000);
        outbox_sql(f, slow, "COMMIT");
    }
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 1);
    assert_string_equal(m[0].id, "slow");
    outbox_fixture_disconnect(f, slow);
    acemq_outbox_close(h);
}

/* Holds SQLite's write lock on a connection of its own for a moment, then
 * lets it go: `held` is set while it has it. */
typedef struct lock_holder {
    const char *path;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int held;
} lock_holder;

static void *hold_write_lock(void *arg)
{
    lock_holder *l = arg;
    sqlite3 *db = NULL;
    if (sqlite3_open(l->path, &db) != SQLITE_OK ||
        sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        abort();
    pthread_mutex_lock(&l->mu);
    l->held = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    struct timespec ts = {0, 30000000L};
    nanosleep(&ts, NULL);
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) abort();
    sqlite3_close(db);
    return NULL;
}

/* A lock another connection holds costs a relay no more than its budget,
 * and leaves nothing half-done. SQLite: the caller's transaction holds the
 * one write lock; a claim or a mark waits busy_timeout_ms (0: not at all),
 * then fails with EBUSY and SQLite's words, the record as it was, and both
 * go through once the lock is let go. PostgreSQL: a row the caller holds
 * locked is passed over at once (SKIP LOCKED), the others are claimed. */
void a_held_lock_costs_only_the_budget(void **state)
{
    outbox_fixture *f = *state;
    const char *ids[] = {"first", "second"};
    outbox_add_committed(f, ids, NULL, 2);
    void *other = outbox_fixture_connect(f);
    const acemq_outbox_msg *m;
    if (f->pg) {
        acemq_outbox *h = outbox_fixture_open(f);
        outbox_sql(f, other, "BEGIN");
        outbox_sql(f, other, "SELECT 1 FROM acemq_outbox WHERE id = 'first' FOR UPDATE");
        assert_int_equal(outbox_claim(h, 10, 30000, &m), 1);
        assert_string_equal(m[0].id, "second");
        outbox_sql(f, other, "COMMIT");
        assert_int_equal(outbox_claim(h, 10, 30000, &m), 1);
        assert_string_equal(m[0].id, "first");
        acemq_outbox_close(h);
        outbox_fixture_disconnect(f, other);
        return;
    }
    f->opts.busy_timeout_ms = 0;
    acemq_outbox *hasty = outbox_fixture_open(f);
    f->opts.busy_timeout_ms = 20;
    acemq_outbox *patient = outbox_fixture_open(f);
    assert_int_equal(outbox_claim(patient, 1, 30000, &m), 1);
    assert_string_equal(m[0].id, "first");
    uint64_t token = m[0].token;
    outbox_sql(f, other, "BEGIN IMMEDIATE");
    const acemq_outbox_msg *none = NULL;
    size_t n = 99;
    assert_int_equal(acemq_outbox_claim_batch(hasty, 10, 30000, &none, &n), ACEMQ_EBUSY);
    assert_non_null(strstr(acemq_outbox_errmsg(hasty), "database is locked"));
    assert_int_equal(n, 0);
    assert_int_equal(acemq_outbox_claim_batch(patient, 10, 30000, &none, &n), ACEMQ_EBUSY);
    assert_int_equal(acemq_outbox_mark_published(patient, "first", token), ACEMQ_EBUSY);
    outbox_sql(f, other, "COMMIT");
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE state = 0"), 2);
    assert_int_equal(acemq_outbox_mark_published(patient, "first", token), 0);
    /* Within the budget the wait ends in success: a lock let go while the
     * new handle's open and first claim wait for it. With SQLite's default,
     * no busy handler, the open fails at once with EBUSY. */
    lock_holder l = {.path = f->url + strlen("sqlite:"), .held = 0};
    pthread_mutex_init(&l.mu, NULL);
    pthread_cond_init(&l.cv, NULL);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, hold_write_lock, &l), 0);
    pthread_mutex_lock(&l.mu);
    while (!l.held)
        pthread_cond_wait(&l.cv, &l.mu);
    pthread_mutex_unlock(&l.mu);
    f->opts.busy_timeout_ms = 60000;
    acemq_outbox *waiting = outbox_fixture_open(f);
    assert_int_equal(outbox_claim(waiting, 10, 30000, &m), 1);
    assert_string_equal(m[0].id, "second");
    pthread_join(t, NULL);
    pthread_cond_destroy(&l.cv);
    pthread_mutex_destroy(&l.mu);
    acemq_outbox_close(waiting);
    acemq_outbox_close(patient);
    acemq_outbox_close(hasty);
    outbox_fixture_disconnect(f, other);
}

void wait_wakes_on_a_commit(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    /* PostgreSQL's NOTIFY channel is shared by the whole database, and other
     * suites may be inserting at once: only SQLite can promise silence. A
     * PostgreSQL handle's first wait starts it listening and answers 1 at
     * once ("look again": a commit before it sent nothing it could hear). */
    assert_int_equal(acemq_outbox_wait(h, 0), f->pg ? 1 : 0);
    const char *ids[] = {"wake"};
    outbox_add_committed(f, ids, NULL, 1);
    /* A generous bound, not a timing assertion: the wake-up comes at once. */
    assert_int_equal(acemq_outbox_wait(h, 10000), 1);
    if (!f->pg) assert_int_equal(acemq_outbox_wait(h, 0), 0);
    acemq_outbox_close(h);
}

/* SQLite only. An idle wait sleeps on the file's writes (file_watch.h) and
 * reads PRAGMA data_version every 100 ms as a safety net, where it used to
 * read it every 5 ms: a wait of 500 ms that nothing interrupts reads it a
 * handful of times, not a hundred (a slow machine reads it less often, never
 * more). A commit from another connection then still wakes it. */
void an_idle_wait_sleeps_until_a_write(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    assert_int_equal(acemq_outbox_wait(h, 0), 0);
    int watching = 0;
    uint64_t before = acemq__sqlite_outbox_wait_reads(h, &watching);
    assert_int_equal(watching, 1);
    assert_int_equal(acemq_outbox_wait(h, 500), 0);
    uint64_t reads = acemq__sqlite_outbox_wait_reads(h, &watching) - before;
    assert_int_equal(watching, 1);
    assert_true(reads >= 1);
    assert_true(reads <= 10);
    const char *ids[] = {"after-the-sleep"};
    outbox_add_committed(f, ids, NULL, 1);
    assert_int_equal(acemq_outbox_wait(h, 10000), 1);
    acemq_outbox_close(h);
}
