/* bench_idem.c — claim+confirm pairs per second for every idempotency backend,
 * each beside a peer that does the same writes on the same ids in the same run,
 * so the ratio still means something on a noisy machine.
 *
 * Ids are what producers send: 36-byte UUID text (random, version 4), made
 * before the clock starts. The memory store's target (>= 5,000,000 pairs/s on
 * one thread) is judged on them; memory/short/1t runs the same path on 14-byte
 * ids ("order-00000042") beside it, without a target.
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
#include <stdint.h>
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
#define MAX_IDS 100000000u /* "order-%08zu" stays 14 bytes below this */
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
} config;

/* n ids of len bytes each, id i at buf + i * stride. */
typedef struct idset {
    char *buf;
    size_t n, len, stride;
} idset;

static const char *id_at(const idset *s, size_t i)
{
    return s->buf + i * s->stride;
}

static void idset_alloc(idset *s, size_t n, size_t len)
{
    s->n = n;
    s->len = len;
    s->stride = (len + 1 + 7) & ~(size_t)7; /* room for snprintf's NUL, aligned */
    s->buf = malloc(n * s->stride);
    if (!s->buf) die("out of memory for %zu ids", n);
}

/* splitmix64: fixed seed, so every run claims the same ids. */
static uint64_t next_random(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Random UUIDv4 text, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx". */
static void make_uuid_ids(idset *s, size_t n)
{
    idset_alloc(s, n, 36);
    uint64_t seed = 42;
    for (size_t i = 0; i < n; i++) {
        uint64_t hi = next_random(&seed), lo = next_random(&seed);
        hi = (hi & ~(uint64_t)0xf000) | 0x4000;
        lo = (lo & ~((uint64_t)3 << 62)) | ((uint64_t)2 << 62);
        int len =
            snprintf(s->buf + i * s->stride, s->stride, "%08x-%04x-%04x-%04x-%012llx",
                     (unsigned)(hi >> 32), (unsigned)(hi >> 16) & 0xffff, (unsigned)hi & 0xffff,
                     (unsigned)(lo >> 48), (unsigned long long)(lo & 0xffffffffffffu));
        if (len != 36) die("uuid text of %d bytes", len);
    }
}

static void make_short_ids(idset *s, size_t n)
{
    if (n >= MAX_IDS) die("too many short ids: %zu", n);
    idset_alloc(s, n, 14);
    for (size_t i = 0; i < n; i++)
        if (snprintf(s->buf + i * s->stride, s->stride, "order-%08zu", i) != 14)
            die("short id %zu", i);
}

/* The raw peer reads wall-clock time per write, as acemq's system clock does. */
static int64_t wall_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) die("clock_gettime: %s", strerror(errno));
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- threads */

/* One thread's share of a run: ids [lo, hi), stopping early at the deadline
 * when the run is sized by time. */
typedef struct worker {
    int (*run)(struct worker *w);
    void *ctx;
    const idset *ids;
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
    rc = pthread_barrier_destroy(&gate);
    if (rc != 0) die("pthread_barrier_destroy: %s", strerror(rc));
    for (int t = 0; t < n; t++)
        if (ws[t].err[0]) die("thread %d: %s", t, ws[t].err);
    return last - first;
}

