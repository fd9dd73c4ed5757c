/* outbox_sql.h — the PostgreSQL outbox's table and statements
 * (outbox_sql.c): the schema that opening a handle creates, and the
 * statements each handle prepares by name. Internal to
 * src/backends/postgres/.
 */
#ifndef ACEMQ_BACKENDS_POSTGRES_OUTBOX_SQL_H
#define ACEMQ_BACKENDS_POSTGRES_OUTBOX_SQL_H

enum {
    Q_CLAIM,
    Q_CLAIM_RUNS,
    Q_PUBLISH,
    Q_PUBLISH_DELETE,
    Q_PUBLISH_ONE,
    Q_FAIL,
    Q_RELEASE,
    Q_EXISTS,
    Q_PENDING,
    Q_LIST_DEAD,
    Q_RETRY,
    Q_PURGE,
    Q_PURGE_END,
    Q_COUNT
};

typedef struct acemq__pg_query {
    const char *name, *sql;
    int nparams;
} acemq__pg_query;

/* Each statement's prepared name ("acemq_" and what it does), text and
 * number of parameters, by Q_*. */
extern const acemq__pg_query acemq__pg_queries[Q_COUNT];

/* The table, its indexes and the NOTIFY trigger, created if missing. */
extern const char acemq__pg_schema_sql[];

#endif
