/* idem.c — the in-process idempotency store: one hash table of
 * leased, fenced entries, bounded by max_entries, behind one lock.
 *
 * One table, not shards with a share of the bound each: a shard's share
 * fills before the store does (ids never spread evenly), and a shard that
 * evicts a confirmed id within its retention while the store has room lets
 * a duplicate through. With one table and one count, nothing is evicted and
 * no claim is refused while the store holds fewer than max_entries entries,
 * and the entry dropped at the bound is the store's, not a shard's (see
 * Bounded below).
 *
 * The table is open-addressed (linear probing) over two arrays: tags, one
 * byte a slot (0 empty, else 7 bits of the hash), and slots, 8 bytes a slot
 * (32 bits of the hash and the record's index). A lookup reads tags and
 * opens a slot only where the tag matches, so a new id, the common case,
 * reads one byte and touches no slot and no entry. That read is most of a
 * claim's cost once the table outgrows the caches, and a tag array is
 * small enough to stay in cache where 16-byte slots would not. The table
 * starts small and doubles before it passes its load bound (7/8 full, or
 * half in a small store: see DENSE_LOAD), so a store that never fills
 * never pays for its max_entries, up to the size max_entries needs at that
 * load (bound_slots, any number of slots: see home_of), never past it. The
 * table takes bound_slots in one step from the last power of two under
 * half of it, skipping the one between, whose rehash would move as many
 * ids as all the steps before it.
 *
 * A new id's slot is not written by its claim but by the next operation
 * that reads slots (flush_pending): see there for why.
 *
 * The table comes from the store's arena (backends/memory/arena.h), records from its
 * region (backends/memory/records.h), both in transparent huge pages once they are
 * big: a million ids fault in some fifty 2 MiB pages instead of 20,000
 * small ones, and a probe of a big table does not miss the TLB. The region
 * faults its records in ahead of the claims on a thread of its own, so
 * that a claim seldom waits for the kernel to zero a page
 * (backends/memory/records.h).
 *
 * Since one call cannot hide that read, try_claim_many() takes a batch: it
 * hashes every id and prefetches its slot first, so the reads overlap, then
 * claims the ids one by one, in order, exactly as try_claim() would.
 *
 * Entries are fixed-size records (one cache line) taken from the region in
 * runs, with the id inside the record when it is at most ID_INLINE bytes: a
 * claim of a new id costs no malloc, and entries claimed one after the other
 * sit next to each other. Records that go (released, evicted, purged) wait
 * on the free list for the next claim; the region goes at close.
 *
 * Bounded: the store holds at most max_entries entries, counted store-wide,
 * and below that bound no entry is dropped to make room. A new id's claim
 * at the bound drops one entry and reuses its memory, the first of these
 * that exists: the confirmation made longest ago if its retention has run
 * out (an expiration); else the claim whose lease was set longest ago
 * (claimed, taken over or renewed) if that lease has run out (an eviction:
 * any claim of its id may take it over already, while a live confirmation
 * still stops a duplicate); else the confirmation made longest ago (an
 * eviction: a later duplicate of that id runs again). A live claim is never
 * dropped: with nothing else left the claim fails with ACEMQ_EFULL. With
 * one retention, one lease and a clock that does not step back, the first
 * entry of each list is the first to run out, so this drops an entry that
 * ran out whenever there is one.
 *
 * Invariants a reader must keep:
 *  - every entry taken from the region is either live, in the table and in
 *    exactly one of the two lists, `confirmed` (state CONFIRMED, in confirm
 *    order, so with one retention the head expires first) or `claims` (state
 *    CLAIMED, in the order their leases were set: a renewal moves its claim
 *    to the tail), or on the free list, owning no memory of its own (no
 *    result, fingerprint or out-of-line id). Released entries go to the free
 *    list at once. So the store never takes more than max_entries records.
 *  - tokens come from the store's counter, which only grows: an id's tokens
 *    grow with every claim and never repeat, even after its entry was
 *    released, evicted or forgotten, and no two claims share one.
 *  - `latest` is the most recent claim, or an entry that has since gone
 *    (released, evicted, reused for another id), or NULL. It is only
 *    trusted after checking token, state and id under the lock; the memory
 *    it names stays the store's until close.
 *  - outside the lock, at most one slot is stale: the one at pending_at,
 *    whose tag is already set and whose content is `pending`. Whatever
 *    reads slots calls flush_pending first.
 *  - tags_hint, slots_hint and cap_hint follow tags, slots and cap (stored
 *    under the lock whenever the table moves) and are read without the lock
 *    only to aim a prefetch. They may be stale, even name a freed array, so
 *    nothing ever loads through them: a prefetch cannot fault.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backends/builtin.h"
#include "backends/memory/table.h"
#include "backends/test_control.h"
#include "idem/idem_backend.h"
#include "os/shard_lock.h"

static int fingerprint_differs(const entry *e, const acemq__bytes *fp)
{
    const extras *x = e->more;
    return fp->len > 0 && x && x->fingerprint_len > 0 &&
           (x->fingerprint_len != fp->len || memcmp(x->fingerprint, fp->data, fp->len) != 0);
}

/* Remembers the claimer's fingerprint; keeps the old one when none is given. */
static int set_fingerprint(entry *e, const acemq__bytes *fp)
{
    if (fp->len == 0) return 0;
    if (!e->more) {
        e->more = calloc(1, sizeof *e->more);
        if (!e->more) return ACEMQ_ENOMEM;
    }
    e->more->fingerprint_len = (uint8_t)fp->len;
    memcpy(e->more->fingerprint, fp->data, fp->len);
    return 0;
}

