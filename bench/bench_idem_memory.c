/* bench_idem_memory.c — the memory store's cases: UUID ids on one and two
 * threads, in batches, in a full store in steady state, and short ids, each
 * beside Redis's figure on the same ids. */
#include <stdio.h>
#include <string.h>

#ifdef ACEMQ_BENCH_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

#include "acemq/idem.h"

#include "bench_common.h"
#include "bench_idem.h"

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

void bench_memory(const config *cfg, FILE *out, const idset *uuids, const idset *shorts)
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
            v[rep] = bench_acemq_run(x->batch ? bench_acemq_batch_pairs : bench_acemq_pairs,
                                     "memory:", &o, x->threads, 1, ids, cfg->mem_ids, 0, &share);
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
