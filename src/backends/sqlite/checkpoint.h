/* checkpoint.h — WAL checkpoints on the SQLite store's own
 * connections, in place of SQLite's auto-checkpoint: run after the writer
 * queue is given back, spaced per file, each ending with the WAL started over.
 */
#ifndef ACEMQ_BACKENDS_SQLITE_CHECKPOINT_H
#define ACEMQ_BACKENDS_SQLITE_CHECKPOINT_H

#include <sqlite3.h>

#include "backends/sqlite/busy.h"
#include "backends/sqlite/writer_queue.h"

/* Replaces db's auto-checkpoint with a count: after each commit *wal_frames
 * holds the frames in the WAL. */
void acemq__sqlite_checkpoint_hook(sqlite3 *db, int *wal_frames);

/* Checkpoints when the WAL has grown enough, then counts from nothing. Call it
 * after each write, holding the connection's lock but not q (the file's writer
 * queue, NULL when it has none); busy is the connection's busy handler state,
 * whose timeout is shortened for the final step. */
void acemq__sqlite_checkpoint(sqlite3 *db, acemq__writer_queue *q, acemq__sqlite_busy *busy,
                              int *wal_frames);

#endif
