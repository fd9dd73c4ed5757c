/* audit_internal.h — what the message audit's files share: the bit window, a
 * hash map in LRU order (the connection audit's table of audits; the audit's
 * own producer table is in audit.c) and the memory of evictions.
 *
 * None of these lock: the audit (audit.c) and the connection audit
 * (conn_audit.c) hold a shard's lock, when they have one, around every use.
 */
#ifndef ACEMQ_AUDIT_INTERNAL_H
#define ACEMQ_AUDIT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "acemq/audit.h"
#include "core/dlist.h"

/* ---- window.c: one producer's sliding window of seen sequences ---- */

/* The window's size, shared by every producer of an audit. The ring holds
 * ring_bits >= reach + 128 bits (a power of two, so a position is seq & ring_mask),
 * and the `reach` sequences ending at `top` have exact bits: reach is the bit
 * count of ActiveMQ's window for this depth, 64 * ((depth + 1) / 64 + 1),
 * more than depth, so that every sequence ActiveMQ still remembers has its
 * bit here too. The window proper, whose clear bits are answered NEW, is the
 * `depth` sequences ending at `top` (and not below start). */
typedef struct acemq__window_shape {
    uint64_t depth;
    uint64_t reach;
    uint64_t ring_bits;
    uint64_t ring_mask;
    size_t words; /* ring_bits / 64 */
} acemq__window_shape;

/* Invariant: for every s with top - reach < s <= top, bit (s & ring_mask) is
 * set iff s was recorded since the window began and not rolled back since.
 * A check records every sequence it answers NEW and, when the audit answers
 * UNKNOWN as NEW (fail-open), every UNKNOWN one within that reach; it never
 * records one it answers UNKNOWN under fail-closed. The window began with
 * its whole ring clear, and a slide clears the positions it brings in, so
 * no bit within the reach is left from an older sequence.
 *
 * Ahead of the top, every position up to the end of the ring word after
 * top's word is clear (at least 64 positions), so that a step of up to 64
 * sets one bit and clears one word (acemq__window_take_next). The ring is at
 * least reach + 128 bits, so that word never holds a position within the
 * reach. Bits of other positions are stale and never read.
 *
 * The window's floor, the lowest sequence whose clear bit means NEW, is
 * max(start, top - (depth - 1)), and is not stored: a sequence is inside
 * the window when top - seq < depth and start <= seq <= top, two
 * comparisons made only for a sequence behind the top
 * (acemq__window_check_fast_at), so that a slide forward reads and writes
 * nothing but top and ring words. */
typedef struct acemq__window {
    uint64_t top;        /* highest sequence seen */
    uint64_t start;      /* lowest sequence whose clear bit means NEW */
    uint64_t readmitted; /* 1: began after the producer was evicted */
    uint64_t *ring_end;  /* one past the ring's words, owned by whoever holds the window */
} acemq__window;

/* The ring word of position pos (pos & ring_mask). The ring runs backwards
 * from its end: word k is the k-th before ring_end. The audit puts each ring
 * just before its producer's header, so the check finds its word from the
 * producer's address and the sequence alone: indexed forwards from the
 * ring's start, the address also needed the ring's length, a load and two
 * instructions more on every check. */
static inline uint64_t *acemq__ring_word(uint64_t *ring_end, uint64_t pos)
{
    /* -1 - k written as ~k: one instruction, and the address is then
     * ring_end + 8 * ~k, which x86's addressing computes for free. */
    return ring_end + (ptrdiff_t) ~(pos >> 6);
}

/* Sets the bit of ring position pos (seq & ring_mask) in the ring ending at
 * ring_end: 1 when it was already set, 0 otherwise. The window's general
 * check and the fast check's "inside" case share it. */
static inline uint64_t acemq__ring_test_and_set(uint64_t *ring_end, uint64_t pos)
{
    uint64_t *word = acemq__ring_word(ring_end, pos);
    uint64_t old = *word;
    *word = old | (uint64_t)1 << (pos & 63);
    return (old >> (pos & 63)) & 1;
}

void acemq__window_shape_init(acemq__window_shape *sh, uint32_t depth);
/* Bytes of one window's ring (the words before w->ring_end). */
size_t acemq__window_size(const acemq__window_shape *sh);
/* Starts a window at seq, seq recorded; w->ring_end must end its ring. A readmitted window starts
 * exactly at seq; a new one reaches depth - 1 below it, so early stragglers count. */
