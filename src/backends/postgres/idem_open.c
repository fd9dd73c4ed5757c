/* idem_open.c — the PostgreSQL idempotency store's connection: a URL made
 * into libpq's connection string, the schema made once under an advisory
 * lock, the statements prepared, reconnects, and the store on a caller's
 * own connection (acemq_idem_open_pg). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/postgres.h"
#include "backends/builtin.h"
#include "backends/postgres/connect.h"
#include "backends/postgres/idem_pg.h"
#include "backends/postgres/schema.h"
#include "backends/test_control.h"
#include "core/url.h"

#define SCHEMA_VERSION 1
#define DEFAULT_TABLE "acemq_idem"
#define DEFAULT_STATEMENT_TIMEOUT_MS 30000

int acemq__pg_idem_fail(acemq_idem *h, PGresult *r, const char *doing)
{
    pg_idem *p = h->self;
    const char *msg = r ? PQresultErrorMessage(r) : PQerrorMessage(p->conn);
    size_t len = msg ? strlen(msg) : 0;
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
        len--;
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    int lost = !p->conn || PQstatus(p->conn) == CONNECTION_BAD ||
               (state && strncmp(state, "08", 2) == 0); /* connection exception */
    int code = ACEMQ_EBACKEND;
    if (lost)
        code = ACEMQ_EIO;
    else if (!r || (state && strncmp(state, "53", 2) == 0))
        code = ACEMQ_ENOMEM; /* no result at all, or insufficient resources */
    else if (state && strcmp(state, "42P01") == 0)
        code = ACEMQ_ESCHEMA; /* undefined_table */
    else if (state && strcmp(state, "57014") == 0)
        code = ACEMQ_EBUSY; /* query_canceled: statement_timeout */
    return acemq__idem_fail(h, code, "postgres: %s: %.*s", doing, (int)len, msg ? msg : "");
}

static int exec_ok(acemq_idem *h, const char *sql, const char *doing)
{
    pg_idem *p = h->self;
    PGresult *r = PQexec(p->conn, sql);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : acemq__pg_idem_fail(h, r, doing);
    PQclear(r);
    return rc;
}

/* The session settings and the prepared statements, after every connect. */
static int prepare_all(acemq_idem *h)
{
    pg_idem *p = h->self;
    if (p->owns_conn) {
        char set[96];
        snprintf(set, sizeof set, "SET statement_timeout = %lld",
                 (long long)p->statement_timeout_ms);
        int rc = exec_ok(h, set, "statement_timeout");
        if (rc != 0) return rc;
    }
    for (int i = 0; i < PGQ_COUNT; i++) {
        PGresult *r = PQprepare(p->conn, p->names[i], p->sql[i], acemq__pg_idem_nparams[i],
                                acemq__pg_idem_types[i]);
        if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
            /* The session may hold them already (42P05,
             * duplicate_prepared_statement): a caller's connection from a
             * store opened on it before, the store's own from a prepare_all
             * that stopped partway (a failed allocation) on a connection
             * that stayed up. The same name is the same text for the same
             * table. */
            const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
            if (state && strcmp(state, "42P05") == 0) {
                PQclear(r);
                continue;
            }
            int rc = acemq__pg_idem_fail(h, r, "preparing a statement");
            PQclear(r);
            return rc;
        }
        PQclear(r);
    }
    return 0;
}

int acemq__pg_idem_ensure_connected(acemq_idem *h)
{
    pg_idem *p = h->self;
    if (PQstatus(p->conn) == CONNECTION_OK) {
        if (!p->unprepared) return 0;
        int rc = prepare_all(h);
        if (rc == 0) p->unprepared = 0;
        return rc;
    }
    if (!p->owns_conn)
        return acemq__idem_fail(h, ACEMQ_EIO, "postgres: the caller's connection is lost: %s",
                                PQerrorMessage(p->conn));
    PQreset(p->conn);
    if (PQstatus(p->conn) != CONNECTION_OK) return acemq__pg_idem_fail(h, NULL, "reconnecting");
    return prepare_all(h);
}

static int ensure_schema(acemq_idem *h, const char *schema_sql)
{
    pg_idem *p = h->self;
    acemq__pg_schema_error e;
    int rc = acemq__pg_schema_ensure(p->conn, "idem", SCHEMA_VERSION, schema_sql, 1, &e);
    if (rc == ACEMQ_ESCHEMA)
        return acemq__idem_fail(h, ACEMQ_ESCHEMA,
                                "postgres: idempotency schema version %ld is newer than this "
                                "library's %d",
                                e.version, SCHEMA_VERSION);
    if (rc != 0) {
        rc = acemq__pg_idem_fail(h, e.result, e.doing);
        PQclear(e.result);
    }
    return rc;
}

/* The server's notices ("relation already exists, skipping") are not the
 * caller's business: a library does not write to stderr. */
static void ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static int check_table(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > PG_IDEM_TABLE_MAX || !(isalpha((unsigned char)t[0]) || t[0] == '_'))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)t[i]) || t[i] == '_')) return -1;
    return 0;
}

