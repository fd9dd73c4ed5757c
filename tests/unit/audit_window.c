/* audit_window.c — one producer's sliding window: new then duplicate, order
 * within the window, the start and the edge it keeps as ActiveMQ does,
 * random walks against a plain model, rollback, and sequences near 2^64. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"
#include "audit_fixture.h"

void new_then_duplicate(void **state)
{
    (void)state;
    acemq_audit *a = audit_make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    int cause = 99;
    assert_int_equal(audit_check_id(a, "p:1", &cause), ACEMQ_AUDIT_NEW);
    assert_int_equal(cause, ACEMQ_AUDIT_CAUSE_NONE);
    assert_int_equal(audit_check_id(a, "p:1", &cause), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(audit_check_id(a, "q:1", NULL), ACEMQ_AUDIT_NEW); /* another producer */
    assert_int_equal(audit_check_id(a, "p:2", NULL), ACEMQ_AUDIT_NEW);
    /* Producers are bytes: "p" and "p\0" differ. */
    assert_int_equal(acemq_audit_check_seq(a, "p\0", 2, 1, NULL), ACEMQ_AUDIT_NEW);
    acemq_audit_stats s = audit_stats(a);
    assert_true(s.checks == 5);
    assert_true(s.news == 4);
    assert_true(s.duplicates == 1);
    assert_true(s.unknowns == 0);
    assert_true(s.producers == 3);
    acemq_audit_free(a);
}

