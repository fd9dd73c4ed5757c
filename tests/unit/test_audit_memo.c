/* test_audit_memo.c — the single-thread audit's two shortcuts: the producer
 * memo (src/audit/producer_memo.h), which offset and slots its build
 * chooses and its bookkeeping as producers come and go; the guess at a
 * producer's next text id (acemq__audit_next_tail, check_tail in audit.c);
 * and the audit that takes both answering, id for id, as the thread-safe
 * flavour (which has neither) does, through evictions that free or reuse
 * the producers the memo points at, jumps, rollbacks, leading zeros and
 * sequences that gain a digit.
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
#include "audit/audit_internal.h"
#include "audit/id_parse.h"
#include "audit/producer_memo.h"

enum { MAX_KEYS = 128, KEY_CAP = 96 };

/* Keys for the memo's own tests; each key's producer is its own address. */
typedef struct keys {
    char key[MAX_KEYS][KEY_CAP];
    size_t len[MAX_KEYS];
    size_t n;
} keys;

static void add_key(keys *k, const char *fmt, int v)
{
    assert_true(k->n < MAX_KEYS);
    int n = snprintf(k->key[k->n], KEY_CAP, fmt, v);
    assert_true(n > 0 && n < KEY_CAP);
    k->len[k->n++] = (size_t)n;
}

static void *key_producer(void *ctx, size_t i, const unsigned char **key, size_t *len)
{
    keys *k = ctx;
    *key = (const unsigned char *)k->key[i];
    *len = k->len[i];
    return k->key[i];
}

static void *find(const acemq__producer_memo *m, const keys *k, size_t i)
{
    return acemq__memo_find(m, (const unsigned char *)k->key[i], k->len[i]);
}

/* Builds a memo of k's keys and checks that every key it says it holds is
 * found as itself. */
static void build(acemq__producer_memo *m, keys *k)
{
    acemq__memo_init(m);
    acemq__memo_build(m, k->n, key_producer, k);
    assert_int_equal(m->held + m->missing, m->producers);
    size_t found = 0;
    for (size_t i = 0; i < k->n; i++)
        found += find(m, k, i) == k->key[i];
    assert_int_equal(found, m->held);
}

static void memo_holds_the_benchmark_producers(void **state)
{
    (void)state;
    static keys k;
    k.n = 0;
    for (int i = 0; i < 64; i++)
        add_key(&k, "ID:host-%d-1700000000000-1:1:1:1", i);
    acemq__producer_memo m;
    build(&m, &k);
    assert_int_equal(m.producers, 64);
    assert_int_equal(m.held, 64);
    assert_false(acemq__memo_stale(&m));
    acemq__memo_free(&m);
}

/* Producers of one connection differ only in their last bytes: the only
 * offset that reads them is the last the shortest key allows. */
static void memo_reads_where_producers_differ(void **state)
{
    (void)state;
    static keys k;
    k.n = 0;
    for (int i = 1; i <= 9; i++)
        add_key(&k, "ID:host-1-1700000000000-1:1:1:%d", i); /* 31 bytes */
    acemq__producer_memo m;
    build(&m, &k);
    assert_int_equal(m.held, 9);
    assert_int_equal(m.off, 31 - 8);
    acemq__memo_free(&m);
}

/* Keys that agree on every word the shortest of them allows: one holds a
 * slot, the rest are missing, and a lookup of theirs finds the one (which
 * the audit then tells apart by comparing keys). */
static void memo_keys_it_cannot_tell_apart_go_missing(void **state)
{
    (void)state;
    static keys k;
    k.n = 0;
    add_key(&k, "ID:host-1-1700000000000-1:1:1:%d", 1); /* 31 bytes */
    for (int i = 10; i <= 19; i++)
        add_key(&k, "ID:host-1-1700000000000-1:1:1:%d", i); /* 32 bytes, the same first 31 */
    acemq__producer_memo m;
    build(&m, &k);
    assert_int_equal(m.producers, 11);
    assert_int_equal(m.held, 1);
    assert_int_equal(m.missing, 10);
    for (size_t i = 0; i < k.n; i++)
        assert_ptr_equal(find(&m, &k, i), k.key[0]);
    /* What the build could not place does not make it stale. */
    assert_false(acemq__memo_stale(&m));
    acemq__memo_free(&m);
}

