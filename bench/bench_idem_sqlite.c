/* bench_idem_sqlite.c — the SQLite cases of bench_idem and their peer: raw
 * sqlite3 calls on the same table, journal mode, synchronous setting and
 * thread count as the acemq store, on the same ids in the same run. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "acemq/idem.h"

#include "bench_common.h"
#include "bench_idem.h"

/* The raw peer reads wall-clock time per write, as acemq's system clock does. */
static int64_t wall_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) die("clock_gettime: %s", strerror(errno));
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* -------------------------------------------------------------- raw sqlite */

typedef struct raw_conn {
    sqlite3 *db;
    sqlite3_stmt *claim, *confirm;
    uint64_t next_token;
} raw_conn;

/* Keeps the first column of the last row a statement answered. */
static int keep_text(void *buf, int ncols, char **vals, char **names)
{
    (void)names;
    if (ncols > 0 && vals[0]) snprintf(buf, 32, "%s", vals[0]);
    return 0;
}

/* Runs sql; answer (32 bytes, may be NULL) gets what it answered. */
static void raw_exec(sqlite3 *db, const char *sql, char *answer)
{
    char *msg = NULL;
    if (answer) answer[0] = '\0';
    if (sqlite3_exec(db, sql, answer ? keep_text : NULL, answer, &msg) != SQLITE_OK) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        die("sqlite: %s: %s", sql, copy);
    }
}

/* The acemq store's table, column for column, so both write rows of the same
 * size into the same kind of B-tree. Without its two partial indexes (on
 * lease_until and expires_at, which purge needs): the peer is the dedup table
 * people write by hand, and the cost of those indexes is part of what the
 * ratio measures. */
static const char raw_schema[] = "CREATE TABLE IF NOT EXISTS acemq_idem("
                                 "id BLOB PRIMARY KEY, state INTEGER NOT NULL, "
                                 "token INTEGER NOT NULL, lease_until INTEGER, "
                                 "expires_at INTEGER, fingerprint BLOB, result BLOB) "
                                 "WITHOUT ROWID";

