/* bench_idem.c — claim+confirm pairs per second for every idempotency backend,
 * each beside a peer that does the same writes on the same ids in the same run,
 * so the ratio still means something on a noisy machine.
 *
 * Peers: for the memory store, a real Redis on loopback doing SET NX / SET per id
 * through hiredis (what people reach for instead of an in-process store); for the
 * SQLite store, raw sqlite3 calls with the same table, journal mode, synchronous
 * setting and thread count. A missed target is printed, never a failure: benchmarks
 * measure, tests assert. The exit status is non-zero only when something broke.
 */
#include "bench_common.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>
#ifdef ACEMQ_BENCH_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

#include "acemq/idem.h"

#ifndef ACEMQ_SOURCE_DIR
#define ACEMQ_SOURCE_DIR "."
#endif

#define MAX_THREADS 2
#define ID_STRIDE 16 /* "order-%08d" is 14 bytes; the rest keeps ids aligned */
#define ID_LEN 14
#define MAX_IDS 100000000u /* %08d stays 8 digits below this */
#define MEMORY_TARGET 5e6  /* pairs/s, one thread */
#define SQLITE_TARGET 0.5  /* acemq / raw */
/* Redis answers one request per round trip (~20-50k/s on loopback), so its runs
 * are sized by time; the cap only bounds the keys we delete around a run. */
#define REDIS_MAX_IDS 1000000u
#define LEASE_MS 30000
#define RETENTION_MS 604800000LL

typedef struct config {
    int quick;
    const char *out_path;
    const char *dir; /* NULL: a fresh mkdtemp under $TMPDIR or /tmp */
    const char *filter;
    size_t mem_ids; /* ids per memory run */
    size_t sql_ids; /* ids available to a SQLite run */
    double seconds; /* how long a time-sized run lasts */
    int reps;       /* runs per measurement; the median is reported */
    int redis_port;
    int no_redis;
    size_t ids_override; /* --ids: memory ids per run */
} config;

static char *g_ids; /* ids[i] at g_ids + i * ID_STRIDE */

static const char *id_at(size_t i)
{
    return g_ids + i * ID_STRIDE;
}