static void grant(table *t, entry *e, const acemq__claim_args *a, acemq_claim *out)
{
    e->state = STATE_CLAIMED;
    e->token = ++t->next_token;
    t->latest = e;
    e->lease_until = a->lease_until_ms;
    list_append(&t->claims, e);
    out->token = e->token;
    out->lease_until_ms = e->lease_until;
}

/* Turns an existing entry into a fresh claim: a forgotten confirmation (which
 * keeps nothing of its past, fingerprint included) or an expired lease. */
static int reclaim(table *t, entry *e, int forgotten, const acemq__claim_args *a, acemq_claim *out)
{
    if (forgotten) clear_extras(e);
    int rc = set_fingerprint(e, &a->fingerprint);
    if (rc != 0) return rc;
    list_remove(list_of(t, e), e);
    if (e->more) {
        free(e->more->result);
        e->more->result = NULL;
        e->more->result_len = 0;
    }
    grant(t, e, a, out);
    return ACEMQ_CLAIMED;
}

/* Keeps the address of a long id's buffer in the id bytes; the entry owns
 * the buffer from here on, and clear_entry frees it. */
static void set_long_id(entry *e, unsigned char *buf)
{
    memcpy(e->id, &buf, sizeof buf);
}

/* An entry for id: the spare one (a dropped record) when there is one, else
 * a record from the region. NULL when out of memory. */
static entry *new_entry(memory_store *m, table *t, entry *spare, const acemq__bytes *id)
{
    entry *e = spare;
    if (e) {
        clear_entry(e);
    } else {
        e = alloc_entry(m, t);
        if (!e) return NULL;
        e->more = NULL;
    }
    if (id->len <= ID_INLINE) {
        memcpy(e->id, id->data, id->len);
    } else {
        unsigned char *p = malloc(id->len);
        if (!p) {
            e->id_len = 0;
            free_entry(t, e);
            return NULL;
        }
        memcpy(p, id->data, id->len);
        set_long_id(e, p);
    }
    e->id_len = (uint16_t)id->len;
    return e;
}

/* A claim of an id the store does not hold; i is the empty slot its lookup
 * ended on. Below max_entries it only adds; at the bound make_room drops
 * one entry first or the claim is refused. */