void acemq__window_init(acemq__window *w, const acemq__window_shape *sh, uint64_t seq,
                        int readmitted);
/* Records seq: ACEMQ_AUDIT_NEW, _DUPLICATE (its bit set, wherever it lies
 * within the reach), or _UNKNOWN with *cause set: outside the window, and its
 * bit clear or beyond the reach. An UNKNOWN within the reach is recorded when
 * record_unknown is set (the audit answers it NEW), so that it is a
 * DUPLICATE next time. */
int acemq__window_check(acemq__window *w, const acemq__window_shape *sh, uint64_t seq,
                        int record_unknown, int *cause);

/* Moves the top to seq, up to 64 ahead (the positions between, clear by
 * the invariant), sets its bit and clears the word after seq's, so that
 * the invariant holds for the new top. */
static inline void acemq__window_take_next(acemq__window *w, uint64_t *ring_end,
                                           const acemq__window_shape *sh, uint64_t seq)
{
    uint64_t pos = seq & sh->ring_mask;
    w->top = seq;
    *acemq__ring_word(ring_end, (pos + 64) & sh->ring_mask) = 0;
    *acemq__ring_word(ring_end, pos) |= (uint64_t)1 << (pos & 63);
}

/* acemq__window_check for the check path, inline: 1 with *result set when
 * seq is one of the two common cases, a sequence up to 64 ahead of the top
 * (the next one, or past the gap that competing consumers leave) or one
 * inside the window; 0, with nothing changed, for everything else (a jump
 * further ahead, a sequence behind the window or before its start), which
 * the caller hands to acemq__window_check, which answers as it always did.
 * A DUPLICATE answer also adds 1 to *duplicates: only a sequence inside the
 * window can be one.
 *
 * Inside the window, back = top - seq is below depth and at most
 * top - start. A seq below start gives more than top - start; so does a
 * seq above top, whose back wraps to top + (2^64 - seq), more than top. The
 * second test is not there for start alone: near 2^64 above a small top,
 * back wraps to a value below depth (the unit test sequences_near_2_64 has
 * such a case). */
static inline int acemq__window_check_fast_at(acemq__window *w, uint64_t *ring_end,
                                              const acemq__window_shape *sh, uint64_t seq,
                                              int *result, uint64_t *duplicates)
{
    uint64_t top = w->top;
    if (__builtin_expect((seq > top) & (seq - top <= 64), 1)) {
        acemq__window_take_next(w, ring_end, sh, seq);
        *result = ACEMQ_AUDIT_NEW;
        return 1;
    }
    uint64_t back = top - seq;
    if (__builtin_expect((back >= sh->depth) | (back > top - w->start), 0)) return 0;
    uint64_t seen = acemq__ring_test_and_set(ring_end, seq & sh->ring_mask);
    *result = (int)seen;
    *duplicates += seen;
    return 1;
}

/* Clears seq's bit, within the reach: 1 when it was set, 0 otherwise. */
int acemq__window_clear(acemq__window *w, const acemq__window_shape *sh, uint64_t seq);

/* ---- lru.c: a map from byte-string keys to fixed-size payloads, in LRU order ---- */

/* One allocation: this header, then key_cap bytes of key, then the payload,
 * so a hit reads the key and the start of the payload in the same place. */
typedef struct acemq__lru_entry {
    struct acemq__lru_entry *chain;       /* next in the bucket */
    struct acemq__lru_entry *prev, *next; /* recency: head is the most recent */
    uint64_t hash;
    uint32_t key_len, key_cap; /* key_cap is a multiple of 16: the payload stays 8-aligned */
    uint64_t bytes[];
} acemq__lru_entry;

static inline unsigned char *acemq__lru_key(acemq__lru_entry *e)
{
    return (unsigned char *)e->bytes;
}

/* The entry's payload_size bytes, 8-aligned. */
static inline void *acemq__lru_payload(acemq__lru_entry *e)
{
    return (unsigned char *)e->bytes + e->key_cap;
}

typedef struct acemq__lru_bucket {
    acemq__lru_entry *first;
} acemq__lru_bucket;

typedef struct acemq__lru {
    acemq__lru_bucket *buckets;
    size_t mask; /* buckets - 1 */
    acemq__lru_entry *head, *tail;
    size_t count;
    size_t payload_size;
} acemq__lru;