/* The raw peer reads wall-clock time per write, as acemq's system clock does. */
static int64_t wall_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) die("clock_gettime: %s", strerror(errno));
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int make_ids(size_t n)
{
    if (n >= MAX_IDS) return -1;
    g_ids = malloc(n * ID_STRIDE);
    if (!g_ids) return -1;
    for (size_t i = 0; i < n; i++) {
        char *p = g_ids + i * ID_STRIDE;
        int len = snprintf(p, ID_STRIDE, "order-%08zu", i);
        if (len != ID_LEN) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- threads */

/* One thread's share of a run: ids [lo, hi), stopping early at the deadline
 * when the run is sized by time. */
typedef struct worker {
    int (*run)(struct worker *w);
    void *ctx;
    size_t lo, hi;
    double seconds; /* 0: no deadline, do the whole range */
    double deadline;
    double t_start, t_end; /* each thread times itself: see run_workers */
    size_t done;
    pthread_barrier_t *gate;
    char err[512];
} worker;

static int worker_fail(worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int worker_fail(worker *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return -1;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    int rc = pthread_barrier_wait(w->gate);
    if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) {
        worker_fail(w, "pthread_barrier_wait: %s", strerror(rc));
        return NULL;
    }
    w->t_start = mono_now();
    w->deadline = w->seconds > 0 ? w->t_start + w->seconds : 0;
    (void)w->run(w);
    w->t_end = mono_now();
    return NULL;
}

/* Runs the workers together and returns the time from the first one starting
 * to the last one finishing. The threads take the times themselves: the main
 * thread may be woken from the barrier long after the workers were (on two
 * cores a short run can be over by then). Per-thread setup (connections,
 * statements) is done by the caller beforehand and is not timed. */
static double run_workers(worker *ws, int n)
{
    pthread_t tids[MAX_THREADS];
    pthread_barrier_t gate;
    int rc = pthread_barrier_init(&gate, NULL, (unsigned)n + 1);
    if (rc != 0) die("pthread_barrier_init: %s", strerror(rc));
    for (int t = 0; t < n; t++) {
        ws[t].gate = &gate;
        ws[t].done = 0;
        ws[t].err[0] = '\0';
        rc = pthread_create(&tids[t], NULL, worker_main, &ws[t]);
        if (rc != 0) die("pthread_create: %s", strerror(rc));
    }
    rc = pthread_barrier_wait(&gate);
    if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
        die("pthread_barrier_wait: %s", strerror(rc));
    for (int t = 0; t < n; t++) {
        rc = pthread_join(tids[t], NULL);
        if (rc != 0) die("pthread_join: %s", strerror(rc));
    }
    double first = ws[0].t_start, last = ws[0].t_end;
    for (int t = 1; t < n; t++) {
        if (ws[t].t_start < first) first = ws[t].t_start;
        if (ws[t].t_end > last) last = ws[t].t_end;
    }
    double elapsed = last - first;
    rc = pthread_barrier_destroy(&gate);
    if (rc != 0) die("pthread_barrier_destroy: %s", strerror(rc));
    for (int t = 0; t < n; t++)
        if (ws[t].err[0]) die("thread %d: %s", t, ws[t].err);
    return elapsed;
}

/* Splits [0, n) into contiguous shares, one per thread. */
static void split(worker *ws, int threads, size_t n, double seconds)
{
    for (int t = 0; t < threads; t++) {
        ws[t].lo = n * (size_t)t / (size_t)threads;
        ws[t].hi = n * (size_t)(t + 1) / (size_t)threads;
        ws[t].seconds = seconds;
    }
}

static size_t total_done(const worker *ws, int n)
{
    size_t sum = 0;
    for (int t = 0; t < n; t++)
        sum += ws[t].done;
    return sum;
}

/* The least-served thread's part of the pairs: in a run sized by time, a
 * figure can look good because one connection kept the write lock while the
 * other starved, and this says so. */
static double least_share(const worker *ws, int n)
{
    size_t done = total_done(ws, n), least = done;
    for (int t = 0; t < n; t++)
        if (ws[t].done < least) least = ws[t].done;
    return done ? (double)least / (double)done : 0;
}

/* ------------------------------------------------------------------ acemq */

static int acemq_pairs(worker *w)
{
    acemq_idem *h = w->ctx;
    for (size_t i = w->lo; i < w->hi; i++) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        acemq_claim c;
        int rc = acemq_idem_try_claim(h, id_at(i), ID_LEN, NULL, &c);
        if (rc != ACEMQ_CLAIMED)
            return worker_fail(w, "try_claim(%.*s) = %s: %s", ID_LEN, id_at(i),
                               acemq_claim_status_name(rc), acemq_idem_errmsg(h));
        rc = acemq_idem_confirm(h, id_at(i), ID_LEN, c.token);
        if (rc != 0)
            return worker_fail(w, "confirm(%.*s) = %s: %s", ID_LEN, id_at(i), acemq_err_name(rc),
                               acemq_idem_errmsg(h));
        w->done++;
    }
    return 0;
}

/* Pairs in batches: CLAIM_BATCH claims in one try_claim_many call, as a consumer
 * holding a prefetch window of deliveries would make, then CLAIM_BATCH confirms,
 * one call each, as the work on each delivery finishes. */
#define CLAIM_BATCH 16

static int acemq_batch_pairs(worker *w)
{
    acemq_idem *h = w->ctx;
    acemq_idem_key keys[CLAIM_BATCH];
    acemq_claim c[CLAIM_BATCH];
    int st[CLAIM_BATCH];
    for (size_t lo = w->lo; lo < w->hi; lo += CLAIM_BATCH) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        size_t k = w->hi - lo < CLAIM_BATCH ? w->hi - lo : CLAIM_BATCH;
        for (size_t j = 0; j < k; j++) {
            keys[j].id = id_at(lo + j);
            keys[j].id_len = ID_LEN;
        }
        int rc = acemq_idem_try_claim_many(h, k, keys, NULL, c, st);
        if (rc != (int)k) {
            for (size_t j = 0; j < k; j++)
                if (st[j] != ACEMQ_CLAIMED)
                    return worker_fail(w, "try_claim_many: %.*s = %s: %s", ID_LEN, id_at(lo + j),
                                       acemq_claim_status_name(st[j]), acemq_idem_errmsg(h));
            return worker_fail(w, "try_claim_many = %s: %s", acemq_claim_status_name(rc),
                               acemq_idem_errmsg(h));
        }
        for (size_t j = 0; j < k; j++) {
            rc = acemq_idem_confirm(h, id_at(lo + j), ID_LEN, c[j].token);
            if (rc != 0)
                return worker_fail(w, "confirm(%.*s) = %s: %s", ID_LEN, id_at(lo + j),
                                   acemq_err_name(rc), acemq_idem_errmsg(h));
        }
        w->done += k;
    }
    return 0;
}

static void open_idem(acemq_idem **h, const char *url, const acemq_idem_options *o)
{
    int rc = acemq_idem_open(h, url, o);
    if (rc != 0) die("acemq_idem_open(%s): %s", url, acemq_strerror(rc));
}

/* The store must have counted exactly the pairs we timed, or the figure
 * measured something other than claim+confirm. */
