/* audit.c — the message audit: producers hashed to shards, each shard an LRU
 * of producer windows with its own memory of evictions, counters and, in the
 * thread-safe flavour, its own lock.
 *
 * The single-thread flavour is one shard and takes no lock: the commonest
 * check (check_fast) is a parse of the id's last eight bytes, a one-multiply
 * hash of the producer (audit_key.h), one slot of an open-addressed table, a
 * key compare and a bit test-and-set, straight-line, with no allocation once
 * the producer is known; everything else goes to the general check. The
 * thread-safe flavour picks a shard by the hash's top bits and holds only
 * that shard's lock, so checks on producers in different shards never wait
 * for each other.
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
#include "audit/producer_memo.h"
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
static inline __attribute__((always_inline)) entry *
table_find_in(int cls, const shard *s, uint64_t hash, const void *key, size_t len)
{
    for (size_t i = (size_t)hash & s->mask;; i = (i + 1) & s->mask) {
        entry *p = s->slots[i].p;
        if (!p) return NULL;
        if (p->hash == hash && p->key_len == len && same_key(cls, p->key, key, len)) return p;
    }
}

static entry *table_find(const shard *s, uint64_t hash, const void *key, size_t len)
{
    int cls = key_class(len);
    if (cls == KEY_17_32) return table_find_in(KEY_17_32, s, hash, key, len);
    if (cls == KEY_9_16) return table_find_in(KEY_9_16, s, hash, key, len);
    return table_find_in(KEY_ANY, s, hash, key, len);
}

/* A use of p: it becomes the most recent producer. The fast path's own
 * touch is in check_fast, which counts its answer by the stamp (see
 * shard.answered); this one is any other use. */
static inline __attribute__((always_inline)) void touch(int stamped, shard *s, entry *p)
{
    if (stamped) {
        p->stamp = ++s->clock;
        s->other_stamps++;
    } else if (s->head != p) { /* not the head, so it has a prev */
        ACEMQ__DLIST_MOVE_TO_FRONT(s->head, s->tail, p);
    }
}

/* ---- the checks ---- */

static inline shard *shard_for(acemq_audit *a, uint64_t hash)
{
    /* hash >> (64 - bits), with no branch for bits = 0: (hash >> 1) >> 63 is 0. */
    return &a->shards[(hash >> 1) >> (63 - a->shard_bits)];
}

/* The i-th producer of a stamped shard, for the memo's build. */
static void *dense_producer(void *ctx, size_t i, const unsigned char **key, size_t *len)
{
    const shard *s = ctx;
    entry *p = s->dense[i].p;
    *key = p->key;
    *len = p->key_len;
    return p;
}

/* p has just entered the plain flavour's table (whose recency is by stamps,
 * so dense[] lists its producers): into the memo, which is built afresh
 * when it has grown stale. */
static void memo_admitted(shard *s, entry *p)
{
    acemq__memo_add(&s->memo, p, p->key, p->key_len);
    if (acemq__memo_stale(&s->memo)) acemq__memo_build(&s->memo, s->count, dense_producer, s);
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
        if (a->plain) acemq__memo_remove(&s->memo, p, p->key, p->key_len);
        s->count--;
        s->stats.evictions++;
        if (acemq__ghosts_put(&s->ghosts, ghost_hash(p->key, p->key_len))) s->stats.forgotten++;
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
    p->tail_len = 0; /* no guess yet (the memory may be an evicted producer's) */
    p->key_len = (uint32_t)len;
    memcpy(p->key, key, len);
    p->w.ring_end = entry_ring(p);
    acemq__audit_table_put(s->slots, s->mask, p);
    acemq__audit_recency_add(a->stamped, s, p);
    s->count++;
    if (a->plain) memo_admitted(s, p);
    return p;
}

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

/* A producer we hold no window for: rare once producers are known, so kept
 * out of line, off the check path's instruction cache. */
static __attribute__((noinline)) int check_newcomer(acemq_audit *a, shard *s, uint64_t hash,
                                                    const void *key, size_t len, uint64_t seq,
                                                    int *cause)
{
    /* If we dropped its window, anything up to this id may have been seen:
     * its first id back is UNKNOWN. */
    int readmitted = acemq__ghosts_take(&s->ghosts, ghost_hash(key, len)) || a->lost_history;
    entry *p = admit(a, s, hash, key, len);
    if (!p) return ACEMQ_ENOMEM;
    acemq__window_init(&p->w, &a->shape, seq, readmitted);
    if (!readmitted) return answer(a, s, ACEMQ_AUDIT_NEW, ACEMQ_AUDIT_CAUSE_NONE);
    *cause = ACEMQ_AUDIT_EVICTED;
    return answer(a, s, ACEMQ_AUDIT_UNKNOWN, *cause);
}

