/* idem.c — the idempotency store on an SQLite file (or a connection the
 * caller owns): schema, prepared statements, transactions, the fencing-token
 * scheme, and the glue to the writer queue (backends/sqlite/writer_queue.c), the busy
 * handler (backends/sqlite/busy.c) and checkpoints (backends/sqlite/checkpoint.c).
 * docs/sqlite-store.md explains the choices.
 *
 * Invariants a reader must keep:
 *
 *   Tokens. A token never repeats for an id, whatever was rolled back, purged
 *   or forgotten: a holder whose token came back would confirm, release or
 *   renew a claim that is not its own. A token is (ms << TOKEN_ISSUE_BITS) |
 *   issue. ms is max(1, now_ms) (now_ms past the year 2109 counts as the
 *   largest ms there is room for), raised to one above the ms of the token the
 *   row holds, so on a row a committed claim's token is larger than every
 *   token before it. issue is the low bits of the database file's counter,
 *   which every process on the file advances under a lock and which no
 *   rollback undoes (backends/sqlite/issue.h), so two claims on the file get
 *   different issues until 2^TOKEN_ISSUE_BITS claims went by. Rows alone
 *   cannot keep tokens apart: a claim inside the caller's transaction is
 *   rolled back with it, row and all, while its holder keeps the token, and
 *   the next claim reads the very row that claim read. Two claims that read
 *   the same row at the same ms differ in their issue, unless
 *   2^TOKEN_ISSUE_BITS other claims were made on the file between them
 *   within that ms. Released rows are kept,
 *   not deleted, so their ms survives; purge deletes a row only after it sat
 *   idle for the retention period, so a row created later starts at an ms
 *   above every token the forgotten row handed out (unless that row was
 *   claimed more than once per ms on average over its whole life plus the
 *   retention period), and in any case with another issue.
 *
 *   Columns by state. Claimed (1): lease_until set, expires_at NULL.
 *   Confirmed (2) and released (0): lease_until NULL, expires_at set. The
 *   partial expires_at index and both purges rely on this, so every statement
 *   that changes state sets both columns.
 *
 *   One writer at a time per handle. The connection is opened NOMUTEX and every
 *   operation runs under s->lock; the busy handler's start time lives in the
 *   state (s->busy) for that reason. A statement is always reset before the
 *   lock is let go, so no read transaction stays open behind the caller's back.
 *
 *   One writer queue per file per process. Every write transaction this file
 *   starts (the claim INSERT, the locked claim, confirm, release, renew, each
 *   purge batch, the schema at open) runs while its thread holds the file's
 *   writer queue, entered through acemq__sqlite_idem_queue_enter and left through
 * acemq__sqlite_idem_queue_leave. Reads never enter it. The queue only speeds writers up, SQLite's
 * locks decide; the rules that keep it free of deadlock (lock order s->lock, then the queue; wait
 * only with no transaction open; hold only inside our call) are in backends/sqlite/writer_queue.c,
 * and the store must keep them.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "acemq/sqlite.h"
#include "idem/idem_backend.h"
#include "backends/sqlite/issue.h"
#include "backends/sqlite/busy.h"
#include "backends/sqlite/checkpoint.h"
#include "backends/sqlite/errors.h"
#include "backends/sqlite/idem_store.h"
#include "backends/sqlite/writer_queue.h"

enum { STATE_RELEASED = 0, STATE_CLAIMED = 1, STATE_CONFIRMED = 2 };

/* A token's low bits: the claim's issue number (see Tokens above). The ms
 * above them has 63 - 21 = 42 bits, enough until the year 2109. */
#define TOKEN_ISSUE_BITS 21
#define TOKEN_ISSUE_MASK ((UINT64_C(1) << TOKEN_ISSUE_BITS) - 1)
#define TOKEN_MS_MAX (INT64_MAX >> TOKEN_ISSUE_BITS)

static int64_t add_ms(int64_t t, int64_t d)
{
    return t > INT64_MAX - d ? INT64_MAX : t + d;
}

/* Keeps SQLite's own words: they are what an operator can search for. */
int acemq__sqlite_idem_fail(acemq_idem *h, sqlite3 *db, int rc)
{
    int code = acemq__sqlite_code(rc);
    sq *s = h->self;
    if (code == ACEMQ_EBUSY && s && s->owns_db)
        return acemq__idem_fail(h, code, "sqlite: %s (still locked after busy_timeout_ms=%d)",
                                sqlite3_errmsg(db), s->busy.timeout_ms);
    char buf[ACEMQ__SQLITE_WORDS];
    return acemq__idem_fail(h, code, "sqlite: %s", acemq__sqlite_words(db, rc, buf));
}

