/* memory_idem.c — the in-process idempotency store: a sharded hash table.
 *
 * Each shard is an independent hash table behind its own mutex, chosen by the
 * top bits of the id's XXH3 hash, so threads working on different ids rarely
 * meet on one lock. A shard's table is open-addressed (linear probing) over
 * slots that hold the full hash beside the entry pointer: a lookup of a new id,
 * the common case, reads one run of slots and touches no entry at all. That
 * read is most of a claim's cost once the table outgrows the caches. Tables
 * start small and double: a younger, denser table misses the caches less than
 * one sized for max_entries from the start (measured: sizing up front, even on
 * huge pages, was 15% slower over a million new ids).
 *
 * Bounded: each shard keeps at most its share of max_entries. When a shard is
 * full, room is made by dropping, in this order, the oldest confirmed record
 * (an expiration if its retention ran out, an eviction otherwise) or the
 * oldest claim whose lease has run out, and the dropped entry's memory is
 * reused for the new id. A live claim is never dropped: with nothing else left
 * the claim fails with ACEMQ_EFULL.
 *
 * Invariants a reader must keep:
 *  - every entry is in its shard's slot table and in exactly one of the two
 *    lists: `confirmed` (state CONFIRMED, in confirm order, so with one
 *    retention the head expires first) or `claims` (state CLAIMED, in claim
 *    order). Released entries are freed at once.
 *  - tokens come from the shard's counter, which only grows; an id always maps
 *    to the same shard, so its tokens grow with every claim and never repeat,
 *    even after its entry was released, evicted or forgotten.
 */
#include <stdlib.h>
#include <string.h>
/* Inlined: ids are short, and the call into the shared library costs more
 * than hashing them. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "idem/idem_backend.h"

enum { STATE_CLAIMED = 1, STATE_CONFIRMED = 2 };

#define MAX_SHARD_BITS 6
#define MIN_ENTRIES_PER_SHARD 1024
#define INITIAL_SLOTS 64
/* A billion entries is far past what a memory store should hold, and keeps
 * every count well inside the types that hold it. */
#define MAX_ENTRIES_LIMIT (1LL << 30)

typedef struct entry {
    struct entry *prev, *next; /* in `claims` or `confirmed` */
    uint64_t hash;
    uint64_t token;
    int64_t lease_until; /* CLAIMED */
    int64_t expires;     /* CONFIRMED */
    unsigned char *result;
    unsigned char *fingerprint;
    uint32_t result_len;
    uint8_t fingerprint_len;
    uint8_t state;
    uint32_t id_len;
    uint32_t id_cap; /* bytes allocated for id, so a dropped entry can be reused */
    unsigned char id[];
} entry;

typedef struct entry_list {
    entry *head, *tail;
} entry_list;

/* e == NULL marks an empty slot. */
typedef struct slot {
    uint64_t hash;
    entry *e;
} slot;

typedef struct shard {
    pthread_mutex_t lock;
    slot *slots;
    size_t mask; /* slots - 1; the slot count is a power of two, at most 3/4 full */
    size_t count;
    uint64_t next_token;
    entry_list claims, confirmed;
    /* Pads shards apart so two threads on neighbouring shards do not share a
     * cache line through the lock. */
    char pad[64];
} shard;

typedef struct memory_store {
    shard *shards;
    unsigned shard_bits;
    size_t per_shard_max;
    int64_t retention_ms;
} memory_store;

static void list_append(entry_list *l, entry *e)
{
    e->next = NULL;
    e->prev = l->tail;
    if (l->tail)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
}

static void list_remove(entry_list *l, entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        l->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = NULL;
}

static entry_list *list_of(shard *s, entry *e)
{
    return e->state == STATE_CONFIRMED ? &s->confirmed : &s->claims;
}

static uint64_t hash_id(const acemq__bytes *id)
{
    return XXH3_64bits(id->data, id->len);
}

static shard *shard_for(memory_store *m, uint64_t hash)
{
    return &m->shards[m->shard_bits ? hash >> (64 - m->shard_bits) : 0];
}

