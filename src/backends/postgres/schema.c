/* schema.c — acemq_schema_version and the transaction that creates a
 * component's tables (schema.h).
 */
#include "backends/postgres/schema.h"

#include <stdio.h>
#include <stdlib.h>

#include "acemq/common.h"

/* The advisory lock key every acemq component's schema transaction takes. */
#define SCHEMA_LOCK_KEY "7263540912"

/* Runs sql; 0, or -1 with e filled. */
static int exec_ok(PGconn *conn, const char *sql, const char *doing, acemq__pg_schema_error *e)
{
    PGresult *r = PQexec(conn, sql);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        PQclear(r);
        return 0;
    }
    e->result = r;
    e->doing = doing;
    return -1;
}

/* The component's recorded version into *version (0: none); 0 or -1. */
static int read_version(PGconn *conn, const char *component, long *version,
                        acemq__pg_schema_error *e)
{
    const char *params[1] = {component};
    PGresult *r =
        PQexecParams(conn, "SELECT version FROM acemq_schema_version WHERE component = $1", 1, NULL,
                     params, NULL, NULL, 0);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
        e->result = r;
        e->doing = "reading the schema version";
        return -1;
    }
    *version = PQntuples(r) > 0 ? strtol(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    return 0;
}

static int record_version(PGconn *conn, const char *component, acemq__pg_schema_error *e)
{
    const char *params[1] = {component};
    PGresult *r = PQexecParams(conn,
                               "INSERT INTO acemq_schema_version(component, version)"
                               " VALUES($1, 1)",
                               1, NULL, params, NULL, NULL, 0);
    if (r && PQresultStatus(r) == PGRES_COMMAND_OK) {
        PQclear(r);
        return 0;
    }
    e->result = r;
    e->doing = "recording the schema version";
    return -1;
}

int acemq__pg_schema_ensure(PGconn *conn, const char *component, long library_version,
                            const char *schema_sql, int always, acemq__pg_schema_error *e)
{
    e->result = NULL;
    e->doing = NULL;
    e->version = 0;
    if (exec_ok(conn, "BEGIN", "BEGIN", e) != 0) return -1;
    long version = 0;
    /* IF NOT EXISTS answers a notice for what exists; on a caller's
     * connection it would reach the caller's notice processor. */
    int rc = exec_ok(conn, "SET LOCAL client_min_messages = warning", "client_min_messages", e);
    if (rc == 0)
        rc = exec_ok(conn, "SELECT pg_advisory_xact_lock(" SCHEMA_LOCK_KEY ")", "schema lock", e);
    if (rc == 0)
        rc = exec_ok(conn,
                     "CREATE TABLE IF NOT EXISTS acemq_schema_version("
                     " component text PRIMARY KEY, version integer NOT NULL)",
                     "creating the schema", e);
    if (rc == 0) rc = read_version(conn, component, &version, e);
    if (rc == 0 && version > library_version) {
        e->version = version;
        rc = ACEMQ_ESCHEMA;
    }
    if (rc == 0 && (version == 0 || always))
        rc = exec_ok(conn, schema_sql, "creating the schema", e);
    if (rc == 0 && version == 0) rc = record_version(conn, component, e);
    if (rc == 0) rc = exec_ok(conn, "COMMIT", "COMMIT", e);
    if (rc != 0) PQclear(PQexec(conn, "ROLLBACK"));
    return rc;
}
