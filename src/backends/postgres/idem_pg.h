/* idem_pg.h — the PostgreSQL idempotency store's state, shared by its
 * files: idem_sql.c writes the statements for a table, idem_open.c
 * connects, makes the schema and prepares them, idem.c runs them. Internal
 * to src/backends/postgres/.
 *
 * Invariants:
 *   Times are milliseconds since the epoch in bigint columns. With the
 *   system clock (the default) every statement reads the database's clock
 *   (clock_timestamp()), so machines whose clocks disagree agree on leases
 *   and retention; with a clock the caller injected (tests), the core's
 *   now_ms is sent instead. Durations (lease, retention) always come from
 *   the caller.
 *   Tokens come from one sequence per table, advanced by every claim and
 *   never rolled back, so no token is issued twice, across purges,
 *   forgets and rolled-back transactions.
 *   One statement per operation, each atomic on its own under READ
 *   COMMITTED; the handle's mutex keeps one call at a time on its
 *   connection.
 */
#ifndef ACEMQ_BACKENDS_POSTGRES_IDEM_PG_H
#define ACEMQ_BACKENDS_POSTGRES_IDEM_PG_H

#include <libpq-fe.h>
#include <pthread.h>

#include "idem/idem_backend.h"

#define PG_IDEM_TABLE_MAX 48 /* bytes in a table name; the sequence adds "_token" */

enum {
    PGQ_CLAIM,
    PGQ_CONFIRM,
    PGQ_RELEASE,
    PGQ_RENEW,
    PGQ_IS_CONFIRMED,
    PGQ_PURGE_DONE,
    PGQ_PURGE_ABANDONED,
    PGQ_COUNTS,
    PGQ_NEXT_LEASE,
    PGQ_INSPECT,
    PGQ_FORGET,
    PGQ_CLAIM_MANY,
    PGQ_CONFIRM_MANY,
    PGQ_COUNT
};

typedef struct pg_idem {
    PGconn *conn;
    int owns_conn;  /* 0: the caller's (acemq_idem_open_pg): never reset, never closed */
    int db_clock;   /* 1: now is the database's clock_timestamp() */
    char *conninfo; /* own connections: what PQconnectdb got, for reconnects */
    int unprepared; /* 1: the session lost the statements (26000): prepared before the next */
    int64_t statement_timeout_ms;
    char table[PG_IDEM_TABLE_MAX + 1];
    char *sql[PGQ_COUNT];                          /* statement texts for this table */
    char names[PGQ_COUNT][PG_IDEM_TABLE_MAX + 32]; /* prepared statement names */
    pthread_mutex_t lock;
} pg_idem;

/* idem_sql.c: the schema and every statement for table, malloc'd into
 * sql[] and *schema (0, or ACEMQ_ENOMEM with nothing allocated). */
int acemq__pg_idem_sql(const char *table, char **sql, char **schema);
/* Each statement's parameter count and types (int8 or bytea OIDs). */
extern const int acemq__pg_idem_nparams[PGQ_COUNT];
extern const unsigned acemq__pg_idem_types[PGQ_COUNT][5];

/* idem_open.c */
/* Records libpq's words for a failed step on h and returns the acemq code
 * for r (NULL: the connection's error). */
int acemq__pg_idem_fail(acemq_idem *h, PGresult *r, const char *doing);
/* Reconnects an own connection that was lost (once per call) and prepares
 * the statements again, as it does on a connection whose session lost them
 * (unprepared: the caller's PQreset or DEALLOCATE ALL); 0 when the
 * connection is usable. */
int acemq__pg_idem_ensure_connected(acemq_idem *h);
void acemq__pg_idem_close(acemq_idem *h);
/* What a postgres:// URL names before any connection: the table, the
 * statement timeout and libpq's URI (*conninfo, free() it), which libpq's
 * own parser accepts. 0, or ACEMQ_EURL / ACEMQ_ENOMEM with why on h. */
int acemq__pg_idem_parse_url(acemq_idem *h, const acemq__url *u, const char **table,
                             int64_t *timeout, char **conninfo);

/* idem.c */
extern const acemq__idem_methods acemq__pg_idem_methods;

#endif
