/* schema.h — the version row each acemq component keeps in PostgreSQL
 * (acemq_schema_version), and the one transaction that creates a
 * component's tables and records it, shared by the outbox and the
 * idempotency store. Internal.
 */
#ifndef ACEMQ_PG_SCHEMA_H
#define ACEMQ_PG_SCHEMA_H

#include <libpq-fe.h>

/* What failed in acemq__pg_schema_ensure. */
typedef struct acemq__pg_schema_error {
    PGresult *result;  /* the failed statement's result (the caller clears it), or NULL */
    const char *doing; /* what was being done, for the message */
    long version;      /* ACEMQ_ESCHEMA: the newer version found */
} acemq__pg_schema_error;

/* In one transaction on conn, under an advisory lock that every opener of
 * every component takes, so that concurrent openers do not race: creates
 * acemq_schema_version, reads component's version, runs schema_sql (when
 * the component has no version yet, or always when always is set: for
 * tables whose names vary from handle to handle) and records version 1 for
 * a new component. 0 committed; ACEMQ_ESCHEMA when the recorded version is
 * newer than library_version (e->version); -1 when a statement failed
 * (e->result, e->doing). Anything but 0 is rolled back. */
int acemq__pg_schema_ensure(PGconn *conn, const char *component, long library_version,
                            const char *schema_sql, int always, acemq__pg_schema_error *e);

#endif
