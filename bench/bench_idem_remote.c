/* bench_idem_remote.c — the turns of the server stores' benches; see
 * bench_idem_remote.h. */
#define _POSIX_C_SOURCE 200809L
#include "bench_idem_remote.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

#define MAX_THREADS 8
#define BATCH 100
#define MAX_REPS 32

static void usage(void)
{
    fprintf(stderr, "usage: %s [--out FILE] [--seconds S] [--reps N] [--filter TEXT]\n",
            bench_name);
    exit(2);
}

void remote_parse_args(int argc, char **argv, remote_config *cfg)
{
    remote_config c = {ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl", NULL, 2.0, 5};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--out") == 0 && v)
            c.out_path = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && v)
            c.seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && v)
            c.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--filter") == 0 && v)
            c.filter = argv[++i];
        else
            usage();
    }
    if (c.seconds <= 0 || c.reps < 1 || c.reps > MAX_REPS) usage();
    *cfg = c;
}

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

/* RAW: the peer's pairs; ACEMQ: acemq's pairs; SINGLE: acemq's claims one
 * at a time; MANY: acemq's claims BATCH at a time. */
enum { SIDE_RAW, SIDE_ACEMQ, SIDE_SINGLE, SIDE_MANY };

typedef struct worker {
    pthread_t thread;
    const remote_bench *b;
    int side;
    uint64_t seed;
    double seconds;
    long done;
    void *conn;
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
            if (w->b->raw_pair(w->conn, ids[0]) != 0) die("raw: a random id was not new");
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
static double turn(const remote_bench *b, int side, int threads, double seconds)
{
    static uint64_t turns;
    uint64_t seed = ++turns;
    worker w[MAX_THREADS];
    memset(w, 0, sizeof w);
    for (int t = 0; t < threads; t++) {
        w[t].b = b;
        w[t].side = side;
        w[t].seed = seed * 7919 + (uint64_t)t * 104729 + (uint64_t)getpid();
        w[t].seconds = seconds;
        if (side == SIDE_RAW)
            w[t].conn = b->raw_open();
        else if (acemq_idem_open(&w[t].store, b->store_url, b->store_opts) != 0)
            die("open %s: %s", b->store_url, acemq_idem_errmsg(NULL));
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
        if (w[t].conn) b->raw_close(w[t].conn);
        acemq_idem_close(w[t].store);
    }
    return (double)done / elapsed;
}

/* Times side a against side b in alternating turns; reports a beside b. */
static void compare(FILE *out, const remote_config *cfg, const remote_bench *rb, const char *kind,
                    int a, int b, int threads, const char *unit, const char *peer, double target)
{
    char name[64];
    snprintf(name, sizeof name, "%s/uuid/%s", rb->tech, kind);
    if (!bench_wanted(cfg->filter, name)) return;
    double va[MAX_REPS], vb[MAX_REPS], ratio[MAX_REPS];
    for (int r = 0; r < cfg->reps; r++) {
        vb[r] = turn(rb, b, threads, cfg->seconds);
        va[r] = turn(rb, a, threads, cfg->seconds);
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
                        want,
                        0};
    res.target_met = res.ratio >= target;
    bench_report(out, &res);
}

void remote_run_cases(FILE *out, const remote_config *cfg, const remote_bench *b)
{
    compare(out, cfg, b, "1conn", SIDE_ACEMQ, SIDE_RAW, 1, "pairs/s", b->raw_peer, 0.8);
    compare(out, cfg, b, "8conn", SIDE_ACEMQ, SIDE_RAW, 8, "pairs/s", b->raw_peer, 0.8);
    compare(out, cfg, b, "batch100", SIDE_MANY, SIDE_SINGLE, 1, "claims/s",
            "acemq try_claim one at a time", 5.0);
}
