/* audit_activemq.c — ActiveMQ's own audit, modelled from its source, and the
 * rule that acemq catches every duplicate it catches, on streams that lose
 * history. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"
#include "audit_fixture.h"

/* ActiveMQ's ActiveMQMessageAuditNoSync, read from its source (5.17):
 * BitArrayBin's bins, their first index and how they slide, and the
 * producers' access-ordered LRU. For the sequences used here (below 2^31,
 * jumps of a few thousand) its int arithmetic does not overflow. */
enum { AMQ_MAX_BINS = 64, AMQ_MAX_PRODUCERS = 128 };
typedef struct amq_bin {
    uint64_t bits[AMQ_MAX_BINS];
    int64_t first; /* longFirstIndex; -1 until the first setBit */
    int bins;      /* maxNumberOfArrays */
} amq_bin;

typedef struct amq_audit {
    amq_bin bin[AMQ_MAX_PRODUCERS]; /* by producer number */
    int order[AMQ_MAX_PRODUCERS];   /* held producers, most recent first */
    int held, max, depth;
} amq_audit;

/* BitArrayBin.getBin: Java's long division truncates toward zero. */
static int64_t amq_get_bin(amq_bin *b, int64_t index)
{
    if (b->first < 0) {
        b->first = index - index % 64;
        return 0;
    }
    return (index - b->first) / 64;
}

/* BitArrayBin.setBit: the bit's old value. */
static int amq_set_bit(amq_bin *b, int64_t index, int value)
{
    int64_t bin = amq_get_bin(b, index);
    if (bin < 0) return 0;
    if (bin >= b->bins) {
        int64_t over = bin - b->bins + 1;
        for (; over > 0; over--) {
            memmove(b->bits, b->bits + 1, (size_t)(b->bins - 1) * sizeof b->bits[0]);
            b->bits[b->bins - 1] = 0;
            b->first += 64;
        }
    }
    int64_t offset = (index - b->first) - 64 * amq_get_bin(b, index);
    if (offset < 0) return 0;
    bin = amq_get_bin(b, index);
    uint64_t mask = (uint64_t)1 << offset;
    int old = (b->bits[bin] & mask) != 0;
    if (value)
        b->bits[bin] |= mask;
    else
        b->bits[bin] &= ~mask;
    return old;
}

/* LRUCache.get: the held producer k, made the most recent; 0 when absent. */
static int amq_get(amq_audit *m, int k)
{
    for (int j = 0; j < m->held; j++)
        if (m->order[j] == k) {
            memmove(m->order + 1, m->order, (size_t)j * sizeof m->order[0]);
            m->order[0] = k;
            return 1;
        }
    return 0;
}

static int amq_is_duplicate(amq_audit *m, int k, int64_t seq)
{
    if (!amq_get(m, k)) { /* put, then the eldest goes past the maximum */
        if (m->held == m->max) m->held--;
        memmove(m->order + 1, m->order, (size_t)m->held * sizeof m->order[0]);
        m->order[0] = k;
        m->held++;
        memset(&m->bin[k], 0, sizeof m->bin[k]);
        m->bin[k].first = -1;
        m->bin[k].bins = (m->depth + 1) / 64 + 1;
    }
    return amq_set_bit(&m->bin[k], seq, 1);
}

static void amq_rollback(amq_audit *m, int k, int64_t seq)
{
    if (amq_get(m, k)) (void)amq_set_bit(&m->bin[k], seq, 0);
}

/* The rule, on random streams that lose history (more producers than the
 * LRU holds, so evictions and returns; redeliveries near and past the
 * window's edge, just below a returned producer's first id, and again
 * soon after; first deliveries out of order; rollbacks): under fail-open,
 * every id ActiveMQ's audit (modelled above) answers duplicate is a
 * DUPLICATE here, and a DUPLICATE is only ever an id checked before.
 * Under fail-closed, a DUPLICATE too is only ever an id checked before.
 * Both flavours, the thread-safe one with its default options. */