/* Splits ids [0, n) into contiguous shares, one per thread. */
static void split(worker *ws, int threads, const idset *ids, size_t n, double seconds)
{
    for (int t = 0; t < threads; t++) {
        ws[t].ids = ids;
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
    const idset *ids = w->ids;
    int len = (int)ids->len;
    for (size_t i = w->lo; i < w->hi; i++) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        acemq_claim c;
        const char *id = id_at(ids, i);
        int rc = acemq_idem_try_claim(h, id, ids->len, NULL, &c);
        if (rc != ACEMQ_CLAIMED)
            return worker_fail(w, "try_claim(%.*s) = %s: %s", len, id, acemq_claim_status_name(rc),
                               acemq_idem_errmsg(h));
        rc = acemq_idem_confirm(h, id, ids->len, c.token);
        if (rc != 0)
            return worker_fail(w, "confirm(%.*s) = %s: %s", len, id, acemq_err_name(rc),
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
    const idset *ids = w->ids;
    int len = (int)ids->len;
    acemq_idem_key keys[CLAIM_BATCH];
    acemq_claim c[CLAIM_BATCH];
    int st[CLAIM_BATCH];
    for (size_t lo = w->lo; lo < w->hi; lo += CLAIM_BATCH) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        size_t k = w->hi - lo < CLAIM_BATCH ? w->hi - lo : CLAIM_BATCH;
        for (size_t j = 0; j < k; j++) {
            keys[j].id = id_at(ids, lo + j);
            keys[j].id_len = ids->len;
        }
        int rc = acemq_idem_try_claim_many(h, k, keys, NULL, c, st);
        if (rc != (int)k) {
            for (size_t j = 0; j < k; j++)
                if (st[j] != ACEMQ_CLAIMED)
                    return worker_fail(w, "try_claim_many: %.*s = %s: %s", len, id_at(ids, lo + j),
                                       acemq_claim_status_name(st[j]), acemq_idem_errmsg(h));
            return worker_fail(w, "try_claim_many = %s: %s", acemq_claim_status_name(rc),
                               acemq_idem_errmsg(h));
        }
        for (size_t j = 0; j < k; j++) {
            rc = acemq_idem_confirm(h, id_at(ids, lo + j), ids->len, c[j].token);
            if (rc != 0)
                return worker_fail(w, "confirm(%.*s) = %s: %s", len, id_at(ids, lo + j),
                                   acemq_err_name(rc), acemq_idem_errmsg(h));
        }
        w->done += k;
    }
    return 0;
}

/* The store must have counted exactly the pairs we timed, or the figure
 * measured something other than claim+confirm. */
static void check_stats(acemq_idem **hs, int nh, size_t done)
{
    uint64_t claimed = 0, confirms = 0;
    for (int i = 0; i < nh; i++) {
        acemq_idem_stats st;
        int rc = acemq_idem_stats_get(hs[i], &st);
        if (rc != 0) die("acemq_idem_stats_get: %s", acemq_strerror(rc));
        claimed += st.claimed;
        confirms += st.confirms;
    }
    if (claimed != done || confirms != done)
        die("store counted %llu claims and %llu confirms for %zu timed pairs",
            (unsigned long long)claimed, (unsigned long long)confirms, done);
}

/* One run of pairs on fresh handles: one handle shared by the threads
 * (shared), or one per thread. Returns pairs/s; *share as least_share. */
static double acemq_run(int (*run)(worker *), const char *url, const acemq_idem_options *o,
                        int threads, int shared, const idset *ids, size_t n, double seconds,
                        double *share)
{
    acemq_idem *hs[MAX_THREADS] = {NULL};
    int nh = shared ? 1 : threads;
    for (int i = 0; i < nh; i++) {
        int rc = acemq_idem_open(&hs[i], url, o);
        if (rc != 0) die("acemq_idem_open(%s): %s", url, acemq_strerror(rc));
    }
    worker ws[MAX_THREADS];
    memset(ws, 0, sizeof ws);
    split(ws, threads, ids, n, seconds);
    for (int t = 0; t < threads; t++) {
        ws[t].run = run;
        ws[t].ctx = hs[shared ? 0 : t];
    }
    double elapsed = run_workers(ws, threads);
    size_t done = total_done(ws, threads);
    *share = least_share(ws, threads);
    check_stats(hs, nh, done);
    for (int i = 0; i < nh; i++)
        acemq_idem_close(hs[i]);
    if (done == 0) die("%s: no pair completed in %.2f s", url, elapsed);
    return (double)done / elapsed;
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
static void redis_del(redisContext *c, const idset *ids, size_t n)
{
    enum { BATCH = 1000 };
    const char *argv[BATCH + 1];
    size_t lens[BATCH + 1];
    argv[0] = "DEL";
    lens[0] = 3;
    for (size_t lo = 0; lo < n; lo += BATCH) {
        size_t k = n - lo < BATCH ? n - lo : BATCH;
        for (size_t j = 0; j < k; j++) {
            argv[j + 1] = id_at(ids, lo + j);
            lens[j + 1] = ids->len;
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
    int len = (int)w->ids->len;
    const char *id = id_at(w->ids, i);
    if (!r) return worker_fail(w, "redis %s(%.*s): %s", what, len, id, c->errstr);
    int ok = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (!ok) {
        const char *why = r->str ? r->str : "";
        if (r->type == REDIS_REPLY_NIL) why = "key already held";
        worker_fail(w, "redis %s(%.*s): reply type %d (%s)", what, len, id, r->type, why);
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
        redisReply *r =
            redisCommand(c, "SET %b claimed NX PX 30000", id_at(w->ids, i), w->ids->len);
        if (redis_ok(w, c, r, "SET NX", i) != 0) return -1;
        r = redisCommand(c, "SET %b confirmed PX 604800000", id_at(w->ids, i), w->ids->len);
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
                                                        id_at(w->ids, lo + j), w->ids->len)
                                   : redisAppendCommand(c, "SET %b confirmed PX 604800000",
                                                        id_at(w->ids, lo + j), w->ids->len);
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

static double redis_run(redis_peer *p, int pipelined, const idset *ids, size_t n, double seconds)
{
    redis_del(p->rc, ids, n);
    worker w;
    memset(&w, 0, sizeof w);
    split(&w, 1, ids, n, seconds);
    w.run = pipelined ? redis_pipelined_pairs : redis_pairs;
    w.ctx = p->rc;
    double elapsed = run_workers(&w, 1);
    redis_del(p->rc, ids, w.done);
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

static double redis_run(redis_peer *p, int pipelined, const idset *ids, size_t n, double seconds)
{
    (void)p;
    (void)pipelined;
    (void)ids;
    (void)n;
    (void)seconds;
    return 0;
}
#endif

/* ------------------------------------------------------------------ cases */

/* The memory cases. Each claims and confirms cfg->mem_ids new ids on a fresh
 * store with room for every id (so nothing is evicted and the figure is the
 * claim+confirm path alone) unless max_entries says otherwise:
 *  - batch16: claimed CLAIM_BATCH at a time through try_claim_many, each
 *    batch then confirmed one id at a time;
 *  - window4k: a full store in steady state, 4,096 entries (a pre-filter's
 *    window), every claim evicting the oldest confirmation. */
typedef struct memory_case {
    const char *name;
    size_t max_entries; /* 0: room for every id */
    int uuid;           /* 1: UUID text ids; 0: the short ids */
    int threads, batch, has_target;
} memory_case;

static const memory_case memory_cases[] = {
    /* name, max_entries, uuid, threads, batch, has_target */
    {"memory/uuid/1t", 0, 1, 1, 0, 1},         {"memory/uuid/2t", 0, 1, 2, 0, 0},
    {"memory/uuid/batch16/1t", 0, 1, 1, 1, 1}, {"memory/uuid/window4k/1t", 4096, 1, 1, 0, 1},
    {"memory/short/1t", 0, 0, 1, 0, 0},
};
#define MEMORY_CASES (sizeof memory_cases / sizeof memory_cases[0])

/* Redis's figure on one id set, one way (plain or pipelined), measured once
 * and set beside every memory case on those ids: its client is one thread
 * either way. */
typedef struct redis_figures {
    redis_peer peer;
    double value[2][2]; /* [uuid][pipelined]; 0: not measured yet */
} redis_figures;

static double redis_figure(redis_figures *rf, const config *cfg, const idset *ids, int uuid,
                           int pipelined)
{
    if (!rf->peer.available) return 0;
    if (rf->value[uuid][pipelined] > 0) return rf->value[uuid][pipelined];
    size_t n = cfg->mem_ids < REDIS_MAX_IDS ? cfg->mem_ids : REDIS_MAX_IDS;
    double v[16];
    for (int r = 0; r < cfg->reps; r++)
        v[r] = redis_run(&rf->peer, pipelined, ids, n, cfg->seconds);
    return rf->value[uuid][pipelined] = median(v, cfg->reps);
}

static void bench_memory(const config *cfg, FILE *out, const idset *uuids, const idset *shorts)
{
    int any = 0;
    for (size_t k = 0; k < MEMORY_CASES; k++)
        any |= bench_wanted(cfg->filter, memory_cases[k].name);
    if (!any) return;
    redis_figures rf;
    memset(&rf, 0, sizeof rf);
    if (cfg->no_redis)
        snprintf(rf.peer.note, sizeof rf.peer.note, "--no-redis was given");
    else
        redis_prepare(&rf.peer, cfg->redis_port);
    if (!rf.peer.available) printf("note: Redis peer skipped: %s\n", rf.peer.note);

    bench_header();
    for (size_t k = 0; k < MEMORY_CASES; k++) {
        const memory_case *x = &memory_cases[k];
        if (!bench_wanted(cfg->filter, x->name)) continue;
        const idset *ids = x->uuid ? uuids : shorts;
        acemq_idem_options o;
        acemq_idem_options_init(&o);
        o.max_entries = x->max_entries ? x->max_entries : cfg->mem_ids + cfg->mem_ids / 4 + 16;
        double v[16], share;
        for (int rep = 0; rep < cfg->reps; rep++)
            v[rep] = acemq_run(x->batch ? acemq_batch_pairs : acemq_pairs, "memory:", &o,
                               x->threads, 1, ids, cfg->mem_ids, 0, &share);
        bench_result r = {"idem", x->name, median(v, cfg->reps), "pairs/s", NULL, 0, 0, NULL, 0};
        r.peer_value = redis_figure(&rf, cfg, ids, x->uuid, x->batch);
        if (rf.peer.available) {
            r.peer = x->batch ? "redis SET NX x16 pipelined" : "redis SET NX";
            r.ratio = r.value / r.peer_value;
        }
        if (x->has_target) {
            r.target = ">= 5,000,000 pairs/s";
            r.target_met = r.value >= MEMORY_TARGET;
        }
        bench_report(out, &r);
    }
    redis_finish(&rf.peer);
}

/* The SQLite cases, on UUID ids: synchronous=full and normal, one and two
 * threads (one connection each), each beside raw sqlite3 doing the same. */
static void bench_sqlite(const config *cfg, FILE *out, const char *dir, const idset *ids)
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
                        a[rep] = acemq_run(acemq_pairs, url, &o, threads[k], 0, ids, cfg->sql_ids,
                                           cfg->seconds, &share);
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
               "  --filter TEXT  only the cases whose name contains TEXT (e.g. memory/uuid)\n"
               "environment: ACEMQ_REDIS_PORT (default 6390)\n");
}

int main(int argc, char **argv)
{
    bench_name = "bench_idem";
    config cfg = {0};
    size_t ids_override = 0;
    cfg.out_path = ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            cfg.quick = 1;
        } else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(argv[++i], &end, 10);
            if (errno || *end || n == 0 || n >= MAX_IDS) die("--ids wants 1..%u", MAX_IDS - 1);
            ids_override = (size_t)n;
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
    cfg.mem_ids = ids_override ? ids_override : cfg.quick ? 100000 : 1000000;
    cfg.sql_ids = cfg.quick ? 200000 : 2000000;
    cfg.seconds = cfg.quick ? 0.3 : 1.5;
    cfg.reps = cfg.quick ? 1 : 5;
    const char *port = getenv("ACEMQ_REDIS_PORT");
    cfg.redis_port = port && *port ? atoi(port) : 6390;
    if (cfg.redis_port <= 0 || cfg.redis_port > 65535)
        die("ACEMQ_REDIS_PORT=%s is not a port", port);

    /* A Redis that goes away mid-run must fail a write, not kill us. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("signal(SIGPIPE): %s", strerror(errno));

    idset uuids, shorts;
    make_uuid_ids(&uuids, cfg.mem_ids > cfg.sql_ids ? cfg.mem_ids : cfg.sql_ids);
    make_short_ids(&shorts, cfg.mem_ids);

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
    printf("ids: random UUIDv4 text (36 bytes), memory/short: \"order-%%08d\" (14 bytes)\n"
           "memory: %zu ids per run; sqlite and redis: %.1f s per run; median of %d run%s\n",
           cfg.mem_ids, cfg.seconds, cfg.reps, cfg.reps == 1 ? "" : "s");
    fflush(stdout);

    double t0 = mono_now();
    bench_memory(&cfg, out, &uuids, &shorts);
    bench_sqlite(&cfg, out, dir, &uuids);
    double took = mono_now() - t0;
    read_loadavg(load, sizeof load);

    if (fclose(out) != 0) die("closing %s: %s", cfg.out_path, strerror(errno));
    if (!cfg.dir && rmdir(dir) != 0) die("rmdir(%s): %s", dir, strerror(errno));
    free(uuids.buf);
    free(shorts.buf);
    printf("\n%.1f s in all, load %s at the end; results appended to %s\n", took, load,
           cfg.out_path);
    return 0;
}
