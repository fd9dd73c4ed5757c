/* sqlite_idem.c — the idempotency store on an SQLite file (or a connection the
 * caller owns): schema, prepared statements, transactions, the fencing-token
 * scheme, and the glue to the writer queue (sqlite_writer_queue.c), the busy
 * handler (sqlite_busy.c) and checkpoints (sqlite_checkpoint.c).
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
 *   rollback undoes (sqlite_issue.h), so two claims on the file get
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
 *   writer queue, entered through queue_enter and left through queue_leave.
 *   Reads never enter it. The queue only speeds writers up, SQLite's locks
 *   decide; the rules that keep it free of deadlock (lock order s->lock, then
 *   the queue; wait only with no transaction open; hold only inside our call)
 *   are in sqlite_writer_queue.c, and the store must keep them.
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
#include "store/sqlite_issue.h"
#include "store/sqlite_busy.h"
#include "store/sqlite_checkpoint.h"
#include "store/sqlite_errors.h"
#include "store/sqlite_idem_internal.h"
#include "store/sqlite_writer_queue.h"

#define SCHEMA_COMPONENT "idem"
#define SCHEMA_VERSION 1
/* Rows per purge statement: large purges must not hold the write lock for
 * seconds while claimers wait. */
#define PURGE_BATCH 512
/* Keys per abandoned-claim purge statement. Abandoned claims have no index
 * (one would cost every claim and confirm a page), so that purge walks the
 * primary key in windows of this many rows, each its own short write. */
#define PURGE_WINDOW 2048

enum { STATE_RELEASED = 0, STATE_CLAIMED = 1, STATE_CONFIRMED = 2 };

/* A token's low bits: the claim's issue number (see Tokens above). The ms
 * above them has 63 - 21 = 42 bits, enough until the year 2109. */
#define TOKEN_ISSUE_BITS 21
#define TOKEN_ISSUE_MASK ((UINT64_C(1) << TOKEN_ISSUE_BITS) - 1)
#define TOKEN_MS_MAX (INT64_MAX >> TOKEN_ISSUE_BITS)

enum {
    ST_INSERT,
    ST_SELECT,
    ST_CLAIM,
    ST_CONFIRM,
    ST_RELEASE,
    ST_RENEW,
    ST_IS_CONFIRMED,
    ST_PURGE_DONE,
    ST_PURGE_WINDOW,
    ST_PURGE_ABANDONED,
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_SAVEPOINT,
    ST_RELEASE_SP,
    ST_ROLLBACK_TO,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_INSERT] = "INSERT INTO acemq_idem(id, state, token, lease_until, expires_at, fingerprint,"
                  " result) VALUES(?1, 1, ?2, ?3, NULL, ?4, NULL) ON CONFLICT(id) DO NOTHING",
    [ST_SELECT] = "SELECT state, token, lease_until, expires_at, fingerprint, result"
                  " FROM acemq_idem WHERE id = ?1",
    /* ?5 = 1: the old record is forgotten, so its fingerprint goes with it. */
    [ST_CLAIM] = "UPDATE acemq_idem SET state = 1, token = ?2, lease_until = ?3, expires_at = NULL,"
                 " fingerprint = CASE WHEN ?5 THEN ?4 ELSE coalesce(?4, fingerprint) END,"
                 " result = NULL WHERE id = ?1 AND token = ?6",
    /* A repeated confirm is fine while the confirmation is remembered; once it
     * is forgotten its token is as dead as the record. */
    [ST_CONFIRM] = "UPDATE acemq_idem SET state = 2, expires_at = ?3, result = ?4,"
                   " lease_until = NULL WHERE id = ?1 AND token = ?2"
                   " AND (state = 1 OR (state = 2 AND expires_at > ?5))",
    [ST_RELEASE] = "UPDATE acemq_idem SET state = 0, lease_until = NULL, expires_at = ?3"
                   " WHERE id = ?1 AND token = ?2 AND state = 1",
    [ST_RENEW] =
        "UPDATE acemq_idem SET lease_until = ?3 WHERE id = ?1 AND token = ?2 AND state = 1",
    [ST_IS_CONFIRMED] = "SELECT 1 FROM acemq_idem WHERE id = ?1 AND state = 2 AND expires_at > ?2",
    [ST_PURGE_DONE] = "DELETE FROM acemq_idem WHERE id IN (SELECT id FROM acemq_idem"
                      " WHERE expires_at <= ?1 AND state <> 1 LIMIT ?2)",
    /* The last key of the next window after ?1: a read, so it takes no write
     * lock however long the table is. */
    [ST_PURGE_WINDOW] = "SELECT max(id) FROM (SELECT id FROM acemq_idem WHERE id > ?1"
                        " ORDER BY id LIMIT ?2)",
    /* A primary-key range scan over at most one window's rows. */
    [ST_PURGE_ABANDONED] = "DELETE FROM acemq_idem WHERE id > ?1 AND id <= ?2 AND state = 1"
                           " AND lease_until <= ?3",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SAVEPOINT] = "SAVEPOINT acemq_idem",
    [ST_RELEASE_SP] = "RELEASE acemq_idem",
    [ST_ROLLBACK_TO] = "ROLLBACK TO acemq_idem",
};