/* The token for a claim at now_ms of a row whose token is stored (0 for a new
 * row): above the stored one's ms, with this claim's own issue. */
static int next_token(acemq_idem *h, int64_t stored, int64_t now_ms, int64_t *token)
{
    int64_t ms = now_ms < 1 ? 1 : now_ms > TOKEN_MS_MAX ? TOKEN_MS_MAX : now_ms;
    int64_t stored_ms = stored > 0 ? stored >> TOKEN_ISSUE_BITS : 0;
    if (ms <= stored_ms) {
        if (stored_ms >= TOKEN_MS_MAX)
            return acemq__idem_fail(h, ACEMQ_ERANGE, "sqlite: fencing token exhausted for this id");
        ms = stored_ms + 1;
    }
    sq *s = h->self;
    uint64_t issue = 0;
    if (acemq__issue_next(s->issue_fd, &issue) != 0)
        return acemq__idem_fail(h, ACEMQ_EIO, "sqlite: the token counter file: %s",
                                strerror(errno));
    *token = (int64_t)(((uint64_t)ms << TOKEN_ISSUE_BITS) | (issue & TOKEN_ISSUE_MASK));
    return 0;
}

/* ---- the writer queue and checkpoints -------------------------------------- *
 *
 * The queue itself, and the rules that keep it free of deadlock, are in
 * backends/sqlite/writer_queue.c; the checkpoint scheme is in backends/sqlite/checkpoint.c.
 * Here the store keeps those rules: it enters the queue under s->lock, only
 * with no SQLite transaction open, and leaves it before its call returns. */

/* Takes this file's writer queue for one write transaction; returns 1 when it
 * is held (acemq__sqlite_idem_queue_leave must follow), 0 when the write goes ahead unqueued. */
int acemq__sqlite_idem_queue_enter(sq *s)
{
    s->busy.start_kept = 0;
    if (!s->file) return 0;
    /* A connection that holds a transaction (the caller's, open around our
     * call) may hold the very lock the queue's holder waits for: it must not
     * wait behind that holder. It writes unqueued, as any other process. */
    if (sqlite3_txn_state(s->db, NULL) != SQLITE_TXN_NONE) return 0;
    int waited = 0;
    struct timespec start;
    int held = acemq__writer_queue_acquire(s->file, s->busy.timeout_ms, &start, &waited);
    if (waited) {
        s->busy.start = start;
        s->busy.start_kept = 1;
    }
    return held;
}

/* Gives the queue back, then checkpoints if due: outside the queue, so the
 * process's other writers go on meanwhile. */
void acemq__sqlite_idem_queue_leave(sq *s, int held)
{
    s->busy.start_kept = 0;
    if (held) acemq__writer_queue_release(s->file);
    acemq__sqlite_checkpoint(s->db, s->file, &s->busy, &s->wal_frames);
}

/* ---- statements ----------------------------------------------------------- */

void acemq__sqlite_idem_finish(sqlite3_stmt *st)
{
    /* reset's return repeats step's error, already reported. */
    (void)sqlite3_reset(st);
    (void)sqlite3_clear_bindings(st);
}

/* Steps a statement that returns no row, then resets it. */
static int run(acemq_idem *h, sqlite3_stmt *st)
{
    sq *s = h->self;
    int rc = sqlite3_step(st);
    int ret = 0;
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) ret = acemq__sqlite_idem_fail(h, s->db, rc);
    acemq__sqlite_idem_finish(st);
    return ret;
}

/* run() for a statement that writes: through the file's writer queue. */
int acemq__sqlite_idem_run_queued(acemq_idem *h, sqlite3_stmt *st)
{
    sq *s = h->self;
    int queued = acemq__sqlite_idem_queue_enter(s);
    int rc = run(h, st);
    acemq__sqlite_idem_queue_leave(s, queued);
    return rc;
}

/* A bind failed: report SQLite's words and leave the statement reusable. */
int acemq__sqlite_idem_bind_failed(acemq_idem *h, sqlite3_stmt *st, int rc)
{
    sq *s = h->self;
    rc = acemq__sqlite_idem_fail(h, s->db, rc);
    acemq__sqlite_idem_finish(st);
    return rc;
}