/* The state for table on conn; statements written and named, nothing sent. */
static int new_state(acemq_idem *h, const char *table, char **schema)
{
    pg_idem *p = calloc(1, sizeof *p);
    if (!p || pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "postgres: out of memory");
    }
    h->self = p;
    snprintf(p->table, sizeof p->table, "%s", table);
    p->statement_timeout_ms = DEFAULT_STATEMENT_TIMEOUT_MS;
    const acemq_clock *sys = acemq_clock_system();
    p->db_clock = h->clock.now_ms == sys->now_ms && h->clock.ctx == sys->ctx;
    static const char *const suffix[PGQ_COUNT] = {
        "claim",      "confirm",         "release",     "renew",      "is_confirmed",
        "purge_done", "purge_abandoned", "counts",      "next_lease", "inspect",
        "forget",     "claim_many",      "confirm_many"};
    for (int i = 0; i < PGQ_COUNT; i++)
        snprintf(p->names[i], sizeof p->names[i], "acemq_idem_%s_%s", table, suffix[i]);
    if (acemq__pg_idem_sql(table, p->sql, schema) != 0)
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "postgres: out of memory");
    return 0;
}

void acemq__pg_idem_close(acemq_idem *h)
{
    pg_idem *p = h->self;
    if (!p) return;
    if (p->owns_conn) {
        PQfinish(p->conn);
    } else if (p->conn && PQstatus(p->conn) == CONNECTION_OK &&
               PQtransactionStatus(p->conn) == PQTRANS_IDLE) {
        /* The caller's connection gets its session back as it was. */
        for (int i = 0; i < PGQ_COUNT; i++) {
            char sql[PG_IDEM_TABLE_MAX + 48];
            snprintf(sql, sizeof sql, "DEALLOCATE \"%s\"", p->names[i]);
            PQclear(PQexec(p->conn, sql));
        }
    }
    for (int i = 0; i < PGQ_COUNT; i++)
        free(p->sql[i]);
    free(p->conninfo);
    pthread_mutex_destroy(&p->lock);
    free(p);
    h->self = NULL;
}

/* Appends s to the string at *b (len *n, capacity *cap), percent-escaping
 * what a URI query value cannot hold. 0, or -1 out of memory. */
static int put(char **b, size_t *n, size_t *cap, const char *s, int escape)
{
    for (; *s; s++) {
        char enc[4];
        unsigned char c = (unsigned char)*s;
        int plain = !escape || isalnum(c) || strchr("-._~", c);
        if (plain) {
            enc[0] = (char)c;
            enc[1] = '\0';
        } else {
            snprintf(enc, sizeof enc, "%%%02X", c);
        }
        size_t k = strlen(enc);
        if (*n + k + 1 > *cap) {
            size_t want = (*cap + k + 1) * 2;
            char *nb = realloc(*b, want);
            if (!nb) return -1;
            *b = nb;
            *cap = want;
        }
        memcpy(*b + *n, enc, k);
        *n += k;
        (*b)[*n] = '\0';
    }
    return 0;
}

/* libpq's URI: the URL less the parameters that are the store's own
 * (table, statement_timeout_ms). acemq__pg_connect adds its limits to it. */
static char *conninfo_of(const acemq__url *u)
{
    char *b = NULL;
    size_t n = 0, cap = 0;
    int ok = put(&b, &n, &cap, u->scheme, 0) == 0 && put(&b, &n, &cap, ":", 0) == 0 &&
             put(&b, &n, &cap, u->rest, 0) == 0;
    int first = 1;
    for (size_t i = 0; ok && i < u->nparams; i++) {
        const char *k = u->params[i].key;
        if (strcmp(k, "table") == 0 || strcmp(k, "statement_timeout_ms") == 0) continue;
        ok = put(&b, &n, &cap, first ? "?" : "&", 0) == 0 && put(&b, &n, &cap, k, 1) == 0 &&
             put(&b, &n, &cap, "=", 0) == 0 && put(&b, &n, &cap, u->params[i].value, 1) == 0;
        first = 0;
    }
    if (!ok) {
        free(b);
        return NULL;
    }
    return b;
}

