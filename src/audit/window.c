/* window.c — one producer's sliding bit window: which of the last `depth`
 * sequences were seen, in constant memory, with overflow-free 64-bit arithmetic.
 *
 * The ring is indexed by seq & ring_mask, so sliding forward never moves bits:
 * it only clears the positions the new sequences will use. Sequences are
 * ordered as plain unsigned 64-bit numbers; every difference below is taken
 * larger minus smaller, so nothing wraps, even at 0 and 2^64 - 1.
 */
#include <string.h>

#include "audit/audit_internal.h"

size_t acemq__pow2(size_t n)
{
    size_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

void acemq__window_shape_init(acemq__window_shape *sh, uint32_t depth)
{
    sh->depth = depth;
    sh->ring_bits = acemq__pow2(depth < 64 ? 64 : depth);
    sh->ring_mask = sh->ring_bits - 1;
    sh->words = (size_t)(sh->ring_bits / 64);
}

size_t acemq__window_size(const acemq__window_shape *sh)
{
    return sh->words * sizeof(uint64_t);
}

/* Sets seq's bit; 1 when it was already set. */
static int test_and_set(acemq__window *w, const acemq__window_shape *sh, uint64_t seq)
{
    return (int)acemq__ring_test_and_set(w->ring_end, seq & sh->ring_mask);
}

void acemq__window_init(acemq__window *w, const acemq__window_shape *sh, uint64_t seq,
                        int readmitted)
{
    memset(w->ring_end - sh->words, 0, sh->words * sizeof(uint64_t));
    w->top = seq;
    /* A producer never seen before has nothing behind its first id that we
     * could have seen, so the window reaches back to catch out-of-order
     * stragglers. One that was evicted may have had any earlier id seen. */
    if (readmitted)
        w->start = seq;
    else
        w->start = seq >= sh->depth - 1 ? seq - (sh->depth - 1) : 0;
    w->readmitted = readmitted != 0;
    (void)test_and_set(w, sh, seq);
}

/* Clears the ring positions of n sequences starting at from (n < ring_bits),
 * a word at a time. */
static void clear_positions(acemq__window *w, const acemq__window_shape *sh, uint64_t from,
                            uint64_t n)
{
    uint64_t pos = from & sh->ring_mask;
    while (n > 0) {
        unsigned off = (unsigned)(pos & 63);
        uint64_t take = 64 - off;
        if (take > n) take = n;
        uint64_t mask = take == 64 ? ~(uint64_t)0 : (((uint64_t)1 << take) - 1) << off;
        *acemq__ring_word(w->ring_end, pos) &= ~mask;
        n -= take;
        pos = (pos + take) & sh->ring_mask;
    }
}

int acemq__window_check(acemq__window *w, const acemq__window_shape *sh, uint64_t seq, int *cause)
{
    if (seq > w->top) {
        /* Ahead: the positions of top+1..seq held sequences now out of the
         * window; clear them and move the top. top + 1 cannot wrap: seq > top. */
        uint64_t ahead = seq - w->top;
        if (ahead >= sh->ring_bits)
            memset(w->ring_end - sh->words, 0, sh->words * sizeof(uint64_t));
        else
            clear_positions(w, sh, w->top + 1, ahead);
        w->top = seq;
        (void)test_and_set(w, sh, seq);
        return ACEMQ_AUDIT_NEW;
    }
    if (seq < w->start) {
        *cause = w->readmitted ? ACEMQ_AUDIT_EVICTED : ACEMQ_AUDIT_BEFORE_START;
        return ACEMQ_AUDIT_UNKNOWN;
    }
    if (w->top - seq >= sh->depth) {
        *cause = ACEMQ_AUDIT_BEHIND_WINDOW;
        return ACEMQ_AUDIT_UNKNOWN;
    }
    return test_and_set(w, sh, seq) ? ACEMQ_AUDIT_DUPLICATE : ACEMQ_AUDIT_NEW;
}

int acemq__window_clear(acemq__window *w, const acemq__window_shape *sh, uint64_t seq)
{
    if (seq > w->top || seq < w->start || w->top - seq >= sh->depth) return 0;
    uint64_t pos = seq & sh->ring_mask;
    uint64_t bit = (uint64_t)1 << (pos & 63);
    uint64_t *word = acemq__ring_word(w->ring_end, pos);
    int was = (*word & bit) != 0;
    *word &= ~bit;
    return was;
}
