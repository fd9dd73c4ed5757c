/* test_audit_split4.c — the batch check's AVX2 split of four text ids
 * (src/audit/id_split4.h) against the byte loop's answers, and the batch
 * check, with it and without, against one call per id. On a processor
 * without AVX2 the split's own tests are reported as skipped: it is never
 * used there.
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

/* The ids the split must take: 9 to ACEMQ_AUDIT_ID_MAX bytes whose last
 * ':' is one of the last eight bytes, with one to seven digits after it
 * and nothing else. Everything else it must refuse, and the one-id path
 * answers. */
static int common_id(const char *id, size_t len)
{
    if (!id || len < 9 || len > ACEMQ_AUDIT_ID_MAX) return 0;
    size_t colon = len;
    while (colon > 0 && id[colon - 1] != ':')
        colon--;
    if (colon == 0 || colon < len - 7 || colon == len) return 0; /* 1-based: id[colon - 1] */
    for (size_t i = colon; i < len; i++)
        if (id[i] < '0' || id[i] > '9') return 0;
    return 1;
}

static void skip_without_avx2(void)
{
    if (!acemq__audit_split4_supported()) {
        print_message("no AVX2 on this processor: the batch check splits ids one by one\n");
        skip();
    }
}

/* Random ids of 0 to 40 bytes from an alphabet that makes near misses
 * likely (digits, ':', the bytes next to '0', '9' and ':', high bytes),
 * each in an allocation of its own exact size, so that AddressSanitizer
 * sees any read past an id's end or before its start; four at a time
 * through the split, each compared with acemq_audit_parse_id. */
static void split4_agrees_with_the_byte_loop(void **state)
{
    (void)state;
    skip_without_avx2();
    static const char alphabet[] = "0123456789:::/;aZ\x8a\xfa\xff\x7f\x40\r";
    srand(11);
    size_t taken = 0, refused = 0;
    for (int n = 0; n < 300000; n++) {
        char *ids[4];
        size_t lens[4];
        int all_common = 1;
        for (int g = 0; g < 4; g++) {
            lens[g] = (size_t)(rand() % 41);
            ids[g] = malloc(lens[g] ? lens[g] : 1);
            assert_non_null(ids[g]);
            for (size_t i = 0; i < lens[g]; i++) {
                size_t r = (size_t)(rand() % 100);
                if (r < 60) r %= 10; /* mostly digits, so that sequences end the ids */
                ids[g][i] = alphabet[r % (sizeof alphabet - 1)];
            }
            /* Three ids in four of 9 bytes or more made common on purpose
             * (a ':' and one to seven digits), or the groups would almost
             * never be taken whole; one in eight of those then has one of
             * its last eight bytes changed again. */
            if (rand() % 4 != 0 && lens[g] >= 9) {
                size_t digits = 1 + (size_t)(rand() % 7);
                ids[g][lens[g] - 1 - digits] = ':';
                for (size_t i = lens[g] - digits; i < lens[g]; i++)
                    ids[g][i] = (char)('0' + rand() % 10);
                if (rand() % 8 == 0)
                    ids[g][lens[g] - 1 - (size_t)(rand() % 8)] =
                        alphabet[(size_t)rand() % (sizeof alphabet - 1)];
            }
            all_common &= common_id(ids[g], lens[g]);
        }
        size_t len[4] = {0};
        uint64_t seq[4] = {0};
        int got = acemq__audit_split4_ids((const char *const *)ids, lens, len, seq);
        if (got != all_common) fail_msg("group %d: split4 %d, all common %d", n, got, all_common);
        if (got) {
            taken++;
            for (int g = 0; g < 4; g++) {
                acemq_audit_id p;
                assert_int_equal(acemq_audit_parse_id(ids[g], lens[g], &p), 0);
                if (p.producer_len != len[g] || p.sequence != seq[g])
                    fail_msg("id '%.*s': split4 (%zu, %llu), byte loop (%zu, %llu)", (int)lens[g],
                             ids[g], len[g], (unsigned long long)seq[g], p.producer_len,
                             (unsigned long long)p.sequence);
            }
        } else {
            refused++;
        }
        for (int g = 0; g < 4; g++)
            free(ids[g]);
    }
    /* Both answers were tried often. */
    assert_true(taken > 1000 && refused > 1000);
}