/* p's window has just taken seq: if seq moved its top, p's guess at the
 * next id (check_tail), made for the old top, is dropped. Every path that
 * may move a top calls it, but the guess's own (check_tail) and the one
 * that makes the next guess instead (check_memo, for a text id). The
 * thread-safe flavour makes no guesses and need not. A producer checked
 * by split ids only never has a guess: no store then (one on every such
 * check made acemq_audit_check_seq about 4 % slower). */
static inline __attribute__((always_inline)) void guess_drop(entry *p, uint64_t seq)
{
    if (p->w.top == seq && p->tail_len != 0) p->tail_len = 0;
}

/* A sequence the window's fast path did not take (see acemq__window_check_fast_at). */
static __attribute__((noinline)) int check_slow(acemq_audit *a, shard *s, entry *p, uint64_t seq,
                                                int *cause)
{
    int c = ACEMQ_AUDIT_CAUSE_NONE;
    /* Fail-open answers an UNKNOWN NEW, so it records it where the ring
     * can (its next sighting is then a DUPLICATE, as in ActiveMQ, which
     * records whatever falls in its window); fail-closed leaves it
     * unrecorded, UNKNOWN again, for the durable store to decide. */
    int result = acemq__window_check(&p->w, &a->shape, seq, a->policy == ACEMQ_AUDIT_FAIL_OPEN, &c);
    guess_drop(p, seq);
    if (cause) *cause = c;
    return answer(a, s, result, c);
}

/* The whole check, every case, for one length class and flavour (the
 * general check; check_fast below is the common case's shortcut). It is
 * inline in check_general and nowhere else, so that the exported entry
 * points, which in position-independent code may be interposed and so are
 * never inlined into each other, each reach it in one call. DUPLICATE or
 * NEW from the window's fast case is counted without a branch (see
 * shard.answered), since which of the two comes next is what the stream
 * decides. *cause was set to NONE by the caller. */
static inline __attribute__((always_inline)) int
check_in(int cls, int locked, acemq_audit *a, const void *key, size_t len, uint64_t seq, int *cause)
{
    uint64_t hash = key_hash_in(cls, key, len);
    shard *s = locked ? shard_for(a, hash) : a->shards;
    if (locked) acemq__shard_lock_take(&s->lock);
    int rc;
    entry *p = table_find_in(cls, s, hash, key, len);
    if (__builtin_expect(p == NULL, 0)) {
        int c = ACEMQ_AUDIT_CAUSE_NONE;
        rc = check_newcomer(a, s, hash, key, len, seq, &c);
        if (cause) *cause = c;
    } else {
        touch(a->stamped, s, p);
        if (__builtin_expect(acemq__window_check_fast_at(&p->w, entry_ring(p), &a->shape, seq, &rc,
                                                         &s->answered_duplicates),
                             1)) {
            if (!locked) guess_drop(p, seq);
            s->answered++;
        } else {
            rc = check_slow(a, s, p, seq, cause);
        }
    }
    if (locked) acemq__shard_lock_give(&s->lock);
    return rc;
}

static inline __attribute__((always_inline)) int check_split(acemq_audit *a, const void *key,
                                                             size_t len, uint64_t seq, int *cause)
{
    if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
    /* len - 1 wraps for 0: one comparison rejects both ends. */
    if (!a || !key || len - 1 >= ACEMQ_AUDIT_PRODUCER_MAX) return ACEMQ_EINVAL;
    /* One copy per length class and flavour: the single-thread one has no
     * shard to pick and no lock to test twice. */
    if (!a->locked) {
        if (__builtin_expect(len - 17 <= 15, 1))
            return check_in(KEY_17_32, 0, a, key, len, seq, cause);
        if (len - 9 <= 7) return check_in(KEY_9_16, 0, a, key, len, seq, cause);
        return check_in(KEY_ANY, 0, a, key, len, seq, cause);
    }
    if (__builtin_expect(len - 17 <= 15, 1)) return check_in(KEY_17_32, 1, a, key, len, seq, cause);
    if (len - 9 <= 7) return check_in(KEY_9_16, 1, a, key, len, seq, cause);
    return check_in(KEY_ANY, 1, a, key, len, seq, cause);
}

