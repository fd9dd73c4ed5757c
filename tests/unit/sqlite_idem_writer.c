/* sqlite_idem_writer.c — the in-process writer queue: one per file, however
 * its path is spelled, and the WAL still checkpointed and bounded with two
 * handles writing flat out. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "acemq/acemq.h"
#include "acemq/sqlite.h"
#include "conformance/backends.h"
#include "backends/test_control.h"
#include "sqlite_idem_fixture.h"

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
void writer_queue_per_file(void **state)
{
    fixture *f = *state;
    size_t files = acemq__sqlite_idem_queue_files();
    acemq_idem *h1 = sqlite_idem_open_url(f, f->url);
    const void *q = acemq__sqlite_idem_queue(h1);
    assert_non_null(q);
    assert_int_equal(acemq__sqlite_idem_queue_files(), files + 1);

    char url[700];
    snprintf(f->link, sizeof f->link, "%s.link", f->path);
    assert_int_equal(symlink(f->path, f->link), 0);
    snprintf(url, sizeof url, "sqlite:%s", f->link);
    acemq_idem *h2 = sqlite_idem_open_url(f, url);
    assert_ptr_equal(acemq__sqlite_idem_queue(h2), q);
    sqlite3 *db = sqlite_idem_raw_open(f->path);
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    acemq_idem *caller = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&caller, db, &o), 0);
    assert_ptr_equal(acemq__sqlite_idem_queue(caller), q);
    assert_int_equal(acemq__sqlite_idem_queue_files(), files + 1);

    /* Another file, another queue; an in-memory database needs none. */
    char other_url[512];
    assert_int_equal(test_backend_fresh_url("sqlite", other_url, sizeof other_url), 0);
    acemq_idem *other = sqlite_idem_open_url(f, other_url);
    assert_non_null(acemq__sqlite_idem_queue(other));
    assert_ptr_not_equal(acemq__sqlite_idem_queue(other), q);
    assert_int_equal(acemq__sqlite_idem_queue_files(), files + 2);
    acemq_idem *mem = sqlite_idem_open_url(f, "sqlite::memory:");
    assert_null(acemq__sqlite_idem_queue(mem));
    assert_int_equal(acemq__sqlite_idem_queue_files(), files + 2);

    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(h1, "held", &c), ACEMQ_CLAIMED);

    /* While h1's queue is held, h2's new claim waits in it and writes
     * nothing... */
    assert_int_equal(acemq__sqlite_idem_queue_hold(h1, 1), 0);
    queued_claim qc = {h2, "queued", 99};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, claim_in_thread, &qc), 0);
    wait_for_waiters(h1, 1);
    assert_int_equal(rows_with_id(db, "queued"), 0);
    /* ...other files' writers are not held up... */
    assert_int_equal(sqlite_idem_claim(other, "elsewhere", &c), ACEMQ_CLAIMED);
    /* ...reads pass by (a claim of a known id does not: it starts with the
     * INSERT, which needs the write lock anyway)... */
    assert_int_equal(acemq_idem_is_confirmed(caller, "held", 4), 0);
    assert_int_equal(acemq_idem_is_confirmed(h1, "held", 4), 0);
    /* ...so does a caller whose transaction holds SQLite's lock: waiting
     * behind the queue's holder, which may wait for that lock, would
     * deadlock... */
    sqlite_idem_exec(db, "BEGIN IMMEDIATE");
    assert_int_equal(sqlite_idem_claim(caller, "in-tx", &c), ACEMQ_CLAIMED);
    sqlite_idem_exec(db, "COMMIT");
    /* ...and a writer whose busy_timeout_ms runs out in the queue goes ahead
     * without it: the queue orders writers, SQLite's locks decide. */
    snprintf(url, sizeof url, "%s?busy_timeout_ms=20", f->url);
    acemq_idem *impatient = sqlite_idem_open_url(f, url);
    assert_int_equal(sqlite_idem_claim(impatient, "impatient", &c), ACEMQ_CLAIMED);
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
    assert_int_equal(sqlite_idem_claim(h2, "paths", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_renew(h2, "paths", 5, c.token, LEASE), 0);
    assert_int_equal(acemq_idem_release(h2, "paths", 5, c.token), 0);
    assert_int_equal(sqlite_idem_claim(h1, "paths", &c), ACEMQ_CLAIMED); /* the locked claim */
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

void wal_bounded_with_two_writers(void **state)
{
    fixture *f = *state;
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
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
    sqlite3 *db = sqlite_idem_raw_open(f->path);
    int64_t pages = sqlite_idem_query_int(db, "PRAGMA page_size");
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
