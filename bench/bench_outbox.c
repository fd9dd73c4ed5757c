/* bench_outbox.c — records per second through claim_batch + mark_published,
 * for batch sizes 1, 100 and 1,000 on SQLite and PostgreSQL, beside raw SQL
 * doing the same reads and writes in the same run, so the ratio holds on a
 * noisy machine. Target: acemq >= 0.8 x raw.
 *
 * The raw peer is what a careful person writes by hand for the same job on the
 * same table: claim the oldest unpublished rows (SQLite: SELECT then UPDATE
 * each in one BEGIN IMMEDIATE transaction; PostgreSQL: one UPDATE ... WHERE
 * seq IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING), copy every column a
 * relay needs, then mark the batch published in one transaction. It has no
 * fencing token and no ordering-key rule: what those cost is part of what the
 * ratio measures.
 *
 * With --delete-published both sides delete a published record instead of
 * marking it (acemq's delete_on_publish), and the cases' names end in
 * /delete-published.
 *
 *   bench_outbox [--pg URL] [--out FILE] [--reps N] [--quick] [--filter TEXT]
 *                [--delete-published]
 *
 * PostgreSQL's URL comes from --pg or ACEMQ_PG_URL (scripts/services.sh env
 * postgres); without one the PostgreSQL cases are skipped and say so.
 */
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acemq/outbox.h"
#include "bench_common.h"

#define TARGET_RATIO 0.8

typedef struct config {
    const char *pg_url;
    const char *out_path;
    const char *filter;
    int reps;
    int quick;
    int delete_published; /* both sides delete what they publish */
    char dir[256];
} config;

typedef struct sink {
    size_t bytes; /* what was copied, so the copies cannot be optimised away */
    char *buf;
    size_t cap;
} sink;

/* A relay copies every column it will publish: so does the peer. */
static void copy_out(sink *s, const void *p, size_t len)
{
    if (len > s->cap) {
        free(s->buf);
        s->cap = len * 2;
        s->buf = malloc(s->cap);
        if (!s->buf) die("out of memory");
    }
    if (len) memcpy(s->buf, p, len);
    s->bytes += len;
}

/* ------------------------------------------------------------- filling */

static void sqlite_exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) die("sqlite: %s: %s", sql, msg);
}

static void pg_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        die("postgres: %s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

/* n fresh records of 200 bytes each, nothing else in the table. */
static void refill(int pg, sqlite3 *db, PGconn *conn, long n)
{
    char sql[640];
    if (pg) {
        pg_exec(conn, "TRUNCATE acemq_outbox");
        snprintf(sql, sizeof sql,
                 "INSERT INTO acemq_outbox(id, destination, routing_key, headers, content_type, "
                 "body) SELECT 'r' || lpad(g::text, 8, '0'), 'orders', 'order.created',"
                 " '{\"trace\":\"abc\"}', 'application/json', convert_to(repeat('x', 200), 'UTF8')"
                 " FROM generate_series(1, %ld) g",
                 n);
        pg_exec(conn, sql);
        pg_exec(conn, "VACUUM ANALYZE acemq_outbox");
    } else {
        sqlite_exec(db, "DELETE FROM acemq_outbox");
        snprintf(sql, sizeof sql,
                 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < %ld)"
                 " INSERT INTO acemq_outbox(id, destination, routing_key, headers, content_type,"
                 " body) SELECT printf('r%%08d', i), 'orders', 'order.created',"
                 " '{\"trace\":\"abc\"}', 'application/json', zeroblob(200) FROM g",
                 n);
        sqlite_exec(db, sql);
        sqlite_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    }
}

/* ------------------------------------------------------------- acemq */