/* check_split, out of line: the way out of check_fast. */
static __attribute__((noinline)) int check_general(acemq_audit *a, const void *key, size_t len,
                                                   uint64_t seq, int *cause)
{
    return check_split(a, key, len, seq, cause);
}

/* Where the fast check looks for a producer: its home slot, or the next one
 * when home holds another (a producer displaced by one is common enough,
 * one or two of 64 (see table_spread), to stay off the general path). The
 * producer there, if any, may still hold another key: fast_key tells. */
static inline __attribute__((always_inline)) entry *fast_slot(const shard *s, uint64_t hash)
{
    size_t i = (size_t)hash & s->mask;
    entry *p = s->slots[i].p;
    if (__builtin_expect(p != NULL && p->hash != hash, 0)) p = s->slots[(i + 1) & s->mask].p;
    return p;
}

/* p, from fast_slot, is the producer of this 17-32 byte key. */
static inline __attribute__((always_inline)) int fast_key(const entry *p, uint64_t hash,
                                                          const void *key, size_t len)
{
    return p != NULL && p->hash == hash && p->key_len == len &&
           same_key(KEY_17_32, p->key, key, len);
}

/* The commonest check, straight-line: a producer of 17 to 32 bytes in its
 * home slot, the next sequence or one inside the window. Anything else
 * leaves, before anything is written, through a tail call to check_general,
 * which does the whole check from the start and treats this case exactly as
 * this does. With no loop and no call on its path, the single-thread copy
 * needs few registers: check_split (one function for every case) spills
 * and saves more per id. The thread-safe copy holds the shard's lock from
 * the lookup to the last write, and gives it back before leaving. */
static inline __attribute__((always_inline)) int check_fast(int locked, int stamped, acemq_audit *a,
                                                            const void *key, size_t len,
                                                            uint64_t seq, int *cause)
{
    uint64_t hash = key_hash_in(KEY_17_32, key, len);
    shard *s = locked ? shard_for(a, hash) : &a->one;
    if (locked) acemq__shard_lock_take(&s->lock);
    entry *p = fast_slot(s, hash);
    int rc;
    if (__builtin_expect(!fast_key(p, hash, key, len) ||
                             !acemq__window_check_fast_at(&p->w, entry_ring(p), &a->shape, seq, &rc,
                                                          &s->answered_duplicates),
                         0)) {
        if (locked) acemq__shard_lock_give(&s->lock);
        return check_general(a, key, len, seq, cause);
    }
    if (!locked) guess_drop(p, seq);
    if (stamped < 0 ? a->stamped : stamped) {
        p->stamp = ++s->clock; /* which counts this answer: see shard.answered */
    } else {
        touch(0, s, p);
        s->answered++;
    }
    if (locked) acemq__shard_lock_give(&s->lock);
    if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
    return rc;
}

/* The fast check of every flavour but the plain one (see acemq_audit.plain). */
static __attribute__((noinline)) int check_fast_other(acemq_audit *a, const void *key, size_t len,
                                                      uint64_t seq, int *cause)
{
    if (a->locked) return check_fast(1, -1, a, key, len, seq, cause);
    return check_fast(0, 0, a, key, len, seq, cause);
}

/* A guess at the id after this text id of p, whose sequence seq is now the
 * window's top: its last eight bytes, from `last`, this id's (see
 * acemq__audit_next_tail), and its length, this id's. */
static inline __attribute__((always_inline)) void guess_next(entry *p, uint64_t last, size_t id_len)
{
    int ok;
    p->next_tail = acemq__audit_next_tail(last, &ok);
    p->tail_len = ok ? id_len : 0;
}

/* The plain flavour's one-id check: the producer from the memo
 * (producer_memo.h), whose slot is read from a word at the key's start while
 * the id is still being split, and only if the memo does not know the key,
 * or the window's fast cases do not take the sequence, check_fast, which
 * finds it by the whole key's hash. The memo's answer is checked as the
 * table's is, key and length; what is done with the producer then is what
 * check_fast does (its stamp counts the answer: see shard.answered). room:
 * the bytes readable at key, the key's and the sequence's for a text id. */