static void check_stats(acemq_idem **hs, int nh, size_t done, uint64_t claimed0, uint64_t confirms0)
{
    uint64_t claimed = 0, confirms = 0;
    for (int i = 0; i < nh; i++) {
        acemq_idem_stats st;
        int rc = acemq_idem_stats_get(hs[i], &st);
        if (rc != 0) die("acemq_idem_stats_get: %s", acemq_strerror(rc));
        claimed += st.claimed;
        confirms += st.confirms;
    }
    claimed -= claimed0;
    confirms -= confirms0;
    if (claimed != done || confirms != done)
        die("store counted %llu claims and %llu confirms for %zu timed pairs",
            (unsigned long long)claimed, (unsigned long long)confirms, done);
}

/* Claims ids [0, n), then releases them all, before the clock starts: the
 * store's tables have then grown to hold n ids and its records (now on its
 * free lists) are faulted in, and the timed run claims the same ids anew, as
 * new ids, since a released id is forgotten. Returns the claims it made, for
 * check_stats. */
static uint64_t warm_up(acemq_idem *h, size_t n)
{
    uint64_t *tokens = malloc(n * sizeof *tokens);
    if (!tokens) die("out of memory");
    for (size_t i = 0; i < n; i++) {
        acemq_claim c;
        int rc = acemq_idem_try_claim(h, id_at(i), ID_LEN, NULL, &c);
        if (rc != ACEMQ_CLAIMED) die("warm-up try_claim: %s", acemq_claim_status_name(rc));
        tokens[i] = c.token;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = acemq_idem_release(h, id_at(i), ID_LEN, tokens[i]);
        if (rc != 0) die("warm-up release: %s", acemq_err_name(rc));
    }
    free(tokens);
    return n;
}

static double acemq_run_with(int (*run)(worker *), int warm, const char *url,
                             const acemq_idem_options *o, int threads, int shared, size_t n,
                             double seconds, double *share)
{
    acemq_idem *hs[MAX_THREADS] = {NULL};
    int nh = shared ? 1 : threads;
    for (int i = 0; i < nh; i++)
        open_idem(&hs[i], url, o);
    uint64_t claimed0 = warm && nh == 1 ? warm_up(hs[0], n) : 0;
    worker ws[MAX_THREADS];
    memset(ws, 0, sizeof ws);
    split(ws, threads, n, seconds);
    for (int t = 0; t < threads; t++) {
        ws[t].run = run;
        ws[t].ctx = hs[shared ? 0 : t];
    }
    double elapsed = run_workers(ws, threads);
    size_t done = total_done(ws, threads);
    *share = least_share(ws, threads);
    check_stats(hs, nh, done, claimed0, 0);
    for (int i = 0; i < nh; i++)
        acemq_idem_close(hs[i]);
    if (done == 0) die("%s: no pair completed in %.2f s", url, elapsed);
    return (double)done / elapsed;
}

static double acemq_run(const char *url, const acemq_idem_options *o, int threads, int shared,
                        size_t n, double seconds, double *share)
{
    return acemq_run_with(acemq_pairs, 0, url, o, threads, shared, n, seconds, share);
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
    for (size_t i = w->lo; i < w->hi; i++) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        uint64_t token = c->next_token++;
        if (sqlite3_bind_blob(c->claim, 1, id_at(i), ID_LEN, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(c->claim, 2, (sqlite3_int64)token) != SQLITE_OK ||
            sqlite3_bind_int64(c->claim, 3, wall_ms() + LEASE_MS) != SQLITE_OK)
            return worker_fail(w, "bind(claim): %s", sqlite3_errmsg(c->db));
        int n = raw_step(w, c->db, c->claim, "claim");
        if (n < 0) return -1;
        if (n != 1) return worker_fail(w, "claim(%.*s) inserted %d rows", ID_LEN, id_at(i), n);
        if (sqlite3_bind_int64(c->confirm, 1, wall_ms() + RETENTION_MS) != SQLITE_OK ||
            sqlite3_bind_blob(c->confirm, 2, id_at(i), ID_LEN, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(c->confirm, 3, (sqlite3_int64)token) != SQLITE_OK)
            return worker_fail(w, "bind(confirm): %s", sqlite3_errmsg(c->db));
        n = raw_step(w, c->db, c->confirm, "confirm");
        if (n < 0) return -1;
        if (n != 1) return worker_fail(w, "confirm(%.*s) updated %d rows", ID_LEN, id_at(i), n);
        w->done++;
    }
    return 0;
}

static double raw_run(const char *path, int sync_full, int threads, size_t n, double seconds,
                      double *share)
{
    raw_conn conns[MAX_THREADS];
    worker ws[MAX_THREADS];
    memset(ws, 0, sizeof ws);
    split(ws, threads, n, seconds);
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

static void join_path(char *buf, size_t cap, const char *a, const char *b)
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

/* ------------------------------------------------------------------ redis */

typedef struct redis_peer {
    int available;
    int started; /* by us, so we stop it again */
    char note[256];
#ifdef ACEMQ_BENCH_HAVE_HIREDIS
    redisContext *rc;
#endif
} redis_peer;

#ifdef ACEMQ_BENCH_HAVE_HIREDIS
static int in_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    char buf[4096];
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(buf, sizeof buf, "%.*s/%s", (int)len, path, prog);
        if (access(buf, X_OK) == 0) return 1;
        path += len + (path[len] == ':');
    }
    return 0;
}

