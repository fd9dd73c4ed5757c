/* sqlite_idem_internal.h — test hooks into the SQLite store's in-process writer
 * queue (sqlite_writer_queue.c; the hooks are in sqlite_idem.c). Internal: not
 * exported, not for callers; tests use them to see that handles on one file
 * share one queue and that the process-wide registry forgets a file when its
 * last handle closes.
 */
#ifndef ACEMQ_SQLITE_IDEM_INTERNAL_H
#define ACEMQ_SQLITE_IDEM_INTERNAL_H

#include <stddef.h>
#include "idem/idem_backend.h"

/* The writer queue this handle's writes go through; NULL when it has none (an
 * in-memory or temporary database, or a file that could not be stat()ed).
 * Handles on the same file (same st_dev and st_ino) answer the same pointer. */
const void *acemq__sqlite_idem_queue(const acemq_idem *h);

/* Files with at least one open handle in this process: registry entries. */
size_t acemq__sqlite_idem_queue_files(void);

/* Threads waiting in h's queue right now (not counting the holder). */
int acemq__sqlite_idem_queue_waiters(const acemq_idem *h);

/* Takes (hold = 1) or gives back (hold = 0) h's queue as a writer would,
 * without a transaction, so a test can make other handles' writes queue up.
 * Returns 0, or -1 when h has no queue. */
int acemq__sqlite_idem_queue_hold(acemq_idem *h, int hold);

#endif