/* The slot holding id, or the empty slot that ends its probe run. */
static slot *probe(shard *s, uint64_t hash, const acemq__bytes *id)
{
    for (size_t i = hash & s->mask;; i = (i + 1) & s->mask) {
        slot *sl = &s->slots[i];
        if (!sl->e) return sl;
        if (sl->hash == hash && sl->e->id_len == id->len &&
            memcmp(sl->e->id, id->data, id->len) == 0)
            return sl;
    }
}

static entry *find(shard *s, uint64_t hash, const acemq__bytes *id)
{
    return probe(s, hash, id)->e;
}

static void free_entry(entry *e)
{
    free(e->result);
    free(e->fingerprint);
    free(e);
}

/* Empties slot i and shifts later members of its probe run back (backward
 * shift deletion), so runs stay unbroken without tombstones. */
static void remove_slot(shard *s, size_t i)
{
    for (size_t j = (i + 1) & s->mask; s->slots[j].e; j = (j + 1) & s->mask) {
        size_t home = s->slots[j].hash & s->mask;
        /* An entry may move back to i only if its home is not in (i, j]. */
        int home_between = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!home_between) {
            s->slots[i] = s->slots[j];
            i = j;
        }
    }
    s->slots[i].e = NULL;
}

/* Doubles the slot array before it passes 3/4 full; on allocation failure the
 * table grows denser instead, slower but correct while a slot stays empty. */
static int maybe_grow(shard *s)
{
    size_t cap = s->mask + 1;
    if ((s->count + 1) * 4 <= cap * 3) return 0;
    size_t n = cap * 2;
    slot *fresh = calloc(n, sizeof(slot));
    if (!fresh) return s->count + 1 < cap ? 0 : ACEMQ_ENOMEM;
    for (size_t i = 0; i < cap; i++) {
        if (!s->slots[i].e) continue;
        size_t j = s->slots[i].hash & (n - 1);
        while (fresh[j].e)
            j = (j + 1) & (n - 1);
        fresh[j] = s->slots[i];
    }
    free(s->slots);
    s->slots = fresh;
    s->mask = n - 1;
    return 0;
}

/* Unlinks e from its table and list without freeing it. */
static void unlink_entry(shard *s, entry *e)
{
    size_t i = e->hash & s->mask;
    while (s->slots[i].e != e)
        i = (i + 1) & s->mask;
    remove_slot(s, i);
    list_remove(list_of(s, e), e);
    s->count--;
}

static void drop(shard *s, entry *e)
{
    unlink_entry(s, e);
    free_entry(e);
}

/* Drops one record that no live claim depends on, and hands it back in
 * *spare so a full store reuses the memory instead of a free and a malloc
 * per claim. 0 when room was made, ACEMQ_EFULL when the shard holds only
 * live claims. */
static int make_room(acemq_idem *h, shard *s, int64_t now, entry **spare)
{
    entry *e = s->confirmed.head;
    if (e) {
        if (e->expires <= now)
            ACEMQ__IDEM_COUNT(h, expirations, 1);
        else
            ACEMQ__IDEM_COUNT(h, evictions, 1);
    } else {
        e = s->claims.head;
        if (!e || e->lease_until > now) return ACEMQ_EFULL;
        ACEMQ__IDEM_COUNT(h, evictions, 1);
    }
    unlink_entry(s, e);
    *spare = e;
    return 0;
}

static int fingerprint_differs(const entry *e, const acemq__bytes *fp)
{
    return fp->len > 0 && e->fingerprint_len > 0 &&
           (e->fingerprint_len != fp->len || memcmp(e->fingerprint, fp->data, fp->len) != 0);
}

/* Remembers the claimer's fingerprint; keeps the old one when none is given. */
static int set_fingerprint(entry *e, const acemq__bytes *fp)
{
    if (fp->len == 0) return 0;
    if (e->fingerprint_len != fp->len) {
        unsigned char *p = realloc(e->fingerprint, fp->len);
        if (!p) return ACEMQ_ENOMEM;
        e->fingerprint = p;
        e->fingerprint_len = (uint8_t)fp->len;
    }
    memcpy(e->fingerprint, fp->data, fp->len);
    return 0;
}

static void grant(shard *s, entry *e, const acemq__claim_args *a, acemq_claim *out)
{
    e->state = STATE_CLAIMED;
    e->token = ++s->next_token;
    e->lease_until = a->lease_until_ms;
    list_append(&s->claims, e);
    out->token = e->token;
    out->lease_until_ms = e->lease_until;
}