static redisContext *redis_connect(int port)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c) return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisReply *r = redisCommand(c, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r) freeReplyObject(r);
    if (!ok) {
        redisFree(c);
        return NULL;
    }
    return c;
}

static int services(const char *action)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s/scripts/services.sh' %s redis", ACEMQ_SOURCE_DIR, action);
    fflush(stdout);
    int st = system(cmd);
    return st == -1 ? -1 : (st >> 8) & 0xff;
}

static void redis_prepare(redis_peer *p, int port)
{
    memset(p, 0, sizeof *p);
    p->rc = redis_connect(port);
    if (!p->rc) {
        if (!in_path("redis-server")) {
            snprintf(p->note, sizeof p->note,
                     "redis-server is not installed (scripts/deps.sh installs it)");
            return;
        }
        int st = services("start");
        if (st != 0) {
            snprintf(p->note, sizeof p->note, "scripts/services.sh start redis exited %d", st);
            return;
        }
        p->started = 1;
        p->rc = redis_connect(port);
        if (!p->rc) {
            snprintf(p->note, sizeof p->note, "no PONG from 127.0.0.1:%d after starting it", port);
            return;
        }
    }
    p->available = 1;
}

static void redis_finish(redis_peer *p)
{
    if (p->rc) redisFree(p->rc);
    p->rc = NULL;
    if (p->started && services("stop") != 0)
        fprintf(stderr, "bench_idem: scripts/services.sh stop redis failed\n");
}

/* Deletes ids [0, n) in batches, so a run starts on keys nobody holds and the
 * bench leaves nothing behind in a server it may not own. */
static void redis_del(redisContext *c, size_t n)
{
    enum { BATCH = 1000 };
    const char *argv[BATCH + 1];
    size_t lens[BATCH + 1];
    argv[0] = "DEL";
    lens[0] = 3;
    for (size_t lo = 0; lo < n; lo += BATCH) {
        size_t k = n - lo < BATCH ? n - lo : BATCH;
        for (size_t j = 0; j < k; j++) {
            argv[j + 1] = id_at(lo + j);
            lens[j + 1] = ID_LEN;
        }
        redisReply *r = redisCommandArgv(c, (int)k + 1, argv, lens);
        if (!r) die("redis DEL: %s", c->errstr);
        int ok = r->type == REDIS_REPLY_INTEGER;
        freeReplyObject(r);
        if (!ok) die("redis DEL: unexpected reply");
    }
}

static int redis_ok(worker *w, redisContext *c, redisReply *r, const char *what, size_t i)
{
    if (!r) return worker_fail(w, "redis %s(%.*s): %s", what, ID_LEN, id_at(i), c->errstr);
    int ok = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (!ok) {
        const char *why = r->str ? r->str : "";
        if (r->type == REDIS_REPLY_NIL) why = "key already held";
        worker_fail(w, "redis %s(%.*s): reply type %d (%s)", what, ID_LEN, id_at(i), r->type, why);
    }
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* The usual hand-rolled Redis idempotency check: claim with a leased SET NX,
 * mark confirmed with a long expiry. Cheaper than acemq's contract (no fencing
 * token is checked on confirm), which favours the peer. */
static int redis_pairs(worker *w)
{
    redisContext *c = w->ctx;
    for (size_t i = w->lo; i < w->hi; i++) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        redisReply *r = redisCommand(c, "SET %b claimed NX PX 30000", id_at(i), (size_t)ID_LEN);
        if (redis_ok(w, c, r, "SET NX", i) != 0) return -1;
        r = redisCommand(c, "SET %b confirmed PX 604800000", id_at(i), (size_t)ID_LEN);
        if (redis_ok(w, c, r, "SET", i) != 0) return -1;
        w->done++;
    }
    return 0;
}

/* The batch case's peer: the same commands, pipelined as the batch is
 * claimed, CLAIM_BATCH SET NX in one round trip, then CLAIM_BATCH SET in
 * another. */
