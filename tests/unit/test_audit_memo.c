/* test_audit_memo.c — the single-thread audit against the thread-safe one
 * (one shard, the same LRU), id for id, through evictions that free or
 * reuse a producer's memory, jumps, rollbacks, leading zeros and sequences
 * that gain a digit; and the cases where a producer's next id must not be
 * taken for another's: a producer evicted for one whose key is its own but
 * for the last ":1", an all-nines sequence, and a top moved by each entry
 * point.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"

enum { KEY_CAP = 96 };

static acemq_audit *make(uint32_t depth, uint32_t producers, unsigned flags)
{
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.depth = depth;
    o.max_producers = producers;
    o.flags = flags;
    o.shards = 1; /* the thread-safe flavour: one LRU, as the plain one has */
    acemq_audit *a = NULL;
    assert_int_equal(acemq_audit_new(&a, &o), 0);
    return a;
}

/* A producer evicted for one whose key is its own but for the last ":1":
 * the newcomer takes the evicted producer's memory, and must not take its
 * window, or the evicted producer's next id would pass for the newcomer's. */
static void guess_leaves_with_its_producer(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 1, 0);
    const char *a5 = "ID:host-1-1700000000000-1:1:1:1:5", *a6 = "ID:host-1-1700000000000-1:1:1:1:6";
    const char *a7 = "ID:host-1-1700000000000-1:1:1:1:7", *b6 = "ID:host-1-1700000000000-1:1:1:6";
    int cause = -1;
    assert_int_equal(acemq_audit_check(a, a5, strlen(a5), &cause), ACEMQ_AUDIT_NEW);
    assert_int_equal(acemq_audit_check(a, a6, strlen(a6), &cause), ACEMQ_AUDIT_NEW);
    /* Evicts a's producer; its top is 6 too. */
    assert_int_equal(acemq_audit_check(a, b6, strlen(b6), &cause), ACEMQ_AUDIT_NEW);
    /* a7's producer was evicted: its history is lost. */
    assert_int_equal(acemq_audit_check(a, a7, strlen(a7), &cause), ACEMQ_AUDIT_NEW);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
    acemq_audit_stats st;
    assert_int_equal(acemq_audit_stats_get(a, &st), 0);
    assert_int_equal(st.unknown_evicted, 1);
    acemq_audit_free(a);
}

/* After an all-nines sequence the next id has a digit more; an id of the
 * old length whose ':' became a ';' has no sequence, and must be refused,
 * not taken as the next one. */
static void no_guess_after_all_nines(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, 0);
    char id[64];
    for (int seq = 990; seq <= 999; seq++) {
        snprintf(id, sizeof id, "ID:host-1-1700000000000-1:1:1:1:%d", seq);
        assert_int_equal(acemq_audit_check(a, id, strlen(id), NULL), ACEMQ_AUDIT_NEW);
    }
    const char *semicolon = "ID:host-1-1700000000000-1:1:1:1;000";
    assert_int_equal(acemq_audit_check(a, semicolon, strlen(semicolon), NULL), ACEMQ_EINVAL);
    const char *next = "ID:host-1-1700000000000-1:1:1:1:1000";
    assert_int_equal(acemq_audit_check(a, next, strlen(next), NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(acemq_audit_check(a, next, strlen(next), NULL), ACEMQ_AUDIT_DUPLICATE);
    acemq_audit_free(a);
}

static void check_new(acemq_audit *a, const char *id)
{
    assert_int_equal(acemq_audit_check(a, id, strlen(id), NULL), ACEMQ_AUDIT_NEW);
}

/* The top moves through the general split (an id of eight digits, which
 * the one-word split does not take); the same sequence in fewer digits must
 * then be a duplicate, not the sequence after. */
static void guess_dropped_when_the_general_check_moves_top(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, 0);
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:4");
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:5");
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:00000006");
    const char *six = "ID:host-1-1700000000000-1:1:1:1:6";
    assert_int_equal(acemq_audit_check(a, six, strlen(six), NULL), ACEMQ_AUDIT_DUPLICATE);
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:7");
    acemq_audit_free(a);
}

/* The same, when the top moves through the split entry point. */
static void guess_dropped_when_a_split_id_moves_top(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, 0);
    const char *key = "ID:host-1-1700000000000-1:1:1:1";
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:4");
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:5");
    assert_int_equal(acemq_audit_check_seq(a, key, strlen(key), 6, NULL), ACEMQ_AUDIT_NEW);
    const char *six = "ID:host-1-1700000000000-1:1:1:1:6";
    assert_int_equal(acemq_audit_check(a, six, strlen(six), NULL), ACEMQ_AUDIT_DUPLICATE);
    /* A split id inside the window leaves the top alone. */
    assert_int_equal(acemq_audit_check_seq(a, key, strlen(key), 5, NULL), ACEMQ_AUDIT_DUPLICATE);
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:7");
    acemq_audit_free(a);
}

/* Producers alike in their first 31 bytes, and two shorter ones between
 * their ids: each id answers for its own producer's top. */