static int bind_bytes(sqlite3_stmt *st, int i, const acemq__bytes *b)
{
    if (!b || b->len == 0) return sqlite3_bind_null(st, i);
    return sqlite3_bind_blob64(st, i, b->data, b->len, SQLITE_STATIC);
}

int acemq__sqlite_idem_tx_begin(acemq_idem *h, tx_kind *kind)
{
    sq *s = h->self;
    *kind = sqlite3_get_autocommit(s->db) ? TX_OWN : TX_SAVEPOINT;
    return run(h, s->st[*kind == TX_OWN ? ST_BEGIN : ST_SAVEPOINT]);
}

static int tx_commit(acemq_idem *h, tx_kind kind)
{
    sq *s = h->self;
    return run(h, s->st[kind == TX_OWN ? ST_COMMIT : ST_RELEASE_SP]);
}

/* The level for the writes that follow: relaxed 1 before a claim's, 0
 * after it and before any other (backends/sqlite/claim_sync.h). 0 or an
 * error with SQLite's words. */
static int sync_level(acemq_idem *h, int relaxed)
{
    sq *s = h->self;
    int rc = acemq__claim_sync_set(&s->claim_sync, s->db, relaxed);
    return rc == SQLITE_OK ? 0 : acemq__sqlite_idem_fail(h, s->db, rc);
}

/* Undoes whatever the operation wrote. Failures here are not reported: the
 * error that led here is the one the caller needs, and SQLite may already have
 * rolled back on its own (after SQLITE_FULL or an I/O error, for instance). */
static void tx_rollback(acemq_idem *h, tx_kind kind)
{
    sq *s = h->self;
    if (kind == TX_OWN) {
        if (!sqlite3_get_autocommit(s->db)) {
            (void)sqlite3_step(s->st[ST_ROLLBACK]);
            acemq__sqlite_idem_finish(s->st[ST_ROLLBACK]);
        }
        return;
    }
    (void)sqlite3_step(s->st[ST_ROLLBACK_TO]);
    acemq__sqlite_idem_finish(s->st[ST_ROLLBACK_TO]);
    (void)sqlite3_step(s->st[ST_RELEASE_SP]);
    acemq__sqlite_idem_finish(s->st[ST_RELEASE_SP]);
}

/* Ends a transaction: commits when rc is 0 (or a non-negative result), rolls
 * back otherwise. A failed commit is rolled back too and becomes the result. */
int acemq__sqlite_idem_tx_end(acemq_idem *h, tx_kind kind, int rc)
{
    if (rc >= 0) {
        int c = tx_commit(h, kind);
        if (c == 0) return rc;
        rc = c;
    }
    tx_rollback(h, kind);
    return rc;
}

/* ---- try_claim ------------------------------------------------------------ */

typedef enum {
    V_ABSENT,    /* no row: insert one */
    V_CONFIRMED, /* ALREADY_CONFIRMED */
    V_BUSY,      /* IN_PROGRESS */
    V_MISMATCH,  /* EMISMATCH */
    V_CLAIM      /* update the row into a new claim */
} verdict_kind;

typedef struct verdict {
    verdict_kind kind;
    int64_t old_token;
    int forgotten; /* the row is logically gone: drop its fingerprint */
    int takeover;
} verdict;

static int fingerprints_differ(sqlite3_stmt *st, int col, const acemq__bytes *fp)
{
    if (fp->len == 0 || sqlite3_column_type(st, col) == SQLITE_NULL) return 0;
    const void *stored = sqlite3_column_blob(st, col);
    size_t n = (size_t)sqlite3_column_bytes(st, col);
    return n != fp->len || (n > 0 && memcmp(stored, fp->data, n) != 0);
}

/* Reads the row for id and decides what try_claim answers. Copies the stored
 * result while the row is still at hand. */