static inline __attribute__((always_inline)) int check_memo(acemq_audit *a, const void *key,
                                                            size_t len, size_t room, uint64_t seq,
                                                            int *cause, int text, uint64_t last)
{
    shard *s = &a->one;
    entry *p = acemq__memo_find(&s->memo, key, room);
    int rc;
    if (__builtin_expect(p == NULL || p->key_len != len || !same_key(KEY_17_32, p->key, key, len),
                         0))
        return check_fast(0, 1, a, key, len, seq, cause);
    /* guess_drop for a split id, decided before the window's stores: the
     * top moves here only for the next sequence, which the fast case always
     * takes. After the stores, the compiler had to load the top again (a
     * ring word might be it), and the split check took about 4 % longer. */
    if (!text && __builtin_expect(seq - p->w.top == 1 && p->tail_len != 0, 0)) p->tail_len = 0;
    if (__builtin_expect(!acemq__window_check_fast_at(&p->w, entry_ring(p), &a->shape, seq, &rc,
                                                      &s->answered_duplicates),
                         0))
        return check_fast(0, 1, a, key, len, seq, cause);
    p->stamp = ++s->clock;
    if (text && p->w.top == seq) guess_next(p, last, room);
    if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
    return rc;
}

/* Both entry points: the single-thread fast copy inline, the rest a call.
 * room: as for check_memo; text: the key is a text id's (room its length),
 * whose last eight bytes are `last`. */
static inline __attribute__((always_inline)) int check_entry(acemq_audit *a, const void *key,
                                                             size_t len, size_t room, uint64_t seq,
                                                             int *cause, int text, uint64_t last)
{
    if (__builtin_expect(!a || !key || len - 17 > 15, 0))
        return check_general(a, key, len, seq, cause);
    if (!a->plain) return check_fast_other(a, key, len, seq, cause);
    return check_memo(a, key, len, room, seq, cause, text, last);
}

int acemq_audit_check_seq(acemq_audit *a, const void *producer, size_t producer_len,
                          uint64_t sequence, int *cause)
{
    return check_entry(a, producer, producer_len, producer_len, sequence, cause, 0, 0);
}

#ifdef ACEMQ__AUDIT_SWAR
/* check_tail's answer when it does not take the id. */
#define NOT_TAKEN (-0x7FFF)

/* The plain flavour's commonest text check, without the split: the producer
 * from the memo (empty in the other flavours, which leave here at once,
 * having read nothing a check of theirs writes), and the id the one its
 * last id led the audit to expect (guess_next): the same length, the same
 * last eight bytes, and the key before them. Such an id is the producer's
 * key, its ':' and the digits of top + 1, so it is the next sequence,
 * and no digit need be converted. The sequence was what the check's chain
 * waited for last once the memo had taken the hash off it
 * (docs/performance.md, "The producer memo, and the guess at the next
 * id"). What is done then is what check_fast does with the next sequence,
 * and the guess moves on. NOT_TAKEN, with nothing written, for every other
 * id. */
static inline __attribute__((always_inline)) int
check_tail(acemq_audit *a, const char *id, size_t id_len, uint64_t last, int *cause)
{
    shard *s = &a->one;
    entry *p = acemq__memo_find_roomy(&s->memo, (const unsigned char *)id);
    if (__builtin_expect(p == NULL || p->tail_len != id_len || p->next_tail != last ||
                             !same_key(KEY_17_32, p->key, (const unsigned char *)id, p->key_len),
                         0))
        return NOT_TAKEN;
    uint64_t seq = p->w.top + 1; /* never 0: the guess was made from a sequence of 7 digits */
    acemq__window_take_next(&p->w, entry_ring(p), &a->shape, seq);
    /* guess_next, but tail_len is id_len already: it is written only when
     * there is no next guess, two instructions fewer on every guess taken. */
    int ok;
    p->next_tail = acemq__audit_next_tail(last, &ok);
    if (__builtin_expect(!ok, 0)) p->tail_len = 0;
    p->stamp = ++s->clock; /* which counts this answer: see shard.answered */
    if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
    return ACEMQ_AUDIT_NEW;
}
#endif

/* Every text check check_tail does not take: split, then the memo, the
 * table or the general check. Out of line, so that the common case, the
 * guess taken, needs few registers: with this path inline, every call saved
 * and restored five callee-saved ones (docs/performance.md, "The producer
 * memo, and the guess at the next id"). text: the id passed check_tail's
 * tests of a and of its length, and `last` is its last word. */