static double run_acemq(const char *url, int delete_published, size_t batch, long n, sink *s)
{
    acemq_outbox_options o;
    acemq_outbox_options_init(&o);
    o.delete_on_publish = delete_published;
    acemq_outbox *h = NULL;
    int rc = acemq_outbox_open(&h, url, &o);
    if (rc != 0) die("acemq_outbox_open: %s", acemq_outbox_errmsg(NULL));
    acemq_outbox_mark *marks = malloc(batch * sizeof *marks);
    int *status = malloc(batch * sizeof *status);
    if (!marks || !status) die("out of memory");
    long done = 0;
    double t0 = mono_now();
    for (;;) {
        const acemq_outbox_msg *m;
        size_t got;
        rc = acemq_outbox_claim_batch(h, batch, 60000, &m, &got);
        if (rc != 0) die("claim_batch: %s", acemq_outbox_errmsg(h));
        if (got == 0) break;
        for (size_t i = 0; i < got; i++) {
            copy_out(s, m[i].body, m[i].body_len);
            marks[i].id = m[i].id;
            marks[i].token = m[i].token;
        }
        rc = acemq_outbox_mark_published_batch(h, marks, got, status);
        if (rc != 0) die("mark_published_batch: %s", acemq_outbox_errmsg(h));
        for (size_t i = 0; i < got; i++)
            if (status[i] != 0) die("mark %s: %s", marks[i].id, acemq_err_name(status[i]));
        done += (long)got;
    }
    double elapsed = mono_now() - t0;
    if (done != n) die("acemq drained %ld of %ld records", done, n);
    free(marks);
    free(status);
    acemq_outbox_close(h);
    return (double)done / elapsed;
}

/* ------------------------------------------------------------- raw sqlite */

static sqlite3_stmt *prep(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        die("sqlite: %s: %s", sql, sqlite3_errmsg(db));
    return st;
}

static void step_done(sqlite3 *db, sqlite3_stmt *st)
{
    if (sqlite3_step(st) != SQLITE_DONE) die("sqlite: %s", sqlite3_errmsg(db));
    sqlite3_reset(st);
}

static double run_raw_sqlite(const char *path, int delete_published, size_t batch, long n, sink *s)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
        die("sqlite3_open_v2(%s)", path);
    sqlite_exec(db, "PRAGMA journal_mode=WAL");
    sqlite_exec(db, "PRAGMA synchronous=FULL"); /* the outbox handle's default */
    sqlite3_stmt *begin = prep(db, "BEGIN IMMEDIATE"), *commit = prep(db, "COMMIT");
    sqlite3_stmt *pick = prep(db, "SELECT seq, id, destination, routing_key, headers, content_type,"
                                  " body FROM acemq_outbox WHERE state = 0 AND (lease_until IS NULL"
                                  " OR lease_until <= ?1) ORDER BY seq LIMIT ?2");
    sqlite3_stmt *lease = prep(db, "UPDATE acemq_outbox SET lease_until = ?1 WHERE seq = ?2");
    sqlite3_stmt *mark =
        prep(db, delete_published ? "DELETE FROM acemq_outbox WHERE seq = ?2 AND ?1 IS NOT NULL"
                                  : "UPDATE acemq_outbox SET state = 1, published_at = ?1,"
                                    " lease_until = NULL WHERE seq = ?2");
    int64_t *seqs = malloc(batch * sizeof *seqs);
    if (!seqs) die("out of memory");
    const acemq_clock *clock = acemq_clock_system();
    long done = 0;
    double t0 = mono_now();
    for (;;) {
        int64_t now = clock->now_ms(clock->ctx);
        step_done(db, begin);
        sqlite3_bind_int64(pick, 1, now);
        sqlite3_bind_int64(pick, 2, (sqlite3_int64)batch);
        size_t got = 0;
        while (sqlite3_step(pick) == SQLITE_ROW) {
            seqs[got] = sqlite3_column_int64(pick, 0);
            for (int c = 1; c <= 5; c++)
                copy_out(s, sqlite3_column_text(pick, c), (size_t)sqlite3_column_bytes(pick, c));
            copy_out(s, sqlite3_column_blob(pick, 6), (size_t)sqlite3_column_bytes(pick, 6));
            got++;
        }
        sqlite3_reset(pick);
        for (size_t i = 0; i < got; i++) {
            sqlite3_bind_int64(lease, 1, now + 60000);
            sqlite3_bind_int64(lease, 2, seqs[i]);
            step_done(db, lease);
        }
        step_done(db, commit);
        if (got == 0) break;
        if (got > 1) step_done(db, begin);
        for (size_t i = 0; i < got; i++) {
            sqlite3_bind_int64(mark, 1, now);
            sqlite3_bind_int64(mark, 2, seqs[i]);
            step_done(db, mark);
        }
        if (got > 1) step_done(db, commit);
        done += (long)got;
    }
    double elapsed = mono_now() - t0;
    if (done != n) die("raw sqlite drained %ld of %ld records", done, n);
    free(seqs);
    sqlite3_finalize(begin);
    sqlite3_finalize(commit);
    sqlite3_finalize(pick);
    sqlite3_finalize(lease);
    sqlite3_finalize(mark);
    sqlite3_close(db);
    return (double)done / elapsed;
}

