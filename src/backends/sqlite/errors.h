/* errors.h — what an SQLite result code means to a caller of acemq,
 * the same for every store on SQLite: locked is EBUSY, out of memory ENOMEM,
 * anything about the file or the disk EIO, the rest EBACKEND (with SQLite's
 * own words on the handle). */
#ifndef ACEMQ_BACKENDS_SQLITE_ERRORS_H
#define ACEMQ_BACKENDS_SQLITE_ERRORS_H

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "acemq/common.h"

/* Room for SQLite's words and the system's (acemq__sqlite_words). */
#define ACEMQ__SQLITE_WORDS 512

static inline int acemq__sqlite_code(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return ACEMQ_EBUSY;
    case SQLITE_NOMEM:
        return ACEMQ_ENOMEM;
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_PROTOCOL:
        return ACEMQ_EIO;
    default:
        return ACEMQ_EBACKEND;
    }
}

/* The name of an I/O error's extended code, which says what SQLite was
 * doing when the system refused (SQLite's words alone are "disk I/O error"
 * for all of them); NULL for another code. */
static inline const char *acemq__sqlite_ioerr_name(int extended)
{
    switch (extended) {
    case SQLITE_IOERR_READ:
        return "SQLITE_IOERR_READ";
    case SQLITE_IOERR_SHORT_READ:
        return "SQLITE_IOERR_SHORT_READ";
    case SQLITE_IOERR_WRITE:
        return "SQLITE_IOERR_WRITE";
    case SQLITE_IOERR_FSYNC:
        return "SQLITE_IOERR_FSYNC";
    case SQLITE_IOERR_DIR_FSYNC:
        return "SQLITE_IOERR_DIR_FSYNC";
    case SQLITE_IOERR_TRUNCATE:
        return "SQLITE_IOERR_TRUNCATE";
    case SQLITE_IOERR_FSTAT:
        return "SQLITE_IOERR_FSTAT";
    case SQLITE_IOERR_DELETE:
        return "SQLITE_IOERR_DELETE";
    case SQLITE_IOERR_SHMOPEN:
        return "SQLITE_IOERR_SHMOPEN";
    case SQLITE_IOERR_SHMSIZE:
        return "SQLITE_IOERR_SHMSIZE";
    case SQLITE_IOERR_SHMMAP:
        return "SQLITE_IOERR_SHMMAP";
    case SQLITE_IOERR_MMAP:
        return "SQLITE_IOERR_MMAP";
    default:
        return NULL;
    }
}

/* SQLite's words for db's last error (rc's when there is no connection)
 * and, when the operating system failed it (an I/O error, a file that
 * cannot be opened), what SQLite was doing and the system's reason where
 * SQLite kept it (sqlite3_system_errno):
 * "disk I/O error (SQLITE_IOERR_WRITE)", "unable to open database file (No
 * such file or directory)". Without them an operator has to guess between a
 * full disk, a size or quota limit and a permission. buf holds
 * ACEMQ__SQLITE_WORDS bytes. */
static inline const char *acemq__sqlite_words(sqlite3 *db, int rc, char *buf)
{
    const char *words = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    /* SQLite records the system's errno for these two classes only (for a
     * full disk its words say it already); for others it may be an earlier
     * error's. */
    int primary = rc & 0xff;
    if (!db || (primary != SQLITE_IOERR && primary != SQLITE_CANTOPEN)) return words;
    const char *doing = acemq__sqlite_ioerr_name(sqlite3_extended_errcode(db));
    int sys = sqlite3_system_errno(db);
    if (!doing && sys == 0) return words;
    int n = snprintf(buf, ACEMQ__SQLITE_WORDS, "%s (%s%s%s)", words, doing ? doing : "",
                     doing && sys ? ": " : "", sys ? strerror(sys) : "");
    return n < 0 ? words : buf;
}

#endif
