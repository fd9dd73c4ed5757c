/* conn_audit.c — the connection-level audit: one audit per queue, shared by
 * its consumers, and one per topic consumer, kept in an LRU of audits.
 *
 * Audits are keyed by kind and name, hashed to shards like producers in
 * audit.c; a shard's lock (thread-safe flavour) covers finding the audit and
 * the check inside it, so the audits it holds are the unlocked flavour. An
 * audit dropped by the LRU takes all its producers' history with it: its key
 * is remembered, and the audit made when the key comes back answers each
 * producer's first id UNKNOWN (EVICTED).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "audit/audit_internal.h"

#define DEFAULT_AUDITS 1000
#define GHOSTS_PER_AUDIT 8

typedef struct shard {
    pthread_mutex_t lock;
    acemq__lru audits; /* payload: one acemq_audit * */
    acemq__ghosts ghosts;
    acemq_audit_stats retired; /* counters of the audits this shard dropped */
    char pad[64];
} shard;

struct acemq_conn_audit {
    acemq_audit_options audit; /* for the audits it makes: unlocked */
    uint32_t max_audits;
    atomic_int enabled;
    int locked;
    unsigned shard_bits;
    unsigned nshards;
    unsigned mutexes;
    atomic_size_t held; /* audits across shards; only read when nshards > 1 */
    shard *shards;
};

void acemq_conn_audit_options_init(acemq_conn_audit_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    acemq_audit_options_init(&o->audit);
    o->max_audits = DEFAULT_AUDITS;
    o->check_for_duplicates = 1;
}

/* An entry's payload: the audit. Copied in and out with memcpy, which keeps
 * clear of the aliasing rules. */
typedef struct audit_ref {
    acemq_audit *audit;
} audit_ref;

static acemq_audit *audit_in(const void *payload)
{
    audit_ref r;
    memcpy(&r, payload, sizeof r);
    return r.audit;
}

static void drop_audit(void *payload)
{
    acemq_audit_free(audit_in(payload));
}

static void destroy(acemq_conn_audit *c)
{
    for (unsigned i = 0; c->shards && i < c->nshards; i++) {
        shard *s = &c->shards[i];
        acemq__lru_destroy(&s->audits, drop_audit);
        acemq__ghosts_destroy(&s->ghosts);
        if (i < c->mutexes) pthread_mutex_destroy(&s->lock);
    }
    free(c->shards);
    free(c);
}

int acemq_conn_audit_new(acemq_conn_audit **out, const acemq_conn_audit_options *o)
{
    if (!out) return ACEMQ_EINVAL;
    *out = NULL;
    acemq_conn_audit_options opts;
    if (o)
        opts = *o;
    else
        acemq_conn_audit_options_init(&opts);
    if (acemq__audit_options_check(&opts.audit) != 0 || opts.max_audits == 0 ||
        opts.max_audits > ACEMQ_AUDIT_AUDITS_MAX)
        return ACEMQ_EINVAL;
    acemq_conn_audit *c = calloc(1, sizeof *c);
    if (!c) return ACEMQ_ENOMEM;
    c->audit = opts.audit;
    c->audit.flags &= ~(unsigned)ACEMQ_AUDIT_THREAD_SAFE;
    c->max_audits = opts.max_audits;
    atomic_init(&c->enabled, opts.check_for_duplicates != 0);
    atomic_init(&c->held, 0);
    c->locked = (opts.audit.flags & ACEMQ_AUDIT_THREAD_SAFE) != 0;
    c->nshards = acemq__audit_shards(&opts.audit, &c->shard_bits);
    size_t per_shard = (opts.max_audits + c->nshards - 1) / c->nshards;
    size_t bytes = (sizeof(shard) * c->nshards + 63) & ~(size_t)63;
    c->shards = aligned_alloc(64, bytes);
    if (!c->shards) {
        free(c);
        return ACEMQ_ENOMEM;
    }
    memset(c->shards, 0, bytes);
    int rc = 0;
    for (unsigned i = 0; i < c->nshards; i++) {
        shard *s = &c->shards[i];
        if (c->locked) {
            if (pthread_mutex_init(&s->lock, NULL) != 0) rc = ACEMQ_ENOMEM;
            if (rc == 0) c->mutexes++;
        }
        if (rc == 0) rc = acemq__lru_init(&s->audits, per_shard, sizeof(audit_ref));
        if (rc == 0) rc = acemq__ghosts_init(&s->ghosts, per_shard * GHOSTS_PER_AUDIT);
        if (rc != 0) {
            destroy(c);
            return rc;
        }
    }
    *out = c;
    return 0;
}

void acemq_conn_audit_free(acemq_conn_audit *c)
{
    if (c) destroy(c);
}

void acemq_conn_audit_set_check_for_duplicates(acemq_conn_audit *c, int on)
{
    if (c) atomic_store(&c->enabled, on != 0);
}

/* The audit's key: a kind byte, then the name. */
typedef struct key {
    unsigned char bytes[1 + ACEMQ_AUDIT_NAME_MAX];
    size_t len;
    uint64_t hash;
} key;

static int make_key(key *k, int kind, const char *destination, const char *consumer)
{
    const char *name;
    if (kind == ACEMQ_AUDIT_QUEUE)
        name = destination;
    else if (kind == ACEMQ_AUDIT_TOPIC)
        name = consumer;
    else
        return ACEMQ_EINVAL;
    if (!name) return ACEMQ_EINVAL;
    size_t n = strnlen(name, ACEMQ_AUDIT_NAME_MAX + 1);
    if (n == 0 || n > ACEMQ_AUDIT_NAME_MAX) return ACEMQ_EINVAL;
    k->bytes[0] = (unsigned char)kind;
    memcpy(k->bytes + 1, name, n);
    k->len = n + 1;
    k->hash = XXH3_64bits(k->bytes, k->len);
    return 0;
}

