/* producer_memo.h — a cache in front of the audit's producer table (audit.c),
 * for the single-thread flavour's one-id checks: a producer found from eight
 * bytes read at a fixed offset from the start of its key.
 *
 * Why. The table finds a producer by a hash of its whole key, and the key
 * ends where the id's last ':' is, so the table's lookup waits for the id's
 * split: load the id's last word, find the ':', load the key's last words,
 * hash, then read the slot. The check is a chain of such waits and little of
 * one check overlaps the next (docs/performance.md), so every link costs its
 * latency. Bytes at a fixed offset from the key's start are where they are
 * whatever the sequence, so the memo's slot is read while the id is still
 * being split, and the whole hash is skipped.
 *
 * What it holds. Eight bytes at one offset need not tell every producer
 * apart (ActiveMQ producers of one connection differ only at their end), so
 * the offset, and the multiplier that spreads the word over the slots, are
 * chosen when the memo is built, from the producers held then: the pair
 * that leaves the fewest producers without a slot of their own. A producer
 * that finds its slot taken goes without one (it is "missing") and is
 * checked through the table as before; the memo is built again when the
 * producers outgrow its slots or too many go missing.
 *
 * It decides nothing. A slot only says where to look: the caller compares
 * the producer's key and length with the id's, and a slot of another
 * producer (or none) sends the check to the table. Every producer it holds
 * is one the table holds; audit.c takes a producer out of the memo before it
 * leaves the table (an evicted producer's memory is reused or freed).
 *
 * Only keys of 17 to 32 bytes are held: the class the check's straight-line
 * path compares (audit_key.h). Not locked: the thread-safe flavour does not
 * use it.
 */
#ifndef ACEMQ_AUDIT_PRODUCER_MEMO_H
#define ACEMQ_AUDIT_PRODUCER_MEMO_H

#include <stddef.h>
#include <stdint.h>

#include "core/short_bytes.h"

#define ACEMQ__MEMO_MIN_KEY 17
#define ACEMQ__MEMO_MAX_KEY 32

typedef struct acemq__producer_memo {
    /* cap slots, each a producer (audit.c's entry) or NULL. With no slots
     * (cap 0) this is a shared one-slot array holding NULL and mult is 0,
     * so every lookup reads that slot and finds nothing: the lookup needs
     * no test of its own. */
    void **slots;
    uint64_t mult;     /* the word times mult, top bits: the slot */
    unsigned shift;    /* 64 - log2(cap); 0 with no slots */
    uint32_t off;      /* the word: bytes [off, off + 8) of the key */
    size_t cap;        /* slots; 0: none */
    size_t producers;  /* producers of 17-32 bytes the table holds */
    size_t held;       /* of those, in a slot */
    size_t missing;    /* of those, not in a slot: producers - held */
    size_t missing_ok; /* missing may grow to this before the memo is built again */
} acemq__producer_memo;

/* An empty memo: no slots, nothing held. */
void acemq__memo_init(acemq__producer_memo *m);
void acemq__memo_free(acemq__producer_memo *m);

/* The producer whose key's bytes [off, off + 8) the key starting at k has,
 * as far as the memo knows; NULL when it knows none. room: bytes readable
 * at k (the word is read only when it lies inside them). The caller must
 * compare keys: another producer may be the answer. */
static inline void *acemq__memo_find(const acemq__producer_memo *m, const unsigned char *k,
                                     size_t room)
{
    if (__builtin_expect(room < (size_t)m->off + 8, 0)) return NULL;
    return m->slots[(acemq__load8(k + m->off) * m->mult) >> m->shift];
}

/* acemq__memo_find for a key with at least ACEMQ__MEMO_MAX_KEY bytes
 * readable at k: no test of room, since the word read never ends past the
 * longest key held (off + 8 <= the shortest key's length at the build). */
static inline void *acemq__memo_find_roomy(const acemq__producer_memo *m, const unsigned char *k)
{
    return m->slots[(acemq__load8(k + m->off) * m->mult) >> m->shift];
}

/* p, with this key, has just entered the table: it takes its slot if the
 * slot is free, or counts as missing. Keys outside 17-32 bytes are ignored. */
void acemq__memo_add(acemq__producer_memo *m, void *p, const unsigned char *key, size_t len);

/* p, with this key, is leaving the table: its slot, if it has one, is
 * emptied. Must be called before p's memory is freed or reused. */
void acemq__memo_remove(acemq__producer_memo *m, const void *p, const unsigned char *key,
                        size_t len);

/* Whether the memo should be built again: its producers have outgrown its
 * slots, or too many of them have no slot. */
int acemq__memo_stale(const acemq__producer_memo *m);

/* The i-th of the producers the table holds, with its key. */
typedef void *(*acemq__memo_producer_fn)(void *ctx, size_t i, const unsigned char **key,
                                         size_t *len);

/* Builds the memo afresh from the n producers the table holds: chooses the
 * slots' number, the offset and the multiplier, and fills the slots. On
 * ENOMEM the memo is left empty (every lookup then finds nothing), which
 * costs speed, never an answer. */
void acemq__memo_build(acemq__producer_memo *m, size_t n, acemq__memo_producer_fn producer,
                       void *ctx);

#endif