/* Turns an existing entry into a fresh claim: a forgotten confirmation (which
 * keeps nothing of its past, fingerprint included) or an expired lease. */
static int reclaim(shard *s, entry *e, int forgotten, const acemq__claim_args *a, acemq_claim *out)
{
    if (forgotten) {
        free(e->fingerprint);
        e->fingerprint = NULL;
        e->fingerprint_len = 0;
    }
    int rc = set_fingerprint(e, &a->fingerprint);
    if (rc != 0) return rc;
    list_remove(list_of(s, e), e);
    free(e->result);
    e->result = NULL;
    e->result_len = 0;
    grant(s, e, a, out);
    return ACEMQ_CLAIMED;
}

/* An entry for id: the spare one when its id fits, else a new one. Rounded
 * up so that ids of slightly different lengths can reuse each other's. */
static entry *new_entry(entry *spare, const acemq__bytes *id)
{
    if (spare && spare->id_cap >= id->len) {
        free(spare->result);
        free(spare->fingerprint);
    } else {
        if (spare) free_entry(spare);
        size_t cap = (id->len + 15) & ~(size_t)15;
        spare = malloc(sizeof *spare + cap);
        if (!spare) return NULL;
        spare->id_cap = (uint32_t)cap;
    }
    spare->result = NULL;
    spare->fingerprint = NULL;
    spare->result_len = 0;
    spare->fingerprint_len = 0;
    spare->id_len = (uint32_t)id->len;
    memcpy(spare->id, id->data, id->len);
    return spare;
}

/* A claim of an id the shard does not hold; sl is the empty slot its lookup
 * ended on. */
static int claim_new(acemq_idem *h, memory_store *m, shard *s, slot *sl, uint64_t hash,
                     const acemq__bytes *id, const acemq__claim_args *a, acemq_claim *out)
{
    entry *spare = NULL;
    if (s->count >= m->per_shard_max) {
        if (make_room(h, s, a->now_ms, &spare) != 0)
            return acemq__idem_fail(
                h, ACEMQ_EFULL, "memory store: %zu live claims fill this shard (max_entries=%zu)",
                s->count, h->opts.max_entries);
        sl = probe(s, hash, id); /* removing the spare may have shifted id's run */
    } else if (maybe_grow(s) != 0) {
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "memory store: out of memory");
    } else {
        sl = probe(s, hash, id); /* the table may have moved */
    }
    entry *e = new_entry(spare, id);
    if (!e || set_fingerprint(e, &a->fingerprint) != 0) {
        if (e) free_entry(e);
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "memory store: out of memory");
    }
    e->hash = hash;
    sl->hash = hash;
    sl->e = e;
    s->count++;
    grant(s, e, a, out);
    return ACEMQ_CLAIMED;
}

static int decide_existing(acemq_idem *h, shard *s, entry *e, const acemq__claim_args *a,
                           acemq_claim *out)
{
    /* Past retention a confirmation is forgotten, whatever fingerprint it had. */
    int forgotten = e->state == STATE_CONFIRMED && e->expires <= a->now_ms;
    if (forgotten) {
        ACEMQ__IDEM_COUNT(h, expirations, 1);
    } else {
        if (fingerprint_differs(e, &a->fingerprint))
            return acemq__idem_fail(
                h, ACEMQ_EMISMATCH,
                "memory store: id was first seen with another payload fingerprint");
        if (e->state == STATE_CONFIRMED) {
            if (e->result) {
                out->has_result = 1;
                out->result_len = e->result_len;
                size_t n = e->result_len < a->result_cap ? e->result_len : a->result_cap;
                if (n > 0) memcpy(a->result_buf, e->result, n); /* buf may be NULL when n is 0 */
            }
            return ACEMQ_ALREADY_CONFIRMED;
        }
        if (e->lease_until > a->now_ms) {
            out->lease_until_ms = e->lease_until;
            return ACEMQ_IN_PROGRESS;
        }
    }
    int rc = reclaim(s, e, forgotten, a, out);
    if (rc != ACEMQ_CLAIMED) return acemq__idem_fail(h, rc, "memory store: out of memory");
    out->takeover = !forgotten;
    return rc;
}

