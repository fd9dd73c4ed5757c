/* fault_db.h — one database connection for the fault suite's writer and
 * shipper, on either outbox backend: "sqlite:PATH" or "postgres://...".
 *
 * The tools write the same SQL on both (integers are formatted into it,
 * never text), so the shim is small: statements, their outcome sorted into
 * what a fault test must tell apart (done, a duplicate key, the connection
 * lost, any other error), a reconnect, and the two acemq calls that run on
 * the caller's own connection (the outbox's add, the inbox store's open).
 */
#ifndef FAULT_DB_H
#define FAULT_DB_H

#include <libpq-fe.h>
#include <sqlite3.h>

#include <acemq/idem.h>
#include <acemq/outbox.h>

enum {
    FAULT_OK = 0,
    FAULT_DUP = 1,  /* a unique or primary key refused the row */
    FAULT_LOST = 2, /* the connection is gone (PostgreSQL restarted, cut) */
    FAULT_ERR = 3   /* anything else; fault_db_errmsg says what */
};

typedef struct fault_db {
    sqlite3 *lite; /* exactly one of the two is set */
    PGconn *pg;
    char err[512];
} fault_db;

/* Opens url: SQLite in WAL with acemq's busy wait (30 s), or a libpq
 * connection. 0, or -1 with the reason in d->err. */
int fault_db_open(fault_db *d, const char *url);
void fault_db_close(fault_db *d);
const char *fault_db_errmsg(const fault_db *d);

/* Runs sql (one or several statements, no results kept): a FAULT_* value. */
int fault_db_exec(fault_db *d, const char *sql);
/* BEGIN (IMMEDIATE on SQLite, so the write lock is taken at once and a
 * busy database is waited for here rather than at the first write). */
int fault_db_begin(fault_db *d);
/* Rolls back what is open; errors are ignored (a lost connection rolled
 * back already). */
void fault_db_rollback(fault_db *d);
/* Whether the connection is usable; PostgreSQL: reset until it is or
 * until timeout_ms ran out. 0 usable, -1 not. */
int fault_db_reconnect(fault_db *d, int timeout_ms);
/* 1 when a PostgreSQL connection is gone (a call on it failed for that). */
int fault_db_lost(const fault_db *d);

/* acemq_outbox_add_* on this connection, inside the open transaction. */
int fault_db_outbox_add(fault_db *d, const acemq_outbox_record *r);
/* An idempotency store on this connection with flags (the inbox). */
int fault_db_idem_open(fault_db *d, acemq_idem **out, unsigned flags);

#endif
