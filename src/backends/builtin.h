/* builtin.h — the backends built into the library, as their contracts'
 * registries know them. Each is defined beside its backend (one file per
 * contract it fills) and registered once by acemq__backends_init
 * (builtin.c); a new backend adds its line here and there.
 */
#ifndef ACEMQ_BACKENDS_BUILTIN_H
#define ACEMQ_BACKENDS_BUILTIN_H

#include "broker/broker_backend.h"
#include "idem/idem_backend.h"
#include "outbox/outbox_backend.h"

extern const acemq__idem_backend acemq__memory_idem_backend; /* memory: */
extern const acemq__idem_backend acemq__sqlite_idem_backend; /* sqlite: */
extern const acemq__idem_backend acemq__pg_idem_backend;     /* postgres:// */
extern const acemq__idem_backend acemq__pgsql_idem_backend;  /* postgresql:// */
extern const acemq__idem_backend acemq__redis_idem_backend;  /* redis:// */

extern const acemq__outbox_backend acemq__sqlite_outbox_backend; /* sqlite: */
extern const acemq__outbox_backend acemq__pg_outbox_backend;     /* postgres:// */
extern const acemq__outbox_backend acemq__pgsql_outbox_backend;  /* postgresql:// */

extern const acemq__broker_backend acemq__amqp_broker_backend;   /* amqp:// */
extern const acemq__broker_backend acemq__memory_broker_backend; /* memory: */

#endif