/* One partial index, for the common purge (confirmed and released rows past
 * retention): a claimed row has no expires_at, so a claim does not touch it
 * and a confirm adds one entry. Every index entry a commit changes costs it a
 * whole page in the WAL, which is why abandoned claims, rare, have no index
 * of their own (docs/sqlite-store.md has the figures). */
static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS acemq_idem("
    " id BLOB PRIMARY KEY,"
    " state INTEGER NOT NULL," /* 1 claimed, 2 confirmed, 0 released */
    " token INTEGER NOT NULL,"
    " lease_until INTEGER,"
    " expires_at INTEGER,"
    " fingerprint BLOB,"
    " result BLOB) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS acemq_idem_expires ON acemq_idem(expires_at)"
    " WHERE expires_at IS NOT NULL;";

typedef struct sq {
    sqlite3 *db;
    int owns_db; /* 0: the caller's connection; never closed, never re-configured */
    pthread_mutex_t lock;
    sqlite3_stmt *st[ST_COUNT];
    acemq__sqlite_busy busy;   /* the busy handler's budget and wait; s->lock guards it */
    acemq__writer_queue *file; /* this file's writer queue; NULL for in-memory and temp */
    int wal_frames;            /* frames in the WAL after our last commit; own connections only */
    int issue_fd;              /* the file's token counter (sqlite_issue.h); -1: the process's */
} sq;

/* How a multi-statement operation is wrapped: its own transaction on an idle
 * connection, a savepoint inside the caller's open one. */
typedef enum { TX_OWN, TX_SAVEPOINT } tx_kind;

static int64_t add_ms(int64_t t, int64_t d)
{
    return t > INT64_MAX - d ? INT64_MAX : t + d;
}

static int64_t sub_ms(int64_t t, int64_t d)
{
    return t < INT64_MIN + d ? INT64_MIN : t - d;
}

/* Keeps SQLite's own words: they are what an operator can search for. */
static int sq_fail(acemq_idem *h, sqlite3 *db, int rc)
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
 * sqlite_writer_queue.c; the checkpoint scheme is in sqlite_checkpoint.c.
 * Here the store keeps those rules: it enters the queue under s->lock, only
 * with no SQLite transaction open, and leaves it before its call returns. */

/* Takes this file's writer queue for one write transaction; returns 1 when it
 * is held (queue_leave must follow), 0 when the write goes ahead unqueued. */
static int queue_enter(sq *s)
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
static void queue_leave(sq *s, int held)
{
    s->busy.start_kept = 0;
    if (held) acemq__writer_queue_release(s->file);
    acemq__sqlite_checkpoint(s->db, s->file, &s->busy, &s->wal_frames);
}

/* Finds or makes the registry entry for the connection's main file. The key
 * is the file's identity after open, so "a.db", "./a.db" and a symlink to it
 * share one queue. Databases with no file (in-memory, temp) get none; nor does
 * one we cannot stat (a VFS of its own, say): they are private or decided by
 * SQLite's locks alone, which stay correct either way. */
static int file_join(acemq_idem *h)
{
    sq *s = h->self;
    const char *name = sqlite3_db_filename(s->db, "main");
    if (acemq__issue_open(name, &s->issue_fd) != 0)
        return acemq__idem_fail(h, ACEMQ_EIO, "sqlite: cannot open %s-acemq-issue: %s", name,
                                strerror(errno));
    struct stat st;
    if (!name || !*name || stat(name, &st) != 0) return 0;
    s->file = acemq__writer_queue_join(st.st_dev, st.st_ino);
    if (!s->file)
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "sqlite: out of memory for the writer queue");
    return 0;
}

static void file_leave(sq *s)
{
    acemq__writer_queue *f = s->file;
    s->file = NULL;
    acemq__writer_queue_leave(f);
}

