/* outbox_fixture.h — one outbox, fresh and empty, on SQLite or PostgreSQL, with
 * the caller's own connection beside it, so the outbox suites run the same
 * cases against both backends.
 *
 * PostgreSQL: ACEMQ_PG_URL names the server (scripts/services.sh env
 * postgres); each fixture gets a schema of its own, so suites that run at
 * once do not see each other's rows. Without ACEMQ_PG_URL the suite exits
 * with TEST_SKIP (77), which ctest reports as skipped, never as passed.
 */
#ifndef ACEMQ_TEST_OUTBOX_FIXTURE_H
#define ACEMQ_TEST_OUTBOX_FIXTURE_H

#include <libpq-fe.h>
#include <sqlite3.h>

#include "acemq/outbox.h"

#define TEST_SKIP 77

typedef struct outbox_fixture {
    int pg;          /* 0 sqlite, 1 postgres */
    char url[1024];  /* what acemq_outbox_open takes */
    char schema[64]; /* postgres: this fixture's schema */
    sqlite3 *db;     /* sqlite: the caller's connection */
    PGconn *conn;    /* postgres: the caller's connection */
    acemq_manual_clock *clock;
    acemq_outbox_options opts;
    acemq_outbox_add_options add_opts;
} outbox_fixture;

/* "sqlite" or "postgres" from argv[1]; exits 77 when postgres has no server. */
int outbox_backend_from_args(int argc, char **argv);

/* A fresh, empty outbox (schema created) and caller connection; the clock
 * starts at 1,000,000,000 ms. Aborts the test on failure. */
void outbox_fixture_init(outbox_fixture *f, int pg);
void outbox_fixture_free(outbox_fixture *f);

/* Opens a relay-side handle with f->opts (the fixture's clock). */
acemq_outbox *outbox_fixture_open(outbox_fixture *f);
/* Another caller connection to the same database (the caller owns it). */
void *outbox_fixture_connect(outbox_fixture *f);
void outbox_fixture_disconnect(outbox_fixture *f, void *conn);

/* SQL on a caller connection (f's own when conn is NULL); aborts on error. */
void outbox_sql(outbox_fixture *f, void *conn, const char *sql);
/* add on a caller connection (f's own when conn is NULL). */
int outbox_add(outbox_fixture *f, void *conn, const acemq_outbox_record *r, char *id_out);
/* The number of rows in the outbox table, whatever their state. */
long outbox_rows(outbox_fixture *f);
/* The one integer a query answers, on f's own connection. */
long long outbox_scalar(outbox_fixture *f, const char *sql);

/* PostgreSQL: f's URL with application_name set to f's schema and `tag`,
 * so that the connections opened with it can be found (and cut). */
void outbox_fixture_tagged_url(outbox_fixture *f, const char *tag, char *out, size_t cap);
/* PostgreSQL: the server ends every connection opened with
 * outbox_fixture_tagged_url(f, tag), as a restart or a network cut would;
 * returns once they are gone, with how many there were. */
long outbox_fixture_cut(outbox_fixture *f, const char *tag);

#endif
