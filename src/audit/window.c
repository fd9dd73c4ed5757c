/* window.c — one producer's sliding bit window: which of the last `reach`
 * sequences were seen (reach: ActiveMQ's bit count for the audit's depth), in
 * constant memory, with overflow-free 64-bit arithmetic.
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
    /* ActiveMQ's BitArrayBin for this depth: (depth + 1) / 64 + 1 bins of 64
     * bits. Its window is those bins, aligned to multiples of 64, the last
     * holding its highest sequence, so it remembers the last reach - 63 to reach
     * sequences, depending on where the top sits in its bin. A ring that
     * keeps the last reach sequences keeps all of them. */
    sh->reach = 64 * ((uint64_t)(depth + 1) / 64 + 1);
    /* + 128: room for the clear word ahead of the top (see acemq__window). */
    sh->ring_bits = acemq__pow2((size_t)sh->reach + 128);
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

/* Why seq, outside the window, is UNKNOWN. */
static int lost_cause(const acemq__window *w, uint64_t seq)
{
    if (seq < w->start) return w->readmitted ? ACEMQ_AUDIT_EVICTED : ACEMQ_AUDIT_BEFORE_START;
    return ACEMQ_AUDIT_BEHIND_WINDOW;
}

int acemq__window_check(acemq__window *w, const acemq__window_shape *sh, uint64_t seq,
                        int record_unknown, int *cause)
{
    if (seq > w->top) {
        /* Ahead by at most 64: the positions up to seq are clear (see
         * acemq__window). Further: clear from top + 1 to the end of seq's
         * word; take_next clears the word after it. None of those positions
         * holds a sequence within the reach. */
        uint64_t ahead = seq - w->top;
        if (ahead > 64) {
            /* The whole ring when that stretch is as long. */
            uint64_t n = ahead < sh->ring_bits ? ahead + 63 - (seq & 63) : sh->ring_bits;
            if (n >= sh->ring_bits)
                memset(w->ring_end - sh->words, 0, sh->words * sizeof(uint64_t));
            else
                clear_positions(w, sh, w->top + 1, n);
        }
        acemq__window_take_next(w, w->ring_end, sh, seq);
        return ACEMQ_AUDIT_NEW;
    }
    uint64_t back = w->top - seq;
    if (back >= sh->reach) {
        /* No bit: nothing can be known or recorded. */
        *cause = lost_cause(w, seq);
        return ACEMQ_AUDIT_UNKNOWN;
    }
    /* Within the ring's reach every bit is exact (see acemq__window), so a
     * set one is a duplicate wherever it lies. */
    uint64_t pos = seq & sh->ring_mask;
    uint64_t bit = (uint64_t)1 << (pos & 63);
    uint64_t *word = acemq__ring_word(w->ring_end, pos);
    if (*word & bit) return ACEMQ_AUDIT_DUPLICATE;
    if (seq >= w->start && back < sh->depth) {
        *word |= bit;
        return ACEMQ_AUDIT_NEW;
    }
    /* A clear bit outside the window: seq may have been seen before the
     * window began (or slid past depth). Recorded when the caller answers it
     * NEW, so that its next sighting is a DUPLICATE. */
    if (record_unknown) *word |= bit;
    *cause = lost_cause(w, seq);
    return ACEMQ_AUDIT_UNKNOWN;
}

int acemq__window_clear(acemq__window *w, const acemq__window_shape *sh, uint64_t seq)
{
    if (seq > w->top || w->top - seq >= sh->reach) return 0;
    uint64_t pos = seq & sh->ring_mask;
    uint64_t bit = (uint64_t)1 << (pos & 63);
    uint64_t *word = acemq__ring_word(w->ring_end, pos);
    int was = (*word & bit) != 0;
    *word &= ~bit;
    return was;
}