/* Buckets for about `expected` entries; more still work, in longer chains. */
int acemq__lru_init(acemq__lru *l, size_t expected, size_t payload_size);
/* Frees every entry, calling drop (may be NULL) on each payload first. */
void acemq__lru_destroy(acemq__lru *l, void (*drop)(void *payload));
/* The entry for key, made the most recent; NULL when absent. */
acemq__lru_entry *acemq__lru_find(acemq__lru *l, uint64_t hash, const void *key, size_t len);

static inline int acemq__lru_matches(acemq__lru_entry *e, uint64_t hash, const void *key,
                                     size_t len)
{
    return e->hash == hash && e->key_len == len && memcmp(acemq__lru_key(e), key, len) == 0;
}

/* Makes e the most recent entry; nothing to do when it already is. */
static inline void acemq__lru_touch(acemq__lru *l, acemq__lru_entry *e)
{
    /* Only the head has no prev; an entry in the list means a head. */
    if (l->head == e || !l->head || !e->prev) return;
    ACEMQ__DLIST_MOVE_TO_FRONT(l->head, l->tail, e);
}

/* acemq__lru_find for the check path, inline. The most recent entry is
 * tried first: a run of checks on one audit, common in real streams, then
 * costs no bucket walk and no relinking. */
static inline acemq__lru_entry *acemq__lru_find_fast(acemq__lru *l, uint64_t hash, const void *key,
                                                     size_t len)
{
    acemq__lru_entry *e = l->head;
    if (e && acemq__lru_matches(e, hash, key, len)) return e;
    for (e = l->buckets[hash & l->mask].first; e; e = e->chain) {
        if (!acemq__lru_matches(e, hash, key, len)) continue;
        acemq__lru_touch(l, e);
        return e;
    }
    return NULL;
}
/* Unlinks the least recent entry and hands it back for reuse; NULL when empty. */
acemq__lru_entry *acemq__lru_pop_oldest(acemq__lru *l);
/* Adds key (absent) as the most recent, in `reuse` when given (from
 * pop_oldest) and its key fits, or else in a new entry. NULL on ENOMEM, reuse
 * then freed. The payload is left for the caller to fill. */
acemq__lru_entry *acemq__lru_insert(acemq__lru *l, uint64_t hash, const void *key, size_t len,
                                    acemq__lru_entry *reuse);
/* Frees an entry handed back by pop_oldest and not reused; accepts NULL. */
void acemq__lru_entry_free(acemq__lru_entry *e);

/* ---- ghosts.c: the hashes of evicted keys, so their return is recognised ---- */

/* Direct-mapped: a newer eviction overwrites an older one in the same slot.
 * 0 marks an empty slot (a hash of 0 is stored as 1). */
typedef struct acemq__ghosts {
    uint64_t *slots;
    size_t mask;
} acemq__ghosts;

int acemq__ghosts_init(acemq__ghosts *g, size_t capacity);
void acemq__ghosts_destroy(acemq__ghosts *g);
/* Remembers hash; 1 when that overwrote another remembered hash. */
int acemq__ghosts_put(acemq__ghosts *g, uint64_t hash);
/* 1 when hash was remembered (and forgets it), 0 otherwise. */
int acemq__ghosts_take(acemq__ghosts *g, uint64_t hash);

/* ---- audit.c, for conn_audit.c ---- */

/* An audit whose key was evicted before: every producer's first id is
 * UNKNOWN (EVICTED), since the old audit may have seen any of them. */
int acemq__audit_new_lost(acemq_audit **out, const acemq_audit_options *o, int lost_history);
/* Adds every counter of t into *sum. */
void acemq__audit_stats_merge(acemq_audit_stats *sum, const acemq_audit_stats *t);
/* Adds a's counters into *sum, `producers` as held now. */
void acemq__audit_stats_add(acemq_audit *a, acemq_audit_stats *sum);
/* 0 when o (already defaulted) is in range, ACEMQ_EINVAL otherwise. */
int acemq__audit_options_check(const acemq_audit_options *o);

/* Shards for options o: 1 without ACEMQ_AUDIT_THREAD_SAFE, else o->shards (0:
 * 16) rounded up to a power of two; *bits gets its log2. */
unsigned acemq__audit_shards(const acemq_audit_options *o, unsigned *bits);

/* Rounds up to a power of two (n <= 2^31). */
size_t acemq__pow2(size_t n);

#endif