static void memo_bookkeeping(void **state)
{
    (void)state;
    static keys k;
    k.n = 0;
    for (int i = 0; i < 8; i++)
        add_key(&k, "ID:host-%d-1700000000000-1:1:1:1", i);
    add_key(&k, "short-%d", 1);                                       /* 7 bytes */
    add_key(&k, "ID:a-much-longer-producer-than-32-bytes-%d:1:1", 1); /* 46 bytes */
    acemq__producer_memo m;
    acemq__memo_init(&m);
    /* Empty: nothing found, nothing stale. */
    assert_null(find(&m, &k, 0));
    assert_false(acemq__memo_stale(&m));
    /* Keys outside 17-32 bytes are not its business. */
    acemq__memo_add(&m, k.key[8], (const unsigned char *)k.key[8], k.len[8]);
    acemq__memo_add(&m, k.key[9], (const unsigned char *)k.key[9], k.len[9]);
    assert_int_equal(m.producers, 0);
    assert_false(acemq__memo_stale(&m));
    /* A producer with no slots to go into is missing, and makes it stale. */
    acemq__memo_add(&m, k.key[0], (const unsigned char *)k.key[0], k.len[0]);
    assert_int_equal(m.producers, 1);
    assert_int_equal(m.missing, 1);
    assert_true(acemq__memo_stale(&m));
    acemq__memo_build(&m, 1, key_producer, &k);
    assert_int_equal(m.held, 1);
    assert_false(acemq__memo_stale(&m));
    /* Admissions take free slots. */
    for (size_t i = 1; i < 4; i++)
        acemq__memo_add(&m, k.key[i], (const unsigned char *)k.key[i], k.len[i]);
    assert_int_equal(m.producers, 4);
    assert_int_equal(m.held + m.missing, 4);
    for (size_t i = 0; i < 4; i++)
        if (find(&m, &k, i) != k.key[i]) assert_true(m.missing > 0);
    /* A producer that leaves empties its slot. */
    void *had = find(&m, &k, 2);
    size_t held = m.held;
    acemq__memo_remove(&m, k.key[2], (const unsigned char *)k.key[2], k.len[2]);
    assert_int_equal(m.producers, 3);
    if (had == k.key[2]) {
        assert_null(find(&m, &k, 2));
        assert_int_equal(m.held, held - 1);
    }
    /* A lookup with fewer bytes than the word needs finds nothing. */
    assert_null(acemq__memo_find(&m, (const unsigned char *)k.key[0], m.off + 7));
    /* Outgrowing the slots makes it stale: 64 slots, 16 a producer. */
    for (size_t i = 4; i < 8; i++)
        acemq__memo_add(&m, k.key[i], (const unsigned char *)k.key[i], k.len[i]);
    assert_int_equal(m.producers, 7);
    assert_true(acemq__memo_stale(&m));
    acemq__memo_free(&m);
    assert_null(find(&m, &k, 0));
}

/* ---- the guess at the next id ---- */

/* The tail of the id after `id` (whose last eight bytes are read), as text,
 * or "" when there is no guess. */
#ifdef ACEMQ__AUDIT_SWAR
static const char *next_tail(const char *id, char out[9])
{
    uint64_t last;
    memcpy(&last, id + strlen(id) - 8, 8);
    int ok;
    uint64_t next = acemq__audit_next_tail(last, &ok);
    memcpy(out, &next, 8);
    out[ok ? 8 : 0] = '\0';
    return out;
}
#endif