static __attribute__((noinline)) int check_text(acemq_audit *a, const char *id, size_t id_len,
                                                int *cause, int text, uint64_t last)
{
#ifdef ACEMQ__AUDIT_SWAR
    size_t len;
    uint64_t seq;
    if (__builtin_expect(acemq__audit_split_fast(id, id_len, &len, &seq), 1)) {
        if (text) return check_entry(a, id, len, id_len, seq, cause, 1, last);
        return check_entry(a, id, len, id_len, seq, cause, 0, 0);
    }
#else
    (void)text;
    (void)last;
#endif
    if (cause) *cause = ACEMQ_AUDIT_CAUSE_NONE;
    acemq_audit_id p;
    int rc = acemq__audit_split(id, id_len, &p);
    if (rc != 0) return rc;
    return check_general(a, p.producer, p.producer_len, p.sequence, cause);
}

/* acemq_audit_check, inline for the batch of the plain flavour. */
static inline __attribute__((always_inline)) int check_one_text(acemq_audit *a, const char *id,
                                                                size_t id_len, int *cause)
{
#ifdef ACEMQ__AUDIT_SWAR
    /* ACEMQ__MEMO_MAX_KEY..ACEMQ_AUDIT_ID_MAX bytes: the memo's word lies
     * inside the id (acemq__memo_find_roomy), and split_fast takes the id.
     * A shorter id, for which check_tail would have to test where the word
     * ends, never gets the guess (an ActiveMQ id has 30 bytes at the least,
     * and one from a named host and port more than 32). */
    _Static_assert(ACEMQ__MEMO_MAX_KEY >= 9, "split_fast takes ids of 9 bytes and more");
    if (__builtin_expect(a != NULL && id != NULL &&
                             id_len - ACEMQ__MEMO_MAX_KEY <=
                                 (size_t)ACEMQ_AUDIT_ID_MAX - ACEMQ__MEMO_MAX_KEY,
                         1)) {
        uint64_t last = acemq__load8((const unsigned char *)id + id_len - 8);
        int rc = check_tail(a, id, id_len, last, cause);
        if (__builtin_expect(rc != NOT_TAKEN, 1)) return rc;
        return check_text(a, id, id_len, cause, 1, last);
    }
#endif
    return check_text(a, id, id_len, cause, 0, 0);
}

int acemq_audit_check(acemq_audit *a, const char *id, size_t id_len, int *cause)
{
    return check_one_text(a, id, id_len, cause);
}

/* ---- many ids in one call ----
 *
 * A loop inside the audit pays a call's entry once per batch. The plain
 * flavour's batch is its one-id check, inline, id after id: the memo and,
 * for text ids, the guess at the next id. Until 2026-12-02 it took ids in
 * groups instead (their splits, hashes and slot reads side by side, text
 * ids split four at a time with AVX2), which beat one call per id until
 * the memo and the guess; against the one-id check inline it took 1.3 to
 * 1.4 times as long for text ids and 1.2 to 1.3 for split ones
 * (docs/performance.md, "The batch through the one-id check"). The other flavours loop over the
 * table's straight-line check (check_fast). Every answer, cause, counter
 * and recency update is the one the calls would have made. */

/* Where the ids come from: text ids, or split ones. */
typedef struct many_src {
    const char *const *ids;
    const size_t *id_lens;
    const void *const *producers;
    const size_t *producer_lens;
    const uint64_t *seqs;
} many_src;

/* The i-th id of a batch through the one-id entry point, which answers it
 * in full. */
static inline __attribute__((always_inline)) int
many_one(int text, acemq_audit *a, const many_src *src, size_t i, int *causes)
{
    int *cause = causes ? &causes[i] : NULL;
    if (text) return acemq_audit_check(a, src->ids[i], src->id_lens[i], cause);
    return acemq_audit_check_seq(a, src->producers[i], src->producer_lens[i], src->seqs[i], cause);
}

/* The i-th id of a batch as the straight-line check takes it: 1 with *key,
 * *len and *seq set, a text id split (its producer where the id is); 0
 * when the one-id entry point must answer it (*len and *seq then 0). */