static int mem_try_claim(acemq_idem *h, const acemq__bytes *id, const acemq__claim_args *a,
                         acemq_claim *out)
{
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    shard *s = shard_for(m, hash);
    pthread_mutex_lock(&s->lock);
    slot *sl = probe(s, hash, id);
    int rc =
        sl->e ? decide_existing(h, s, sl->e, a, out) : claim_new(h, m, s, sl, hash, id, a, out);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The entry for id when token is its current claim (or, for a repeated
 * confirm, its confirmation), else NULL. */
static entry *fenced(shard *s, uint64_t hash, const acemq__bytes *id, uint64_t token,
                     int confirmed_ok, int64_t now)
{
    entry *e = find(s, hash, id);
    if (!e || e->token != token) return NULL;
    if (e->state == STATE_CLAIMED) return e;
    return confirmed_ok && e->expires > now ? e : NULL;
}

static int stale(acemq_idem *h, const char *op)
{
    return acemq__idem_fail(
        h, ACEMQ_ESTALE, "memory store: %s refused: the token is not the id's current claim", op);
}

static int mem_confirm(acemq_idem *h, const acemq__bytes *id, uint64_t token,
                       const acemq__bytes *result, int64_t now_ms, int64_t expires_ms)
{
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    shard *s = shard_for(m, hash);
    unsigned char *copy = NULL;
    if (result->len > 0) {
        copy = malloc(result->len);
        if (!copy) return acemq__idem_fail(h, ACEMQ_ENOMEM, "memory store: out of memory");
        memcpy(copy, result->data, result->len);
    }
    pthread_mutex_lock(&s->lock);
    entry *e = fenced(s, hash, id, token, 1, now_ms);
    if (e) {
        list_remove(list_of(s, e), e);
        e->state = STATE_CONFIRMED;
        e->expires = expires_ms;
        free(e->result);
        e->result = copy;
        e->result_len = (uint32_t)result->len;
        copy = NULL;
        list_append(&s->confirmed, e);
    }
    pthread_mutex_unlock(&s->lock);
    free(copy);
    return e ? 0 : stale(h, "confirm");
}

static int mem_release(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms)
{
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    shard *s = shard_for(m, hash);
    pthread_mutex_lock(&s->lock);
    entry *e = fenced(s, hash, id, token, 0, now_ms);
    if (e) drop(s, e);
    pthread_mutex_unlock(&s->lock);
    return e ? 0 : stale(h, "release");
}

static int mem_renew(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms,
                     int64_t lease_until_ms)
{
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    shard *s = shard_for(m, hash);
    pthread_mutex_lock(&s->lock);
    entry *e = fenced(s, hash, id, token, 0, now_ms);
    if (e) e->lease_until = lease_until_ms;
    pthread_mutex_unlock(&s->lock);
    return e ? 0 : stale(h, "renew");
}

static int mem_is_confirmed(acemq_idem *h, const acemq__bytes *id, int64_t now_ms)
{
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    shard *s = shard_for(m, hash);
    pthread_mutex_lock(&s->lock);
    entry *e = find(s, hash, id);
    int confirmed = e && e->state == STATE_CONFIRMED && e->expires > now_ms;
    pthread_mutex_unlock(&s->lock);
    return confirmed;
}

static int mem_purge(acemq_idem *h, int64_t now_ms, uint64_t *purged)
{
    memory_store *m = h->self;
    int64_t abandoned_before = now_ms - m->retention_ms;
    uint64_t n = 0;
    for (size_t i = 0; i < (size_t)1 << m->shard_bits; i++) {
        shard *s = &m->shards[i];
        pthread_mutex_lock(&s->lock);
        /* Confirm order is not expiry order if the clock stepped back, so
         * walk the whole list rather than stop at the first live record. */
        for (entry *e = s->confirmed.head, *next; e; e = next) {
            next = e->next;
            if (e->expires <= now_ms) {
                drop(s, e);
                n++;
            }
        }
        for (entry *e = s->claims.head, *next; e; e = next) {
            next = e->next;
            if (e->lease_until <= abandoned_before) {
                drop(s, e);
                n++;
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
    *purged = n;
    return 0;
}

static void free_shards(memory_store *m, size_t nshards)
{
    for (size_t i = 0; i < nshards; i++) {
        shard *s = &m->shards[i];
        /* Every entry is on one of the two lists: walking them touches only
         * entries, not the whole (mostly untouched) slot mapping. */
        entry_list *lists[] = {&s->claims, &s->confirmed};
        for (size_t l = 0; l < 2; l++) {
            for (entry *e = lists[l]->head, *next; e; e = next) {
                next = e->next;
                free_entry(e);
            }
        }
        free(s->slots);
        pthread_mutex_destroy(&s->lock);
    }
    free(m->shards);
}

static void mem_close(acemq_idem *h)
{
    memory_store *m = h->self;
    if (!m) return;
    free_shards(m, (size_t)1 << m->shard_bits);
    free(m);
    h->self = NULL;
}

static const acemq__idem_methods memory_methods = {
    .version = ACEMQ__IDEM_METHODS_VERSION,
    .name = "memory",
    .close = mem_close,
    .try_claim = mem_try_claim,
    .confirm = mem_confirm,
    .release = mem_release,
    .renew = mem_renew,
    .is_confirmed = mem_is_confirmed,
    .purge = mem_purge,
};

/* Small stores get one shard so that max_entries is exact; large ones get up
 * to 64 so that threads spread over locks. */
static unsigned pick_shard_bits(size_t max_entries)
{
    unsigned bits = 0;
    while (bits < MAX_SHARD_BITS && (max_entries >> (bits + 1)) >= MIN_ENTRIES_PER_SHARD)
        bits++;
    return bits;
}

static int allocate_slots(memory_store *m, size_t nshards)
{
    for (size_t i = 0; i < nshards; i++) {
        m->shards[i].slots = calloc(INITIAL_SLOTS, sizeof(slot));
        if (!m->shards[i].slots) return ACEMQ_ENOMEM;
        m->shards[i].mask = INITIAL_SLOTS - 1;
    }
    return 0;
}

int acemq__idem_open_memory(acemq_idem *h, const acemq__url *url)
{
    static const char *const known[] = {"max_entries", NULL};
    const char *bad = NULL;
    if (acemq__url_check_params(url, known, &bad) != 0)
        return acemq__idem_fail(h, ACEMQ_EURL, "memory: unknown URL parameter '%s'", bad);
    if (url->rest[0] != '\0')
        return acemq__idem_fail(h, ACEMQ_EURL, "memory: takes no path, got '%s'", url->rest);
    if (h->opts.flags & ACEMQ_IDEM_CONFIRM_IN_CALLER_TX)
        return acemq__idem_fail(h, ACEMQ_EINVAL,
                                "memory: ACEMQ_IDEM_CONFIRM_IN_CALLER_TX needs a caller's "
                                "database connection; the memory store has no transactions");
    int64_t max = (int64_t)h->opts.max_entries;
    if (acemq__url_param_int(url, "max_entries", 1, MAX_ENTRIES_LIMIT, &max) != 0)
        return acemq__idem_fail(h, ACEMQ_EURL, "memory: max_entries must be 1..%lld",
                                (long long)MAX_ENTRIES_LIMIT);
    if (max > MAX_ENTRIES_LIMIT)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "memory: max_entries must be 1..%lld",
                                (long long)MAX_ENTRIES_LIMIT);
    h->opts.max_entries = (size_t)max;

    memory_store *m = calloc(1, sizeof *m);
    if (!m) return acemq__idem_fail(h, ACEMQ_ENOMEM, "memory store: out of memory");
    m->shard_bits = pick_shard_bits(h->opts.max_entries);
    size_t nshards = (size_t)1 << m->shard_bits;
    m->per_shard_max = h->opts.max_entries / nshards;
    m->retention_ms = h->opts.retention_ms;
    m->shards = calloc(nshards, sizeof *m->shards);
    int rc = m->shards ? allocate_slots(m, nshards) : ACEMQ_ENOMEM;
    size_t ready = 0;
    while (rc == 0 && ready < nshards && pthread_mutex_init(&m->shards[ready].lock, NULL) == 0)
        ready++;
    if (rc != 0 || ready < nshards) {
        for (size_t i = ready; m->shards && i < nshards; i++)
            free(m->shards[i].slots); /* free_shards below covers those before ready */
        free_shards(m, ready);
        free(m);
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "memory store: out of memory");
    }
    h->self = m;
    h->methods = &memory_methods;
    return 0;
}
