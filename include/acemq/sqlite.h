/* acemq/sqlite.h — acemq on a SQLite connection the caller owns.
 *
 * Kept apart from acemq.h so that the core header pulls in no third-party
 * header: include this one only where sqlite3 is already at hand.
 */
#ifndef ACEMQ_SQLITE_H
#define ACEMQ_SQLITE_H

#include <sqlite3.h>
#include "acemq/idem.h"

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

#ifdef __cplusplus
}
#endif
#endif