/* Within the window, order does not matter: every sequence is NEW once. */
void out_of_order_within_window(void **state)
{
    (void)state;
    enum { N = 2048 };
    static uint64_t order[N];
    for (int i = 0; i < N; i++)
        order[i] = (uint64_t)i + 1000;
    srand(7);
    for (int i = N - 1; i > 0; i--) {
        int j = rand() % (i + 1);
        uint64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    acemq_audit *a = audit_make(N, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(audit_check(a, "p", order[i], NULL), ACEMQ_AUDIT_NEW);
    for (int i = 0; i < N; i++)
        assert_int_equal(audit_check(a, "p", order[i], NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_true(audit_stats(a).unknowns == 0);
    acemq_audit_free(a);
}

/* A first id reaches depth - 1 back; below that the window never was. */
void before_start(void **state)
{
    (void)state;
    acemq_audit *a = audit_make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    int cause;
    assert_int_equal(audit_check(a, "p", 10000, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check(a, "p", 10000 - 2047, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check(a, "p", 10000 - 2048, &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_BEFORE_START);
    /* Not recordable, so a redelivery is UNKNOWN again, never NEW. */
    assert_int_equal(audit_check(a, "p", 10000 - 2048, &cause), ACEMQ_AUDIT_UNKNOWN);
    /* Still before the start after the window has slid far past it. */
    assert_int_equal(audit_check(a, "p", 50000, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check(a, "p", 1, &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_BEFORE_START);
    assert_int_equal(audit_check(a, "p", 20000, &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
    acemq_audit_stats s = audit_stats(a);
    assert_true(s.unknown_before_start == 3);
    assert_true(s.unknown_behind_window == 1);
    assert_true(s.unknowns == 4);
    acemq_audit_free(a);
}

void slides_across_many_windows(void **state)
{
    (void)state;
    acemq_audit *a = audit_make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    int cause;
    for (uint64_t s = 1; s <= 100000; s++) {
        assert_int_equal(audit_check(a, "p", s, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(audit_check(a, "p", s, NULL), ACEMQ_AUDIT_DUPLICATE);
        /* A redelivery from just inside the window is still caught. */
        if (s > 2047) assert_int_equal(audit_check(a, "p", s - 2047, NULL), ACEMQ_AUDIT_DUPLICATE);
    }
    /* Past depth, the 64 sequences of ActiveMQ's slack still have their
     * bits: seen, so duplicates; beyond them nothing is known. */
    for (uint64_t back = 2048; back < 2112; back++)
        assert_int_equal(audit_check(a, "p", 100000 - back, NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(audit_check(a, "p", 100000 - 2112, &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
    /* A jump of less than the window keeps what is still inside it. */
    assert_int_equal(audit_check(a, "p", 101000, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check(a, "p", 101000 - 2047, NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(audit_check(a, "p", 100001, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check(a, "p", 100999, NULL), ACEMQ_AUDIT_NEW);
    /* A jump past the whole window forgets it all, in one step. */
    assert_int_equal(audit_check(a, "p", 1000000000000ULL, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check(a, "p", 1000000000000ULL - 1, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check(a, "p", 101000, &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
    acemq_audit_free(a);
}

/* The plain model of one producer's window: the contract in a few lines. */
typedef struct model {
    unsigned char *seen; /* by sequence, over [0, range): recorded */
    uint64_t top, start, depth, reach;
    int started, fail_open;
} model;

static int model_check(model *m, uint64_t seq, int *cause)
{
    *cause = ACEMQ_AUDIT_CAUSE_NONE;
    if (!m->started) {
        m->started = 1;
        m->top = seq;
        m->start = seq >= m->depth - 1 ? seq - (m->depth - 1) : 0;
        m->seen[seq] = 1;
        return ACEMQ_AUDIT_NEW;
    }
    if (seq > m->top) {
        m->top = seq;
        m->seen[seq] = 1;
        return ACEMQ_AUDIT_NEW;
    }
    int in_reach = m->top - seq < m->reach;
    if (in_reach && m->seen[seq]) return ACEMQ_AUDIT_DUPLICATE;
    if (seq >= m->start && m->top - seq < m->depth) {
        m->seen[seq] = 1;
        return ACEMQ_AUDIT_NEW;
    }
    *cause = seq < m->start ? ACEMQ_AUDIT_BEFORE_START : ACEMQ_AUDIT_BEHIND_WINDOW;
    if (in_reach && m->fail_open) m->seen[seq] = 1;
    return m->fail_open ? ACEMQ_AUDIT_NEW : ACEMQ_AUDIT_UNKNOWN;
}

static int model_rollback(model *m, uint64_t seq)
{
    if (!m->started || seq > m->top || m->top - seq >= m->reach) return 0;
    int was = m->seen[seq];
    m->seen[seq] = 0;
    return was;
}

/* Random walks with gaps of up to 64 (which the window slides over inline),
 * longer jumps, stragglers (into the slack past depth and just beyond it)
 * and rollbacks, at depths on and off the ring's powers of two,
 * under both policies, must answer exactly as the model does: for
 * producers short and long (8, 9-16, 17-32 and 48 bytes), by split
 * producer and by text id, from sequence 5000 and from 0 (a window that
 * first grows from its start). */
static void run_against_model(unsigned flags)
{
    const uint32_t depths[] = {1, 2, 63, 64, 65, 100, 127, 129, 1000, 2048};
    const char *producers[] = {"p", "ID:host-1:1:1", "ID:host-7-1700000000000-1:1:1:1",
                               "ID:broker.example.com-40373-1700000000000-1:1:1:1"};
    enum { RANGE = 4000000, STEPS = 30000 };
    unsigned char *seen = malloc(RANGE);
    assert_non_null(seen);
    srand(42);
    for (size_t d = 0; d < sizeof depths / sizeof depths[0] * 8; d++) {
        uint32_t depth = depths[d % (sizeof depths / sizeof depths[0])];
        size_t variant = d / (sizeof depths / sizeof depths[0]);
        const char *p = producers[variant % 4];
        memset(seen, 0, RANGE);
        /* The reach: ActiveMQ's bit count for this depth. */
        uint64_t reach = 64 * (((uint64_t)depth + 1) / 64 + 1);
        int fail_open = (int)((d + variant) & 1);
        model m = {seen, 0, 0, depth, reach, 0, fail_open};
        acemq_audit *a = audit_make(
            depth, 64, fail_open ? ACEMQ_AUDIT_FAIL_OPEN : ACEMQ_AUDIT_FAIL_CLOSED, flags);
        uint64_t cur = variant < 4 ? 5000 : 0;
        for (int i = 0; i < STEPS && cur < RANGE - 20000; i++) {
            int r = rand() % 100;
            uint64_t seq;
            if (r < 40)
                seq = ++cur;
            else if (r < 50) /* a gap, as competing consumers leave: the window's inline case */
                seq = cur += 2 + (uint64_t)(rand() % 63);
            else if (r < 55)
                seq = cur += (uint64_t)(rand() % (int)(3 * depth + 2));
            else if (r < 90)
                seq = cur - (uint64_t)(rand() % (int)(reach + 3) % (cur + 1));
            else
                seq = cur - (uint64_t)(rand() % 5000) % (cur + 1);
            if (r % 13 == 0) {
                assert_int_equal(acemq_audit_rollback_seq(a, p, strlen(p), seq),
                                 model_rollback(&m, seq));
                continue;
            }
            int want_cause, got_cause;
            int want = model_check(&m, seq, &want_cause);
            int got = audit_check_either(a, p, seq, i & 1, &got_cause);
            if (got != want || got_cause != want_cause)
                fail_msg("%s depth %u step %d seq %llu: got %s/%s, want %s/%s", p, depth, i,
                         (unsigned long long)seq, acemq_audit_result_name(got),
                         acemq_audit_cause_name(got_cause), acemq_audit_result_name(want),
                         acemq_audit_cause_name(want_cause));
        }
        acemq_audit_free(a);
    }
    free(seen);
}

void window_matches_model(void **state)
{
    (void)state;
    run_against_model(0);
}

void window_matches_model_thread_safe(void **state)
{
    (void)state;
    run_against_model(ACEMQ_AUDIT_THREAD_SAFE);
}

void rollback_lets_a_sequence_pass_again(void **state)
{
    (void)state;
    acemq_audit *a = audit_make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    assert_int_equal(audit_check_id(a, "p:5", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(acemq_audit_rollback(a, "p:5", 3), 1);
    assert_int_equal(acemq_audit_rollback(a, "p:5", 3), 0); /* already clear */
    assert_int_equal(audit_check_id(a, "p:5", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check_id(a, "p:5", NULL), ACEMQ_AUDIT_DUPLICATE);
    /* Nothing to clear: never seen, unknown producer, ahead, behind the window. */
    assert_int_equal(acemq_audit_rollback(a, "p:4", 3), 0);
    assert_int_equal(acemq_audit_rollback(a, "q:5", 3), 0);
    assert_int_equal(acemq_audit_rollback(a, "p:6", 3), 0);
    assert_int_equal(audit_check_id(a, "p:10000", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(acemq_audit_rollback(a, "p:5", 3), 0);
    /* Rolling back the top leaves the top where it is. */
    assert_int_equal(acemq_audit_rollback(a, "p:10000", 7), 1);
    assert_int_equal(audit_check_id(a, "p:9999", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check_id(a, "p:10000", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(acemq_audit_rollback_seq(a, NULL, 1, 1), ACEMQ_EINVAL);
    assert_true(audit_stats(a).rollbacks == 2);
    acemq_audit_free(a);
}

/* The window's edge, as ActiveMQ keeps it: its BitArrayBin for depth 2048 is
 * 33 bins of 64 bits aligned to multiples of 64, the last holding the top,
 * so with the top at 63 past a multiple of 64 it still remembers sequences
 * 2,048 to 2,111 behind it. Every one of them that was seen is a duplicate
 * here too, under both policies; one that was not is NEW under fail-open
 * and recorded (its next sighting a DUPLICATE), UNKNOWN under fail-closed
 * and not recorded. 2,112 behind has no bit, in ActiveMQ either. */
void window_edge_keeps_activemqs_slack(void **state)
{
    (void)state;
    const uint64_t top = 4095; /* 63 past a multiple of 64 */
    for (int closed = 0; closed < 2; closed++) {
        int policy = closed ? ACEMQ_AUDIT_FAIL_CLOSED : ACEMQ_AUDIT_FAIL_OPEN;
        acemq_audit *a = audit_make(2048, 64, policy, 0);
        int cause;
        for (uint64_t s = 1; s <= top; s++)
            if (s != top - 2080) assert_int_equal(audit_check(a, "p", s, NULL), ACEMQ_AUDIT_NEW);
        for (uint64_t back = 2048; back < 2112; back++) {
            if (back == 2080) continue;
            assert_int_equal(audit_check(a, "p", top - back, &cause), ACEMQ_AUDIT_DUPLICATE);
            assert_int_equal(cause, ACEMQ_AUDIT_CAUSE_NONE);
        }
        /* Never seen, in the slack: history may be lost, so UNKNOWN. */
        int unknown = closed ? ACEMQ_AUDIT_UNKNOWN : ACEMQ_AUDIT_NEW;
        assert_int_equal(audit_check(a, "p", top - 2080, &cause), unknown);
        assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
        assert_int_equal(audit_check(a, "p", top - 2080, &cause),
                         closed ? ACEMQ_AUDIT_UNKNOWN : ACEMQ_AUDIT_DUPLICATE);
        if (!closed) {
            /* What fail-open recorded a rollback can clear. */
            assert_int_equal(acemq_audit_rollback_seq(a, "p", 1, top - 2080), 1);
            assert_int_equal(audit_check(a, "p", top - 2080, NULL), ACEMQ_AUDIT_NEW);
        }
        /* Beyond the slack no bit is left: nothing recorded, never a duplicate. */
        assert_int_equal(audit_check(a, "p", top - 2112, &cause), unknown);
        assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
        assert_int_equal(audit_check(a, "p", top - 2112, &cause), unknown);
        assert_int_equal(acemq_audit_rollback_seq(a, "p", 1, top - 2112), 0);
        acemq_audit_free(a);
    }
}

void sequences_near_2_64(void **state)
{
    (void)state;
    const uint64_t top = UINT64_MAX;
    int cause;
    for (int f = 0; f < 2; f++) {
        acemq_audit *a =
            audit_make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, f ? ACEMQ_AUDIT_THREAD_SAFE : 0);
        for (uint64_t s = top - 5000;; s++) {
            assert_int_equal(audit_check(a, "p", s, NULL), ACEMQ_AUDIT_NEW);
            assert_int_equal(audit_check(a, "p", s, NULL), ACEMQ_AUDIT_DUPLICATE);
            if (s == top) break;
        }
        assert_int_equal(audit_check_id(a, "p:18446744073709551615", NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(audit_check(a, "p", top - 2047, NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(audit_check(a, "p", top - 2111, NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(audit_check(a, "p", top - 2112, &cause), ACEMQ_AUDIT_UNKNOWN);
        assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
        assert_int_equal(audit_check(a, "p", 0, &cause), ACEMQ_AUDIT_UNKNOWN);
        assert_int_equal(cause, ACEMQ_AUDIT_BEFORE_START);
        assert_int_equal(acemq_audit_rollback_seq(a, "p", 1, top), 1);
        assert_int_equal(audit_check(a, "p", top, NULL), ACEMQ_AUDIT_NEW);

        /* First ids at both ends, and one jump across the whole range. */
        assert_int_equal(audit_check(a, "hi", top, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(audit_check(a, "hi", top - 2047, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(audit_check(a, "hi", top - 2048, &cause), ACEMQ_AUDIT_UNKNOWN);
        assert_int_equal(cause, ACEMQ_AUDIT_BEFORE_START);
        assert_int_equal(audit_check(a, "lo", 0, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(audit_check(a, "lo", 0, NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(audit_check(a, "lo", 1, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(audit_check(a, "lo", top, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(audit_check(a, "lo", top - 1, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(audit_check(a, "lo", top, NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(audit_check(a, "lo", 1, &cause), ACEMQ_AUDIT_UNKNOWN);
        assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
        /* Beyond 2^31 and 2^63, where 32-bit and signed arithmetic break. */
        const uint64_t edges[] = {(1ULL << 31) - 1, 1ULL << 31, (1ULL << 32) + 5, (1ULL << 63) - 1,
                                  1ULL << 63};
        for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
            assert_int_equal(audit_check(a, "mid", edges[i], NULL), ACEMQ_AUDIT_NEW);
            assert_int_equal(audit_check(a, "mid", edges[i], NULL), ACEMQ_AUDIT_DUPLICATE);
        }
        acemq_audit_free(a);
    }
}