static void guess_dropped_when_the_table_moves_top(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, 0);
    static const char *const longs[] = {"ID:host-1-1700000000000-1:1:1:1",
                                        "ID:host-1-1700000000000-1:1:1:2",
                                        "ID:host-1-1700000000000-1:1:1:3"};
    char id[64];
    for (int seq = 1; seq <= 2; seq++)
        for (int i = 0; i < 3; i++) {
            snprintf(id, sizeof id, "%s:%d", longs[i], seq);
            check_new(a, id);
        }
    check_new(a, "ID:h-17-bytes:1:1:1");
    check_new(a, "ID:h-17-bytes:1:2:1");
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "%s:3", longs[i]);
        check_new(a, id);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "%s:3", longs[i]);
        assert_int_equal(acemq_audit_check(a, id, strlen(id), NULL), ACEMQ_AUDIT_DUPLICATE);
    }
    acemq_audit_free(a);
}

/* The single-thread flavour against the thread-safe one with one shard (the
 * same LRU), id for id, on producers short and long, alike at their start
 * or their end, with evictions (a producer's memory freed when a longer key
 * takes its place, reused otherwise), rollbacks, and both entry points. */
static void audit_with_memo_answers_as_without(void **state)
{
    (void)state;
    static const char *const producers[] = {
        "ID:host-1-1700000000000-1:1:1:1",
        "ID:host-1-1700000000000-1:1:1:10",
        "ID:host-1-1700000000000-1:1:1:11",
        "ID:host-1-1700000000000-1:1:1:12",
        "ID:host-2-1700000000000-1:1:1:1",
        "ID:host-3-1700000000000-1:1:1:1",
        "ID:host-4-1700000000000-1:1:1:1",
        "ID:h-17-bytes:1:1",
        "ID:h-18-bytes:1:12",
        "ID:host-32-bytes-000000000:1:1:1",
        "ID:host-32-bytes-000000000:1:1:2",
        "p-short",
        "ID:a-producer-id-well-over-sixty-four-bytes-so-its-entry-is-freed:1:1:1"};
    enum { NP = sizeof producers / sizeof producers[0], N = 40000 };
    for (int max = 3; max <= 16; max += 13) { /* evictions, then none */
        acemq_audit *plain = make(64, (uint32_t)max, 0);
        acemq_audit *locked = make(64, (uint32_t)max, ACEMQ_AUDIT_THREAD_SAFE);
        /* One producer's sequences grow from 7 digits to 8, past what the
         * one-word split takes (the others' cross 9, 99 and 999). */
        uint64_t cur[NP] = {0, 0, 0, 9999000};
        srand(11);
        char id[KEY_CAP * 2];
        for (int i = 0; i < N; i++) {
            int k = rand() % NP, r = rand() % 100;
            uint64_t seq;
            if (r < 75)
                seq = ++cur[k];
            else if (r < 95)
                seq = cur[k] - (uint64_t)(rand() % 80) % (cur[k] + 1);
            else
                seq = cur[k] += (uint64_t)(rand() % 300);
            const char *p = producers[k];
            size_t plen = strlen(p);
            /* Now and then the sequence with leading zeros: the same id to
             * the audit, another text to the split. */
            int n = snprintf(id, sizeof id, r % 13 == 5 ? "%s:00%llu" : "%s:%llu", p,
                             (unsigned long long)seq);
            assert_true(n > 0 && (size_t)n < sizeof id);
            int c1 = -1, c2 = -1, a1, a2;
            if (r % 3 == 0) {
                a1 = acemq_audit_check_seq(plain, p, plen, seq, &c1);
                a2 = acemq_audit_check_seq(locked, p, plen, seq, &c2);
            } else {
                a1 = acemq_audit_check(plain, id, (size_t)n, &c1);
                a2 = acemq_audit_check(locked, id, (size_t)n, &c2);
            }
            if (a1 != a2 || c1 != c2)
                fail_msg("max %d id %d (%s): single %d/%d, thread-safe %d/%d", max, i, id, a1, c1,
                         a2, c2);
            if (r == 7) {
                assert_int_equal(acemq_audit_rollback(plain, id, (size_t)n),
                                 acemq_audit_rollback(locked, id, (size_t)n));
            }
        }
        acemq_audit_stats s1, s2;
        assert_int_equal(acemq_audit_stats_get(plain, &s1), 0);
        assert_int_equal(acemq_audit_stats_get(locked, &s2), 0);
        assert_memory_equal(&s1, &s2, sizeof s1);
        assert_true(s1.duplicates > 0);
        if (max < NP) assert_true(s1.evictions > 0);
        acemq_audit_free(plain);
        acemq_audit_free(locked);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(guess_leaves_with_its_producer),
        cmocka_unit_test(no_guess_after_all_nines),
        cmocka_unit_test(guess_dropped_when_the_general_check_moves_top),
        cmocka_unit_test(guess_dropped_when_a_split_id_moves_top),
        cmocka_unit_test(guess_dropped_when_the_table_moves_top),
        cmocka_unit_test(audit_with_memo_answers_as_without),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