static int read_and_decide(acemq_idem *h, const acemq__bytes *id, const acemq__claim_args *a,
                           acemq_claim *out, verdict *v)
{
    sq *s = h->self;
    sqlite3_stmt *st = s->st[ST_SELECT];
    memset(v, 0, sizeof *v);
    int rc = bind_bytes(st, 1, id);
    if (rc != SQLITE_OK) return acemq__sqlite_idem_bind_failed(h, st, rc);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        v->kind = V_ABSENT;
        acemq__sqlite_idem_finish(st);
        return 0;
    }
    if (rc != SQLITE_ROW) {
        rc = acemq__sqlite_idem_fail(h, s->db, rc);
        acemq__sqlite_idem_finish(st);
        return rc;
    }
    int state = sqlite3_column_int(st, 0);
    v->old_token = sqlite3_column_int64(st, 1);
    int64_t lease_until = sqlite3_column_int64(st, 2); /* NULL reads as 0: run out */
    int64_t expires_at = sqlite3_column_int64(st, 3);
    int differ = fingerprints_differ(st, 4, &a->fingerprint);

    if (state == STATE_CONFIRMED && expires_at > a->now_ms) {
        if (differ) {
            v->kind = V_MISMATCH;
        } else {
            v->kind = V_CONFIRMED;
            if (sqlite3_column_type(st, 5) != SQLITE_NULL) {
                const void *res = sqlite3_column_blob(st, 5);
                size_t n = (size_t)sqlite3_column_bytes(st, 5);
                out->has_result = 1;
                out->result_len = n;
                if (a->result_cap > 0 && n > 0)
                    memcpy(a->result_buf, res, n < a->result_cap ? n : a->result_cap);
            }
        }
    } else if (state == STATE_CONFIRMED) {
        v->kind = V_CLAIM;
        v->forgotten = 1;
    } else if (state == STATE_CLAIMED) {
        if (differ) {
            v->kind = V_MISMATCH;
        } else if (lease_until > a->now_ms) {
            v->kind = V_BUSY;
            out->lease_until_ms = lease_until;
        } else {
            v->kind = V_CLAIM;
            v->takeover = 1;
        }
    } else {
        v->kind = V_CLAIM; /* released: a retry may come with another payload */
    }
    acemq__sqlite_idem_finish(st);
    return 0;
}

/* Answers a verdict that writes nothing. */
static int answer(acemq_idem *h, const verdict *v)
{
    switch (v->kind) {
    case V_CONFIRMED:
        return ACEMQ_ALREADY_CONFIRMED;
    case V_BUSY:
        return ACEMQ_IN_PROGRESS;
    case V_MISMATCH:
        return acemq__idem_fail(h, ACEMQ_EMISMATCH,
                                "id already seen with a different payload fingerprint");
    default:
        return acemq__idem_fail(h, ACEMQ_EBACKEND, "sqlite: internal: no answer for verdict %d",
                                (int)v->kind);
    }
}

/* 1 when a new row was inserted, 0 when the id already had one. */
static int insert_new(acemq_idem *h, const acemq__bytes *id, const acemq__claim_args *a,
                      acemq_claim *out)
{
    sq *s = h->self;
    sqlite3_stmt *st = s->st[ST_INSERT];
    int64_t token = 0;
    int rc = next_token(h, 0, a->now_ms, &token);
    if (rc != 0) return rc;
    rc = bind_bytes(st, 1, id);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, token);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 3, a->lease_until_ms);
    if (rc == SQLITE_OK) rc = bind_bytes(st, 4, &a->fingerprint);
    if (rc != SQLITE_OK) return acemq__sqlite_idem_bind_failed(h, st, rc);
    rc = run(h, st);
    if (rc != 0) return rc;
    if (sqlite3_changes(s->db) != 1) return 0;
    out->token = (uint64_t)token;
    out->lease_until_ms = a->lease_until_ms;
    out->takeover = 0;
    return 1;
}

static int claim_row(acemq_idem *h, const acemq__bytes *id, const acemq__claim_args *a,
                     const verdict *v, acemq_claim *out)
{
    sq *s = h->self;
    int64_t token = 0;
    int rc = next_token(h, v->old_token, a->now_ms, &token);
    if (rc != 0) return rc;
    sqlite3_stmt *st = s->st[ST_CLAIM];
    rc = bind_bytes(st, 1, id);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, token);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 3, a->lease_until_ms);
    if (rc == SQLITE_OK) rc = bind_bytes(st, 4, &a->fingerprint);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(st, 5, v->forgotten);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 6, v->old_token);
    if (rc != SQLITE_OK) return acemq__sqlite_idem_bind_failed(h, st, rc);
    rc = run(h, st);
    if (rc != 0) return rc;
    /* Impossible under the write lock we hold; refuse rather than hand out a
     * token that is not stored. */
    if (sqlite3_changes(s->db) != 1)
        return acemq__idem_fail(h, ACEMQ_EBACKEND, "sqlite: row changed during a claim");
    out->token = (uint64_t)token;
    out->lease_until_ms = a->lease_until_ms;
    out->takeover = v->takeover;
    return ACEMQ_CLAIMED;
}