static void guess_counts_in_decimal(void **state)
{
    (void)state;
#ifndef ACEMQ__AUDIT_SWAR
    skip(); /* no one-word split here, and so no guess */
#else
    char t[9];
    assert_string_equal(next_tail("ID:host-1:1:1:41", t), "1:1:1:42");
    assert_string_equal(next_tail("ID:host-1:1:1:49", t), "1:1:1:50");
    assert_string_equal(next_tail("ID:host-1:1:1:8", t), "-1:1:1:9");
    assert_string_equal(next_tail("ID:host-1:1:1:1299", t), "1:1:1300");
    assert_string_equal(next_tail("ID:host-1:1:1:0099", t), "1:1:0100"); /* zeros kept */
    assert_string_equal(next_tail("ID:host-1:1:1:8999999", t), ":9000000");
    /* All nines: the next id is a byte longer, so no guess. */
    assert_string_equal(next_tail("ID:host-19:9", t), "");
    assert_string_equal(next_tail("ID:host-1:1:1:99", t), "");
    assert_string_equal(next_tail("ID:host-1:9999999", t), "");
    /* Every sequence up to a million and one, plain and zero-padded to six
     * digits, against its successor written out. */
    char id[32], want[32];
    for (unsigned long v = 0; v <= 1000001; v++) {
        for (int padded = 0; padded < 2; padded++) {
            const char *fmt = padded && v < 999999 ? "ID:host-7:1:%06lu" : "ID:host-7:1:%lu";
            int n = snprintf(id, sizeof id, fmt, v);
            int m = snprintf(want, sizeof want, fmt, v + 1);
            next_tail(id, t);
            if (m == n ? strcmp(t, want + m - 8) != 0 : t[0] != '\0')
                fail_msg("after %s: got \"%s\", want \"%s\"", id, t, m == n ? want + m - 8 : "");
        }
    }
#endif
}

/* ---- the audit that uses them ---- */

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

static void audit_memo_holds_its_producers(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, 0);
    char id[KEY_CAP];
    for (int round = 1; round <= 3; round++) {
        for (int p = 0; p < 64; p++) {
            int n = snprintf(id, sizeof id, "ID:host-%d-1700000000000-1:1:1:1:%d", p, round);
            assert_int_equal(acemq_audit_check(a, id, (size_t)n, NULL), ACEMQ_AUDIT_NEW);
            assert_int_equal(acemq_audit_check(a, id, (size_t)n, NULL), ACEMQ_AUDIT_DUPLICATE);
        }
    }
    size_t producers, held;
    uint32_t off;
    acemq__audit_memo_state(a, &producers, &held, &off);
    assert_int_equal(producers, 64);
    assert_int_equal(held, 64);
    assert_int_equal(acemq__audit_memo_verify(a), 0);
    acemq_audit_free(a);
    /* The thread-safe flavour has none. */
    a = make(2048, 64, ACEMQ_AUDIT_THREAD_SAFE);
    int n = snprintf(id, sizeof id, "ID:host-%d-1700000000000-1:1:1:1:%d", 1, 1);
    assert_int_equal(acemq_audit_check(a, id, (size_t)n, NULL), ACEMQ_AUDIT_NEW);
    acemq__audit_memo_state(a, &producers, &held, &off);
    assert_int_equal(producers + held + off, 0);
    acemq_audit_free(a);
}

/* A producer evicted for one whose key is its own but for the last ":1":
 * the newcomer takes the evicted producer's memory, and must not take its
 * guess, or the evicted producer's next id would pass for the newcomer's. */
static void guess_leaves_with_its_producer(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 1, 0);
    const char *a5 = "ID:host-1-1700000000000-1:1:1:1:5", *a6 = "ID:host-1-1700000000000-1:1:1:1:6";
    const char *a7 = "ID:host-1-1700000000000-1:1:1:1:7", *b6 = "ID:host-1-1700000000000-1:1:1:6";
    int cause = -1;
    assert_int_equal(acemq_audit_check(a, a5, strlen(a5), &cause), ACEMQ_AUDIT_NEW);
    /* Through the memo: the guess is now a7, after top 6. */
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

/* A guess taken at an all-nines sequence leaves no guess behind: the next
 * id has a digit more, and the increment, with no digit left to gain, has
 * turned the ':' into a ';'. An id ending in those bytes, at the same
 * length, has no sequence, and must be refused, not taken as the next one. */
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

/* A guess is for its producer's present top. Here the top moves through the
 * general check (an id of eight digits, which the fast split does not
 * take), and the id the guess was made for, the same sequence in fewer
 * digits, must then be a duplicate, not the sequence after. */