int acemq__pg_idem_parse_url(acemq_idem *h, const acemq__url *u, const char **table,
                             int64_t *timeout, char **conninfo)
{
    *conninfo = NULL;
    *table = acemq__url_param(u, "table");
    if (!*table) *table = DEFAULT_TABLE;
    if (check_table(*table) != 0)
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "postgres: table '%s' is not a name of 1 to %d letters, digits "
                                "and '_', starting with a letter or '_'",
                                *table, PG_IDEM_TABLE_MAX);
    *timeout = DEFAULT_STATEMENT_TIMEOUT_MS;
    if (acemq__url_param_int(u, "statement_timeout_ms", 0, INT32_MAX, timeout) != 0)
        return acemq__idem_fail(
            h, ACEMQ_EURL, "postgres: statement_timeout_ms must be 0..%d (0: none)", INT32_MAX);
    char *info = conninfo_of(u);
    if (!info) return acemq__idem_fail(h, ACEMQ_ENOMEM, "postgres: out of memory");
    /* libpq's own check of the URL and its parameters, before any
     * connection: a misspelt parameter is the URL's fault. */
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(info, &err);
    int rc = 0;
    if (!opts) {
        size_t len = err ? strlen(err) : 0;
        while (len > 0 && (err[len - 1] == '\n' || err[len - 1] == ' '))
            len--;
        /* libpq tells a failed allocation from a bad URL only in words. */
        int oom = !err || strncmp(err, "out of memory", 13) == 0;
        rc = acemq__idem_fail(h, oom ? ACEMQ_ENOMEM : ACEMQ_EURL, "postgres: %s: %.*s",
                              oom ? "checking the URL" : "bad URL", (int)len,
                              err ? err : "out of memory");
        PQfreemem(err);
        free(info);
        info = NULL;
    }
    PQconninfoFree(opts);
    *conninfo = info;
    return rc;
}

static int open_pg_url(acemq_idem *h, const acemq__url *u)
{
    if (h->opts.flags & ACEMQ_IDEM_CONFIRM_IN_CALLER_TX)
        return acemq__idem_fail(h, ACEMQ_EINVAL,
                                "postgres: ACEMQ_IDEM_CONFIRM_IN_CALLER_TX needs the caller's "
                                "connection (acemq_idem_open_pg); a store opened by URL has no "
                                "caller transaction to join");
    const char *table = NULL;
    int64_t timeout = 0;
    char *conninfo = NULL;
    int rc = acemq__pg_idem_parse_url(h, u, &table, &timeout, &conninfo);
    if (rc != 0) return rc;
    char *schema = NULL;
    rc = new_state(h, table, &schema);
    pg_idem *p = h->self;
    if (rc == 0) {
        p->owns_conn = 1;
        p->statement_timeout_ms = timeout;
        p->conninfo = conninfo;
    } else {
        free(conninfo);
    }
    if (rc == 0) {
        p->conn = acemq__pg_connect(p->conninfo);
        if (!p->conn)
            rc = acemq__idem_fail(h, ACEMQ_ENOMEM, "postgres: out of memory connecting");
        else if (PQstatus(p->conn) != CONNECTION_OK)
            rc = acemq__pg_idem_fail(h, NULL, "connecting");
    }
    if (rc == 0) (void)PQsetNoticeProcessor(p->conn, ignore_notice, NULL);
    if (rc == 0) rc = ensure_schema(h, schema);
    if (rc == 0) rc = prepare_all(h);
    free(schema);
    if (rc != 0) {
        acemq__pg_idem_close(h);
        return rc;
    }
    h->methods = &acemq__pg_idem_methods;
    return 0;
}

int acemq_idem_open_pg(acemq_idem **out, PGconn *conn, const acemq_idem_options *o,
                       const char *table)
{
    if (!out) return acemq__idem_open_fail(ACEMQ_EINVAL, "out is NULL");
    *out = NULL;
    if (!conn) return acemq__idem_open_fail(ACEMQ_EINVAL, "conn is NULL");
    if (!table) table = DEFAULT_TABLE;
    if (check_table(table) != 0)
        return acemq__idem_open_fail(ACEMQ_EINVAL,
                                     "table '%s' is not a name of 1 to %d letters, digits and "
                                     "'_', starting with a letter or '_'",
                                     table, PG_IDEM_TABLE_MAX);
    if (PQstatus(conn) != CONNECTION_OK)
        return acemq__idem_open_fail(ACEMQ_EIO, "postgres: conn is not connected: %s",
                                     PQerrorMessage(conn));
    if (PQtransactionStatus(conn) != PQTRANS_IDLE)
        return acemq__idem_open_fail(ACEMQ_EINVAL,
                                     "postgres: open the store while conn has no transaction "
                                     "open (it makes the schema in one of its own)");
    acemq_idem *h = NULL;
    int rc = acemq__idem_new(&h, o);
    if (rc != 0) return rc;
    char *schema = NULL;
    rc = new_state(h, table, &schema);
    if (rc == 0) {
        pg_idem *p = h->self;
        p->conn = conn;
        p->owns_conn = 0;
        rc = ensure_schema(h, schema);
        if (rc == 0) rc = prepare_all(h);
    }
    free(schema);
    if (rc != 0) {
        acemq__pg_idem_close(h);
        acemq__idem_free(h);
        return rc;
    }
    h->methods = &acemq__pg_idem_methods;
    *out = h;
    return 0;
}

PGconn *acemq__pg_idem_conn(acemq_idem *h)
{
    const pg_idem *p = h->self;
    return p->conn;
}

const acemq__idem_backend acemq__pg_idem_backend = {{"postgres", "postgres://"}, open_pg_url};
const acemq__idem_backend acemq__pgsql_idem_backend = {{"postgresql", NULL}, open_pg_url};