/* The slow path: read, decide and write under the write lock, so two claimers
 * that both found the row claimable cannot both win. */
static int claim_locked(acemq_idem *h, const acemq__bytes *id, const acemq__claim_args *a,
                        acemq_claim *out)
{
    sq *s = h->self;
    int queued = acemq__sqlite_idem_queue_enter(s);
    tx_kind kind;
    int rc = acemq__sqlite_idem_tx_begin(h, &kind);
    if (rc != 0) {
        acemq__sqlite_idem_queue_leave(s, queued);
        return rc;
    }
    verdict v;
    memset(out, 0, sizeof *out);
    rc = read_and_decide(h, id, a, out, &v);
    if (rc == 0) {
        if (v.kind == V_ABSENT) {
            /* purged between our first look and the lock */
            rc = insert_new(h, id, a, out);
            if (rc == 0)
                rc = acemq__idem_fail(h, ACEMQ_EBACKEND, "sqlite: row appeared during a claim");
            else if (rc == 1)
                rc = ACEMQ_CLAIMED;
        } else if (v.kind == V_CLAIM) {
            rc = claim_row(h, id, a, &v, out);
        } else {
            rc = answer(h, &v);
        }
    }
    rc = acemq__sqlite_idem_tx_end(h, kind, rc);
    acemq__sqlite_idem_queue_leave(s, queued);
    /* A confirmation forgotten here never reaches purge; count it as the
     * memory store does. */
    if (rc == ACEMQ_CLAIMED && v.forgotten) ACEMQ__IDEM_COUNT(h, expirations, 1);
    return rc;
}

static int sq_try_claim(acemq_idem *h, const acemq__bytes *id, const acemq__claim_args *a,
                        acemq_claim *out)
{
    sq *s = h->self;
    pthread_mutex_lock(&s->lock);
    /* A plain read first. Redeliveries of finished or held work are answered
     * from it without asking for the write lock (nor the writer queue): a
     * confirmed record stays confirmed until it expires, and a live claim
     * read a moment ago is an honest IN_PROGRESS. A new id costs one extra
     * read, a few microseconds, against a commit. */
    verdict v;
    int rc = read_and_decide(h, id, a, out, &v);
    /* Failing to relax only costs the fsync. */
    if (rc == 0 && (v.kind == V_ABSENT || v.kind == V_CLAIM)) (void)sync_level(h, 1);
    if (rc == 0 && v.kind == V_ABSENT) {
        /* New ids: one autocommit statement, one commit. */
        int queued = acemq__sqlite_idem_queue_enter(s);
        rc = insert_new(h, id, a, out);
        acemq__sqlite_idem_queue_leave(s, queued);
        if (rc == 0) /* inserted by another claimer since the read */
            rc = read_and_decide(h, id, a, out, &v);
    }
    /* rc is 1 when the INSERT claimed, 0 when the verdict is to be acted on.
     * Only a claim of an existing row needs the write lock, and it reads
     * again under it. */
    if (rc == 1)
        rc = ACEMQ_CLAIMED;
    else if (rc == 0)
        rc = v.kind == V_ABSENT || v.kind == V_CLAIM ? claim_locked(h, id, a, out) : answer(h, &v);
    (void)sync_level(h, 0);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---- confirm, release, renew ---------------------------------------------- */

static int stale(acemq_idem *h, const char *op, uint64_t token)
{
    return acemq__idem_fail(h, ACEMQ_ESTALE,
                            "%s: token %llu is not the current claim on this id (taken over, "
                            "released, never issued or forgotten)",
                            op, (unsigned long long)token);
}

/* Runs one fenced UPDATE: binds id, token, ?3 and, for confirm, the result
 * and now; answers 0 when the row matched, ESTALE when not. Caller holds the
 * lock; queue: through the writer queue, else inside the caller's own
 * transaction. */
static int fenced_update_on(acemq_idem *h, int queue, const char *op, int which,
                            const acemq__bytes *id, uint64_t token, int64_t value,
                            const acemq__bytes *blob4, int64_t now)
{
    sq *s = h->self;
    if (token > (uint64_t)INT64_MAX) return stale(h, op, token);
    sqlite3_stmt *st = s->st[which];
    int rc = bind_bytes(st, 1, id);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, (int64_t)token);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 3, value);
    if (rc == SQLITE_OK && blob4) rc = bind_bytes(st, 4, blob4);
    if (rc == SQLITE_OK && blob4) rc = sqlite3_bind_int64(st, 5, now);
    if (rc != SQLITE_OK) return acemq__sqlite_idem_bind_failed(h, st, rc);
    rc = queue ? acemq__sqlite_idem_run_queued(h, st) : run(h, st);
    if (rc != 0) return rc;
    return sqlite3_changes(s->db) == 1 ? 0 : stale(h, op, token);
}