static int claim_new(acemq_idem *h, memory_store *m, table *t, size_t i, uint64_t hash,
                     const acemq__bytes *id, const acemq__claim_args *a, acemq_claim *out)
{
    entry *spare = NULL, *absent;
    if (t->count >= m->max_entries) {
        if (make_room(h, m, t, a->now_ms, &spare) != 0)
            return acemq__idem_fail(h, ACEMQ_EFULL,
                                    "memory store: full: max_entries=%zu entries, all claims, the "
                                    "oldest lease still running; live claims are never dropped",
                                    m->max_entries);
        i = probe(m, t, hash, id, &absent); /* removing the spare may have shifted id's run */
    } else {
        int grew = maybe_grow(m, t);
        if (grew < 0) return acemq__idem_fail(h, ACEMQ_ENOMEM, "memory store: out of memory");
        if (grew) i = probe(m, t, hash, id, &absent); /* the table moved */
    }
    entry *e = new_entry(m, t, spare, id);
    if (!e || set_fingerprint(e, &a->fingerprint) != 0) {
        if (e) free_entry(t, e);
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "memory store: out of memory");
    }
    /* probe() flushed the previous pending slot. */
    t->tags[i] = tag_of(hash);
    /* The slot is written by the next reader of slots (flush_pending): its
     * line is on its way by then. */
    __builtin_prefetch(&t->slots[i], 1, 3);
    t->pending_at = i;
    t->pending.hash = (uint32_t)hash;
    t->pending.index = acemq__record_index(&m->records, e);
    t->count++;
    grant(t, e, a, out);
    return ACEMQ_CLAIMED;
}

static int decide_existing(acemq_idem *h, table *t, entry *e, const acemq__claim_args *a,
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
            const extras *x = e->more;
            if (x && x->result) {
                out->has_result = 1;
                out->result_len = x->result_len;
                size_t n = x->result_len < a->result_cap ? x->result_len : a->result_cap;
                if (n > 0) memcpy(a->result_buf, x->result, n); /* buf may be NULL when n is 0 */
            }
            return ACEMQ_ALREADY_CONFIRMED;
        }
        if (e->lease_until > a->now_ms) {
            out->lease_until_ms = e->lease_until;
            return ACEMQ_IN_PROGRESS;
        }
    }
    int rc = reclaim(t, e, forgotten, a, out);
    if (rc != ACEMQ_CLAIMED) return acemq__idem_fail(h, rc, "memory store: out of memory");
    out->takeover = !forgotten;
    return rc;
}

static int claim_hashed(acemq_idem *h, memory_store *m, uint64_t hash, const acemq__bytes *id,
                        const acemq__claim_args *a, acemq_claim *out)
{
    table *t = &m->t;
    acemq__shard_lock_take(&t->lock);
    entry *e;
    size_t i = probe(m, t, hash, id, &e);
    int rc = e ? decide_existing(h, t, e, a, out) : claim_new(h, m, t, i, hash, id, a, out);
    acemq__shard_lock_give(&t->lock);
    return rc;
}

static int mem_try_claim(acemq_idem *h, const acemq__bytes *id, const acemq__claim_args *a,
                         acemq_claim *out)
{
    return claim_hashed(h, h->self, a->has_hint ? a->hint : hash_id(id), id, a, out);
}

/* A new id's claim waits on one read, of the tag its hash names, which
 * misses the cache once the table outgrows it. Started here, before the
 * core checks the options and reads the clock, it overlaps that work; the
 * hash is handed back, not computed twice. */
static uint64_t mem_prefetch(acemq_idem *h, const acemq__bytes *id)
{
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    prefetch_tag(&m->t, hash);
    return hash;
}

/* Hashes a group of ids and prefetches their tags and slots, then claims them in
 * order, each under the lock as try_claim would: by the time the
 * first claim probes, the other reads are in flight, so they overlap instead
 * of following one another. A later id of the group that repeats an earlier
 * one finds the earlier claim, as a later call would. */