static int redis_pipelined_pairs(worker *w)
{
    redisContext *c = w->ctx;
    for (size_t lo = w->lo; lo < w->hi; lo += CLAIM_BATCH) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        size_t k = w->hi - lo < CLAIM_BATCH ? w->hi - lo : CLAIM_BATCH;
        for (int step = 0; step < 2; step++) {
            for (size_t j = 0; j < k; j++) {
                int rc = step == 0 ? redisAppendCommand(c, "SET %b claimed NX PX 30000",
                                                        id_at(lo + j), (size_t)ID_LEN)
                                   : redisAppendCommand(c, "SET %b confirmed PX 604800000",
                                                        id_at(lo + j), (size_t)ID_LEN);
                if (rc != REDIS_OK) return worker_fail(w, "redis append: %s", c->errstr);
            }
            for (size_t j = 0; j < k; j++) {
                void *r = NULL;
                if (redisGetReply(c, &r) != REDIS_OK) r = NULL;
                if (redis_ok(w, c, r, step == 0 ? "SET NX" : "SET", lo + j) != 0) return -1;
            }
        }
        w->done += k;
    }
    return 0;
}

static double redis_run(redis_peer *p, int pipelined, size_t n, double seconds)
{
    redis_del(p->rc, n);
    worker w;
    memset(&w, 0, sizeof w);
    split(&w, 1, n, seconds);
    w.run = pipelined ? redis_pipelined_pairs : redis_pairs;
    w.ctx = p->rc;
    double elapsed = run_workers(&w, 1);
    redis_del(p->rc, w.done);
    if (w.done == 0) die("redis: no pair completed in %.2f s", elapsed);
    return (double)w.done / elapsed;
}
#else
static void redis_prepare(redis_peer *p, int port)
{
    (void)port;
    memset(p, 0, sizeof *p);
    snprintf(p->note, sizeof p->note, "bench_idem was built without hiredis");
}

static void redis_finish(redis_peer *p)
{
    (void)p;
}

static double redis_run(redis_peer *p, int pipelined, size_t n, double seconds)
{
    (void)p;
    (void)pipelined;
    (void)n;
    (void)seconds;
    return 0;
}
#endif

/* ----------------------------------------------------------------- output */

typedef struct result {
    char name[64]; /* "memory/1t", "sqlite/full/2t" */
    const char *backend;
    int threads;
    const char *sync; /* "-" for memory */
    double value;
    const char *peer;
    double peer_value;  /* 0: peer not measured */
    const char *target; /* human text, "-" when none */
    int target_met;     /* 1 yes, 0 no, -1 no target or no peer */
} result;

static void print_header(void)
{
    printf("\n%-25s %-7s %3s %-6s %14s  %-26s %14s %9s  %-16s %s\n", "case", "backend", "thr",
           "sync", "acemq pairs/s", "peer", "peer pairs/s", "ratio", "target", "met");
}

