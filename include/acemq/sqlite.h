/* acemq/sqlite.h — acemq on a SQLite connection the caller owns.
 *
 * Kept apart from acemq.h so that the core header pulls in no third-party
 * header: include this one only where sqlite3 is already at hand.
 */
#ifndef ACEMQ_SQLITE_H
#define ACEMQ_SQLITE_H

#include <sqlite3.h>
#include "acemq/idem.h"
#include "acemq/outbox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An idempotency store on the caller's connection. The library never closes
 * db; it must outlive the handle, and the caller must not use db from another
 * thread while an acemq call on it runs. The schema is created if missing.
 * With ACEMQ_IDEM_CONFIRM_IN_CALLER_TX in o->flags, confirm() joins the
 * caller's open transaction and fails with ACEMQ_ENOTX when none is open.
 * Operations that need several statements run in a SAVEPOINT when the caller
 * has a transaction open, so they commit or roll back with it. */
ACEMQ_EXTERN int acemq_idem_open_sqlite(acemq_idem **out, sqlite3 *db, const acemq_idem_options *o);

/* Writes r into the outbox inside the transaction open on db, so the record
 * commits or rolls back with the caller's work. Never begins, commits or
 * opens anything: with no transaction open it returns ACEMQ_ENOTX and writes
 * nothing. ACEMQ_EEXIST when a record with r->id exists (the transaction
 * stays open and unharmed); ACEMQ_EINVAL or ACEMQ_ERANGE for a bad record,
 * ACEMQ_ESCHEMA when the outbox table was never created (acemq_outbox_open
 * creates it). id_out (NULL, or ACEMQ_OUTBOX_ID_MAX + 1 bytes) gets the id
 * written, generated or not. Errors are explained by acemq_outbox_errmsg(NULL). */
ACEMQ_EXTERN int acemq_outbox_add_sqlite(sqlite3 *db, const acemq_outbox_record *r,
                                         const acemq_outbox_add_options *o, char *id_out);

/* Makes db wait for a lock held by another connection the way acemq's own
 * connections do: sleeps of 20 to 320 microseconds, randomised, for up to
 * timeout_ms in all, then SQLITE_BUSY. SQLite's own sqlite3_busy_timeout()
 * sleeps 1, 2, 5 ... 100 ms between tries, so a writer that meets a relay's
 * claim or mark (held for about a millisecond) loses 10 to 100 ms; with
 * this it loses about what the lock was held for (docs/outbox.md). Replaces
 * any busy handler or busy timeout db had, and is replaced by a later one.
 * Its state lives as long as db and goes when db closes. timeout_ms 0:
 * do not wait. 0; ACEMQ_EINVAL (db NULL or timeout_ms negative);
 * ACEMQ_ENOMEM; ACEMQ_EBUSY when a statement on db is still running (the
 * state is kept by an SQL function, which SQLite will not redefine then);
 * ACEMQ_EBACKEND for any other refusal from SQLite. On failure db keeps the
 * busy handling it had. */
ACEMQ_EXTERN int acemq_sqlite_busy_wait(sqlite3 *db, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