/* ---- statements ----------------------------------------------------------- */

static void finish(sqlite3_stmt *st)
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
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) ret = sq_fail(h, s->db, rc);
    finish(st);
    return ret;
}

/* run() for a statement that writes: through the file's writer queue. */
static int run_queued(acemq_idem *h, sqlite3_stmt *st)
{
    sq *s = h->self;
    int queued = queue_enter(s);
    int rc = run(h, st);
    queue_leave(s, queued);
    return rc;
}

/* A bind failed: report SQLite's words and leave the statement reusable. */
static int bind_failed(acemq_idem *h, sqlite3_stmt *st, int rc)
{
    sq *s = h->self;
    rc = sq_fail(h, s->db, rc);
    finish(st);
    return rc;
}

static int bind_bytes(sqlite3_stmt *st, int i, const acemq__bytes *b)
{
    if (!b || b->len == 0) return sqlite3_bind_null(st, i);
    return sqlite3_bind_blob64(st, i, b->data, b->len, SQLITE_STATIC);
}

static int tx_begin(acemq_idem *h, tx_kind *kind)
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

/* Undoes whatever the operation wrote. Failures here are not reported: the
 * error that led here is the one the caller needs, and SQLite may already have
 * rolled back on its own (after SQLITE_FULL or an I/O error, for instance). */
static void tx_rollback(acemq_idem *h, tx_kind kind)
{
    sq *s = h->self;
    if (kind == TX_OWN) {
        if (!sqlite3_get_autocommit(s->db)) {
            (void)sqlite3_step(s->st[ST_ROLLBACK]);
            finish(s->st[ST_ROLLBACK]);
        }
        return;
    }
    (void)sqlite3_step(s->st[ST_ROLLBACK_TO]);
    finish(s->st[ST_ROLLBACK_TO]);
    (void)sqlite3_step(s->st[ST_RELEASE_SP]);
    finish(s->st[ST_RELEASE_SP]);
}

/* Ends a transaction: commits when rc is 0 (or a non-negative result), rolls
 * back otherwise. A failed commit is rolled back too and becomes the result. */
