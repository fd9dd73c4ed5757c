/* bench_idem_pg.c — the PostgreSQL idempotency store beside the statements
 * a competent hand-written version sends, in the same run on the same
 * server: claim + confirm pairs per second on one connection and on eight
 * (one handle per thread), and claims per second through
 * acemq_idem_try_claim_many of 100 ids against one try_claim at a time.
 *
 * The peer ("raw") is a table of the same shape and two prepared
 * statements with binary parameters: INSERT ... ON CONFLICT (id) DO
 * NOTHING RETURNING token (the claim of a new id), then UPDATE ... SET
 * state = 2 WHERE id AND token (the confirm), times on the database's
 * clock as acemq's, on a table of the same shape (fillfactor, the purge's
 * partial index). Ids are random UUID text. Turns alternate, raw then
 * acemq, and each figure is the median of its turns.
 *
 * Targets: pairs >= 0.8 x raw on 1 and on 8 connections; a batch of 100
 * claims >= 5 x one claim at a time. Needs ACEMQ_PG_URL (make bench starts
 * the server). Exit status: 0 measured, 1 something broke, 2 usage. */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acemq/acemq.h"

#ifndef ACEMQ_SOURCE_DIR
#define ACEMQ_SOURCE_DIR "."
#endif

#define MAX_THREADS 8
#define BATCH 100

typedef struct config {
    const char *out_path;
    const char *filter;
    double seconds; /* per turn */
    int reps;
} config;

static const char *pg_url;
static char store_url[1024];
static char raw_table[32];

/* Random UUIDv4 text into out (37 bytes), from the state at *x. */
static void uuid_text(uint64_t *x, char *out)
{
    uint64_t v[2];
    for (int i = 0; i < 2; i++) {
        uint64_t z = (*x += 0x9e3779b97f4a7c15u);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        v[i] = z ^ (z >> 31);
    }
    uint64_t hi = (v[0] & ~(uint64_t)0xf000) | 0x4000;
    uint64_t lo = (v[1] & ~((uint64_t)3 << 62)) | ((uint64_t)2 << 62);
    snprintf(out, 37, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(hi >> 32),
             (unsigned)(hi >> 16) & 0xffff, (unsigned)hi & 0xffff, (unsigned)(lo >> 48),
             (unsigned long long)(lo & 0xffffffffffffu));
}

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