static int mem_try_claim_many(acemq_idem *h, size_t n, const acemq__bytes *ids,
                              const acemq__claim_args *a, acemq_claim *out, int *status)
{
    memory_store *m = h->self;
    uint64_t hashes[CLAIM_GROUP];
    for (size_t lo = 0; lo < n; lo += CLAIM_GROUP) {
        size_t k = n - lo < CLAIM_GROUP ? n - lo : CLAIM_GROUP;
        for (size_t i = 0; i < k; i++) {
            if (ids[lo + i].len == 0) continue;
            hashes[i] = hash_id(&ids[lo + i]);
            prefetch_tag_and_slot(&m->t, hashes[i]);
        }
        for (size_t i = 0; i < k; i++) {
            if (ids[lo + i].len == 0) continue;
            status[lo + i] = claim_hashed(h, m, hashes[i], &ids[lo + i], &a[lo + i], &out[lo + i]);
        }
    }
    return 0;
}

/* The entry for id when token is its current claim (or, for a repeated
 * confirm, its confirmation), else NULL. */
static entry *fenced(const memory_store *m, table *t, uint64_t hash, const acemq__bytes *id,
                     uint64_t token, int confirmed_ok, int64_t now)
{
    entry *e = find(m, t, hash, id);
    if (!e || e->token != token) return NULL;
    if (e->state == STATE_CLAIMED) return e;
    return confirmed_ok && e->expires > now ? e : NULL;
}

/* The commonest confirm follows its own claim: that claim is still the
 * latest, so it is found with no hash and no probe. The token, the state
 * and every byte of the id are checked, so an entry that has gone since,
 * or another id's, is never taken; NULL sends the caller to the lookup by
 * id. Under the lock. */
static entry *latest_claim(const table *t, const acemq__bytes *id, uint64_t token)
{
    entry *e = t->latest;
    if (e && e->token == token && e->state == STATE_CLAIMED && e->id_len == id->len &&
        memcmp(entry_id(e), id->data, id->len) == 0)
        return e;
    return NULL;
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
    /* Allocated before the lock, used only if the entry needs them. */
    unsigned char *copy = NULL;
    extras *spare = NULL;
    if (result->len > 0) {
        copy = malloc(result->len);
        spare = calloc(1, sizeof *spare);
        if (!copy || !spare) {
            free(copy);
            free(spare);
            return acemq__idem_fail(h, ACEMQ_ENOMEM, "memory store: out of memory");
        }
        memcpy(copy, result->data, result->len);
    }
    table *t = &m->t;
    acemq__shard_lock_take(&t->lock);
    entry *e = latest_claim(t, id, token);
    if (!e) e = fenced(m, t, hash_id(id), id, token, 1, now_ms);
    if (e) {
        list_remove(list_of(t, e), e);
        e->state = STATE_CONFIRMED;
        e->expires = expires_ms;
        if (copy && !e->more) {
            e->more = spare;
            spare = NULL;
        }
        if (e->more) { /* a confirm without a result drops an earlier one */
            free(e->more->result);
            e->more->result = copy;
            e->more->result_len = (uint32_t)result->len;
            copy = NULL;
        }
        list_append(&t->confirmed, e);
    }
    acemq__shard_lock_give(&t->lock);
    /* Tested first: free(NULL) is still a call through the PLT, and most
     * confirms carry no result. */
    if (copy) free(copy);
    if (spare) free(spare);
    return e ? 0 : stale(h, "confirm");
}

static int mem_release(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms)
{
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    table *t = &m->t;
    acemq__shard_lock_take(&t->lock);
    entry *e = fenced(m, t, hash, id, token, 0, now_ms);
    if (e) drop(m, t, e);
    acemq__shard_lock_give(&t->lock);
    return e ? 0 : stale(h, "release");
}