/* The edges one by one, each in a group of three common ids. */
static void split4_edges(void **state)
{
    (void)state;
    skip_without_avx2();
    static const struct {
        const char *id;
        int common;
        size_t producer_len;
        uint64_t seq;
    } cases[] = {
        {"producer:1", 1, 8, 1},       {"p:1234567", 1, 1, 1234567}, /* 9 bytes, seven digits */
        {"pp:9999999", 1, 2, 9999999}, /* the largest the split takes */
        {"p:12345678", 0, 0, 0},       /* eight digits: no ':' in the last eight bytes */
        {"pppppp:1", 0, 0, 0},         /* 8 bytes: too short for the split */
        {"ppppppp:", 0, 0, 0},         /* no digits, 8 bytes */
        {"pppppppp:", 0, 0, 0},        /* no digits, 9 bytes */
        {"ppppppp:12x", 0, 0, 0},      /* a non-digit last */
        {"pppppp:12:34", 1, 9, 34},    /* the last ':' counts */
        {"pppppppp:007", 1, 8, 7},     /* leading zeros */
        {"pppppppp:0", 1, 8, 0},       /* sequence 0 */
        {"ppppppp\xff:5", 1, 8, 5},    /* a high byte in the producer */
        {"pppppppp:5\r", 0, 0, 0},     /* a line's '\r' */
        {"ppppppppp/1", 0, 0, 0},      /* '/' is the byte before '0' */
        {"ppppppppp;1", 0, 0, 0},      /* ';' is the byte after ':' */
    };
    const char *good = "ID:host-1-1700000000000-1:1:1:1:42";
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = strlen(cases[c].id);
        int want = cases[c].common;
        for (int at = 0; at < 4; at++) {
            const char *ids[4] = {good, good, good, good};
            size_t lens[4] = {strlen(good), strlen(good), strlen(good), strlen(good)};
            ids[at] = cases[c].id;
            lens[at] = n;
            size_t len[4];
            uint64_t seq[4];
            int got = acemq__audit_split4_ids(ids, lens, len, seq);
            if (got != want) fail_msg("'%s' at %d: split4 %d, want %d", cases[c].id, at, got, want);
            if (got && (len[at] != cases[c].producer_len || seq[at] != cases[c].seq))
                fail_msg("'%s': (%zu, %llu)", cases[c].id, len[at], (unsigned long long)seq[at]);
        }
    }
    /* A NULL id, or a length of 2^63 and more, refuses the group unread. */
    const char *ids[4] = {good, NULL, good, good};
    size_t lens[4] = {strlen(good), strlen(good), strlen(good), strlen(good)};
    size_t len[4];
    uint64_t seq[4];
    assert_int_equal(acemq__audit_split4_ids(ids, lens, len, seq), 0);
    ids[1] = good;
    lens[2] = (size_t)1 << 63;
    assert_int_equal(acemq__audit_split4_ids(ids, lens, len, seq), 0);
    lens[2] = SIZE_MAX;
    assert_int_equal(acemq__audit_split4_ids(ids, lens, len, seq), 0);
    lens[2] = ACEMQ_AUDIT_ID_MAX + 1;
    assert_int_equal(acemq__audit_split4_ids(ids, lens, len, seq), 0);
}

/* A batch checked in groups and one checked id by id answer the same, id
 * for id, and end with the same counters: on a stream of ActiveMQ-shaped
 * ids whose producers are all of one length and whose sequences stay
 * close (so an id checked against another producer's window would often
 * be answered, and wrongly), with redeliveries, repeats of a producer
 * inside a group, ids the split refuses and malformed ones. Split one by
 * one, and with AVX2 where the processor has it. */
