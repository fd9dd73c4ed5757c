/* audit_lru.c — the producer LRU: exact against a plain recency list,
 * eviction and the UNKNOWN answers it leads to under both policies, sharded
 * tables, the bounded memory of evictions, and an evicted producer's return. */
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

/* The producer LRU is exact: checked against a plain recency list, with
 * producers of every length class drawn at random from a pool larger than
 * max_producers, checks and rollbacks both counting as uses, and every
 * evicted producer coming back UNKNOWN (EVICTED), unless the memory of
 * evictions forgot it (direct-mapped by hash, so two evicted producers can
 * share a slot): such a NEW is allowed only as often as `forgotten` counts.
 * A wrong victim would show as a held producer answering UNKNOWN. Capacities
 * on both sides of the switch from stamps to a linked list (docs/audit.md). */
void lru_matches_model(void **state)
{
    (void)state;
    const uint32_t caps[] = {1, 3, 64, 256, 257, 400};
    enum { POOL_MAX = 602, STEPS = 20000 };
    static char names[POOL_MAX][64];
    static int order[POOL_MAX]; /* the model: producers held, most recent first */
    static int evicted[POOL_MAX], rolled[POOL_MAX];
    static uint64_t seq[POOL_MAX];
    srand(7);
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        uint32_t cap = caps[c];
        int pool = (int)(cap * 3 / 2 + 2), held = 0;
        uint64_t evictions = 0, lenient = 0;
        for (int k = 0; k < pool; k++) {
            snprintf(names[k], sizeof names[k], "ID:%.*s-%d", k % 45,
                     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", k);
            evicted[k] = rolled[k] = 0;
            seq[k] = 0;
        }
        acemq_audit_options o;
        acemq_audit_options_init(&o);
        o.max_producers = cap;
        o.policy = ACEMQ_AUDIT_FAIL_CLOSED;
        o.max_evicted = 1u << 20;
        acemq_audit *a = NULL;
        assert_int_equal(acemq_audit_new(&a, &o), 0);
        for (int i = 0; i < STEPS; i++) {
            int k = rand() % pool, at = -1;
            for (int j = 0; j < held; j++)
                if (order[j] == k) at = j;
            if (at >= 0) { /* a use: to the front */
                memmove(order + 1, order, (size_t)at * sizeof order[0]);
                order[0] = k;
            }
            if (rand() % 8 == 0) {
                int want = at >= 0 && seq[k] > 0 && !rolled[k];
                if (at >= 0 && seq[k] > 0) rolled[k] = 1;
                assert_int_equal(acemq_audit_rollback_seq(a, names[k], strlen(names[k]), seq[k]),
                                 want);
                continue;
            }
            int want = ACEMQ_AUDIT_NEW, want_cause = ACEMQ_AUDIT_CAUSE_NONE, cause;
            if (at < 0) {
                if (evicted[k]) {
                    want = ACEMQ_AUDIT_UNKNOWN;
                    want_cause = ACEMQ_AUDIT_EVICTED;
                }
                if ((uint32_t)held == cap) { /* the least recent goes */
                    evicted[order[--held]] = 1;
                    evictions++;
                }
                memmove(order + 1, order, (size_t)held * sizeof order[0]);
                order[0] = k;
                held++;
                evicted[k] = 0;
            }
            rolled[k] = 0;
            int got = audit_check_either(a, names[k], ++seq[k], i & 1, &cause);
            if (got == ACEMQ_AUDIT_NEW && want == ACEMQ_AUDIT_UNKNOWN &&
                lenient < audit_stats(a).forgotten) {
                lenient++;
                continue;
            }
            if (got != want || cause != want_cause)
                fail_msg("max_producers %u step %d %s:%llu: got %s/%s, want %s/%s", cap, i,
                         names[k], (unsigned long long)seq[k], acemq_audit_result_name(got),
                         acemq_audit_cause_name(cause), acemq_audit_result_name(want),
                         acemq_audit_cause_name(want_cause));
        }
        acemq_audit_stats st = audit_stats(a);
        assert_true(lenient <= st.forgotten && st.forgotten < evictions / 8 + 2);
        assert_true(st.evictions == evictions);
        assert_true(st.producers == (uint64_t)held);
        acemq_audit_free(a);
    }
}

/* Thread-safe, a shard may hold more than its share of producers (its
 * table grows) and every one of them is still found. */