static shard *shard_for(acemq_conn_audit *c, uint64_t hash)
{
    return &c->shards[c->shard_bits ? hash >> (64 - c->shard_bits) : 0];
}

/* Folds a dropped audit's counters into the shard's: its producers count
 * as evicted, all at once. */
static void retire(shard *s, acemq_audit *a)
{
    acemq_audit_stats t;
    memset(&t, 0, sizeof t);
    acemq__audit_stats_add(a, &t);
    /* Its producers go with it: count them as evicted, and as held no more. */
    t.evictions += t.producers;
    t.producers = 0;
    acemq__audit_stats_merge(&s->retired, &t);
    acemq_audit_free(a);
}

/* The audit for k, made (evicting the shard's least recently used one when
 * the connection holds max_audits) when absent and create is set. */
static int find_audit(acemq_conn_audit *c, shard *s, const key *k, int create, acemq_audit **out)
{
    *out = NULL;
    acemq__lru_entry *e = acemq__lru_find(&s->audits, k->hash, k->bytes, k->len);
    if (e) {
        *out = audit_in(acemq__lru_payload(e));
        return 0;
    }
    if (!create) return 0;
    acemq_audit *a = NULL;
    int rc = acemq__audit_new_lost(&a, &c->audit, acemq__ghosts_take(&s->ghosts, k->hash));
    if (rc != 0) return rc;
    size_t held =
        c->nshards == 1 ? s->audits.count : atomic_load_explicit(&c->held, memory_order_relaxed);
    acemq__lru_entry *reuse = NULL;
    if (held >= c->max_audits && s->audits.count > 0) {
        reuse = acemq__lru_pop_oldest(&s->audits);
        if (acemq__ghosts_put(&s->ghosts, reuse->hash)) s->retired.forgotten++;
        retire(s, audit_in(acemq__lru_payload(reuse)));
    }
    e = acemq__lru_insert(&s->audits, k->hash, k->bytes, k->len, reuse);
    if (!reuse && e) atomic_fetch_add_explicit(&c->held, 1, memory_order_relaxed);
    if (reuse && !e) atomic_fetch_sub_explicit(&c->held, 1, memory_order_relaxed);
    if (!e) {
        acemq_audit_free(a);
        return ACEMQ_ENOMEM;
    }
    audit_ref r = {a};
    memcpy(acemq__lru_payload(e), &r, sizeof r);
    *out = a;
    return 0;
}

static void unlock_shard(acemq_conn_audit *c, shard *s)
{
    if (c->locked) pthread_mutex_unlock(&s->lock);
}

/* What check and rollback both start from: the parsed id, and the audit for
 * (kind, destination, consumer) with its shard locked. */
typedef struct located {
    acemq_audit_id id;
    shard *shard;
    acemq_audit *audit; /* NULL when !create and there is none */
} located;

/* 0 with l->shard locked (the caller unlocks it with unlock_shard), or an
 * error with nothing locked. */
static int locate(acemq_conn_audit *c, int kind, const char *destination, const char *consumer,
                  const char *id, size_t id_len, int create, located *l)
{
    int rc = acemq_audit_parse_id(id, id_len, &l->id);
    if (rc != 0) return rc;
    key k;
    rc = make_key(&k, kind, destination, consumer);
    if (rc != 0) return rc;
    l->shard = shard_for(c, k.hash);
    if (c->locked) pthread_mutex_lock(&l->shard->lock);
    rc = find_audit(c, l->shard, &k, create, &l->audit);
    if (rc != 0) unlock_shard(c, l->shard);
    return rc;
}

int acemq_conn_audit_check(acemq_conn_audit *c, int kind, const char *destination,
                           const char *consumer, const char *id, size_t id_len, int *cause)
{
    if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
    if (!c) return ACEMQ_EINVAL;
    if (!atomic_load_explicit(&c->enabled, memory_order_relaxed)) return ACEMQ_AUDIT_NEW;
    located l;
    int rc = locate(c, kind, destination, consumer, id, id_len, 1, &l);
    if (rc != 0) return rc;
    rc = acemq_audit_check_seq(l.audit, l.id.producer, l.id.producer_len, l.id.sequence, cause);
    unlock_shard(c, l.shard);
    return rc;
}

int acemq_conn_audit_rollback(acemq_conn_audit *c, int kind, const char *destination,
                              const char *consumer, const char *id, size_t id_len)
{
    if (!c) return ACEMQ_EINVAL;
    located l;
    int rc = locate(c, kind, destination, consumer, id, id_len, 0, &l);
    if (rc != 0) return rc;
    if (l.audit)
        rc = acemq_audit_rollback_seq(l.audit, l.id.producer, l.id.producer_len, l.id.sequence);
    unlock_shard(c, l.shard);
    return rc;
}

int acemq_conn_audit_stats_get(acemq_conn_audit *c, acemq_audit_stats *out, uint64_t *audits)
{
    if (!c || !out) return ACEMQ_EINVAL;
    memset(out, 0, sizeof *out);
    uint64_t n = 0;
    for (unsigned i = 0; i < c->nshards; i++) {
        shard *s = &c->shards[i];
        if (c->locked) pthread_mutex_lock(&s->lock);
        acemq__audit_stats_merge(out, &s->retired);
        for (acemq__lru_entry *e = s->audits.head; e; e = e->next)
            acemq__audit_stats_add(audit_in(acemq__lru_payload(e)), out);
        n += s->audits.count;
        if (c->locked) pthread_mutex_unlock(&s->lock);
    }
    if (audits) *audits = n;
    return 0;
}