static void batch_checks(int split4)
{
    enum { NP = 12, N = 30000, ID_CAP = 64 };
    char(*text)[ID_CAP] = malloc(N * sizeof *text);
    const char **ids = malloc(N * sizeof *ids);
    size_t *lens = malloc(N * sizeof *lens);
    int *got = malloc(N * sizeof *got), *got_cause = malloc(N * sizeof *got_cause);
    assert_true(text && ids && lens && got && got_cause);
    srand(5);
    uint64_t cur[NP] = {0};
    for (int i = 0, last = 0; i < N; i++) {
        int k = rand() % NP, r = rand() % 100;
        if (r < 25) k = last; /* runs of one producer: twice in a group */
        last = k;
        uint64_t seq = r < 80 ? ++cur[k] : cur[k] - (uint64_t)(rand() % 40) % (cur[k] + 1);
        if (r == 7) seq = 123456789; /* nine digits: the split refuses the group */
        /* host-10 to host-21: producers of 32 bytes each. */
        int n = snprintf(text[i], ID_CAP, "ID:host-%d-1700000000000-1:1:1:1:%llu", k + 10,
                         (unsigned long long)seq);
        assert_true(n > 0 && n < ID_CAP);
        lens[i] = (size_t)n;
        if (r == 8) text[i][n - 1] = 'x'; /* malformed */
        ids[i] = text[i];
    }
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.depth = 128;
    o.max_producers = 10; /* fewer than the producers: evictions, UNKNOWNs */
    acemq_audit *one, *many;
    assert_int_equal(acemq_audit_new(&one, &o), 0);
    assert_int_equal(acemq_audit_new(&many, &o), 0);
    assert_int_equal(acemq__audit_use_split4(many, split4), 0);
    for (size_t at = 0, step = 1; at < N; at += step, step = step % 41 + 5) {
        size_t m = N - at < step ? N - at : step;
        int *causes = (at & 1) ? NULL : got_cause + at;
        assert_int_equal(acemq_audit_check_many(many, ids + at, lens + at, m, got + at, causes), 0);
        for (size_t j = at; j < at + m; j++) {
            int want_cause = -1;
            int want = acemq_audit_check(one, ids[j], lens[j], &want_cause);
            if (got[j] != want || (causes && got_cause[j] != want_cause))
                fail_msg("id %zu '%s': got %d/%d, want %d/%d", j, ids[j], got[j],
                         causes ? got_cause[j] : -1, want, want_cause);
        }
    }
    acemq_audit_stats s1, s2;
    assert_int_equal(acemq_audit_stats_get(one, &s1), 0);
    assert_int_equal(acemq_audit_stats_get(many, &s2), 0);
    assert_memory_equal(&s1, &s2, sizeof s1);
    assert_true(s1.duplicates > 0 && s1.unknowns > 0 && s1.evictions > 0);
    acemq_audit_free(one);
    acemq_audit_free(many);
    free(text);
    free(ids);
    free(lens);
    free(got);
    free(got_cause);
}

static void batch_grouped_agrees_with_one_by_one(void **state)
{
    (void)state;
    batch_checks(0);
    if (acemq__audit_split4_supported())
        batch_checks(1);
    else
        print_message(
            "no AVX2 on this processor: batches checked with the one-by-one split only\n");
}

/* The switch tests use is refused where the processor cannot, and a new
 * audit uses the split exactly where it can. */
static void split4_switch(void **state)
{
    (void)state;
    acemq_audit *a;
    assert_int_equal(acemq_audit_new(&a, NULL), 0);
    assert_int_equal(acemq__audit_use_split4(a, 0), 0);
    assert_int_equal(acemq__audit_use_split4(a, 1),
                     acemq__audit_split4_supported() ? 0 : ACEMQ_ENOTSUP);
    acemq_audit_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split4_agrees_with_the_byte_loop),
        cmocka_unit_test(split4_edges),
        cmocka_unit_test(batch_grouped_agrees_with_one_by_one),
        cmocka_unit_test(split4_switch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