static int tx_end(acemq_idem *h, tx_kind kind, int rc)
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
    if (rc != SQLITE_OK) return bind_failed(h, st, rc);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        v->kind = V_ABSENT;
        finish(st);
        return 0;
    }
    if (rc != SQLITE_ROW) {
        rc = sq_fail(h, s->db, rc);
        finish(st);
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
    finish(st);
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
    if (rc != SQLITE_OK) return bind_failed(h, st, rc);
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
    if (rc != SQLITE_OK) return bind_failed(h, st, rc);
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
    int queued = queue_enter(s);
    tx_kind kind;
    int rc = tx_begin(h, &kind);
    if (rc != 0) {
        queue_leave(s, queued);
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
    rc = tx_end(h, kind, rc);
    queue_leave(s, queued);
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
    if (rc == 0 && v.kind == V_ABSENT) {
        /* New ids: one autocommit statement, one commit. */
        int queued = queue_enter(s);
        rc = insert_new(h, id, a, out);
        queue_leave(s, queued);
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
 * lock. */
static int fenced_update(acemq_idem *h, const char *op, int which, const acemq__bytes *id,
                         uint64_t token, int64_t value, const acemq__bytes *blob4, int64_t now)
{
    sq *s = h->self;
    if (token > (uint64_t)INT64_MAX) return stale(h, op, token);
    sqlite3_stmt *st = s->st[which];
    int rc = bind_bytes(st, 1, id);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, (int64_t)token);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 3, value);
    if (rc == SQLITE_OK && blob4) rc = bind_bytes(st, 4, blob4);
    if (rc == SQLITE_OK && blob4) rc = sqlite3_bind_int64(st, 5, now);
    if (rc != SQLITE_OK) return bind_failed(h, st, rc);
    rc = run_queued(h, st);
    if (rc != 0) return rc;
    return sqlite3_changes(s->db) == 1 ? 0 : stale(h, op, token);
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
    else
        /* The token fences, not the lease: a late confirm still counts. */
        rc = fenced_update(h, "confirm", ST_CONFIRM, id, token, expires_ms, result, now_ms);
    pthread_mutex_unlock(&s->lock);
    return rc;
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

/* ---- is_confirmed, purge -------------------------------------------------- */

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
        rc = sq_fail(h, s->db, rc);
    finish(st);
    pthread_mutex_unlock(&s->lock);
    return rc;
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
        if (rc != SQLITE_OK) return bind_failed(h, st, rc);
        rc = run_queued(h, st);
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
            rc = sq_fail(h, s->db, src);
            finish(win);
            break;
        }
        if (src == SQLITE_DONE || sqlite3_column_type(win, 0) == SQLITE_NULL) {
            finish(win); /* no key after lo: the walk is over */
            break;
        }
        int kept = keep_key(&hi, sqlite3_column_blob(win, 0), (size_t)sqlite3_column_bytes(win, 0));
        finish(win);
        if (kept != 0) {
            rc = acemq__idem_fail(h, ACEMQ_ENOMEM, "sqlite: out of memory");
            break;
        }
        src = bind_key(del, 1, &lo);
        if (src == SQLITE_OK) src = bind_key(del, 2, &hi);
        if (src == SQLITE_OK) src = sqlite3_bind_int64(del, 3, before);
        if (src != SQLITE_OK) {
            rc = sq_fail(h, s->db, src);
            finish(del);
            break;
        }
        rc = run_queued(h, del);
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

static int sq_purge(acemq_idem *h, int64_t now_ms, uint64_t *purged)
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

/* ---- open and close ------------------------------------------------------- */

static void sq_free_state(sq *s)
{
    if (!s) return;
    for (int i = 0; i < ST_COUNT; i++)
        (void)sqlite3_finalize(s->st[i]); /* NULL is a no-op */
    if (s->owns_db) (void)sqlite3_close_v2(s->db);
    file_leave(s);
    acemq__issue_close(s->issue_fd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static void sq_close(acemq_idem *h)
{
    sq_free_state(h->self);
    h->self = NULL;
}

/* NULL when out of memory (ACEMQ_ENOMEM), with the error text on h. */
static sq *sq_new_state(acemq_idem *h)
{
    sq *s = calloc(1, sizeof *s);
    if (!s) {
        (void)acemq__idem_fail(h, ACEMQ_ENOMEM, "sqlite: out of memory");
        return NULL;
    }
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        (void)acemq__idem_fail(h, ACEMQ_ENOMEM, "sqlite: cannot create a mutex");
        return NULL;
    }
    s->issue_fd = -1;
    acemq__sqlite_busy_init(&s->busy, h->opts.busy_timeout_ms);
    return s;
}

static int prepare(acemq_idem *h, int which)
{
    sq *s = h->self;
    int rc = sqlite3_prepare_v3(s->db, stmt_sql[which], -1, SQLITE_PREPARE_PERSISTENT,
                                &s->st[which], NULL);
    return rc == SQLITE_OK ? 0 : sq_fail(h, s->db, rc);
}

static int exec(acemq_idem *h, const char *sql)
{
    sq *s = h->self;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : sq_fail(h, s->db, rc);
}

/* Inside the open transaction: refuses a schema from a newer library before
 * touching anything, creates what is missing. */
static int ensure_schema_locked(acemq_idem *h)
{
    sq *s = h->self;
    int rc = exec(h, "CREATE TABLE IF NOT EXISTS acemq_schema_version("
                     "component TEXT PRIMARY KEY, version INTEGER NOT NULL)");
    if (rc != 0) return rc;
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(
        s->db, "SELECT version FROM acemq_schema_version WHERE component = '" SCHEMA_COMPONENT "'",
        -1, &st, NULL);
    if (rc != SQLITE_OK) return sq_fail(h, s->db, rc);
    int64_t version = 0;
    int have = 0;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        have = 1;
        version = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    } else {
        rc = sq_fail(h, s->db, rc);
    }
    (void)sqlite3_finalize(st);
    if (rc != 0) return rc;
    if (have && version > SCHEMA_VERSION)
        return acemq__idem_fail(h, ACEMQ_ESCHEMA,
                                "sqlite: schema version %lld of '" SCHEMA_COMPONENT
                                "' is newer than this library's %d",
                                (long long)version, SCHEMA_VERSION);
    if (have && version < 1)
        return acemq__idem_fail(h, ACEMQ_EBACKEND,
                                "sqlite: schema version %lld of '" SCHEMA_COMPONENT
                                "' is not one this library ever wrote",
                                (long long)version);
    rc = exec(h, schema_sql);
    if (rc == 0 && !have)
        rc =
            exec(h, "INSERT INTO acemq_schema_version(component, version) VALUES('" SCHEMA_COMPONENT
                    "', 1)");
    return rc;
}

/* Everything both open paths share, once the connection is configured. */
static int setup(acemq_idem *h)
{
    static const int control[] = {ST_BEGIN,     ST_COMMIT,     ST_ROLLBACK,
                                  ST_SAVEPOINT, ST_RELEASE_SP, ST_ROLLBACK_TO};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof control / sizeof *control; i++)
        rc = prepare(h, control[i]);
    if (rc != 0) return rc;
    sq *s = h->self;
    int queued = queue_enter(s);
    tx_kind kind;
    rc = tx_begin(h, &kind);
    if (rc == 0) rc = tx_end(h, kind, ensure_schema_locked(h));
    queue_leave(s, queued);
    for (int i = 0; rc == 0 && i < ST_COUNT; i++)
        if (!s->st[i]) rc = prepare(h, i);
    return rc;
}

