/* connect.c — acemq's own PostgreSQL connections (see connect.h).
 *
 * libpq's own defaults wait on a silent network for a long time: without
 * keepalive probes for two hours on an idle-looking socket, and up to the
 * kernel's retransmission limit (about fifteen minutes) for a statement
 * whose bytes are never acknowledged. A server-side statement_timeout does
 * not help there: its cancellation never arrives. With the limits here, a
 * call on a dead path fails with a lost connection within about a minute,
 * the store or relay reconnects, and the caller gets an error rather than
 * a hang. The probes go to the server's kernel, which answers them while a
 * long statement runs, so a slow statement is not cut short.
 *
 * The limits come first in the keyword list and the URL (expanded from
 * dbname) after them, so a parameter the URL sets wins over the limit.
 * libpq ignores the TCP ones for a Unix-domain socket. A conninfo libpq
 * cannot parse goes to PQconnectdb as it is, whose connection then says
 * what is wrong with it: as a dbname it would be taken for a database's
 * name instead. Out of memory, nothing is connected (NULL).
 */
#include <string.h>

#include "backends/postgres/connect.h"

PGconn *acemq__pg_connect(const char *conninfo)
{
    char *err = NULL;
    PQconninfoOption *parsed = PQconninfoParse(conninfo, &err);
    if (!parsed) {
        /* libpq tells a failed allocation from a bad conninfo only in words. */
        int oom = !err || strncmp(err, "out of memory", 13) == 0;
        PQfreemem(err);
        return oom ? NULL : PQconnectdb(conninfo);
    }
    PQconninfoFree(parsed);
    static const char *const keywords[] = {
        "connect_timeout",  "keepalives",       "keepalives_idle", "keepalives_interval",
        "keepalives_count", "tcp_user_timeout", "dbname",          NULL};
    const char *const values[] = {ACEMQ__PG_CONNECT_TIMEOUT_S,
                                  "1",
                                  ACEMQ__PG_KEEPALIVES_IDLE_S,
                                  ACEMQ__PG_KEEPALIVES_INTERVAL_S,
                                  ACEMQ__PG_KEEPALIVES_COUNT,
                                  ACEMQ__PG_TCP_USER_TIMEOUT_MS,
                                  conninfo,
                                  NULL};
    return PQconnectdbParams(keywords, values, 1);
}
