/* audit_new.c — the message audit's options, its making and freeing, and
 * its counters summed over the shards. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit_shard.h"

#define DEFAULT_DEPTH 2048
#define DEFAULT_PRODUCERS 64
/* One shard: one LRU over all producers, as ActiveMQ keeps, so the
 * thread-safe flavour catches every duplicate ActiveMQ catches. More shards
 * (options.shards) lock less but evict per shard. */
#define DEFAULT_SHARDS 1
#define GHOSTS_PER_PRODUCER 8
/* The default memory of evictions stops growing at 8 MiB. */
#define DEFAULT_GHOSTS_MAX ((size_t)1 << 20)

void acemq_audit_options_init(acemq_audit_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->depth = DEFAULT_DEPTH;
    o->max_producers = DEFAULT_PRODUCERS;
    o->policy = ACEMQ_AUDIT_FAIL_OPEN;
}

int acemq__audit_options_check(const acemq_audit_options *o)
{
    if (o->depth == 0 || o->depth > ACEMQ_AUDIT_DEPTH_MAX || o->max_producers == 0 ||
        o->max_producers > ACEMQ_AUDIT_PRODUCERS_MAX || o->shards > ACEMQ_AUDIT_SHARDS_MAX ||
        o->max_evicted > ACEMQ_AUDIT_EVICTED_MAX ||
        (o->policy != ACEMQ_AUDIT_FAIL_OPEN && o->policy != ACEMQ_AUDIT_FAIL_CLOSED) ||
        (o->flags & ~(unsigned)ACEMQ_AUDIT_THREAD_SAFE) != 0)
        return ACEMQ_EINVAL;
    return 0;
}

unsigned acemq__audit_shards(const acemq_audit_options *o, unsigned *bits)
{
    unsigned n = 1;
    if (o->flags & ACEMQ_AUDIT_THREAD_SAFE)
        n = (unsigned)acemq__pow2(o->shards ? o->shards : DEFAULT_SHARDS);
    *bits = 0;
    while ((1u << *bits) < n)
        ++*bits;
    return n;
}

static void destroy(acemq_audit *a)
{
    for (unsigned i = 0; a->shards && i < a->nshards; i++) {
        shard *s = &a->shards[i];
        acemq__audit_table_destroy(s, a->stamped, a->ring_pad);
        acemq__ghosts_destroy(&s->ghosts);
        if (i < a->mutexes) acemq__shard_lock_destroy(&s->lock);
    }
    if (a->shards != &a->one) free(a->shards);
    free(a);
}

int acemq__audit_new_lost(acemq_audit **out, const acemq_audit_options *o, int lost_history)
{
    if (!out) return ACEMQ_EINVAL;
    *out = NULL;
    acemq_audit_options opts;
    if (o)
        opts = *o;
    else
        acemq_audit_options_init(&opts);
    int rc = acemq__audit_options_check(&opts);
    if (rc != 0) return rc;
    acemq_audit *a = calloc(1, sizeof *a);
    if (!a) return ACEMQ_ENOMEM;
    acemq__window_shape_init(&a->shape, opts.depth);
    a->ring_pad = (acemq__window_size(&a->shape) + 63) & ~(size_t)63;
    a->max_producers = opts.max_producers;
    a->policy = opts.policy;
    a->lost_history = lost_history != 0;
    a->stamped = opts.max_producers <= STAMP_MAX;
    a->locked = (opts.flags & ACEMQ_AUDIT_THREAD_SAFE) != 0;
    a->nshards = acemq__audit_shards(&opts, &a->shard_bits);
    atomic_init(&a->producers, 0);
    size_t ghosts = (size_t)opts.max_producers * GHOSTS_PER_PRODUCER;
    if (ghosts > DEFAULT_GHOSTS_MAX) ghosts = DEFAULT_GHOSTS_MAX;
    if (opts.max_evicted) ghosts = opts.max_evicted;
    if (a->nshards == 1) {
        a->shards = &a->one;
    } else {
        /* Shards are aligned like the cache lines their padding keeps apart. */
        size_t bytes = (sizeof(shard) * a->nshards + 63) & ~(size_t)63;
        a->shards = aligned_alloc(64, bytes);
        if (!a->shards) {
            free(a);
            return ACEMQ_ENOMEM;
        }
        memset(a->shards, 0, bytes);
    }
    for (unsigned i = 0; i < a->nshards; i++) {
        shard *s = &a->shards[i];
        if (a->locked) {
            rc = acemq__shard_lock_init(&s->lock) == 0 ? 0 : ACEMQ_ENOMEM;
            if (rc == 0) a->mutexes++;
        }
        if (rc == 0) rc = acemq__audit_table_init(s);
        if (rc == 0) rc = acemq__ghosts_init(&s->ghosts, (ghosts + a->nshards - 1) / a->nshards);
        if (rc != 0) {
            destroy(a);
            return rc;
        }
    }
    *out = a;
    return 0;
}

int acemq_audit_new(acemq_audit **out, const acemq_audit_options *o)
{
    return acemq__audit_new_lost(out, o, 0);
}

void acemq_audit_free(acemq_audit *a)
{
    if (a) destroy(a);
}

void acemq__audit_stats_merge(acemq_audit_stats *sum, const acemq_audit_stats *t)
{
    sum->checks += t->checks;
    sum->news += t->news;
    sum->duplicates += t->duplicates;
    sum->unknowns += t->unknowns;
    sum->unknown_evicted += t->unknown_evicted;
    sum->unknown_behind_window += t->unknown_behind_window;
    sum->unknown_before_start += t->unknown_before_start;
    sum->evictions += t->evictions;
    sum->forgotten += t->forgotten;
    sum->rollbacks += t->rollbacks;
    sum->producers += t->producers;
}

void acemq__audit_stats_add(acemq_audit *a, acemq_audit_stats *sum)
{
    for (unsigned i = 0; i < a->nshards; i++) {
        shard *s = &a->shards[i];
        lock(a, s);
        acemq__audit_stats_merge(sum, &s->stats);
        /* Under stamp recency every tick of the clock that is not an
         * other_stamps is a fast answer (see shard.answered). */
        uint64_t answered = s->answered + (a->stamped ? s->clock - s->other_stamps : 0);
        uint64_t fast_news = answered - s->answered_duplicates;
        uint64_t news = s->stats.news + fast_news;
        uint64_t duplicates = s->stats.duplicates + s->answered_duplicates;
        sum->news += fast_news;
        sum->duplicates += s->answered_duplicates;
        /* Every check is answered once, and the check path counts only its
         * answer: NEW (fail-open UNKNOWNs included), DUPLICATE, or, only
         * under fail-closed, UNKNOWN. */
        sum->checks +=
            news + duplicates + (a->policy == ACEMQ_AUDIT_FAIL_CLOSED ? s->stats.unknowns : 0);
        sum->producers += s->count;
        unlock(a, s);
    }
}

int acemq_audit_stats_get(acemq_audit *a, acemq_audit_stats *out)
{
    if (!a || !out) return ACEMQ_EINVAL;
    memset(out, 0, sizeof *out);
    acemq__audit_stats_add(a, out);
    return 0;
}
