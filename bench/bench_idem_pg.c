/* bench_idem_pg.c — the PostgreSQL idempotency store beside the statements
 * a competent hand-written version sends, in the same run on the same
 * server: the cases of bench_idem_remote.h, named postgres/uuid/...
 *
 * The peer ("raw") is a table of the same shape and two prepared
 * statements with binary parameters: INSERT ... ON CONFLICT (id) DO
 * NOTHING RETURNING token (the claim of a new id), then UPDATE ... SET
 * state = 2 WHERE id AND token (the confirm), times on the database's
 * clock as acemq's, on a table of the same shape (fillfactor, the purge's
 * partial index).
 *
 * Targets: pairs >= 0.8 x raw on 1 and on 8 connections; a batch of 100
 * claims >= 5 x one claim at a time. Needs ACEMQ_PG_URL (make bench starts
 * the server). Exit status: 0 measured, 1 something broke, 2 usage. */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"
#include "bench_idem_remote.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *pg_url;
static char store_url[1024];
static char raw_table[32];

/* ---- the raw peer ---- */

static PGconn *raw_connect(void)
{
    PGconn *c = PQconnectdb(pg_url);
    if (PQstatus(c) != CONNECTION_OK) die("connect: %s", PQerrorMessage(c));
    return c;
}

static void raw_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        die("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

#define NOW "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

static void raw_prepare(PGconn *c)
{
    char sql[512];
    static const unsigned claim_types[] = {17}, confirm_types[] = {17, 20};
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (id, state, token, lease_until) VALUES ($1, 1,"
             " nextval('%s_token'), " NOW " + 30000) ON CONFLICT (id) DO NOTHING RETURNING token",
             raw_table, raw_table);
    PGresult *r = PQprepare(c, "raw_claim", sql, 1, claim_types);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) die("prepare: %s", PQresultErrorMessage(r));
    PQclear(r);
    snprintf(sql, sizeof sql,
             "UPDATE %s SET state = 2, expires_at = " NOW " + 604800000, lease_until = NULL"
             " WHERE id = $1 AND token = $2",
             raw_table);
    r = PQprepare(c, "raw_confirm", sql, 2, confirm_types);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) die("prepare: %s", PQresultErrorMessage(r));
    PQclear(r);
}

static void *raw_open(void)
{
    PGconn *c = raw_connect();
    raw_prepare(c);
    return c;
}

static void raw_close(void *conn)
{
    PQfinish(conn);
}

/* One raw pair: 0, or 1 when the id was not new. */
static int raw_pair(void *conn, const char *id)
{
    PGconn *c = conn;
    const char *v[2] = {id, NULL};
    int len[2] = {36, 8}, fmt[2] = {1, 1};
    PGresult *r = PQexecPrepared(c, "raw_claim", 1, v, len, fmt, 1);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) die("raw claim: %s", PQresultErrorMessage(r));
    if (PQntuples(r) != 1) {
        PQclear(r);
        return 1;
    }
    char token[8];
    memcpy(token, PQgetvalue(r, 0, 0), 8);
    PQclear(r);
    v[1] = token;
    r = PQexecPrepared(c, "raw_confirm", 2, v, len, fmt, 1);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) die("raw confirm: %s", PQresultErrorMessage(r));
    PQclear(r);
    return 0;
}

int main(int argc, char **argv)
{
    bench_name = "bench_idem_pg";
    remote_config cfg;
    remote_parse_args(argc, argv, &cfg);
    pg_url = getenv("ACEMQ_PG_URL");
    if (!pg_url || !*pg_url) {
        printf("bench_idem_pg: skipped, ACEMQ_PG_URL is not set (scripts/services.sh start "
               "postgres)\n");
        return 0;
    }
    snprintf(raw_table, sizeof raw_table, "bench_raw_%ld", (long)getpid());
    snprintf(store_url, sizeof store_url, "%s%stable=bench_idem_%ld", pg_url,
             strchr(pg_url, '?') ? "&" : "?", (long)getpid());
    PGconn *admin = raw_connect();
    char sql[1024];
    snprintf(sql, sizeof sql,
             "CREATE TABLE %s (id bytea PRIMARY KEY, state smallint NOT NULL, token bigint NOT"
             " NULL, lease_until bigint, expires_at bigint, fingerprint bytea, result bytea)"
             " WITH (fillfactor = 80); CREATE SEQUENCE %s_token;"
             " CREATE INDEX %s_expires ON %s (expires_at) WHERE state <> 1",
             raw_table, raw_table, raw_table, raw_table);
    raw_exec(admin, sql);
    acemq_idem *schema = NULL; /* makes acemq's table before the turns */
    if (acemq_idem_open(&schema, store_url, NULL) != 0)
        die("open %s: %s", store_url, acemq_idem_errmsg(NULL));
    acemq_idem_close(schema);

    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("opening %s", cfg.out_path);
    printf("bench_idem_pg: claim + confirm of random UUID ids, %.1f s a turn, median of %d\n",
           cfg.seconds, cfg.reps);
    bench_header();
    remote_bench b = {
        "postgres", "raw INSERT ON CONFLICT + UPDATE", store_url, NULL, raw_open, raw_pair,
        raw_close};
    remote_run_cases(out, &cfg, &b);
    if (fclose(out) != 0) die("closing %s", cfg.out_path);

    snprintf(sql, sizeof sql,
             "DROP TABLE %s; DROP SEQUENCE %s_token; DROP TABLE bench_idem_%ld;"
             " DROP SEQUENCE bench_idem_%ld_token",
             raw_table, raw_table, (long)getpid(), (long)getpid());
    raw_exec(admin, sql);
    PQfinish(admin);
    return 0;
}
