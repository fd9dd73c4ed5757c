/* writer_queue.h — one writer queue per database file per process, so
 * that handles on one file hand SQLite's write lock to each other instead of
 * polling for it. Knows files by st_dev + st_ino and nothing of the store;
 * backends/sqlite/writer_queue.c has the rules a user must keep (lock order, deadlock).
 */
#ifndef ACEMQ_BACKENDS_SQLITE_WRITER_QUEUE_H
#define ACEMQ_BACKENDS_SQLITE_WRITER_QUEUE_H

#include <stddef.h>
#include <sys/types.h>
#include <time.h>

typedef struct acemq__writer_queue acemq__writer_queue;

/* The queue of the file (dev, ino), made on first use; every join is matched
 * by one leave, and the last leave frees it. NULL when out of memory. */
acemq__writer_queue *acemq__writer_queue_join(dev_t dev, ino_t ino);
/* NULL is a no-op. */
void acemq__writer_queue_leave(acemq__writer_queue *q);

/* Takes q, waiting at most timeout_ms of monotonic time; 1 when held (one
 * release must follow), 0 when not (the write goes ahead unqueued). When it
 * had to wait it sets *waited to 1 and *wait_start to when the wait began. */
int acemq__writer_queue_acquire(acemq__writer_queue *q, int timeout_ms, struct timespec *wait_start,
                                int *waited);
void acemq__writer_queue_release(acemq__writer_queue *q);

/* Runs update(&note, arg) under q's mutex and returns its result. The note is
 * one int shared by every user of the file, 0 at first, that the queue itself
 * never reads: per-file bookkeeping (the checkpoint spacing) lives there
 * because the registry is the one place every handle on the file shares. */
int acemq__writer_queue_note(acemq__writer_queue *q, int (*update)(int *note, int arg), int arg);

/* For the test hooks: files with a queue in this process (registry entries),
 * and threads waiting in q right now (not counting the holder). */
size_t acemq__writer_queue_files(void);
int acemq__writer_queue_waiters(acemq__writer_queue *q);

#endif