static void fmt_rate(char *buf, size_t cap, double v)
{
    if (v <= 0) {
        snprintf(buf, cap, "-");
        return;
    }
    /* Thousands separators by hand: the "'" printf flag is not C11. */
    unsigned long long x = (unsigned long long)(v + 0.5);
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%llu", x);
    size_t o = 0;
    for (int i = 0; i < n && o + 2 < cap; i++) {
        if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
}

static const char *met_text(int met, const char *yes, const char *no, const char *none)
{
    if (met < 0) return none;
    return met ? yes : no;
}

static void report(FILE *out, const result *r)
{
    char v[32], pv[32], ratio[32];
    fmt_rate(v, sizeof v, r->value);
    fmt_rate(pv, sizeof pv, r->peer_value);
    if (r->peer_value > 0)
        snprintf(ratio, sizeof ratio, "%.3f", r->value / r->peer_value);
    else
        snprintf(ratio, sizeof ratio, "-");
    printf("%-25s %-7s %3d %-6s %14s  %-26s %14s %9s  %-16s %s\n", r->name, r->backend, r->threads,
           r->sync, v, r->peer, pv, ratio, r->target, met_text(r->target_met, "yes", "NO", "-"));
    fflush(stdout);

    if (r->peer_value > 0)
        fprintf(out,
                "{\"bench\":\"idem\",\"case\":\"%s\",\"value\":%.0f,\"unit\":\"pairs/s\","
                "\"peer\":\"%s\",\"peer_value\":%.0f,\"ratio\":%.4f,\"target\":\"%s\","
                "\"target_met\":%s}\n",
                r->name, r->value, r->peer, r->peer_value, r->value / r->peer_value, r->target,
                met_text(r->target_met, "true", "false", "null"));
    else
        fprintf(out,
                "{\"bench\":\"idem\",\"case\":\"%s\",\"value\":%.0f,\"unit\":\"pairs/s\","
                "\"peer\":\"%s\",\"peer_value\":null,\"ratio\":null,\"target\":\"%s\","
                "\"target_met\":%s}\n",
                r->name, r->value, r->peer, r->target,
                met_text(r->target_met, "true", "false", "null"));
    if (fflush(out) != 0) die("writing results: %s", strerror(errno));
}

/* ------------------------------------------------------------------ cases */

/* The memory store's floor on a cold table: one dependent random read in a
 * region as large as the store's index. A claim of a new id must make at
 * least one such read, so no hash table on this machine claims cold ids
 * faster than 1 / this. Printed beside the figures so they can be read. */
static double random_read_ns(size_t bytes)
{
    size_t n = bytes / sizeof(size_t);
    size_t *next = malloc(n * sizeof *next);
    if (!next) die("out of memory");
    /* Sattolo's shuffle: one cycle through every cell, so each read depends
     * on the last and the prefetcher cannot guess. */
    for (size_t i = 0; i < n; i++)
        next[i] = i;
    uint64_t x = 88172645463325252ULL;
    for (size_t i = n - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = (size_t)(x % i), t = next[i];
        next[i] = next[j];
        next[j] = t;
    }
    enum { READS = 2000000 };
    size_t at = 0;
    double t0 = mono_now();
    for (int k = 0; k < READS; k++)
        at = next[at];
    double ns = (mono_now() - t0) * 1e9 / READS;
    free(next);
    return at == (size_t)-1 ? 0 : ns; /* use `at` so the loop stays */
}

/* The memory cases. All claim and confirm the same cfg->mem_ids new ids, on
 * a store with room for every id (so nothing is evicted and the figure is
 * the claim+confirm path alone) unless the case says otherwise:
 *  - batch16: claimed CLAIM_BATCH at a time through try_claim_many (which
 *    prefetches the slots of a batch before it probes any), each batch then
 *    confirmed one id at a time;
 *  - warm: on a store that claimed and released those ids before the clock
 *    started, so its tables have grown and its memory is faulted in: the
 *    code without the cost of growing a fresh store (no target: the target
 *    is the fresh store's);
 *  - presize: a fresh store opened with presize=1, its tables sized for
 *    max_entries at open, so that it never rehashes, and they and its
 *    records faulted in there, before the clock starts;
 *  - window4k: a full store in steady state, 4,096 entries (a pre-filter's
 *    window), every claim evicting the oldest confirmation; slots and
 *    entries stay within one core's L2 (512 KiB here), so this is the path without
 *    the cold read that memory/1t pays for every new id. */
typedef struct memory_case {
    const char *name;
    int threads, batch, warm, presize;
    size_t max_entries; /* 0: room for every id */
    int has_target;
} memory_case;

static const memory_case memory_cases[] = {
    {"memory/1t", 1, 0, 0, 0, 0, 1},
    {"memory/warm/1t", 1, 0, 1, 0, 0, 0},
    {"memory/2t", 2, 0, 0, 0, 0, 0},
    {"memory/batch16/1t", 1, 1, 0, 0, 0, 1},
    {"memory/batch16/warm/1t", 1, 1, 1, 0, 0, 0},
    {"memory/presize/1t", 1, 0, 0, 1, 0, 1},
    {"memory/presize/batch16/1t", 1, 1, 0, 1, 0, 1},
    {"memory/window4k/1t", 1, 0, 0, 0, 4096, 1},
};
#define MEMORY_CASES (sizeof memory_cases / sizeof memory_cases[0])

/* The lowest and highest of a case's runs, under its median: on a shared
 * virtual machine one run of the memory cases can be half again as fast
 * as the next (docs/performance.md, "Figures"), and a median alone hides
 * how far they strayed. */
static void print_spread(const char *name, const double *v, int n)
{
    double lo = v[0], hi = v[0];
    for (int i = 1; i < n; i++) {
        if (v[i] < lo) lo = v[i];
        if (v[i] > hi) hi = v[i];
    }
    char a[32], b[32];
    fmt_rate(a, sizeof a, lo);
    fmt_rate(b, sizeof b, hi);
    printf("  %s: its %d runs ranged from %s to %s pairs/s\n", name, n, a, b);
}

static void bench_memory(const config *cfg, FILE *out)
{
    int any = 0, any_batched = 0;
    for (size_t k = 0; k < MEMORY_CASES; k++) {
        int w = bench_wanted(cfg->filter, memory_cases[k].name);
        any |= w;
        any_batched |= w && memory_cases[k].batch;
    }
    if (!any) return;
    printf("memory: a dependent random read over 32 MiB costs %.0f ns here; over 1 MiB %.0f ns\n",
           random_read_ns((size_t)32 << 20), random_read_ns((size_t)1 << 20));

    /* Redis is measured once: its client is one thread either way, and the
     * same figure stands beside both memory cases. */
    redis_peer peer;
    if (cfg->no_redis) {
        memset(&peer, 0, sizeof peer);
        snprintf(peer.note, sizeof peer.note, "--no-redis was given");
    } else {
        redis_prepare(&peer, cfg->redis_port);
    }
    double redis = 0, redis_pipelined = 0;
    if (peer.available) {
        size_t n = cfg->mem_ids < REDIS_MAX_IDS ? cfg->mem_ids : REDIS_MAX_IDS;
        double v[16];
        for (int r = 0; r < cfg->reps; r++)
            v[r] = redis_run(&peer, 0, n, cfg->seconds);
        redis = median(v, cfg->reps);
        if (any_batched) {
            for (int r = 0; r < cfg->reps; r++)
                v[r] = redis_run(&peer, 1, n, cfg->seconds);
            redis_pipelined = median(v, cfg->reps);
        }
    } else {
        printf("note: Redis peer skipped: %s\n", peer.note);
    }
    redis_finish(&peer);

    print_header();
    for (size_t k = 0; k < MEMORY_CASES; k++) {
        const memory_case *x = &memory_cases[k];
        if (!bench_wanted(cfg->filter, x->name)) continue;
        result r;
        memset(&r, 0, sizeof r);
        snprintf(r.name, sizeof r.name, "%s", x->name);
        acemq_idem_options o;
        acemq_idem_options_init(&o);
        o.max_entries = x->max_entries ? x->max_entries : cfg->mem_ids + cfg->mem_ids / 4 + 16;
        double v[16], share;
        for (int rep = 0; rep < cfg->reps; rep++)
            v[rep] = acemq_run_with(x->batch ? acemq_batch_pairs : acemq_pairs, x->warm,
                                    x->presize ? "memory:?presize=1" : "memory:", &o, x->threads, 1,
                                    cfg->mem_ids, 0, &share);
        r.backend = "memory";
        r.threads = x->threads;
        r.sync = "-";
        r.value = median(v, cfg->reps);
        if (!peer.available)
            r.peer = "redis SET NX (skipped)";
        else
            r.peer = x->batch ? "redis SET NX x16 pipelined" : "redis SET NX";
        r.peer_value = x->batch ? redis_pipelined : redis;
        r.target = x->has_target ? ">= 5,000,000/s" : "-";
        r.target_met = x->has_target ? r.value >= MEMORY_TARGET : -1;
        report(out, &r);
        if (cfg->reps > 1) print_spread(x->name, v, cfg->reps);
    }
}

static void bench_sqlite(const config *cfg, FILE *out, const char *dir)
{
    static const int threads[] = {1, 2};
    static const char *const syncs[] = {"full", "normal"};
    char acemq_path[4096], raw_path[4096], url[4200];
    join_path(acemq_path, sizeof acemq_path, dir, "/idem.db");
    join_path(raw_path, sizeof raw_path, dir, "/raw.db");
    int header = 0;
    for (size_t s = 0; s < 2; s++) {
        for (size_t k = 0; k < 2; k++) {
            result r;
            memset(&r, 0, sizeof r);
            snprintf(r.name, sizeof r.name, "sqlite/%s/%dt", syncs[s], threads[k]);
            if (!bench_wanted(cfg->filter, r.name)) continue;
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
                    if ((side ^ rep) & 1) {
                        remove_db(acemq_path);
                        a[rep] =
                            acemq_run(url, &o, threads[k], 0, cfg->sql_ids, cfg->seconds, &share);
                        if (share < a_share) a_share = share;
                        remove_db(acemq_path);
                    } else {
                        remove_db(raw_path);
                        p[rep] = raw_run(raw_path, s == 0, threads[k], cfg->sql_ids, cfg->seconds,
                                         &share);
                        if (share < p_share) p_share = share;
                        remove_db(raw_path);
                    }
                }
            }
            r.backend = "sqlite";
            r.threads = threads[k];
            r.sync = syncs[s];
            r.value = median(a, cfg->reps);
            r.peer = "raw sqlite3";
            r.peer_value = median(p, cfg->reps);
            r.target = ">= 0.5 x peer";
            r.target_met = r.value >= SQLITE_TARGET * r.peer_value;
            if (!header) print_header();
            header = 1;
            report(out, &r);
            if (threads[k] > 1)
                printf("  %s: least-served thread got %.1f%% of the pairs (acemq), %.1f%% (peer); "
                       "worst of %d run%s\n",
                       r.name, 100 * a_share, 100 * p_share, cfg->reps, cfg->reps == 1 ? "" : "s");
        }
    }
}