void catches_what_activemq_catches(void **state)
{
    (void)state;
    const struct {
        int depth, max, producers;
    } cases[] = {{2048, 64, 80}, {100, 4, 7}, {2046, 8, 12}, {10, 2, 3}};
    enum { STEPS = 60000, SEQ_MAX = 1 << 17, RECENT = 16 };
    static unsigned char seen[AMQ_MAX_PRODUCERS][SEQ_MAX];
    static amq_audit amq;
    srand(11);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int v = 0; v < 4; v++) {
            int closed = v & 1;
            unsigned flags = v >> 1 ? ACEMQ_AUDIT_THREAD_SAFE : 0;
            int depth = cases[c].depth, np = cases[c].producers;
            acemq_audit *a =
                audit_make((uint32_t)depth, (uint32_t)cases[c].max,
                           closed ? ACEMQ_AUDIT_FAIL_CLOSED : ACEMQ_AUDIT_FAIL_OPEN, flags);
            memset(seen, 0, sizeof seen);
            memset(&amq, 0, sizeof amq);
            amq.max = cases[c].max;
            amq.depth = depth;
            uint64_t next[AMQ_MAX_PRODUCERS] = {0}, returned[AMQ_MAX_PRODUCERS] = {0};
            int recent_p[RECENT] = {0};
            uint64_t recent_s[RECENT] = {0};
            uint64_t amq_dups = 0, caught = 0;
            int reach = 64 * ((depth + 1) / 64 + 1);
            for (int i = 0; i < STEPS; i++) {
                /* A few producers busy, the rest now and then: evictions. */
                int k = rand() % 4 ? rand() % (np < 4 ? np : 4) : rand() % np;
                uint64_t s;
                int r = rand() % 100;
                if (next[k] == 0 || r < 50) { /* first delivery, some out of order */
                    s = ++next[k];
                    if (rand() % 20 == 0) s = next[k] += (uint64_t)(rand() % 8);
                    /* Back after an eviction (a use of a held producer,
                     * which is what amq_get makes it, changes nothing the
                     * check below would not). */
                    if (!amq_get(&amq, k) && next[k] > 1) returned[k] = s;
                } else if (r < 60) { /* a gap left by the jumps above */
                    s = next[k] - (uint64_t)(rand() % 16) % next[k];
                } else if (r < 75) { /* near and past the edge */
                    uint64_t back = (uint64_t)reach - 80 + (uint64_t)(rand() % 160);
                    s = back < next[k] ? next[k] - back : 1;
                } else if (r < 85 && returned[k]) { /* below a return */
                    uint64_t back = (uint64_t)(1 + rand() % 96);
                    s = back < returned[k] ? returned[k] - back : 1;
                } else if (r < 97) { /* again, soon after */
                    int j = rand() % RECENT;
                    k = recent_p[j];
                    s = recent_s[j] ? recent_s[j] : 1;
                } else { /* a rollback of a recent one */
                    int j = rand() % RECENT;
                    k = recent_p[j];
                    s = recent_s[j] ? recent_s[j] : 1;
                    char name[48];
                    snprintf(name, sizeof name, "ID:host-%d-1700000000000-1:1:1:1", k);
                    assert_true(acemq_audit_rollback_seq(a, name, strlen(name), s) >= 0);
                    amq_rollback(&amq, k, (int64_t)s);
                    continue;
                }
                assert_true(s < SEQ_MAX);
                char name[48];
                snprintf(name, sizeof name, "ID:host-%d-1700000000000-1:1:1:1", k);
                int cause;
                int got = audit_check_either(a, name, s, i & 1, &cause);
                int amq_dup = amq_is_duplicate(&amq, k, (int64_t)s);
                if (got == ACEMQ_AUDIT_DUPLICATE && !seen[k][s])
                    fail_msg("depth %d max %d %s: step %d %s:%llu: DUPLICATE, never seen", depth,
                             amq.max, closed ? "fail-closed" : "fail-open", i, name,
                             (unsigned long long)s);
                if (!closed && amq_dup && got != ACEMQ_AUDIT_DUPLICATE)
                    fail_msg("depth %d max %d%s: step %d %s:%llu: ActiveMQ duplicate, acemq %s/%s",
                             depth, amq.max, flags ? " thread-safe" : "", i, name,
                             (unsigned long long)s, acemq_audit_result_name(got),
                             acemq_audit_cause_name(cause));
                amq_dups += (uint64_t)amq_dup;
                caught += got == ACEMQ_AUDIT_DUPLICATE && !amq_dup;
                seen[k][s] = 1;
                recent_p[i % RECENT] = k;
                recent_s[i % RECENT] = s;
            }
            /* The streams lose history, and ActiveMQ still catches plenty. */
            acemq_audit_stats st = audit_stats(a);
            assert_true(st.evictions > 100 && st.unknown_evicted > 0 &&
                        st.unknown_behind_window > 0);
            assert_true(amq_dups > 1000);
            if (!closed) assert_true(caught > 0); /* and acemq more */
            acemq_audit_free(a);
        }
}
