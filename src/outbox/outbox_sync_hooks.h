/* outbox_sync_hooks.h — for tests: what a handle's own database session
 * holds for the setting that acemq_outbox_options.synchronous controls, and
 * whether it listens for NOTIFY.
 * Not part of the API; tests link the library's objects directly.
 */
#ifndef ACEMQ_OUTBOX_SYNC_HOOKS_H
#define ACEMQ_OUTBOX_SYNC_HOOKS_H

#include <stddef.h>

#include "acemq/outbox.h"

/* PostgreSQL: SHOW synchronous_commit ("on", "off", ...) on h's session. */
int acemq__pg_outbox_sync_setting(acemq_outbox *h, char *buf, size_t cap);
/* PostgreSQL: how many channels h's session listens on (0 until its first
 * wait, then 1). */
int acemq__pg_outbox_listening(acemq_outbox *h, int *listening);
/* SQLite: PRAGMA synchronous on h's connection ("0" off, "1" normal, "2" full). */
int acemq__sqlite_outbox_sync_setting(acemq_outbox *h, char *buf, size_t cap);

#endif
