/* sqlite_errors.h — what an SQLite result code means to a caller of acemq,
 * the same for every store on SQLite: locked is EBUSY, out of memory ENOMEM,
 * anything about the file or the disk EIO, the rest EBACKEND (with SQLite's
 * own words on the handle). */
#ifndef ACEMQ_STORE_SQLITE_ERRORS_H
#define ACEMQ_STORE_SQLITE_ERRORS_H

#include <sqlite3.h>

#include "acemq/common.h"

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

#endif
