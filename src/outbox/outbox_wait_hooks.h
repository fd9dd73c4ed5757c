/* outbox_wait_hooks.h — for tests: how a SQLite handle's acemq_outbox_wait
 * has been waiting. Not part of the API; tests link the library's objects
 * directly.
 */
#ifndef ACEMQ_OUTBOX_WAIT_HOOKS_H
#define ACEMQ_OUTBOX_WAIT_HOOKS_H

#include <stdint.h>

#include "acemq/outbox.h"

/* SQLite: how many times h's waits have read PRAGMA data_version, and in
 * *watching (may be NULL) whether they wake on the file's writes (1) or
 * poll (0). */
uint64_t acemq__sqlite_outbox_wait_reads(acemq_outbox *h, int *watching);

#endif
