/* issue.h — issue numbers for the SQLite idempotency store's fencing
 * tokens (backends/sqlite/idem.c, "Tokens"): numbers that no two claims on one
 * database file share, whichever process makes them and whatever was
 * rolled back in between.
 *
 * A database file gets a counter file beside it, `<file>-acemq-issue`: eight
 * bytes that every process opening the store reads and advances under an
 * exclusive POSIX record lock (fcntl F_SETLKW). It lives outside the database on purpose: a claim
 * made inside the caller's transaction is rolled back with it, and the caller holds SQLite's write
 * lock until then, so nothing inside the file can count past a rollback. A database with no file
 * (in-memory, temp) is private to its process and uses a process-wide counter instead.
 */
#ifndef ACEMQ_BACKENDS_SQLITE_ISSUE_H
#define ACEMQ_BACKENDS_SQLITE_ISSUE_H

#include <stdint.h>

/* Opens (creating it with the database file's permissions) the counter file
 * of the database at path: 0 and *fd, or -1 with errno set. path NULL or
 * empty, or naming no file here: *fd = -1 and 0, the process-wide counter. */
int acemq__issue_open(const char *path, int *fd);

/* The next issue number from fd's counter, or the process-wide one when fd
 * is -1: 0, or -1 with errno set (the counter file could not be locked, read
 * or written). */
int acemq__issue_next(int fd, uint64_t *issue);

void acemq__issue_close(int fd);

#endif