static void raw_open(raw_conn *c, const char *path, int sync_full, uint64_t first_token)
{
    memset(c, 0, sizeof *c);
    /* Each connection belongs to one thread, so SQLite's own mutexes buy
     * nothing: a careful raw user turns them off, and so does this peer. */
    int rc = sqlite3_open_v2(
        path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK)
        die("sqlite3_open_v2(%s): %s", path, c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
    rc = sqlite3_busy_timeout(c->db, 5000);
    if (rc != SQLITE_OK) die("sqlite3_busy_timeout: %s", sqlite3_errmsg(c->db));
    char mode[32];
    raw_exec(c->db, "PRAGMA journal_mode=WAL", mode);
    /* A peer left in rollback-journal mode would measure something else. */
    if (strcmp(mode, "wal") != 0) die("sqlite: %s stayed in journal mode '%s'", path, mode);
    raw_exec(c->db, sync_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL", NULL);
    raw_exec(c->db, raw_schema, NULL);
    rc = sqlite3_prepare_v2(c->db,
                            "INSERT INTO acemq_idem(id, state, token, lease_until) "
                            "VALUES(?1, 1, ?2, ?3) ON CONFLICT DO NOTHING",
                            -1, &c->claim, NULL);
    if (rc != SQLITE_OK) die("sqlite3_prepare_v2(claim): %s", sqlite3_errmsg(c->db));
    rc = sqlite3_prepare_v2(c->db,
                            "UPDATE acemq_idem SET state = 2, expires_at = ?1 "
                            "WHERE id = ?2 AND token = ?3",
                            -1, &c->confirm, NULL);
    if (rc != SQLITE_OK) die("sqlite3_prepare_v2(confirm): %s", sqlite3_errmsg(c->db));
    c->next_token = first_token;
}

static void raw_close(raw_conn *c)
{
    if (sqlite3_finalize(c->claim) != SQLITE_OK || sqlite3_finalize(c->confirm) != SQLITE_OK)
        die("sqlite3_finalize: %s", sqlite3_errmsg(c->db));
    if (sqlite3_close(c->db) != SQLITE_OK) die("sqlite3_close: %s", sqlite3_errmsg(c->db));
}

/* Binds, steps once and resets; returns the rows changed, or -1 with the
 * error in w. */
static int raw_step(worker *w, sqlite3 *db, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    int changed = sqlite3_changes(db);
    int rc2 = sqlite3_reset(st);
    if (rc != SQLITE_DONE || rc2 != SQLITE_OK)
        return worker_fail(w, "%s: %s", what, sqlite3_errmsg(db));
    return changed;
}

static int raw_pairs(worker *w)
{
    raw_conn *c = w->ctx;
    int len = (int)w->ids->len;
    for (size_t i = w->lo; i < w->hi; i++) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        const char *id = id_at(w->ids, i);
        uint64_t token = c->next_token++;
        if (sqlite3_bind_blob(c->claim, 1, id, len, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(c->claim, 2, (sqlite3_int64)token) != SQLITE_OK ||
            sqlite3_bind_int64(c->claim, 3, wall_ms() + LEASE_MS) != SQLITE_OK)
            return worker_fail(w, "bind(claim): %s", sqlite3_errmsg(c->db));
        int n = raw_step(w, c->db, c->claim, "claim");
        if (n < 0) return -1;
        if (n != 1) return worker_fail(w, "claim(%.*s) inserted %d rows", len, id, n);
        if (sqlite3_bind_int64(c->confirm, 1, wall_ms() + RETENTION_MS) != SQLITE_OK ||
            sqlite3_bind_blob(c->confirm, 2, id, len, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(c->confirm, 3, (sqlite3_int64)token) != SQLITE_OK)
            return worker_fail(w, "bind(confirm): %s", sqlite3_errmsg(c->db));
        n = raw_step(w, c->db, c->confirm, "confirm");
        if (n < 0) return -1;
        if (n != 1) return worker_fail(w, "confirm(%.*s) updated %d rows", len, id, n);
        w->done++;
    }
    return 0;
}

static double raw_run(const char *path, int sync_full, int threads, const idset *ids, size_t n,
                      double seconds, double *share)
{
    raw_conn conns[MAX_THREADS];
    worker ws[MAX_THREADS];
    memset(ws, 0, sizeof ws);
    split(ws, threads, ids, n, seconds);
    for (int t = 0; t < threads; t++) {
        /* Disjoint token ranges: the ids are disjoint too, but a token is
         * meant to be unique in the table, as acemq's are. */
        raw_open(&conns[t], path, sync_full, ((uint64_t)t << 40) + 1);
        ws[t].run = raw_pairs;
        ws[t].ctx = &conns[t];
    }
    double elapsed = run_workers(ws, threads);
    size_t done = total_done(ws, threads);
    *share = least_share(ws, threads);
    for (int t = 0; t < threads; t++)
        raw_close(&conns[t]);
    if (done == 0) die("raw sqlite %s: no pair completed in %.2f s", path, elapsed);
    return (double)done / elapsed;
}

void join_path(char *buf, size_t cap, const char *a, const char *b)
{
    int n = snprintf(buf, cap, "%s%s", a, b);
    if (n < 0 || (size_t)n >= cap) die("path too long: %s%s", a, b);
}

static void remove_db(const char *path)
{
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal", "-acemq-issue"};
    char buf[4200];
    for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        join_path(buf, sizeof buf, path, suffix[i]);
        if (unlink(buf) != 0 && errno != ENOENT) die("unlink(%s): %s", buf, strerror(errno));
    }
}

/* The SQLite cases, on UUID ids: synchronous=full and normal, one and two
 * threads (one connection each), each beside raw sqlite3 doing the same. */
void bench_sqlite(const config *cfg, FILE *out, const char *dir, const idset *ids)
{
    static const int threads[] = {1, 2};
    static const char *const syncs[] = {"full", "normal"};
    char acemq_path[4096], raw_path[4096], url[4200], name[64];
    join_path(acemq_path, sizeof acemq_path, dir, "/idem.db");
    join_path(raw_path, sizeof raw_path, dir, "/raw.db");
    int header = 0;
    for (size_t s = 0; s < 2; s++) {
        for (size_t k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "sqlite/%s/%dt", syncs[s], threads[k]);
            if (!bench_wanted(cfg->filter, name)) continue;
            int len = snprintf(url, sizeof url, "sqlite:%s?synchronous=%s", acemq_path, syncs[s]);
            if (len < 0 || (size_t)len >= sizeof url) die("path too long: %s", acemq_path);
            acemq_idem_options o;
            acemq_idem_options_init(&o);
            o.synchronous = s == 0 ? ACEMQ_SYNC_FULL : ACEMQ_SYNC_NORMAL;
            double a[16], p[16], share, a_share = 1, p_share = 1;
            for (int rep = 0; rep < cfg->reps; rep++) {
                /* Alternate which side goes first, so a machine that slows
                 * down (or warms up) during the case does not favour one. */
                for (int side = 0; side < 2; side++) {
                    const char *path = (side ^ rep) & 1 ? acemq_path : raw_path;
                    remove_db(path);
                    if (path == acemq_path) {
                        a[rep] = bench_acemq_run(bench_acemq_pairs, url, &o, threads[k], 0, ids,
                                                 cfg->sql_ids, cfg->seconds, &share);
                        if (share < a_share) a_share = share;
                    } else {
                        p[rep] = raw_run(raw_path, s == 0, threads[k], ids, cfg->sql_ids,
                                         cfg->seconds, &share);
                        if (share < p_share) p_share = share;
                    }
                    remove_db(path);
                }
            }
            bench_result r = {"idem",
                              name,
                              median(a, cfg->reps),
                              "pairs/s",
                              "raw sqlite3",
                              median(p, cfg->reps),
                              0,
                              ">= 0.5 x peer",
                              0};
            r.ratio = r.value / r.peer_value;
            r.target_met = r.value >= SQLITE_TARGET * r.peer_value;
            if (!header) bench_header();
            header = 1;
            bench_report(out, &r);
            if (threads[k] > 1)
                printf("  %s: least-served thread got %.1f%% of the pairs (acemq), %.1f%% (peer); "
                       "worst of %d run%s\n",
                       name, 100 * a_share, 100 * p_share, cfg->reps, cfg->reps == 1 ? "" : "s");
        }
    }
}
