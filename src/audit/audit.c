/* audit.c — the message audit: producers hashed to shards, each shard an LRU
 * of producer windows with its own memory of evictions, counters and, in the
 * thread-safe flavour, its own lock.
 *
 * The single-thread flavour is one shard and takes no lock: a check is a
 * parse, one XXH3 of the producer, one bucket walk and a bit test-and-set,
 * with no allocation once the producer is known. The thread-safe flavour
 * picks a shard by the hash's top bits and holds only that shard's lock, so
 * checks on producers in different shards never wait for each other.
 *
 * The LRU in the thread-safe flavour is per shard, an approximation: when the
 * audit holds max_producers producers, a newcomer evicts the least recently
 * used producer of its own shard, not of the whole audit. A shard always
 * admits its first producer, and shards racing to admit may each add one, so
 * at most max_producers + shards - 1 windows are held. Counters live in the
 * shard, under its lock, so they cost no atomic operation.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
/* Inlined: producers are short, and the call into the shared library costs
 * more than hashing them. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "audit/audit_internal.h"
#include "audit/id_parse.h"

#define DEFAULT_DEPTH 2048
#define DEFAULT_PRODUCERS 64
#define DEFAULT_SHARDS 16
#define GHOSTS_PER_PRODUCER 8
/* The default memory of evictions stops growing at 8 MiB. */
#define DEFAULT_GHOSTS_MAX ((size_t)1 << 20)

typedef struct shard {
    pthread_mutex_t lock;
    acemq__lru producers;
    acemq__ghosts ghosts;
    acemq_audit_stats stats;
    /* Keeps neighbouring shards' locks off one cache line. */
    char pad[64];
} shard;