static void guess_dropped_when_the_general_check_moves_top(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, 0);
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:4");
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:5"); /* the guess: ...:6 */
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:00000006");
    assert_int_equal(acemq__audit_memo_verify(a), 0);
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
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:5"); /* the guess: ...:6 */
    assert_int_equal(acemq_audit_check_seq(a, key, strlen(key), 6, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(acemq__audit_memo_verify(a), 0);
    const char *six = "ID:host-1-1700000000000-1:1:1:1:6";
    assert_int_equal(acemq_audit_check(a, six, strlen(six), NULL), ACEMQ_AUDIT_DUPLICATE);
    /* A split id inside the window leaves the top, and the guess, alone. */
    assert_int_equal(acemq_audit_check_seq(a, key, strlen(key), 5, NULL), ACEMQ_AUDIT_DUPLICATE);
    check_new(a, "ID:host-1-1700000000000-1:1:1:1:7");
    acemq_audit_free(a);
}

/* A producer that made its guess while the memo held it, then lost its
 * slot to a rebuild, is checked through the table (check_fast): its guess
 * must go when its top moves there. Two 17-byte keys make the memo read
 * within the first 17 bytes, where the three long producers are alike, so
 * two of them lose their slots. */
static void guess_dropped_when_the_table_moves_top(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, 0);
    static const char *const longs[] = {"ID:host-1-1700000000000-1:1:1:1",
                                        "ID:host-1-1700000000000-1:1:1:2",
                                        "ID:host-1-1700000000000-1:1:1:3"};
    char id[64];
    size_t producers, held;
    uint32_t off;
    for (int seq = 1; seq <= 2; seq++)
        for (int i = 0; i < 3; i++) {
            snprintf(id, sizeof id, "%s:%d", longs[i], seq);
            check_new(a, id);
        }
    acemq__audit_memo_state(a, &producers, &held, &off);
    assert_int_equal(producers, 3);
    assert_int_equal(held, 3); /* each has a guess now: ...:3 */
    check_new(a, "ID:h-17-bytes:1:1:1");
    check_new(a, "ID:h-17-bytes:1:2:1");
    acemq__audit_memo_state(a, &producers, &held, &off);
    assert_int_equal(producers, 5);
    assert_int_equal(held, 3); /* one long producer, and the short ones */
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "%s:3", longs[i]);
        check_new(a, id);
    }
    assert_int_equal(acemq__audit_memo_verify(a), 0);
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "%s:3", longs[i]);
        assert_int_equal(acemq_audit_check(a, id, strlen(id), NULL), ACEMQ_AUDIT_DUPLICATE);
    }
    acemq_audit_free(a);
}

/* The plain flavour (memo) against the thread-safe one with one shard (the
 * same LRU, no memo), id for id, on a stream whose producers the memo can
 * and cannot tell apart, with evictions of producers it holds (their memory
 * freed when a longer key takes their place, reused otherwise), rollbacks,
 * and both entry points. */
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
        "p-short", /* no memo: under 17 bytes */
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
             * the audit, another text to the guess. */
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
                fail_msg("max %d id %d (%s): memo %d/%d, table %d/%d", max, i, id, a1, c1, a2, c2);
            /* The memo points at producers the table holds, and only those. */
            if (i % 97 == 0) assert_int_equal(acemq__audit_memo_verify(plain), 0);
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
        size_t held_producers, held;
        uint32_t off;
        acemq__audit_memo_state(plain, &held_producers, &held, &off);
        assert_true(held > 0 && held <= held_producers && held_producers <= (size_t)max);
        acemq_audit_free(plain);
        acemq_audit_free(locked);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(memo_holds_the_benchmark_producers),
        cmocka_unit_test(memo_reads_where_producers_differ),
        cmocka_unit_test(memo_keys_it_cannot_tell_apart_go_missing),
        cmocka_unit_test(memo_bookkeeping),
        cmocka_unit_test(guess_counts_in_decimal),
        cmocka_unit_test(audit_memo_holds_its_producers),
        cmocka_unit_test(guess_leaves_with_its_producer),
        cmocka_unit_test(no_guess_after_all_nines),
        cmocka_unit_test(guess_dropped_when_the_general_check_moves_top),
        cmocka_unit_test(guess_dropped_when_a_split_id_moves_top),
        cmocka_unit_test(guess_dropped_when_the_table_moves_top),
        cmocka_unit_test(audit_with_memo_answers_as_without),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
