/* producer_memo.c — building and keeping the audit's producer memo
 * (producer_memo.h). */
#include "audit/producer_memo.h"

#include <stdlib.h>
#include <string.h>

/* Slots per producer, at least: with random words, n producers leave about
 * n / (2 * SPREAD) of themselves without a slot (n^2 / 2m), and the build
 * tries several multipliers to do better than that. */
#define SPREAD 16
#define MIN_SLOTS 64

/* Odd 64-bit constants with well-mixed bits (the golden ratio's, and the
 * finalisers of MurmurHash3 and of wyhash): the build keeps the first that
 * leaves the fewest producers without a slot. */
static const uint64_t multipliers[] = {0x9E3779B97F4A7C15ull, 0xFF51AFD7ED558CCDull,
                                       0xA0761D6478BD642Full};
enum { MULTIPLIERS = sizeof multipliers / sizeof multipliers[0] };

/* The slot every lookup of a memo without slots reads: never written. */
static void *no_slot[1];

static int in_class(size_t len)
{
    return len - ACEMQ__MEMO_MIN_KEY <= ACEMQ__MEMO_MAX_KEY - ACEMQ__MEMO_MIN_KEY;
}

static size_t slot_of(uint64_t mult, unsigned shift, uint32_t off, const unsigned char *key)
{
    return (size_t)((acemq__load8(key + off) * mult) >> shift);
}

/* Whether key, of len bytes, has the word the memo reads. */
static int has_word(const acemq__producer_memo *m, size_t len)
{
    return m->cap != 0 && len >= (size_t)m->off + 8;
}

static void set_empty(acemq__producer_memo *m)
{
    m->slots = no_slot;
    m->mult = 0;
    m->shift = 0;
    m->off = 0;
    m->cap = 0;
    m->held = 0;
}

void acemq__memo_init(acemq__producer_memo *m)
{
    memset(m, 0, sizeof *m);
    set_empty(m);
}

void acemq__memo_free(acemq__producer_memo *m)
{
    if (m->cap) free(m->slots);
    acemq__memo_init(m);
}

void acemq__memo_add(acemq__producer_memo *m, void *p, const unsigned char *key, size_t len)
{
    if (!in_class(len)) return;
    m->producers++;
    if (has_word(m, len)) {
        size_t i = slot_of(m->mult, m->shift, m->off, key);
        if (!m->slots[i]) {
            m->slots[i] = p;
            m->held++;
            return;
        }
    }
    m->missing++;
}

void acemq__memo_remove(acemq__producer_memo *m, const void *p, const unsigned char *key,
                        size_t len)
{
    if (!in_class(len)) return;
    m->producers--;
    if (has_word(m, len)) {
        size_t i = slot_of(m->mult, m->shift, m->off, key);
        if (m->slots[i] == p) {
            m->slots[i] = NULL;
            m->held--;
            return;
        }
    }
    m->missing--;
}

int acemq__memo_stale(const acemq__producer_memo *m)
{
    return m->producers * SPREAD > m->cap || m->missing > m->missing_ok;
}

/* Puts the producers of the class into the memo's slots under (off, mult),
 * first come first served, and counts those left without one. */
static size_t fill(acemq__producer_memo *m, size_t n, acemq__memo_producer_fn producer, void *ctx)
{
    size_t missing = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *key;
        size_t len;
        void *p = producer(ctx, i, &key, &len);
        if (!in_class(len)) continue;
        size_t s = slot_of(m->mult, m->shift, m->off, key);
        if (m->slots[s])
            missing++;
        else
            m->slots[s] = p;
    }
    return missing;
}

/* Empties the slots fill took, and only those: a try costs the producers,
 * not the slots. */
static void unfill(acemq__producer_memo *m, size_t n, acemq__memo_producer_fn producer, void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned char *key;
        size_t len;
        (void)producer(ctx, i, &key, &len);
        if (in_class(len)) m->slots[slot_of(m->mult, m->shift, m->off, key)] = NULL;
    }
}

void acemq__memo_build(acemq__producer_memo *m, size_t n, acemq__memo_producer_fn producer,
                       void *ctx)
{
    size_t count = 0, min_len = ACEMQ__MEMO_MAX_KEY;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *key;
        size_t len;
        (void)producer(ctx, i, &key, &len);
        if (!in_class(len)) continue;
        count++;
        if (len < min_len) min_len = len;
    }
    if (m->cap) free(m->slots);
    set_empty(m);
    m->producers = count;
    m->missing = count;
    /* Nothing to hold, or no memory: the memo stays empty until the next
     * admission finds it stale again. */
    m->missing_ok = count;
    if (count == 0) return;
    size_t cap = MIN_SLOTS;
    unsigned bits = 6;
    while (cap < count * SPREAD) {
        cap *= 2;
        bits++;
    }
    void **slots = calloc(cap, sizeof *slots);
    if (!slots) return;
    m->slots = slots;
    m->cap = cap;
    m->shift = 64 - bits;
    /* Every offset at which all of them have eight bytes, with each
     * multiplier: the first pair that leaves the fewest without a slot. The
     * slots are the scratch space, emptied after each try. At most 25 * 3
     * tries of 2n steps each, when a build runs (at each doubling of the
     * producers, and when missing passes missing_ok). */
    size_t best = count + 1;
    uint32_t best_off = 0;
    uint64_t best_mult = multipliers[0];
    for (uint32_t off = 0; off + 8 <= min_len && best > 0; off++) {
        for (size_t k = 0; k < MULTIPLIERS && best > 0; k++) {
            m->off = off;
            m->mult = multipliers[k];
            size_t missing = fill(m, n, producer, ctx);
            unfill(m, n, producer, ctx);
            if (missing < best) {
                best = missing;
                best_off = off;
                best_mult = multipliers[k];
            }
        }
    }
    m->off = best_off;
    m->mult = best_mult;
    m->missing = fill(m, n, producer, ctx);
    m->held = count - m->missing;
    /* What a build could not place is no reason to build again; a
     * sixteenth of the producers more is. */
    m->missing_ok = m->missing + count / 16 + 1;
}
