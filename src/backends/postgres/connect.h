/* connect.h — the connections acemq opens to PostgreSQL itself (a store or
 * an outbox opened by URL), with limits on how long a dead server or a cut
 * network can hold a call. Internal.
 */
#ifndef ACEMQ_PG_CONNECT_H
#define ACEMQ_PG_CONNECT_H

#include <libpq-fe.h>

/* The limits, each taken unless the URL sets its own libpq parameter. */
#define ACEMQ__PG_CONNECT_TIMEOUT_S "10"
#define ACEMQ__PG_KEEPALIVES_IDLE_S "30"
#define ACEMQ__PG_KEEPALIVES_INTERVAL_S "10"
#define ACEMQ__PG_KEEPALIVES_COUNT "3"
#define ACEMQ__PG_TCP_USER_TIMEOUT_MS "60000"

/* PQconnectdb(conninfo), a libpq URL, with the limits above in force where
 * conninfo does not set them: NULL only when out of memory, otherwise a
 * connection to check with PQstatus. PQreset keeps the limits. */
PGconn *acemq__pg_connect(const char *conninfo);

#endif