struct acemq_audit {
    acemq__window_shape shape;
    uint32_t max_producers;
    int policy;
    int locked;
    int lost_history; /* every unseen producer may have been seen: see acemq__audit_new_lost */
    unsigned shard_bits;
    unsigned nshards;
    unsigned mutexes;        /* shard locks initialised, for destroy() */
    atomic_size_t producers; /* across shards; only read when nshards > 1 */
    shard *shards;
};

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
        acemq__lru_destroy(&s->producers, NULL);
        acemq__ghosts_destroy(&s->ghosts);
        if (i < a->mutexes) pthread_mutex_destroy(&s->lock);
    }
    free(a->shards);
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
    a->max_producers = opts.max_producers;
    a->policy = opts.policy;
    a->lost_history = lost_history != 0;
    a->locked = (opts.flags & ACEMQ_AUDIT_THREAD_SAFE) != 0;
    a->nshards = acemq__audit_shards(&opts, &a->shard_bits);
    atomic_init(&a->producers, 0);
    size_t ghosts = (size_t)opts.max_producers * GHOSTS_PER_PRODUCER;
    if (ghosts > DEFAULT_GHOSTS_MAX) ghosts = DEFAULT_GHOSTS_MAX;
    if (opts.max_evicted) ghosts = opts.max_evicted;
    size_t per_shard = (opts.max_producers + a->nshards - 1) / a->nshards;
    /* Shards are aligned like the cache lines their padding keeps apart. */
    size_t bytes = (sizeof(shard) * a->nshards + 63) & ~(size_t)63;
    a->shards = aligned_alloc(64, bytes);
    if (!a->shards) {
        free(a);
        return ACEMQ_ENOMEM;
    }
    memset(a->shards, 0, bytes);
    for (unsigned i = 0; i < a->nshards; i++) {
        shard *s = &a->shards[i];
        if (a->locked) {
            if (pthread_mutex_init(&s->lock, NULL) != 0) rc = ACEMQ_ENOMEM;
            if (rc == 0) a->mutexes++;
        }
        if (rc == 0) rc = acemq__lru_init(&s->producers, per_shard, acemq__window_size(&a->shape));
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

static shard *shard_for(acemq_audit *a, uint64_t hash)
{
    return &a->shards[a->shard_bits ? hash >> (64 - a->shard_bits) : 0];
}

static void lock(acemq_audit *a, shard *s)
{
    if (a->locked) pthread_mutex_lock(&s->lock);
}

static void unlock(acemq_audit *a, shard *s)
{
    if (a->locked) pthread_mutex_unlock(&s->lock);
}

/* An entry for a producer not in the table: the shard's least recently used
 * one, remembered as evicted, when the audit is full; a new one otherwise. */
static acemq__lru_entry *admit(acemq_audit *a, shard *s, uint64_t hash, const void *producer,
                               size_t len)
{
    size_t held = a->nshards == 1 ? s->producers.count
                                  : atomic_load_explicit(&a->producers, memory_order_relaxed);
    acemq__lru_entry *reuse = NULL;
    if (held >= a->max_producers && s->producers.count > 0) {
        reuse = acemq__lru_pop_oldest(&s->producers);
        s->stats.evictions++;
        if (acemq__ghosts_put(&s->ghosts, reuse->hash)) s->stats.forgotten++;
    }
    acemq__lru_entry *e = acemq__lru_insert(&s->producers, hash, producer, len, reuse);
    if (!reuse && e) atomic_fetch_add_explicit(&a->producers, 1, memory_order_relaxed);
    if (reuse && !e) atomic_fetch_sub_explicit(&a->producers, 1, memory_order_relaxed);
    return e;
}

/* Counts an answer and applies the policy to an UNKNOWN. */
static int answer(acemq_audit *a, shard *s, int result, int cause)
{
    s->stats.checks++;
    if (result == ACEMQ_AUDIT_DUPLICATE) {
        s->stats.duplicates++;
        return result;
    }
    if (result == ACEMQ_AUDIT_UNKNOWN) {
        s->stats.unknowns++;
        if (cause == ACEMQ_AUDIT_EVICTED)
            s->stats.unknown_evicted++;
        else if (cause == ACEMQ_AUDIT_BEHIND_WINDOW)
            s->stats.unknown_behind_window++;
        else
            s->stats.unknown_before_start++;
        if (a->policy == ACEMQ_AUDIT_FAIL_CLOSED) return result;
    }
    s->stats.news++;
    return ACEMQ_AUDIT_NEW;
}

/* A producer we hold no window for: rare once producers are known, so kept
 * out of line, off the check path's instruction cache. */
static __attribute__((noinline)) int check_newcomer(acemq_audit *a, shard *s, uint64_t hash,
                                                    const void *producer, size_t len, uint64_t seq,
                                                    int *cause)
{
    acemq__lru_entry *e;
    /* A producer we hold no window for. If we dropped its window, anything
     * up to this id may have been seen: its first id back is UNKNOWN. */
    int readmitted = acemq__ghosts_take(&s->ghosts, hash) || a->lost_history;
    e = admit(a, s, hash, producer, len);
    if (!e) return ACEMQ_ENOMEM;
    acemq__window_init((acemq__window *)acemq__lru_payload(e), &a->shape, seq, readmitted);
    if (!readmitted) return answer(a, s, ACEMQ_AUDIT_NEW, ACEMQ_AUDIT_CAUSE_NONE);
    *cause = ACEMQ_AUDIT_EVICTED;
    return answer(a, s, ACEMQ_AUDIT_UNKNOWN, *cause);
}

static inline int check_in_shard(acemq_audit *a, shard *s, uint64_t hash, const void *producer,
                                 size_t len, uint64_t seq, int *cause)
{
    acemq__lru_entry *e = acemq__lru_find_fast(&s->producers, hash, producer, len);
    if (!e) return check_newcomer(a, s, hash, producer, len, seq, cause);
    int result =
        acemq__window_check_fast((acemq__window *)acemq__lru_payload(e), &a->shape, seq, cause);
    return answer(a, s, result, *cause);
}

/* Both check entry points, inline in each: the public check_seq is exported,
 * and in position-independent code an exported function may be interposed,
 * so the compiler would not inline it into check: a call per id. */
static inline int check_split(acemq_audit *a, const void *producer, size_t producer_len,
                              uint64_t sequence, int *cause)
{
    int c = ACEMQ_AUDIT_CAUSE_NONE;
    if (cause) *cause = c;
    if (!a || !producer || producer_len == 0 || producer_len > ACEMQ_AUDIT_PRODUCER_MAX)
        return ACEMQ_EINVAL;
    uint64_t hash = XXH3_64bits(producer, producer_len);
    shard *s = shard_for(a, hash);
    lock(a, s);
    int rc = check_in_shard(a, s, hash, producer, producer_len, sequence, &c);
    unlock(a, s);
    if (cause) *cause = c;
    return rc;
}

int acemq_audit_check_seq(acemq_audit *a, const void *producer, size_t producer_len,
                          uint64_t sequence, int *cause)
{
    return check_split(a, producer, producer_len, sequence, cause);
}

int acemq_audit_check(acemq_audit *a, const char *id, size_t id_len, int *cause)
{
    if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
    acemq_audit_id p;
    int rc = acemq__audit_split(id, id_len, &p);
    if (rc != 0) return rc;
    return check_split(a, p.producer, p.producer_len, p.sequence, cause);
}

int acemq_audit_rollback_seq(acemq_audit *a, const void *producer, size_t producer_len,
                             uint64_t sequence)
{
    if (!a || !producer || producer_len == 0 || producer_len > ACEMQ_AUDIT_PRODUCER_MAX)
        return ACEMQ_EINVAL;
    uint64_t hash = XXH3_64bits(producer, producer_len);
    shard *s = shard_for(a, hash);
    lock(a, s);
    int cleared = 0;
    acemq__lru_entry *e = acemq__lru_find(&s->producers, hash, producer, producer_len);
    if (e)
        cleared = acemq__window_clear((acemq__window *)acemq__lru_payload(e), &a->shape, sequence);
    s->stats.rollbacks += (uint64_t)cleared;
    unlock(a, s);
    return cleared;
}

int acemq_audit_rollback(acemq_audit *a, const char *id, size_t id_len)
{
    acemq_audit_id p;
    int rc = acemq_audit_parse_id(id, id_len, &p);
    if (rc != 0) return rc;
    return acemq_audit_rollback_seq(a, p.producer, p.producer_len, p.sequence);
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
        sum->producers += s->producers.count;
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
