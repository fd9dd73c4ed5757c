/* idem_purge.c — the SQLite idempotency store's purge: expired
 * confirmations through their index, abandoned claims by windows of the
 * primary key, each statement a short write of its own.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/sqlite/idem_store.h"

/* Rows per purge statement: large purges must not hold the write lock for
 * seconds while claimers wait. */
#define PURGE_BATCH 512
/* Keys per abandoned-claim purge statement. Abandoned claims have no index
 * (one would cost every claim and confirm a page), so that purge walks the
 * primary key in windows of this many rows, each its own short write. */
#define PURGE_WINDOW 2048

/* Saturating: a retention longer than the clock's past must not wrap. */
static int64_t sub_ms(int64_t t, int64_t d)
{
    return t < INT64_MIN + d ? INT64_MIN : t - d;
}

/* Confirmed and released rows past retention, through the expires_at index.
 * Each batch is its own transaction (or part of the caller's): purging is
 * idempotent, so a failure halfway leaves nothing inconsistent. */
static int purge_done(acemq_idem *h, int64_t before, uint64_t *total)
{
    sq *s = h->self;
    sqlite3_stmt *st = s->st[ST_PURGE_DONE];
    for (;;) {
        int rc = sqlite3_bind_int64(st, 1, before);
        if (rc == SQLITE_OK) rc = sqlite3_bind_int(st, 2, PURGE_BATCH);
        if (rc != SQLITE_OK) return acemq__sqlite_idem_bind_failed(h, st, rc);
        rc = acemq__sqlite_idem_run_queued(h, st);
        if (rc != 0) return rc;
        int n = sqlite3_changes(s->db);
        *total += (uint64_t)n;
        if (n < PURGE_BATCH) return 0;
    }
}

/* A key kept across statements: the window's bounds outlive the row they were
 * read from. */
typedef struct keybuf {
    unsigned char *data;
    size_t len, cap;
} keybuf;

static int keep_key(keybuf *k, const void *data, size_t len)
{
    if (len > k->cap) {
        unsigned char *p = realloc(k->data, len);
        if (!p) return -1;
        k->data = p;
        k->cap = len;
    }
    if (len > 0) memcpy(k->data, data, len);
    k->len = len;
    return 0;
}

static int bind_key(sqlite3_stmt *st, int i, const keybuf *k)
{
    /* The first window starts after the empty blob, below every id: the store
     * binds every id as a non-empty blob (bind_bytes). */
    if (k->len == 0) return sqlite3_bind_zeroblob(st, i, 0);
    return sqlite3_bind_blob64(st, i, k->data, k->len, SQLITE_STATIC);
}

/* Claims abandoned since before `before`. They have no index, so this walks
 * the primary key: a read finds where the next PURGE_WINDOW keys end, then one
 * short write deletes the abandoned claims among them. The write lock is held
 * for one window's scan at a time, never for the whole table; rows inserted
 * behind the cursor meanwhile are new claims, nothing to purge. */
static int purge_abandoned(acemq_idem *h, int64_t before, uint64_t *total)
{
    sq *s = h->self;
    sqlite3_stmt *win = s->st[ST_PURGE_WINDOW], *del = s->st[ST_PURGE_ABANDONED];
    keybuf lo = {NULL, 0, 0}, hi = {NULL, 0, 0};
    int rc = 0;
    for (;;) {
        int src = bind_key(win, 1, &lo);
        if (src == SQLITE_OK) src = sqlite3_bind_int(win, 2, PURGE_WINDOW);
        if (src == SQLITE_OK) src = sqlite3_step(win);
        if (src != SQLITE_ROW && src != SQLITE_DONE) {
            rc = acemq__sqlite_idem_fail(h, s->db, src);
            acemq__sqlite_idem_finish(win);
            break;
        }
        if (src == SQLITE_DONE || sqlite3_column_type(win, 0) == SQLITE_NULL) {
            acemq__sqlite_idem_finish(win); /* no key after lo: the walk is over */
            break;
        }
        int kept = keep_key(&hi, sqlite3_column_blob(win, 0), (size_t)sqlite3_column_bytes(win, 0));
        acemq__sqlite_idem_finish(win);
        if (kept != 0) {
            rc = acemq__idem_fail(h, ACEMQ_ENOMEM, "sqlite: out of memory");
            break;
        }
        src = bind_key(del, 1, &lo);
        if (src == SQLITE_OK) src = bind_key(del, 2, &hi);
        if (src == SQLITE_OK) src = sqlite3_bind_int64(del, 3, before);
        if (src != SQLITE_OK) {
            rc = acemq__sqlite_idem_fail(h, s->db, src);
            acemq__sqlite_idem_finish(del);
            break;
        }
        rc = acemq__sqlite_idem_run_queued(h, del);
        if (rc != 0) break;
        *total += (uint64_t)sqlite3_changes(s->db);
        keybuf t = lo;
        lo = hi;
        hi = t;
    }
    free(lo.data);
    free(hi.data);
    return rc;
}

int acemq__sqlite_idem_purge(acemq_idem *h, int64_t now_ms, uint64_t *purged)
{
    sq *s = h->self;
    uint64_t n = 0;
    pthread_mutex_lock(&s->lock);
    int rc = purge_done(h, now_ms, &n);
    if (rc == 0) rc = purge_abandoned(h, sub_ms(now_ms, h->opts.retention_ms), &n);
    pthread_mutex_unlock(&s->lock);
    *purged = n;
    return rc;
}
