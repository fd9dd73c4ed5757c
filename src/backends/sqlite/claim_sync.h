/* claim_sync.h — claims commit without an fsync.
 *
 * A claim is a lease. A claim that a crash of the machine forgets was held
 * by a process that went down with it, and its message (or outbox record)
 * is claimed again. So a claim needs no fsync: on a connection of its own
 * at synchronous=FULL, a backend commits claims at NORMAL (in WAL mode: no
 * fsync at commit) and every other write at FULL, whose fsync takes the
 * claims' WAL frames to disk with it. A confirm or mark never commits below
 * FULL: should going back after a claim fail, the next confirm or mark
 * tries again and fails if it cannot.
 */
#ifndef ACEMQ_BACKENDS_SQLITE_CLAIM_SYNC_H
#define ACEMQ_BACKENDS_SQLITE_CLAIM_SYNC_H

#include <sqlite3.h>

typedef struct acemq__claim_sync {
    int enabled; /* an own connection at synchronous=FULL */
    int relaxed; /* the connection is at NORMAL now */
} acemq__claim_sync;

/* Enabled for an own connection opened at synchronous (an acemq_sync_mode). */
void acemq__claim_sync_init(acemq__claim_sync *cs, int synchronous);

/* relaxed 1 before a claim's write, 0 after it and before any other write.
 * SQLITE_OK, or SQLite's code from the PRAGMA (nothing changed then); a
 * no-op unless enabled. */
int acemq__claim_sync_set(acemq__claim_sync *cs, sqlite3 *db, int relaxed);

#endif
