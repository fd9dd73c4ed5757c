/* audit.c — the message audit: producers hashed to shards, each shard an
 * open-addressed table of producer windows in LRU order, with its own memory
 * of evictions, counters and, in the thread-safe flavour, its own lock.
 *
 * The common check (check_fast, check_common) is the id split at its last
 * ':', a hash of the producer, its home slot, a comparison of the key (both
 * in audit_key.h) and the window's inline case: straight-line, with no
 * allocation and, in the single-thread flavour, no call, so that it saves
 * no registers. Everything else goes to the general check (check_general),
 * which answers every case. The single-thread flavour is one shard and
 * takes no lock. The thread-safe flavour picks a shard by the hash's top
 * bits and holds only that shard's lock (check_locked), so checks on
 * producers in different shards never wait for each other.
 *
 * The LRU in the thread-safe flavour is per shard, an approximation: when the
 * audit holds max_producers producers, a newcomer evicts the least recently
 * used producer of its own shard, not of the whole audit. A shard always
 * admits its first producer, and shards racing to admit may each add one, so
 * at most max_producers + shards - 1 windows are held. Counters live in the
 * shard, under its lock, so they cost no atomic operation.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit_internal.h"
#include "audit/audit_key.h"
#include "audit/audit_shard.h"
#include "audit/id_parse.h"
#include "core/dlist.h"
#include "os/shard_lock.h"

/* ---- finding and touching producers (the rest of the table: table.c) ---- */

/* The end of the producer's ring, which runs backwards from its header
 * (see acemq__ring_word). */
static inline uint64_t *entry_ring(entry *p)
{
    return (uint64_t *)(void *)p;
}

/* The producer with this key, or NULL. */
static entry *table_find(const shard *s, uint64_t hash, const void *key, size_t len)
{
    for (size_t i = (size_t)hash & s->mask;; i = (i + 1) & s->mask) {
        entry *p = s->slots[i].p;
        if (!p) return NULL;
        if (p->hash == hash && same_key(p, key, len)) return p;
    }
}

/* A use of p other than a fast answer: it becomes the most recent producer
 * (check_fast's own touch counts its answer by the stamp, see
 * shard.answered). */
static void touch(const acemq_audit *a, shard *s, entry *p)
{
    if (a->stamped) {
        p->stamp = ++s->clock;
        s->other_stamps++;
    } else if (s->head != p) { /* not the head, so it has a prev */
        ACEMQ__DLIST_MOVE_TO_FRONT(s->head, s->tail, p);
    }
}

static inline shard *shard_for(acemq_audit *a, uint64_t hash)
{
    /* hash >> (64 - bits), with no branch for bits = 0: (hash >> 1) >> 63 is 0. */
    return &a->shards[(hash >> 1) >> (63 - a->shard_bits)];
}

/* A producer for a key not in the table, most recent in the LRU, its window
 * left for the caller: the shard's least recently used one, remembered as
 * evicted, when the audit is full (its memory reused when the key fits); a
 * new one otherwise. NULL on ENOMEM, with the table as it was before, less
 * the evicted producer. */
static entry *admit(acemq_audit *a, shard *s, uint64_t hash, const void *key, size_t len)
{
    size_t held =
        a->nshards == 1 ? s->count : atomic_load_explicit(&a->producers, memory_order_relaxed);
    int evict = held >= a->max_producers && s->count > 0;
    if (acemq__audit_table_reserve(s, a->stamped, evict ? 0 : 1) != 0) return NULL;
    entry *p = NULL;
    if (evict) {
        p = acemq__audit_recency_pop_oldest(a->stamped, s);
        acemq__audit_table_remove(s, p);
        s->count--;
        s->stats.evictions++;
        if (acemq__ghosts_put(&s->ghosts, key_hash(p->key, p->key_len))) s->stats.forgotten++;
        /* The evicted producer's place in the count passes to the newcomer. */
        if (p->key_cap < len) {
            acemq__audit_entry_free(a->ring_pad, p);
            p = NULL;
        }
    } else {
        atomic_fetch_add_explicit(&a->producers, 1, memory_order_relaxed);
    }
    if (!p) {
        size_t cap = len < MIN_KEY_CAP ? MIN_KEY_CAP : (len + 15) & ~(size_t)15;
        size_t bytes = a->ring_pad + ((sizeof *p + cap + 63) & ~(size_t)63);
        unsigned char *base = aligned_alloc(64, bytes);
        if (!base) {
            atomic_fetch_sub_explicit(&a->producers, 1, memory_order_relaxed);
            return NULL;
        }
        p = (entry *)(void *)(base + a->ring_pad);
        p->key_cap = (uint32_t)cap;
        /* base lives on as p, ring_pad bytes in; entry_free gives it back. */
        // cppcheck-suppress memleak
    }
    p->hash = hash;
    p->key_len = (uint32_t)len;
    memcpy(p->key, key, len);
    p->w.ring_end = entry_ring(p);
    acemq__audit_table_put(s->slots, s->mask, p);
    acemq__audit_recency_add(a->stamped, s, p);
    s->count++;
    return p;
}