/* ------------------------------------------------------------------- main */

/* The 1-minute load average, printed with the figures: on a shared machine it
 * says how far to trust them. "?" where /proc is not there. */
static void read_loadavg(char *buf, size_t cap)
{
    snprintf(buf, cap, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return;
    double one;
    if (fscanf(f, "%lf", &one) == 1) snprintf(buf, cap, "%.2f", one);
    (void)fclose(f); /* read-only: nothing to lose */
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_idem [--quick] [--ids N] [--no-redis] [--out FILE] [--dir DIR]\n"
               "                  [--filter TEXT]\n"
               "  --quick        a short smoke run (one repetition, short runs)\n"
               "  --ids N        ids per memory run (default 1,000,000; --quick 100,000)\n"
               "  --no-redis     skip the Redis peer (memory cases then have no peer figure)\n"
               "  --out FILE     append JSON lines here (default bench/results/latest.jsonl)\n"
               "  --dir DIR      where the SQLite files go (default a fresh dir in /tmp)\n"
               "  --filter TEXT  only the cases whose name contains TEXT (e.g. sqlite/normal)\n"
               "environment: ACEMQ_REDIS_PORT (default 6390)\n");
}

int main(int argc, char **argv)
{
    bench_name = "bench_idem";
    config cfg = {0};
    cfg.out_path = ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            cfg.quick = 1;
        } else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(argv[++i], &end, 10);
            if (errno || *end || n == 0 || n >= MAX_IDS) die("--ids wants 1..%u", MAX_IDS - 1);
            cfg.ids_override = (size_t)n;
        } else if (strcmp(argv[i], "--no-redis") == 0) {
            cfg.no_redis = 1;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            cfg.out_path = argv[++i];
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            cfg.dir = argv[++i];
        } else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
            cfg.filter = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    /* Full: five runs of each side for a median, because one run in three
     * landing on a neighbour's fsync or compile is common on a shared two-core
     * machine; 1.5 s per time-sized run keeps the whole bench near 90 s. */
    cfg.mem_ids = cfg.ids_override ? cfg.ids_override : cfg.quick ? 100000 : 1000000;
    cfg.sql_ids = cfg.quick ? 200000 : 2000000;
    cfg.seconds = cfg.quick ? 0.3 : 1.5;
    cfg.reps = cfg.quick ? 1 : 5;
    const char *port = getenv("ACEMQ_REDIS_PORT");
    cfg.redis_port = port && *port ? atoi(port) : 6390;
    if (cfg.redis_port <= 0 || cfg.redis_port > 65535)
        die("ACEMQ_REDIS_PORT=%s is not a port", port);

    /* A Redis that goes away mid-run must fail a write, not kill us. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("signal(SIGPIPE): %s", strerror(errno));

    size_t nids = cfg.mem_ids > cfg.sql_ids ? cfg.mem_ids : cfg.sql_ids;
    if (make_ids(nids) != 0) die("cannot make %zu ids", nids);

    char tmpl[4096];
    const char *dir = cfg.dir;
    if (!dir) {
        const char *tmp = getenv("TMPDIR");
        join_path(tmpl, sizeof tmpl, tmp && *tmp ? tmp : "/tmp", "/acemq-bench-XXXXXX");
        if (!mkdtemp(tmpl)) die("mkdtemp(%s): %s", tmpl, strerror(errno));
        dir = tmpl;
    }

    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("%s: %s", cfg.out_path, strerror(errno));

    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char load[64];
    read_loadavg(load, sizeof load);
    printf("bench_idem: acemq %s, SQLite %s, %ld cpus, load %s, %s run; SQLite files in %s\n",
           acemq_version(), sqlite3_libversion(), cpus, load, cfg.quick ? "quick" : "full", dir);
    printf("memory: %zu ids per run; sqlite and redis: %.1f s per run; median of %d run%s\n",
           cfg.mem_ids, cfg.seconds, cfg.reps, cfg.reps == 1 ? "" : "s");
    fflush(stdout);

    double t0 = mono_now();
    bench_memory(&cfg, out);
    bench_sqlite(&cfg, out, dir);
    double took = mono_now() - t0;
    read_loadavg(load, sizeof load);

    if (fclose(out) != 0) die("closing %s: %s", cfg.out_path, strerror(errno));
    if (!cfg.dir && rmdir(dir) != 0) die("rmdir(%s): %s", dir, strerror(errno));
    free(g_ids);
    printf("\n%.1f s in all, load %s at the end; results appended to %s\n", took, load,
           cfg.out_path);
    return 0;
}