/* fenced_update_on through the file's writer queue: a write of its own. */
static int fenced_update(acemq_idem *h, const char *op, int which, const acemq__bytes *id,
                         uint64_t token, int64_t value, const acemq__bytes *blob4, int64_t now)
{
    return fenced_update_on(h, 1, op, which, id, token, value, blob4, now);
}

static int sq_confirm(acemq_idem *h, const acemq__bytes *id, uint64_t token,
                      const acemq__bytes *result, int64_t now_ms, int64_t expires_ms)
{
    sq *s = h->self;
    pthread_mutex_lock(&s->lock);
    int rc;
    if (!s->owns_db && (h->opts.flags & ACEMQ_IDEM_CONFIRM_IN_CALLER_TX) &&
        sqlite3_get_autocommit(s->db))
        rc = acemq__idem_fail(h, ACEMQ_ENOTX,
                              "confirm: ACEMQ_IDEM_CONFIRM_IN_CALLER_TX is set but the caller's "
                              "connection has no open transaction; nothing was written");
    else if ((rc = sync_level(h, 0)) == 0)
        /* The token fences, not the lease: a late confirm still counts. */
        rc = fenced_update(h, "confirm", ST_CONFIRM, id, token, expires_ms, result, now_ms);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The answers a batch element may get without breaking the transaction. */
static int element_answer(int rc)
{
    return rc >= 0 || rc == ACEMQ_ESTALE || rc == ACEMQ_EMISMATCH;
}

/* Ends a batch's transaction: committed when every element was answered,
 * rolled back otherwise, and then every element gets the failure. */
static void batch_end(acemq_idem *h, tx_kind kind, int failure, size_t n, const acemq__bytes *ids,
                      int *status)
{
    int rc = acemq__sqlite_idem_tx_end(h, kind, failure);
    if (rc >= 0) return;
    for (size_t i = 0; i < n; i++)
        if (ids[i].len) status[i] = rc;
}

/* Confirms a batch in one transaction: one commit for all of it. */
static int sq_confirm_many(acemq_idem *h, size_t n, const acemq__bytes *ids, const uint64_t *tokens,
                           const acemq__bytes *results, int64_t now_ms, int64_t expires_ms,
                           int *status)
{
    sq *s = h->self;
    pthread_mutex_lock(&s->lock);
    int failure;
    if (!s->owns_db && (h->opts.flags & ACEMQ_IDEM_CONFIRM_IN_CALLER_TX) &&
        sqlite3_get_autocommit(s->db))
        failure = acemq__idem_fail(h, ACEMQ_ENOTX,
                                   "confirm: ACEMQ_IDEM_CONFIRM_IN_CALLER_TX is set but the "
                                   "caller's connection has no open transaction; nothing was "
                                   "written");
    else
        failure = sync_level(h, 0);
    if (failure != 0) {
        for (size_t i = 0; i < n; i++)
            if (ids[i].len) status[i] = failure;
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    int queued = acemq__sqlite_idem_queue_enter(s);
    tx_kind kind;
    failure = acemq__sqlite_idem_tx_begin(h, &kind);
    if (failure != 0) {
        for (size_t i = 0; i < n; i++)
            if (ids[i].len) status[i] = failure;
    } else {
        for (size_t i = 0; i < n && failure == 0; i++) {
            if (!ids[i].len) continue;
            status[i] = fenced_update_on(h, 0, "confirm", ST_CONFIRM, &ids[i], tokens[i],
                                         expires_ms, &results[i], now_ms);
            if (!element_answer(status[i])) failure = status[i];
        }
        batch_end(h, kind, failure, n, ids, status);
    }
    acemq__sqlite_idem_queue_leave(s, queued);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* Claims a batch in one transaction, reading and deciding each id under
 * the write lock as claim_locked does: one commit for all of it. */
static int sq_try_claim_many(acemq_idem *h, size_t n, const acemq__bytes *ids,
                             const acemq__claim_args *a, acemq_claim *out, int *status)
{
    sq *s = h->self;
    pthread_mutex_lock(&s->lock);
    (void)sync_level(h, 1); /* failing to relax only costs the fsync */
    int queued = acemq__sqlite_idem_queue_enter(s);
    tx_kind kind;
    int failure = acemq__sqlite_idem_tx_begin(h, &kind);
    uint64_t forgotten = 0;
    if (failure != 0) {
        for (size_t i = 0; i < n; i++)
            if (ids[i].len) status[i] = failure;
    } else {
        for (size_t i = 0; i < n && failure == 0; i++) {
            if (!ids[i].len) continue;
            verdict v;
            memset(&out[i], 0, sizeof out[i]);
            int rc = read_and_decide(h, &ids[i], &a[i], &out[i], &v);
            if (rc == 0) {
                if (v.kind == V_ABSENT) {
                    rc = insert_new(h, &ids[i], &a[i], &out[i]);
                    if (rc == 0)
                        rc = acemq__idem_fail(h, ACEMQ_EBACKEND,
                                              "sqlite: row appeared during a claim");
                    else if (rc == 1)
                        rc = ACEMQ_CLAIMED;
                } else if (v.kind == V_CLAIM) {
                    rc = claim_row(h, &ids[i], &a[i], &v, &out[i]);
                } else {
                    rc = answer(h, &v);
                }
            }
            status[i] = rc;
            if (rc == ACEMQ_CLAIMED && v.forgotten) forgotten++;
            if (!element_answer(rc)) failure = rc;
        }
        batch_end(h, kind, failure, n, ids, status);
    }
    acemq__sqlite_idem_queue_leave(s, queued);
    (void)sync_level(h, 0);
    pthread_mutex_unlock(&s->lock);
    /* Confirmations forgotten here never reach purge; counted as the memory
     * store counts them. */
    if (failure == 0 && forgotten) ACEMQ__IDEM_COUNT(h, expirations, forgotten);
    return 0;
}

static int sq_release(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms)
{
    sq *s = h->self;
    pthread_mutex_lock(&s->lock);
    /* Kept, not deleted: the next claim must continue from this token. */
    int rc = fenced_update(h, "release", ST_RELEASE, id, token,
                           add_ms(now_ms, h->opts.retention_ms), NULL, now_ms);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_renew(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms,
                    int64_t lease_until_ms)
{
    sq *s = h->self;
    pthread_mutex_lock(&s->lock);
    int rc = fenced_update(h, "renew", ST_RENEW, id, token, lease_until_ms, NULL, now_ms);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---- is_confirmed (purge: idem_purge.c) ----------------------------------- */

static int sq_is_confirmed(acemq_idem *h, const acemq__bytes *id, int64_t now_ms)
{
    sq *s = h->self;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st = s->st[ST_IS_CONFIRMED];
    int rc = bind_bytes(st, 1, id);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, now_ms);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        rc = 1;
    else if (rc == SQLITE_DONE)
        rc = 0;
    else
        rc = acemq__sqlite_idem_fail(h, s->db, rc);
    acemq__sqlite_idem_finish(st);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

const acemq__idem_methods acemq__sqlite_idem_methods = {
    .version = ACEMQ__IDEM_METHODS_VERSION,
    .name = "sqlite",
    .close = acemq__sqlite_idem_close,
    .try_claim = sq_try_claim,
    .confirm = sq_confirm,
    .release = sq_release,
    .renew = sq_renew,
    .is_confirmed = sq_is_confirmed,
    .purge = acemq__sqlite_idem_purge,
    .counts = acemq__sqlite_idem_counts,
    .inspect = acemq__sqlite_idem_inspect,
    .forget = acemq__sqlite_idem_forget,
    .try_claim_many = sq_try_claim_many,
    .confirm_many = sq_confirm_many,
};
