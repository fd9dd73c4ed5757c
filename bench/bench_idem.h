/* bench_idem.h — what the parts of bench_idem share: the run's options (one
 * config, filled by main), the id sets, the workers that time a run, the
 * Redis peer's state, and each part's entry points. */
#ifndef ACEMQ_BENCH_IDEM_H
#define ACEMQ_BENCH_IDEM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

/* Pairs in batches: CLAIM_BATCH claims in one try_claim_many call, as a consumer
 * holding a prefetch window of deliveries would make, then CLAIM_BATCH confirms,
 * one call each, as the work on each delivery finishes. */
#define CLAIM_BATCH 16

typedef struct redis_peer {
    int available;
    int started; /* by us, so we stop it again */
    char note[256];
#ifdef ACEMQ_BENCH_HAVE_HIREDIS
    redisContext *rc;
#endif
} redis_peer;

/* ---- bench_idem_workers.c: ids and threads */

/* Id i of s; inline, as every pair of every case reads one. */
static inline const char *id_at(const idset *s, size_t i)
{
    return s->buf + i * s->stride;
}
/* Random UUIDv4 text, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx". */
void make_uuid_ids(idset *s, size_t n);
/* "order-%08zu" text (14 bytes), n < MAX_IDS. */
void make_short_ids(idset *s, size_t n);
/* Puts the reason in w->err; -1, for a worker's run to return. */
int worker_fail(worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Runs the workers together and returns the time from the first one starting
 * to the last one finishing. The threads take the times themselves: the main
 * thread may be woken from the barrier long after the workers were (on two
 * cores a short run can be over by then). Per-thread setup (connections,
 * statements) is done by the caller beforehand and is not timed. */
double run_workers(worker *ws, int n);
/* Splits ids [0, n) into contiguous shares, one per thread. */
void split(worker *ws, int threads, const idset *ids, size_t n, double seconds);
/* The pairs the n workers completed. */
size_t total_done(const worker *ws, int n);
/* The least-served thread's part of the pairs: in a run sized by time, a
 * figure can look good because one connection kept the write lock while the
 * other starved, and this says so. */
double least_share(const worker *ws, int n);

/* ---- bench_idem_acemq.c: acemq's pairs */

/* A worker's run: claim+confirm pairs one id at a time, or CLAIM_BATCH claims
 * in one try_claim_many call and then their confirms. */
int bench_acemq_pairs(worker *w);
int bench_acemq_batch_pairs(worker *w);
/* One run of pairs on fresh handles: one handle shared by the threads
 * (shared), or one per thread. Returns pairs/s; *share as least_share. */
double bench_acemq_run(int (*run)(worker *), const char *url, const acemq_idem_options *o,
                       int threads, int shared, const idset *ids, size_t n, double seconds,
                       double *share);

/* ---- bench_idem_hiredis.c: the Redis peer */

/* Connects to Redis on port (starting it with scripts/services.sh when it is
 * not running); p->available, or p->note says why not. */
void redis_prepare(redis_peer *p, int port);
/* Disconnects, and stops the server when redis_prepare started it. */
void redis_finish(redis_peer *p);
/* SET NX / SET pairs on ids [0, n) for `seconds`, plain or pipelined;
 * pairs/s. */
double redis_run(redis_peer *p, int pipelined, const idset *ids, size_t n, double seconds);

/* ---- bench_idem_memory.c, bench_idem_sqlite.c: the cases */

void bench_memory(const config *cfg, FILE *out, const idset *uuids, const idset *shorts);
void bench_sqlite(const config *cfg, FILE *out, const char *dir, const idset *ids);
/* a then b into buf; dies when they do not fit. */
void join_path(char *buf, size_t cap, const char *a, const char *b);

#endif