/* One raw pair: 0, or 1 when the id was not new. */
static int raw_pair(PGconn *c, const char *id)
{
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

/* ---- the turns ---- */

enum { SIDE_RAW, SIDE_ACEMQ, SIDE_SINGLE, SIDE_MANY };

typedef struct worker {
    pthread_t thread;
    int side;
    uint64_t seed;
    double seconds;
    long done;
    PGconn *conn;
    acemq_idem *store;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    char ids[BATCH][37];
    acemq_idem_key keys[BATCH];
    acemq_claim out[BATCH];
    int status[BATCH];
    double end = mono_now() + w->seconds;
    while (mono_now() < end) {
        if (w->side == SIDE_RAW) {
            uuid_text(&w->seed, ids[0]);
            if (raw_pair(w->conn, ids[0]) != 0) die("raw: a random id was not new");
            w->done++;
        } else if (w->side == SIDE_ACEMQ || w->side == SIDE_SINGLE) {
            uuid_text(&w->seed, ids[0]);
            acemq_claim c;
            if (acemq_idem_try_claim(w->store, ids[0], 36, NULL, &c) != ACEMQ_CLAIMED)
                die("try_claim: %s", acemq_idem_errmsg(w->store));
            if (w->side == SIDE_ACEMQ && acemq_idem_confirm(w->store, ids[0], 36, c.token) != 0)
                die("confirm: %s", acemq_idem_errmsg(w->store));
            w->done++;
        } else {
            for (int i = 0; i < BATCH; i++) {
                uuid_text(&w->seed, ids[i]);
                keys[i].id = ids[i];
                keys[i].id_len = 36;
            }
            int n = acemq_idem_try_claim_many(w->store, BATCH, keys, NULL, out, status);
            if (n != BATCH)
                die("try_claim_many: %d of %d: %s", n, BATCH, acemq_idem_errmsg(w->store));
            w->done += BATCH;
        }
    }
    return NULL;
}

/* One turn of side on threads connections: operations per second. Every
 * thread of every turn starts its ids from a seed of its own. */
static double turn(int side, int threads, double seconds)
{
    static uint64_t turns;
    uint64_t seed = ++turns;
    worker w[MAX_THREADS];
    memset(w, 0, sizeof w);
    for (int t = 0; t < threads; t++) {
        w[t].side = side;
        w[t].seed = seed * 7919 + (uint64_t)t * 104729 + (uint64_t)getpid();
        w[t].seconds = seconds;
        if (side == SIDE_RAW) {
            w[t].conn = raw_connect();
            raw_prepare(w[t].conn);
        } else if (acemq_idem_open(&w[t].store, store_url, NULL) != 0) {
            die("open %s: %s", store_url, acemq_idem_errmsg(NULL));
        }
    }
    double t0 = mono_now();
    for (int t = 0; t < threads; t++)
        if (pthread_create(&w[t].thread, NULL, work, &w[t]) != 0) die("pthread_create");
    long done = 0;
    for (int t = 0; t < threads; t++) {
        if (pthread_join(w[t].thread, NULL) != 0) die("pthread_join");
        done += w[t].done;
    }
    double elapsed = mono_now() - t0;
    for (int t = 0; t < threads; t++) {
        PQfinish(w[t].conn);
        acemq_idem_close(w[t].store);
    }
    return (double)done / elapsed;
}

/* Times side a against side b in alternating turns; reports a beside b. */
static void compare(FILE *out, const config *cfg, const char *name, int a, int b, int threads,
                    const char *unit, const char *peer, double target)
{
    if (!bench_wanted(cfg->filter, name)) return;
    double va[32], vb[32], ratio[32];
    for (int r = 0; r < cfg->reps; r++) {
        vb[r] = turn(b, threads, cfg->seconds);
        va[r] = turn(a, threads, cfg->seconds);
        ratio[r] = va[r] / vb[r];
    }
    char want[48];
    snprintf(want, sizeof want, ">= %.1f x %s", target, b == SIDE_RAW ? "raw" : "one at a time");
    bench_result res = {"idem",
                        name,
                        median(va, cfg->reps),
                        unit,
                        peer,
                        median(vb, cfg->reps),
                        median(ratio, cfg->reps),
                        NULL,
                        0};
    res.target = want;
    res.target_met = res.ratio >= target;
    bench_report(out, &res);
}

static void usage(void)
{
    fputs("usage: bench_idem_pg [--out FILE] [--seconds S] [--reps N] [--filter TEXT]\n", stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    bench_name = "bench_idem_pg";
    config cfg = {ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl", NULL, 2.0, 5};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--out") == 0 && v)
            cfg.out_path = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && v)
            cfg.seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && v)
            cfg.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--filter") == 0 && v)
            cfg.filter = argv[++i];
        else
            usage();
    }
    if (cfg.seconds <= 0 || cfg.reps < 1 || cfg.reps > 32) usage();
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
    compare(out, &cfg, "postgres/uuid/1conn", SIDE_ACEMQ, SIDE_RAW, 1, "pairs/s",
            "raw INSERT ON CONFLICT + UPDATE", 0.8);
    compare(out, &cfg, "postgres/uuid/8conn", SIDE_ACEMQ, SIDE_RAW, 8, "pairs/s",
            "raw INSERT ON CONFLICT + UPDATE", 0.8);
    compare(out, &cfg, "postgres/uuid/batch100", SIDE_MANY, SIDE_SINGLE, 1, "claims/s",
            "acemq try_claim one at a time", 5.0);
    if (fclose(out) != 0) die("closing %s", cfg.out_path);

    snprintf(sql, sizeof sql,
             "DROP TABLE %s; DROP SEQUENCE %s_token; DROP TABLE bench_idem_%ld;"
             " DROP SEQUENCE bench_idem_%ld_token",
             raw_table, raw_table, (long)getpid(), (long)getpid());
    raw_exec(admin, sql);
    PQfinish(admin);
    return 0;
}
