/* idem_store.h — the SQLite idempotency store's state, shared by its three
 * files: idem.c claims, confirms, releases, renews and purges; idem_open.c
 * holds the SQL, makes the schema, opens, configures and closes;
 * idem_admin.c answers the operator's calls. The rules
 * for the writer queue and the tokens are at the top of idem.c. Internal to
 * src/backends/sqlite/.
 */
#ifndef ACEMQ_BACKENDS_SQLITE_IDEM_STORE_H
#define ACEMQ_BACKENDS_SQLITE_IDEM_STORE_H

#include <pthread.h>
#include <sqlite3.h>

#include "backends/sqlite/busy.h"
#include "backends/sqlite/claim_sync.h"
#include "backends/sqlite/writer_queue.h"
#include "idem/idem_backend.h"

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

/* The text of each statement, prepared once per handle (idem_open.c). */
extern const char *const acemq__sqlite_idem_sql[ST_COUNT];

typedef struct sq {
    sqlite3 *db;
    int owns_db; /* 0: the caller's connection; never closed, never re-configured */
    pthread_mutex_t lock;
    sqlite3_stmt *st[ST_COUNT];
    acemq__sqlite_busy busy;   /* the busy handler's budget and wait; s->lock guards it */
    acemq__writer_queue *file; /* this file's writer queue; NULL for in-memory and temp */
    int wal_frames;            /* frames in the WAL after our last commit; own connections only */
    int issue_fd; /* the file's token counter (backends/sqlite/issue.h); -1: the process's */
    acemq__claim_sync claim_sync; /* claims without an fsync (backends/sqlite/claim_sync.h) */
} sq;

/* How a multi-statement operation is wrapped: its own transaction on an idle
 * connection, a savepoint inside the caller's open one. */
typedef enum { TX_OWN, TX_SAVEPOINT } tx_kind;

/* idem.c */

/* Sets SQLite's own words for rc on h and returns the acemq code. */
int acemq__sqlite_idem_fail(acemq_idem *h, sqlite3 *db, int rc);
/* Takes this file's writer queue for one write transaction; returns 1 when it
 * is held (acemq__sqlite_idem_queue_leave must follow), 0 when the write goes
 * ahead unqueued. */
int acemq__sqlite_idem_queue_enter(sq *s);
void acemq__sqlite_idem_queue_leave(sq *s, int held);
/* Opens a multi-statement operation (*kind: how it is wrapped) and ends it,
 * committing when rc is 0 and rolling back otherwise; tx_end returns rc, or
 * the commit's error. */
int acemq__sqlite_idem_tx_begin(acemq_idem *h, tx_kind *kind);
int acemq__sqlite_idem_tx_end(acemq_idem *h, tx_kind kind, int rc);
/* Resets a statement and clears its bindings. */
void acemq__sqlite_idem_finish(sqlite3_stmt *st);
/* A bind failed: SQLite's words on h, the statement reusable; the code. */
int acemq__sqlite_idem_bind_failed(acemq_idem *h, sqlite3_stmt *st, int rc);
/* Steps a writing statement that returns no row through the file's writer
 * queue, then resets it. */
int acemq__sqlite_idem_run_queued(acemq_idem *h, sqlite3_stmt *st);
/* The store's slots; close is idem_open.c's. */
extern const acemq__idem_methods acemq__sqlite_idem_methods;

/* idem_purge.c: the purge slot. */
int acemq__sqlite_idem_purge(acemq_idem *h, int64_t now_ms, uint64_t *purged);

/* idem_admin.c: the operator's calls (idem_backend.h, counts, inspect, forget). */
int acemq__sqlite_idem_counts(acemq_idem *h, int64_t now_ms, acemq_idem_counts *out);
int acemq__sqlite_idem_inspect(acemq_idem *h, const acemq__bytes *id, int64_t now_ms,
                               acemq_idem_record *out);
int acemq__sqlite_idem_forget(acemq_idem *h, const acemq__bytes *id, int64_t now_ms);

/* idem_open.c */

/* Frees the store's state in h->self: statements, the connection when it is
 * the store's own, the writer queue's registration, the token counter. */
void acemq__sqlite_idem_close(acemq_idem *h);
/* The file a sqlite: URL names (in url->rest) and its parameters, set on
 * h->opts; nothing is opened. 0, or ACEMQ_EURL with why on h. */
int acemq__sqlite_idem_parse_url(acemq_idem *h, const acemq__url *url, const char **path);

#endif