static const acemq__idem_methods sqlite_methods = {
    .version = ACEMQ__IDEM_METHODS_VERSION,
    .name = "sqlite",
    .close = sq_close,
    .try_claim = sq_try_claim,
    .confirm = sq_confirm,
    .release = sq_release,
    .renew = sq_renew,
    .is_confirmed = sq_is_confirmed,
    .purge = sq_purge,
};

/* Runs a PRAGMA that answers one text row into buf. Switching to WAL needs an
 * exclusive lock that SQLite does not wait for, so BUSY is retried here with
 * the same back-off as every other lock. */
static int pragma_text(acemq_idem *h, const char *sql, char *buf, size_t cap)
{
    sq *s = h->self;
    for (int attempt = 0;; attempt++) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const unsigned char *t = sqlite3_column_text(st, 0);
            snprintf(buf, cap, "%s", t ? (const char *)t : "");
        } else if (rc == SQLITE_DONE) {
            snprintf(buf, cap, "%s", "");
        }
        int again = (rc & 0xff) == SQLITE_BUSY && acemq__sqlite_busy_handler(&s->busy, attempt);
        int ret = rc == SQLITE_ROW || rc == SQLITE_DONE || again ? 0 : sq_fail(h, s->db, rc);
        (void)sqlite3_finalize(st);
        if (!again) return ret;
    }
}

static int configure_own(acemq_idem *h)
{
    sq *s = h->self;
    int rc = sqlite3_busy_handler(s->db, acemq__sqlite_busy_handler, &s->busy);
    if (rc != SQLITE_OK) return sq_fail(h, s->db, rc);
    /* Replaces the auto-checkpoint: see sqlite_checkpoint.c. */
    acemq__sqlite_checkpoint_hook(s->db, &s->wal_frames);
    char mode[32];
    rc = pragma_text(h, "PRAGMA journal_mode=WAL", mode, sizeof mode);
    if (rc != 0) return rc;
    const char *file = sqlite3_db_filename(s->db, "main");
    /* An in-memory database has no WAL; it is private to this handle anyway. */
    if (strcasecmp(mode, "wal") != 0 && file && *file)
        return acemq__idem_fail(h, ACEMQ_EBACKEND,
                                "sqlite: '%s' stayed in journal mode '%s'; WAL is required", file,
                                mode);
    static const char *const sync_sql[] = {"PRAGMA synchronous=OFF", "PRAGMA synchronous=NORMAL",
                                           "PRAGMA synchronous=FULL"};
    return exec(h, sync_sql[h->opts.synchronous]);
}

static int parse_url(acemq_idem *h, const acemq__url *url, const char **path)
{
    static const char *const known[] = {"synchronous", "busy_timeout_ms", NULL};
    const char *bad = NULL;
    if (acemq__url_check_params(url, known, &bad) != 0)
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "sqlite: unknown URL parameter '%s' (known: synchronous, "
                                "busy_timeout_ms)",
                                bad ? bad : "");
    const char *sync = acemq__url_param(url, "synchronous");
    if (sync) {
        static const char *const names[] = {"off", "normal", "full"};
        int found = -1;
        for (int i = 0; i < 3; i++)
            if (strcasecmp(sync, names[i]) == 0) found = i;
        if (found < 0)
            return acemq__idem_fail(h, ACEMQ_EURL,
                                    "sqlite: synchronous='%s'; expected off, normal or full", sync);
        h->opts.synchronous = found;
    }
    int64_t timeout = h->opts.busy_timeout_ms;
    if (acemq__url_param_int(url, "busy_timeout_ms", 0, INT_MAX, &timeout) != 0)
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "sqlite: busy_timeout_ms='%s'; expected a whole number of "
                                "milliseconds, 0..%d",
                                acemq__url_param(url, "busy_timeout_ms"), INT_MAX);
    h->opts.busy_timeout_ms = (int)timeout;
    const char *p = url->rest;
    /* sqlite:///abs/path is common enough to accept; a host part is not. */
    if (p[0] == '/' && p[1] == '/') {
        if (p[2] != '/')
            return acemq__idem_fail(h, ACEMQ_EURL,
                                    "sqlite: '%s' names a host; use sqlite:/abs/path.db or "
                                    "sqlite:relative/path.db",
                                    p);
        p += 2;
    }
    if (*p == '\0')
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "sqlite: the URL names no file; use sqlite:/abs/path.db");
    *path = p;
    return 0;
}

