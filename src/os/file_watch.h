/* file_watch.h — a wake-up when a database file, or its -wal or -journal
 * companion, is written by any process on this machine: Linux inotify on the
 * file's directory. It only says "look again": the caller reads the
 * database's own state (SQLite's PRAGMA data_version) to learn whether a
 * commit landed. Where inotify is missing or refused (another OS, the
 * per-user limit of instances reached), open fails and the caller polls.
 */
#ifndef ACEMQ_OS_FILE_WATCH_H
#define ACEMQ_OS_FILE_WATCH_H

#include <stddef.h>

typedef struct acemq__file_watch {
    int fd;     /* the inotify instance; -1 when closed */
    char *base; /* the file's name within its directory */
    size_t base_len;
} acemq__file_watch;

/* Watches path's directory for writes to path, path-wal and path-journal.
 * 0, or -1 with errno set and w closed (fd -1). */
int acemq__file_watch_open(acemq__file_watch *w, const char *path);

/* Waits up to timeout_ms (0: only looks) for such a write and takes every
 * event queued: 1 when one of them was a write to the watched files (or the
 * queue overflowed, when writes may have been lost), 0 when none came, -1
 * with errno set when the watch failed or was removed (its directory gone). */
int acemq__file_watch_wait(acemq__file_watch *w, int timeout_ms);

/* Idempotent; a closed watch (fd -1) is fine. */
void acemq__file_watch_close(acemq__file_watch *w);

#endif