/* ------------------------------------------------------------- raw postgres */

static double run_raw_pg(const char *url, int delete_published, size_t batch, long n, sink *s)
{
    PGconn *c = PQconnectdb(url);
    if (PQstatus(c) != CONNECTION_OK) die("postgres: %s", PQerrorMessage(c));
    PGresult *r =
        PQprepare(c, "claim",
                  "UPDATE acemq_outbox SET lease_until = $1::bigint + 60000 WHERE seq IN ("
                  "SELECT seq FROM acemq_outbox WHERE state = 0 AND (lease_until IS NULL"
                  " OR lease_until <= $1::bigint) ORDER BY seq LIMIT $2 FOR UPDATE SKIP"
                  " LOCKED) RETURNING seq, id, destination, routing_key, headers,"
                  " content_type, body",
                  2, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) die("postgres: %s", PQresultErrorMessage(r));
    PQclear(r);
    r = PQprepare(c, "mark",
                  delete_published ? "DELETE FROM acemq_outbox WHERE seq = ANY($2::bigint[])"
                                     " AND $1::bigint IS NOT NULL"
                                   : "UPDATE acemq_outbox SET state = 1, published_at = $1::bigint,"
                                     " lease_until = NULL WHERE seq = ANY($2::bigint[])",
                  2, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) die("postgres: %s", PQresultErrorMessage(r));
    PQclear(r);
    size_t cap = batch * 21 + 3;
    char *arr = malloc(cap);
    if (!arr) die("out of memory");
    const acemq_clock *clock = acemq_clock_system();
    long done = 0;
    double t0 = mono_now();
    for (;;) {
        char nowb[24], bb[24];
        snprintf(nowb, sizeof nowb, "%lld", (long long)clock->now_ms(clock->ctx));
        snprintf(bb, sizeof bb, "%zu", batch);
        const char *v[] = {nowb, bb};
        r = PQexecPrepared(c, "claim", 2, v, NULL, NULL, 1);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) die("postgres: %s", PQresultErrorMessage(r));
        int got = PQntuples(r);
        size_t o = 0;
        arr[o++] = '{';
        for (int i = 0; i < got; i++) {
            const unsigned char *b = (const unsigned char *)PQgetvalue(r, i, 0);
            long long seq = 0;
            for (int k = 0; k < 8; k++)
                seq = seq << 8 | b[k];
            o += (size_t)snprintf(arr + o, cap - o, "%s%lld", i ? "," : "", seq);
            for (int col = 1; col <= 6; col++)
                copy_out(s, PQgetvalue(r, i, col), (size_t)PQgetlength(r, i, col));
        }
        arr[o++] = '}';
        arr[o] = '\0';
        PQclear(r);
        if (got == 0) break;
        const char *mv[] = {nowb, arr};
        r = PQexecPrepared(c, "mark", 2, mv, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) die("postgres: %s", PQresultErrorMessage(r));
        PQclear(r);
        done += got;
    }
    double elapsed = mono_now() - t0;
    if (done != n) die("raw postgres drained %ld of %ld records", done, n);
    free(arr);
    PQfinish(c);
    return (double)done / elapsed;
}

/* ------------------------------------------------------------- report */

static void report(FILE *out, const char *name, double v, const char *peer, double pv)
{
    bench_result r = {"outbox", name, v, "records/s", peer, pv, 0, ">= 0.8 x peer", 0};
    r.ratio = pv > 0 ? v / pv : 0;
    r.target_met = r.ratio >= TARGET_RATIO;
    bench_report(out, &r);
}