static int mem_renew(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms,
                     int64_t lease_until_ms)
{
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    table *t = &m->t;
    acemq__shard_lock_take(&t->lock);
    entry *e = fenced(m, t, hash, id, token, 0, now_ms);
    if (e) { /* to the tail: claims stay in the order their leases were set */
        e->lease_until = lease_until_ms;
        list_remove(&t->claims, e);
        list_append(&t->claims, e);
    }
    acemq__shard_lock_give(&t->lock);
    return e ? 0 : stale(h, "renew");
}

static int mem_is_confirmed(acemq_idem *h, const acemq__bytes *id, int64_t now_ms)
{
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    table *t = &m->t;
    acemq__shard_lock_take(&t->lock);
    entry *e = find(m, t, hash, id);
    int confirmed = e && e->state == STATE_CONFIRMED && e->expires > now_ms;
    acemq__shard_lock_give(&t->lock);
    return confirmed;
}

static int mem_purge(acemq_idem *h, int64_t now_ms, uint64_t *purged)
{
    memory_store *m = h->self;
    int64_t abandoned_before = now_ms - m->retention_ms;
    uint64_t n = 0;
    table *t = &m->t;
    acemq__shard_lock_take(&t->lock);
    /* Confirm order is not expiry order if the clock stepped back, and
     * leases differ in length, so walk the whole lists rather than stop at
     * the first live record. */
    for (entry *e = t->confirmed.head, *next; e; e = next) {
        next = e->next;
        if (e->expires <= now_ms) {
            drop(m, t, e);
            n++;
        }
    }
    for (entry *e = t->claims.head, *next; e; e = next) {
        next = e->next;
        if (e->lease_until <= abandoned_before) {
            drop(m, t, e);
            n++;
        }
    }
    acemq__shard_lock_give(&t->lock);
    *purged = n;
    return 0;
}

/* ---- the operator's calls (idem_backend.h: counts, inspect, forget) ---- */

/* A record's state as an operator sees it (acemq_idem_state). Released
 * claims are dropped at once, so a kept claim is held or abandoned. */
static int state_at(const entry *e, int64_t now_ms)
{
    if (e->state == STATE_CONFIRMED)
        return e->expires > now_ms ? ACEMQ_IDEM_CONFIRMED : ACEMQ_IDEM_EXPIRED;
    return e->lease_until > now_ms ? ACEMQ_IDEM_HELD : ACEMQ_IDEM_ABANDONED;
}

static int mem_counts(acemq_idem *h, int64_t now_ms, acemq_idem_counts *out)
{
    memory_store *m = h->self;
    table *t = &m->t;
    acemq__shard_lock_take(&t->lock);
    for (const entry *e = t->confirmed.head; e; e = e->next) {
        if (state_at(e, now_ms) == ACEMQ_IDEM_CONFIRMED)
            out->confirmed++;
        else
            out->expired++;
    }
    const entry *next = NULL;
    for (const entry *e = t->claims.head; e; e = e->next) {
        if (state_at(e, now_ms) != ACEMQ_IDEM_HELD) {
            out->abandoned++;
            continue;
        }
        out->held++;
        if (!next || e->lease_until < next->lease_until) next = e;
    }
    if (next) {
        out->has_next_lease = 1;
        out->next_id_len = next->id_len;
        memcpy(out->next_id, entry_id(next),
               next->id_len < sizeof out->next_id ? next->id_len : sizeof out->next_id);
        out->next_token = next->token;
        out->next_lease_until_ms = next->lease_until;
    }
    acemq__shard_lock_give(&t->lock);
    return 0;
}