/* ---- the checks ---- */

/* Counts an answer off the fast path and applies the policy to an UNKNOWN. */
static int answer(acemq_audit *a, shard *s, int result, int cause)
{
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

/* A producer we hold no window for. */
static int check_newcomer(acemq_audit *a, shard *s, uint64_t hash, const void *key, size_t len,
                          uint64_t seq, int *cause)
{
    /* If we dropped its window, anything up to this id may have been seen:
     * its first id back is UNKNOWN. */
    int readmitted = acemq__ghosts_take(&s->ghosts, key_hash(key, len)) || a->lost_history;
    entry *p = admit(a, s, hash, key, len);
    if (!p) return ACEMQ_ENOMEM;
    acemq__window_init(&p->w, &a->shape, seq, readmitted);
    if (!readmitted) return answer(a, s, ACEMQ_AUDIT_NEW, ACEMQ_AUDIT_CAUSE_NONE);
    *cause = ACEMQ_AUDIT_EVICTED;
    return answer(a, s, ACEMQ_AUDIT_UNKNOWN, *cause);
}

/* The whole check, every case: the way out of check_fast, and the check of
 * every producer too long for it. Out of line, so that check_fast, inline
 * in the entry points, stays small. */
static __attribute__((noinline)) int check_general(acemq_audit *a, const void *key, size_t len,
                                                   uint64_t seq, int *cause)
{
    if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
    /* len - 1 wraps for 0: one comparison rejects both ends. */
    if (!a || !key || len - 1 >= ACEMQ_AUDIT_PRODUCER_MAX) return ACEMQ_EINVAL;
    uint64_t hash = key_hash(key, len);
    shard *s = shard_for(a, hash);
    lock(a, s);
    int rc, c = ACEMQ_AUDIT_CAUSE_NONE;
    entry *p = table_find(s, hash, key, len);
    if (!p) {
        rc = check_newcomer(a, s, hash, key, len, seq, &c);
    } else {
        touch(a, s, p);
        if (acemq__window_check_fast_at(&p->w, entry_ring(p), &a->shape, seq, &rc,
                                        &s->answered_duplicates)) {
            s->answered++;
        } else {
            /* Fail-open answers an UNKNOWN NEW, so it records it where the
             * ring can (its next sighting is then a DUPLICATE, as in
             * ActiveMQ, which records whatever falls in its window);
             * fail-closed leaves it unrecorded, UNKNOWN again, for the
             * durable store to decide. */
            rc = acemq__window_check(&p->w, &a->shape, seq, a->policy == ACEMQ_AUDIT_FAIL_OPEN, &c);
            rc = answer(a, s, rc, c);
        }
    }
    unlock(a, s);
    if (cause) *cause = c;
    return rc;
}

/* The common case on shard s, whose lock the caller holds when it has one:
 * a known producer in its home slot (the table is kept sparse, see slot), a
 * sequence the window's inline case takes. 1 with *rc set when it is that
 * case; 0 otherwise, before anything is written, and the caller hands the
 * id to check_general, which does the whole check from the start and
 * treats this case exactly as this does. */
static inline __attribute__((always_inline)) int check_common(acemq_audit *a, shard *s,
                                                              const void *key, size_t len,
                                                              uint64_t seq, uint64_t hash, int *rc)
{
    entry *p = s->slots[(size_t)hash & s->mask].p;
    if (__builtin_expect(p == NULL || p->hash != hash || !same_key_fast(p, key, len) ||
                             !acemq__window_check_fast_at(&p->w, entry_ring(p), &a->shape, seq, rc,
                                                          &s->answered_duplicates),
                         0))
        return 0;
    if (a->stamped) {
        p->stamp = ++s->clock; /* which counts this answer: see shard.answered */
    } else {
        if (s->head != p) ACEMQ__DLIST_MOVE_TO_FRONT(s->head, s->tail, p);
        s->answered++;
    }
    return 1;
}

/* The thread-safe flavour's check: the common case under its shard's lock,
 * or the general check. Out of line, so that the single-thread check,
 * which calls nothing on its common path, keeps no registers across a
 * call. */
static __attribute__((noinline)) int check_locked(acemq_audit *a, const void *key, size_t len,
                                                  uint64_t seq, uint64_t hash, int *cause)
{
    shard *s = shard_for(a, hash);
    lock(a, s);
    int rc;
    int done = check_common(a, s, key, len, seq, hash, &rc);
    unlock(a, s);
    if (!done) return check_general(a, key, len, seq, cause);
    if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
    return rc;
}

/* The check every entry point makes: the common case straight-line, the
 * rest in check_general. The single-thread flavour has one shard, `one`,
 * and no lock. */
static inline __attribute__((always_inline)) int check_fast(acemq_audit *a, const void *key,
                                                            size_t len, uint64_t seq, int *cause)
{
    if (__builtin_expect(!a || !key || !key_fast_range(len), 0))
        return check_general(a, key, len, seq, cause);
    uint64_t hash = key_hash_fast(key, len);
    if (a->locked) return check_locked(a, key, len, seq, hash, cause);
    int rc;
    if (__builtin_expect(!check_common(a, &a->one, key, len, seq, hash, &rc), 0))
        return check_general(a, key, len, seq, cause);
    if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
    return rc;
}

int acemq_audit_check_seq(acemq_audit *a, const void *producer, size_t producer_len,
                          uint64_t sequence, int *cause)
{
    return check_fast(a, producer, producer_len, sequence, cause);
}

/* The text check of every id the word split does not take (one under nine
 * bytes, one whose sequence has eight digits or more, a malformed one, any
 * id on a big-endian machine): the byte loop, then the check.
 * Out of line, so that the common text check keeps no byte loop in its
 * body. */
static __attribute__((noinline)) int check_text_slow(acemq_audit *a, const char *id, size_t id_len,
                                                     int *cause)
{
    acemq_audit_id p = {0};
    int rc = acemq__audit_split_slow(id, id_len, &p);
    if (rc != 0) {
        if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
        return rc;
    }
    return check_fast(a, p.producer, p.producer_len, p.sequence, cause);
}

int acemq_audit_check(acemq_audit *a, const char *id, size_t id_len, int *cause)
{
#ifdef ACEMQ__AUDIT_SWAR
    size_t producer_len;
    uint64_t sequence;
    if (__builtin_expect(acemq__audit_split_fast(id, id_len, &producer_len, &sequence), 1))
        return check_fast(a, id, producer_len, sequence, cause);
#endif
    return check_text_slow(a, id, id_len, cause);
}

/* ---- many ids in one call: the one-id check, id after id ---- */

int acemq_audit_check_many(acemq_audit *a, const char *const *ids, const size_t *id_lens, size_t n,
                           int *results, int *causes)
{
    if (!a || (n > 0 && (!ids || !id_lens || !results))) return ACEMQ_EINVAL;
    for (size_t i = 0; i < n; i++)
        results[i] = acemq_audit_check(a, ids[i], id_lens[i], causes ? &causes[i] : NULL);
    return 0;
}

int acemq_audit_check_seq_many(acemq_audit *a, const void *const *producers,
                               const size_t *producer_lens, const uint64_t *sequences, size_t n,
                               int *results, int *causes)
{
    if (!a || (n > 0 && (!producers || !producer_lens || !sequences || !results)))
        return ACEMQ_EINVAL;
    for (size_t i = 0; i < n; i++)
        results[i] =
            check_fast(a, producers[i], producer_lens[i], sequences[i], causes ? &causes[i] : NULL);
    return 0;
}

int acemq_audit_rollback_seq(acemq_audit *a, const void *producer, size_t producer_len,
                             uint64_t sequence)
{
    if (!a || !producer || producer_len == 0 || producer_len > ACEMQ_AUDIT_PRODUCER_MAX)
        return ACEMQ_EINVAL;
    uint64_t hash = key_hash(producer, producer_len);
    shard *s = shard_for(a, hash);
    lock(a, s);
    int cleared = 0;
    entry *p = table_find(s, hash, producer, producer_len);
    if (p) {
        /* A rollback is a use, as in ActiveMQ's access-ordered map. */
        touch(a, s, p);
        cleared = acemq__window_clear(&p->w, &a->shape, sequence);
    }
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