int acemq__idem_open_sqlite_url(acemq_idem *h, const acemq__url *url)
{
    const char *path = NULL;
    int rc = parse_url(h, url, &path);
    if (rc != 0) return rc;
    if (h->opts.flags & ACEMQ_IDEM_CONFIRM_IN_CALLER_TX)
        return acemq__idem_fail(h, ACEMQ_EINVAL,
                                "sqlite: ACEMQ_IDEM_CONFIRM_IN_CALLER_TX needs the caller's own "
                                "connection (acemq_idem_open_sqlite); a store opened by URL has "
                                "no caller transaction to join");
    sq *s = sq_new_state(h);
    if (!s) return ACEMQ_ENOMEM;
    sqlite3 *db = NULL;
    int src = sqlite3_open_v2(
        path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        char buf[ACEMQ__SQLITE_WORDS];
        rc = acemq__idem_fail(h, acemq__sqlite_code(src), "sqlite: cannot open '%s': %s", path,
                              acemq__sqlite_words(db, src, buf));
        (void)sqlite3_close_v2(db);
        sq_free_state(s);
        return rc;
    }
    s->db = db;
    s->owns_db = 1;
    h->self = s;
    rc = file_join(h);
    if (rc == 0) rc = configure_own(h);
    if (rc == 0) rc = setup(h);
    if (rc != 0) {
        sq_close(h);
        return rc;
    }
    h->methods = &sqlite_methods;
    return 0;
}

int acemq_idem_open_sqlite(acemq_idem **out, sqlite3 *db, const acemq_idem_options *o)
{
    if (!out) return acemq__idem_open_fail(ACEMQ_EINVAL, "out is NULL");
    *out = NULL;
    if (!db) return acemq__idem_open_fail(ACEMQ_EINVAL, "db is NULL");
    acemq_idem *h = NULL;
    int rc = acemq__idem_new(&h, o);
    if (rc != 0) return rc;
    sq *s = sq_new_state(h);
    rc = s ? 0 : ACEMQ_ENOMEM;
    if (s) {
        /* The caller's connection keeps its journal mode, synchronous setting
         * and busy handler: they are the caller's choices for all its work. */
        s->db = db;
        s->owns_db = 0;
        h->self = s;
        /* The caller's connection joins the file's writer queue too, for our
         * own calls only: the caller's other writes on it go unqueued (the
         * queue never decides a race, SQLite does), and while the caller
         * holds a transaction our calls write unqueued as well. */
        rc = file_join(h);
        if (rc == 0) rc = setup(h);
        if (rc != 0) sq_close(h);
    }
    if (rc != 0) {
        acemq__idem_free(h);
        return rc;
    }
    h->methods = &sqlite_methods;
    *out = h;
    return 0;
}

/* ---- test hooks (sqlite_idem_internal.h) ---------------------------------- */

const void *acemq__sqlite_idem_queue(const acemq_idem *h)
{
    const sq *s = h->self;
    return s ? s->file : NULL;
}

size_t acemq__sqlite_idem_queue_files(void)
{
    return acemq__writer_queue_files();
}

int acemq__sqlite_idem_queue_waiters(const acemq_idem *h)
{
    const sq *s = h->self;
    if (!s || !s->file) return 0;
    return acemq__writer_queue_waiters(s->file);
}

int acemq__sqlite_idem_queue_hold(acemq_idem *h, int hold)
{
    sq *s = h->self;
    if (!s || !s->file) return -1;
    if (hold) {
        struct timespec start;
        int waited = 0;
        while (!acemq__writer_queue_acquire(s->file, INT_MAX, &start, &waited)) {
        }
    } else {
        acemq__writer_queue_release(s->file);
    }
    return 0;
}