void shard_tables_grow(void **state)
{
    (void)state;
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.max_producers = 64;
    o.shards = 16;
    o.flags = ACEMQ_AUDIT_THREAD_SAFE;
    o.policy = ACEMQ_AUDIT_FAIL_CLOSED;
    acemq_audit *a = NULL;
    assert_int_equal(acemq_audit_new(&a, &o), 0);
    char name[64];
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 64; k++) {
            snprintf(name, sizeof name, "ID:host-%d-1700000000000-1:1:1:1", k);
            assert_int_equal(audit_check(a, name, 1, NULL),
                             round == 0 ? ACEMQ_AUDIT_NEW : ACEMQ_AUDIT_DUPLICATE);
        }
    acemq_audit_stats st = audit_stats(a);
    assert_true(st.producers == 64 && st.evictions == 0 && st.checks == 192);
    acemq_audit_free(a);
}

/* max_producers 4: the least recently used producer goes, and comes back UNKNOWN. */
static void eviction(int policy)
{
    acemq_audit *a = audit_make(2048, 4, policy, 0);
    int unknown = policy == ACEMQ_AUDIT_FAIL_CLOSED ? ACEMQ_AUDIT_UNKNOWN : ACEMQ_AUDIT_NEW;
    int cause;
    for (int i = 0; i < 4; i++) {
        char p[8];
        snprintf(p, sizeof p, "p%d", i);
        assert_int_equal(audit_check(a, p, 1, NULL), ACEMQ_AUDIT_NEW);
    }
    assert_int_equal(audit_check(a, "p0", 2, NULL), ACEMQ_AUDIT_NEW); /* p0 is recent now */
    assert_int_equal(audit_check(a, "p4", 1, NULL), ACEMQ_AUDIT_NEW); /* evicts p1 */
    acemq_audit_stats s = audit_stats(a);
    assert_true(s.evictions == 1);
    assert_true(s.producers == 4);
    assert_int_equal(audit_check(a, "p0", 1, NULL), ACEMQ_AUDIT_DUPLICATE);

    /* p1 was evicted: its return is UNKNOWN (evicts p2). */
    assert_int_equal(audit_check(a, "p1", 2, &cause), unknown);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
    /* Its window starts again at that id: recorded, and anything below it
     * (seen or not before the eviction, nobody knows) is UNKNOWN. */
    assert_int_equal(audit_check(a, "p1", 2, NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(audit_check(a, "p1", 1, &cause), unknown);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
    assert_int_equal(audit_check(a, "p1", 3, &cause), ACEMQ_AUDIT_NEW);
    assert_int_equal(cause, ACEMQ_AUDIT_CAUSE_NONE);
    /* p2, evicted for p1, comes back UNKNOWN too. */
    assert_int_equal(audit_check(a, "p2", 1, &cause), unknown);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);

    s = audit_stats(a);
    assert_true(s.evictions == 3);
    assert_true(s.unknowns == 3);
    assert_true(s.unknown_evicted == 3);
    assert_true(s.checks == 12);
    assert_true(s.duplicates == 2);
    assert_true(s.news == (policy == ACEMQ_AUDIT_FAIL_CLOSED ? 7 : 10));
    assert_true(s.forgotten == 0);
    acemq_audit_free(a);
}

void eviction_fail_closed(void **state)
{
    (void)state;
    eviction(ACEMQ_AUDIT_FAIL_CLOSED);
}

void eviction_fail_open(void **state)
{
    (void)state;
    eviction(ACEMQ_AUDIT_FAIL_OPEN);
}

/* Sharded, the LRU is per shard but the bound is the audit's, give or take
 * one producer per shard; an evicted producer still comes back UNKNOWN. */
void sharded_eviction(void **state)
{
    (void)state;
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.max_producers = 8;
    o.shards = 4;
    o.max_evicted = 4096;
    o.flags = ACEMQ_AUDIT_THREAD_SAFE;
    o.policy = ACEMQ_AUDIT_FAIL_CLOSED;
    acemq_audit *a = NULL;
    assert_int_equal(acemq_audit_new(&a, &o), 0);
    char p[16];
    for (int i = 0; i < 100; i++) {
        snprintf(p, sizeof p, "p%d", i);
        assert_int_equal(audit_check(a, p, 1, NULL), ACEMQ_AUDIT_NEW);
    }
    acemq_audit_stats s = audit_stats(a);
    assert_true(s.producers >= 8 && s.producers <= 8 + 3);
    assert_true(s.evictions == 100 - s.producers);
    for (int i = 0; i < 100; i++) {
        snprintf(p, sizeof p, "p%d", i);
        int cause;
        int r = audit_check(a, p, 1, &cause);
        if (r == ACEMQ_AUDIT_UNKNOWN)
            assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
        else
            assert_int_equal(r, ACEMQ_AUDIT_DUPLICATE);
    }
    s = audit_stats(a);
    assert_true(s.forgotten == 0);
    assert_true(s.unknown_evicted + s.duplicates == 100);
    assert_true(s.unknown_evicted >= 100 - 11);
    assert_true(s.producers <= 8 + 3);
    acemq_audit_free(a);
}

/* The memory of evictions is bounded too; what it drops is counted. */
void forgotten_evictions_are_counted(void **state)
{
    (void)state;
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.max_producers = 1;
    o.max_evicted = 1;
    o.policy = ACEMQ_AUDIT_FAIL_CLOSED;
    acemq_audit *a = NULL;
    assert_int_equal(acemq_audit_new(&a, &o), 0);
    assert_int_equal(audit_check(a, "p0", 1, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check(a, "p1", 1, NULL), ACEMQ_AUDIT_NEW); /* p0 remembered as evicted */
    assert_int_equal(audit_check(a, "p2", 1, NULL), ACEMQ_AUDIT_NEW); /* p1 overwrites p0 */
    acemq_audit_stats s = audit_stats(a);
    assert_true(s.evictions == 2);
    assert_true(s.forgotten == 1);
    /* The documented limit: p0's return is no longer recognised. */
    assert_int_equal(audit_check(a, "p0", 1, NULL), ACEMQ_AUDIT_NEW);
    acemq_audit_free(a);
}

/* An evicted producer comes back at 200: its window starts there, but its
 * ring reaches back, and ActiveMQ's fresh window begins at 192 (200 rounded
 * down to 64). A redelivery just below 200 is UNKNOWN (EVICTED), answered
 * NEW under fail-open and recorded, so its second sighting is a DUPLICATE,
 * as in ActiveMQ; so is one below ActiveMQ's base, which ActiveMQ never
 * catches. Under fail-closed both stay UNKNOWN. */
void evicted_producer_return_is_recorded(void **state)
{
    (void)state;
    for (int closed = 0; closed < 2; closed++) {
        int policy = closed ? ACEMQ_AUDIT_FAIL_CLOSED : ACEMQ_AUDIT_FAIL_OPEN;
        int unknown = closed ? ACEMQ_AUDIT_UNKNOWN : ACEMQ_AUDIT_NEW;
        acemq_audit *a = audit_make(2048, 64, policy, 0);
        int cause;
        for (uint64_t s = 1; s <= 100; s++)
            assert_int_equal(audit_check(a, "p", s, NULL), ACEMQ_AUDIT_NEW);
        char q[16];
        for (int k = 0; k < 64; k++) { /* 64 others: p goes */
            snprintf(q, sizeof q, "q%d", k);
            assert_int_equal(audit_check(a, q, 1, NULL), ACEMQ_AUDIT_NEW);
        }
        assert_true(audit_stats(a).evictions == 1);
        assert_int_equal(audit_check(a, "p", 200, &cause), unknown);
        assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
        const uint64_t below[] = {195, 150};
        for (size_t i = 0; i < 2; i++) {
            assert_int_equal(audit_check(a, "p", below[i], &cause), unknown);
            assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
            assert_int_equal(audit_check(a, "p", below[i], &cause),
                             closed ? ACEMQ_AUDIT_UNKNOWN : ACEMQ_AUDIT_DUPLICATE);
        }
        assert_int_equal(audit_check(a, "p", 201, &cause), ACEMQ_AUDIT_NEW);
        assert_int_equal(audit_check(a, "p", 200, &cause), ACEMQ_AUDIT_DUPLICATE);
        acemq_audit_stats st = audit_stats(a);
        assert_true(st.unknown_evicted == (closed ? 5 : 3));
        assert_true(st.duplicates == (closed ? 1 : 3));
        acemq_audit_free(a);
    }
}