static void bench_backend(const config *cfg, FILE *out, int pg)
{
    static const size_t batches[] = {1, 100, 1000};
    char url[1200], path[512];
    sqlite3 *db = NULL;
    PGconn *conn = NULL;
    if (pg) {
        snprintf(url, sizeof url, "%s", cfg->pg_url);
        /* The schema, through the library, then a plain connection to fill it. */
        acemq_outbox *h = NULL;
        if (acemq_outbox_open(&h, url, NULL) != 0) die("open: %s", acemq_outbox_errmsg(NULL));
        acemq_outbox_close(h);
        conn = PQconnectdb(url);
        if (PQstatus(conn) != CONNECTION_OK) die("postgres: %s", PQerrorMessage(conn));
    } else {
        snprintf(path, sizeof path, "%s/outbox.db", cfg->dir);
        snprintf(url, sizeof url, "sqlite:%s", path);
        acemq_outbox *h = NULL;
        if (acemq_outbox_open(&h, url, NULL) != 0) die("open: %s", acemq_outbox_errmsg(NULL));
        acemq_outbox_close(h);
        if (sqlite3_open(path, &db) != SQLITE_OK) die("sqlite3_open(%s)", path);
    }
    for (size_t k = 0; k < 3; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s/batch%zu%s", pg ? "postgres" : "sqlite", batches[k],
                 cfg->delete_published ? "/delete-published" : "");
        if (!bench_wanted(cfg->filter, name)) continue;
        long n = batches[k] == 1 ? (cfg->quick ? 300 : 3000) : (cfg->quick ? 5000 : 50000);
        double a[16], p[16];
        sink s = {0};
        for (int rep = 0; rep < cfg->reps; rep++) {
            /* Alternate who goes first, so neither always meets a warmer cache. */
            for (int turn = 0; turn < 2; turn++) {
                int acemq_turn = (turn + rep) % 2 == 0;
                refill(pg, db, conn, n);
                if (acemq_turn)
                    a[rep] = run_acemq(url, cfg->delete_published, batches[k], n, &s);
                else
                    p[rep] = pg ? run_raw_pg(url, cfg->delete_published, batches[k], n, &s)
                                : run_raw_sqlite(path, cfg->delete_published, batches[k], n, &s);
            }
        }
        free(s.buf);
        report(out, name, median(a, cfg->reps), pg ? "raw libpq SQL" : "raw sqlite3 SQL",
               median(p, cfg->reps));
    }
    if (db) sqlite3_close(db);
    if (conn) PQfinish(conn);
}

int main(int argc, char **argv)
{
    bench_name = "bench_outbox";
    config cfg = {.out_path = ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl", .reps = 3};
    cfg.pg_url = getenv("ACEMQ_PG_URL");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--pg") == 0 && i + 1 < argc)
            cfg.pg_url = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            cfg.out_path = argv[++i];
        else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc)
            cfg.filter = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            cfg.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--quick") == 0)
            cfg.quick = 1, cfg.reps = 1;
        else if (strcmp(argv[i], "--delete-published") == 0)
            cfg.delete_published = 1;
        else {
            fprintf(stderr, "usage: bench_outbox [--pg URL] [--out FILE] [--reps N] [--quick] "
                            "[--filter TEXT] [--delete-published]\n");
            return 2;
        }
    }
    if (cfg.reps < 1 || cfg.reps > 16) die("--reps must be within 1..16");
    snprintf(cfg.dir, sizeof cfg.dir, "/tmp/acemq-bench-outbox-XXXXXX");
    if (!mkdtemp(cfg.dir)) die("mkdtemp failed");
    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("opening %s", cfg.out_path);
    printf("outbox: claim_batch + mark_published, records/s (200-byte bodies; median of %d)\n",
           cfg.reps);
    bench_header();
    bench_backend(&cfg, out, 0);
    if (cfg.pg_url && *cfg.pg_url)
        bench_backend(&cfg, out, 1);
    else
        printf("note: PostgreSQL cases skipped: no --pg and no ACEMQ_PG_URL "
               "(scripts/services.sh start postgres)\n");
    fclose(out);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cfg.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", cfg.dir);
    return 0;
}
