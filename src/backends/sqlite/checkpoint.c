/* checkpoint.c — when and how the SQLite store checkpoints the WAL of
 * its own connections (a caller's connection keeps its own settings). The
 * store calls it after every write.
 *
 * SQLite's auto-checkpoint runs inside the committing sqlite3_step, after the
 * write lock is let go, so another connection may commit meanwhile; inside the
 * writer queue it would instead stop every writer of the process for the
 * checkpoint's copying and fsyncs. So the hook only counts (wal_hook),
 * and once the queue is given back a PASSIVE checkpoint copies the WAL while
 * others write.
 *
 * That alone never lets the WAL start over while two threads write: the
 * checkpoint completes up to where the WAL ended when it began, another
 * thread's commit lands behind it, and SQLite restarts the WAL only for a
 * writer that finds every frame copied, so the WAL would hold every frame
 * ever written, and each fdatasync would pay for its growing size. Every try would also fsync again
 * (0.7 more fsyncs a pair with synchronous=full). So tries are spaced, one per
 * AUTOCHECKPOINT_FRAMES frames the WAL grew since the last try, per file (the floor, kept in the
 * file's writer queue note), as one connection alone would try; and each ends
 * with a RESTART checkpoint with the queue held, which copies the few frames
 * committed meanwhile and starts the WAL over. It waits for readers still in
 * the old WAL at most CHECKPOINT_WAIT_MS, since it holds the queue; one that
 * takes longer only defers the restart to the next try, as it would in
 * SQLite. Errors are ignored, as SQLite's auto-checkpoint ignores them: a
 * later commit tries again.
 */
#include <sqlite3.h>

#include "backends/sqlite/checkpoint.h"

#define AUTOCHECKPOINT_FRAMES 1000 /* SQLite's default wal_autocheckpoint */
#define CHECKPOINT_WAIT_MS 1

static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    (void)db;
    (void)name;
    *(int *)arg = frames;
    return SQLITE_OK;
}

void acemq__sqlite_checkpoint_hook(sqlite3 *db, int *wal_frames)
{
    (void)sqlite3_wal_hook(db, wal_hook, wal_frames);
}

/* On the file's note, the WAL's frames when a checkpoint was last tried: 1
 * when this WAL of `frames` is due another try (and records it), 0 when not. */
static int try_due(int *floor, int frames)
{
    /* Shorter than at our last try: another connection started it over. */
    if (frames < *floor) *floor = 0;
    int due = frames >= *floor + AUTOCHECKPOINT_FRAMES;
    if (due) *floor = frames;
    return due;
}

static int started_over(int *floor, int frames)
{
    (void)frames;
    *floor = 0; /* count from nothing */
    return 0;
}

void acemq__sqlite_checkpoint(sqlite3 *db, acemq__writer_queue *q, acemq__sqlite_busy *busy,
                              int *wal_frames)
{
    int frames = *wal_frames;
    if (frames < AUTOCHECKPOINT_FRAMES) return;
    *wal_frames = 0;
    if (q && !acemq__writer_queue_note(q, try_due, frames)) return;
    int rc = sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    if (rc != SQLITE_OK || !q) return;
    struct timespec start;
    int waited = 0;
    if (!acemq__writer_queue_acquire(q, busy->timeout_ms, &start, &waited)) return;
    int timeout = busy->timeout_ms;
    busy->timeout_ms = timeout < CHECKPOINT_WAIT_MS ? timeout : CHECKPOINT_WAIT_MS;
    rc = sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_RESTART, NULL, NULL);
    busy->timeout_ms = timeout;
    if (rc == SQLITE_OK) (void)acemq__writer_queue_note(q, started_over, 0);
    acemq__writer_queue_release(q);
}
