/* acemq/postgres.h — acemq on a PostgreSQL connection the caller owns.
 *
 * Kept apart from acemq.h so that the core header pulls in no third-party
 * header: include this one only where libpq is already at hand.
 */
#ifndef ACEMQ_POSTGRES_H
#define ACEMQ_POSTGRES_H

#include <libpq-fe.h>
#include "acemq/idem.h"
#include "acemq/outbox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes r into the outbox inside the transaction open on conn, so the record
 * commits or rolls back with the caller's work; the commit also delivers a
 * NOTIFY acemq_outbox that waiting relays wake on. Never begins, commits or
 * opens anything: with no transaction open (or one that already failed) it
 * returns ACEMQ_ENOTX and sends nothing. Every limit is checked before
 * anything is sent, so a bad record (ACEMQ_EINVAL, ACEMQ_ERANGE) and a
 * duplicate id (ACEMQ_EEXIST, via ON CONFLICT DO NOTHING) leave the
 * transaction open and unharmed; an error the server reports (ACEMQ_ESCHEMA
 * when the table is missing, ACEMQ_EBACKEND) aborts it, as any failed
 * statement does in PostgreSQL. id_out (NULL, or ACEMQ_OUTBOX_ID_MAX + 1
 * bytes) gets the id written. Errors are explained by acemq_outbox_errmsg(NULL). */
ACEMQ_EXTERN int acemq_outbox_add_pg(PGconn *conn, const acemq_outbox_record *r,
                                     const acemq_outbox_add_options *o, char *id_out);

/* An idempotency store in table (NULL: "acemq_idem") on a connection the
 * caller owns and keeps open until acemq_idem_close; the store never
 * closes or resets it. Open it while conn has no transaction open: the
 * schema is made in a transaction of the store's own. Each call then runs
 * its one statement on conn as it is: inside the caller's transaction
 * when one is open, so a claim made there rolls back with it (its token is
 * still never issued again), else on its own.
 *
 * With ACEMQ_IDEM_CONFIRM_IN_CALLER_TX in o->flags, confirm() must run
 * inside the caller's open transaction and commits or rolls back with it:
 * the inbox pattern, the effect and the confirmation standing or falling
 * together. With no transaction open it returns ACEMQ_ENOTX and writes
 * nothing.
 *
 * A handle is safe to share between threads, but conn is the caller's: do
 * not use it from another thread while a store call runs. Errors of the
 * open are explained by acemq_idem_errmsg(NULL). */
ACEMQ_EXTERN int acemq_idem_open_pg(acemq_idem **out, PGconn *conn, const acemq_idem_options *o,
                                    const char *table);

#ifdef __cplusplus
}
#endif
#endif