static int mem_inspect(acemq_idem *h, const acemq__bytes *id, int64_t now_ms,
                       acemq_idem_record *out)
{
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    table *t = &m->t;
    acemq__shard_lock_take(&t->lock);
    const entry *e = find(m, t, hash, id);
    if (e) {
        out->state = state_at(e, now_ms);
        out->token = e->token;
        if (e->state == STATE_CONFIRMED)
            out->expires_ms = e->expires;
        else
            out->lease_until_ms = e->lease_until;
        const extras *x = e->more;
        out->has_result = x && x->result;
        out->result_len = out->has_result ? x->result_len : 0;
        out->fingerprint_len = x ? x->fingerprint_len : 0;
    }
    acemq__shard_lock_give(&t->lock);
    return e ? 0 : ACEMQ_ENOENT;
}

/* Tokens come from the store-wide next_token, so a forgotten record's token
 * is never issued again. */
static int mem_forget(acemq_idem *h, const acemq__bytes *id, int64_t now_ms)
{
    (void)now_ms;
    memory_store *m = h->self;
    uint64_t hash = hash_id(id);
    table *t = &m->t;
    acemq__shard_lock_take(&t->lock);
    entry *e = find(m, t, hash, id);
    if (e) drop(m, t, e);
    acemq__shard_lock_give(&t->lock);
    return e != NULL;
}

/* Frees everything the store holds; the lock too when lock_ready. */
static void free_store(memory_store *m, int lock_ready)
{
    if (lock_ready) acemq__shard_lock_destroy(&m->t.lock);
    /* Every record taken from the region is live, on the free list owning
     * nothing, or not used yet (zero, owning nothing), so a walk of all of
     * them, in address order, frees all there is. */
    for (size_t i = 0; i < m->records.taken; i++)
        clear_entry(record(m, (uint32_t)i));
    acemq__records_destroy(&m->records);
    acemq__arena_destroy(&m->arena); /* the table, and any it outgrew */
}

size_t acemq__memory_idem_slots(acemq_idem *h)
{
    memory_store *m = h->self;
    acemq__shard_lock_take(&m->t.lock);
    size_t slots = m->t.cap;
    acemq__shard_lock_give(&m->t.lock);
    return slots;
}

size_t acemq__memory_idem_wait_ahead(acemq_idem *h)
{
    memory_store *m = h->self;
    return acemq__records_wait_ahead(&m->records);
}

static void mem_close(acemq_idem *h)
{
    memory_store *m = h->self;
    if (!m) return;
    free_store(m, 1);
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
    .try_claim_many = mem_try_claim_many,
    .prefetch = mem_prefetch,
    .counts = mem_counts,
    .inspect = mem_inspect,
    .forget = mem_forget,
};

/* The first table, INITIAL_SLOTS big: it grows as the store fills (see
 * the top). 0, or ACEMQ_ENOMEM. */
static int allocate_slots(memory_store *m)
{
    table *t = &m->t;
    t->tags = acemq__arena_alloc(&m->arena, INITIAL_SLOTS);
    t->slots = acemq__arena_alloc(&m->arena, INITIAL_SLOTS * sizeof(slot));
    if (!t->tags || !t->slots) return ACEMQ_ENOMEM;
    t->cap = INITIAL_SLOTS;
    t->pending_at = NO_PENDING;
    set_hints(t);
    return 0;
}

static int open_memory(acemq_idem *h, const acemq__url *url)
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
    if (!m || acemq__arena_init(&m->arena) != 0) {
        free(m);
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "memory store: out of memory");
    }
    m->max_entries = h->opts.max_entries;
    m->max_load = max_load_for(m->max_entries);
    m->retention_ms = h->opts.retention_ms;
    int rc = acemq__records_init(&m->records, m->max_entries, 1);
    if (rc == 0) rc = allocate_slots(m);
    int lock_ready = rc == 0 && acemq__shard_lock_init(&m->t.lock) == 0;
    if (!lock_ready) {
        free_store(m, 0); /* and the arena, with the table in it */
        free(m);
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "memory store: out of memory");
    }
    h->self = m;
    h->methods = &memory_methods;
    return 0;
}

const acemq__idem_backend acemq__memory_idem_backend = {{"memory", "memory:"}, open_memory};