static inline __attribute__((always_inline)) int
many_take(int text, const many_src *src, size_t i, const void **key, size_t *len, uint64_t *seq)
{
    *len = 0;
    *seq = 0;
    if (text) {
        *key = src->ids[i];
#ifdef ACEMQ__AUDIT_SWAR
        return acemq__audit_split_fast(src->ids[i], src->id_lens[i], len, seq);
#else
        return 0;
#endif
    }
    *key = src->producers[i];
    *len = src->producer_lens[i];
    *seq = src->seqs[i];
    return *key != NULL;
}

static inline __attribute__((always_inline)) int check_many_in(int text, int locked, acemq_audit *a,
                                                               const many_src *src, size_t n,
                                                               int *results, int *causes)
{
    for (size_t i = 0; i < n; i++) {
        const void *key;
        size_t len;
        uint64_t seq;
        int ok = many_take(text, src, i, &key, &len, &seq);
        /* Whatever the straight-line check does not take goes through the
         * one-id entry point, which answers it in full. */
        results[i] = __builtin_expect(ok && len - 17 <= 15, 1)
                         ? check_fast(locked, -1, a, key, len, seq, causes ? &causes[i] : NULL)
                         : many_one(text, a, src, i, causes);
    }
    return 0;
}

void acemq__audit_memo_state(acemq_audit *a, size_t *producers, size_t *held, uint32_t *off)
{
    const acemq__producer_memo *m = &a->one.memo;
    int plain = a->plain;
    *producers = plain ? m->producers : 0;
    *held = plain ? m->held : 0;
    *off = plain ? m->off : 0;
}

int acemq__audit_memo_verify(acemq_audit *a)
{
    if (!a->plain) return 0;
    const shard *s = &a->one;
    const acemq__producer_memo *m = &s->memo;
    size_t in_slots = 0;
    for (size_t i = 0; i < m->cap; i++) {
        const entry *p = m->slots[i];
        if (!p) continue;
        in_slots++;
        size_t k = 0;
        while (k < s->count && s->dense[k].p != p)
            k++;
        if (k == s->count || acemq__memo_find(m, p->key, p->key_len) != p) return -1;
    }
    if (in_slots != m->held) return -1;
#ifdef ACEMQ__AUDIT_SWAR
    /* Every guess is for its producer's present top: its last eight bytes
     * (after one producer byte, as split_fast wants) end in top + 1. */
    for (size_t k = 0; k < s->count; k++) {
        const entry *p = s->dense[k].p;
        if (p->tail_len == 0) continue;
        char tail[9] = {'x'};
        memcpy(tail + 1, &p->next_tail, 8);
        size_t len;
        uint64_t seq;
        if (!acemq__audit_split_fast(tail, sizeof tail, &len, &seq) || seq != p->w.top + 1)
            return -1;
    }
#endif
    return 0;
}

static __attribute__((noinline)) int check_many_locked(int text, acemq_audit *a,
                                                       const many_src *src, size_t n, int *results,
                                                       int *causes)
{
    if (text) return check_many_in(1, 1, a, src, n, results, causes);
    return check_many_in(0, 1, a, src, n, results, causes);
}

int acemq_audit_check_many(acemq_audit *a, const char *const *ids, const size_t *id_lens, size_t n,
                           int *results, int *causes)
{
    if (!a || (n > 0 && (!ids || !id_lens || !results))) return ACEMQ_EINVAL;
    if (a->plain) {
        for (size_t i = 0; i < n; i++)
            results[i] = check_one_text(a, ids[i], id_lens[i], causes ? &causes[i] : NULL);
        return 0;
    }
    many_src src = {ids, id_lens, NULL, NULL, NULL};
    if (a->locked) return check_many_locked(1, a, &src, n, results, causes);
    return check_many_in(1, 0, a, &src, n, results, causes);
}

int acemq_audit_check_seq_many(acemq_audit *a, const void *const *producers,
                               const size_t *producer_lens, const uint64_t *sequences, size_t n,
                               int *results, int *causes)
{
    if (!a || (n > 0 && (!producers || !producer_lens || !sequences || !results)))
        return ACEMQ_EINVAL;
    if (a->plain) {
        for (size_t i = 0; i < n; i++)
            results[i] = check_entry(a, producers[i], producer_lens[i], producer_lens[i],
                                     sequences[i], causes ? &causes[i] : NULL, 0, 0);
        return 0;
    }
    many_src src = {NULL, NULL, producers, producer_lens, sequences};
    if (a->locked) return check_many_locked(0, a, &src, n, results, causes);
    return check_many_in(0, 0, a, &src, n, results, causes);
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
        touch(a->stamped, s, p);
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
