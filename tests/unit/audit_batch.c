/* audit_batch.c — the batch calls, acemq_audit_check_many and
 * acemq_audit_check_seq_many: the same answers as one call per id, and their
 * errors. */
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

/* acemq_audit_check_many and acemq_audit_check_seq_many answer exactly as
 * one call per id: on a random stream of producers of every length class
 * (so the straight-line check and the general one both run), with
 * evictions (more producers than tracked, so EVICTED answers), jumps and
 * stragglers (BEHIND_WINDOW, BEFORE_START), repeats of one producer inside a
 * batch, malformed ids among them (each answered ACEMQ_EINVAL alone), both
 * policies and both flavours, in batches of odd sizes: the same answers,
 * causes and counters as a twin audit fed one id at a time. */
void batch_agrees_with_one_by_one(void **state)
{
    (void)state;
    const char *producers[] = {"p",
                               "ID:host-1:1:1",
                               "ID:host-7-1700000000000-1:1:1:1",
                               "ID:host-8-1700000000000-1:1:1:1",
                               "ID:host-9-1700000000000-1:1:1:12",
                               "ID:broker.example.com-40373-1700000000000-1:1:1:1",
                               "ID:h-17-bytes:1:1",
                               "ID:host-32-bytes-000000000:1:1:1"};
    enum { NP = sizeof producers / sizeof producers[0], N = 20000, ID_CAP = 96 };
    static const unsigned flavours[] = {0, ACEMQ_AUDIT_THREAD_SAFE};
    static const int policies[] = {ACEMQ_AUDIT_FAIL_OPEN, ACEMQ_AUDIT_FAIL_CLOSED};
    char(*text)[ID_CAP] = malloc(N * sizeof *text);
    const char **ids = malloc(N * sizeof *ids);
    size_t *lens = malloc(N * sizeof *lens);
    const void **prod = malloc(N * sizeof *prod);
    size_t *plens = malloc(N * sizeof *plens);
    uint64_t *seqs = malloc(N * sizeof *seqs);
    int *got = malloc(N * sizeof *got), *got_cause = malloc(N * sizeof *got_cause);
    assert_true(text && ids && lens && prod && plens && seqs && got && got_cause);
    srand(7);
    uint64_t cur[NP] = {0};
    for (int i = 0, last = 0; i < N; i++) {
        int k = rand() % NP, r = rand() % 100;
        /* Runs of one producer, so a batch holds it many times. */
        if (r < 20) k = last;
        last = k;
        uint64_t seq;
        if (r < 70)
            seq = ++cur[k];
        else if (r < 75)
            seq = cur[k] += (uint64_t)(rand() % 200);
        else if (r < 95)
            seq = cur[k] - (uint64_t)(rand() % 80) % (cur[k] + 1);
        else
            seq = UINT64_MAX - (uint64_t)(rand() % 3); /* near 2^64: a jump, then stragglers */
        prod[i] = producers[k];
        plens[i] = strlen(producers[k]);
        seqs[i] = seq;
        int n = snprintf(text[i], ID_CAP, "%s:%llu", producers[k], (unsigned long long)seq);
        assert_true(n > 0 && n < ID_CAP);
        lens[i] = (size_t)n;
        if (r == 42) lens[i] = plens[i];    /* no ':' left: malformed */
        if (r == 43) text[i][n - 1] = 'x';  /* a non-digit in the sequence */
        if (r == 44) text[i][n - 1] = '\r'; /* a line with its '\r' */
        ids[i] = text[i];
    }
    for (size_t f = 0; f < 2; f++) {
        for (size_t pol = 0; pol < 2; pol++) {
            for (int form = 0; form < 2; form++) {
                acemq_audit_options o;
                acemq_audit_options_init(&o);
                o.depth = 64;
                o.max_producers = 5; /* fewer than the producers: evictions */
                o.policy = policies[pol];
                o.flags = flavours[f];
                o.shards = 2;
                acemq_audit *one, *many;
                assert_int_equal(acemq_audit_new(&one, &o), 0);
                assert_int_equal(acemq_audit_new(&many, &o), 0);
                for (size_t at = 0, step = 1; at < N; at += step, step = step % 37 + 3) {
                    size_t m = N - at < step ? N - at : step;
                    int *causes = (at & 1) ? NULL : got_cause + at; /* causes may be NULL */
                    int rc = form == 0 ? acemq_audit_check_many(many, ids + at, lens + at, m,
                                                                got + at, causes)
                                       : acemq_audit_check_seq_many(many, prod + at, plens + at,
                                                                    seqs + at, m, got + at, causes);
                    assert_int_equal(rc, 0);
                    for (size_t j = at; j < at + m; j++) {
                        int want_cause = -1;
                        int want = form == 0 ? acemq_audit_check(one, ids[j], lens[j], &want_cause)
                                             : acemq_audit_check_seq(one, prod[j], plens[j],
                                                                     seqs[j], &want_cause);
                        if (got[j] != want || (causes && got_cause[j] != want_cause))
                            fail_msg("flavour %zu policy %zu form %d id %zu: got %d/%d, want %d/%d",
                                     f, pol, form, j, got[j], causes ? got_cause[j] : -1, want,
                                     want_cause);
                    }
                }
                acemq_audit_stats s1 = audit_stats(one), s2 = audit_stats(many);
                assert_memory_equal(&s1, &s2, sizeof s1);
                assert_true(s1.unknowns > 0 && s1.evictions > 0 && s1.duplicates > 0);
                acemq_audit_free(one);
                acemq_audit_free(many);
            }
        }
    }
    free(text);
    free(ids);
    free(lens);
    free(prod);
    free(plens);
    free(seqs);
    free(got);
    free(got_cause);
}

void batch_errors(void **state)
{
    (void)state;
    acemq_audit *a = audit_make(2048, 64, ACEMQ_AUDIT_FAIL_OPEN, 0);
    const char *ids[] = {"p:1"};
    size_t lens[] = {3};
    const void *prod[] = {"p"};
    size_t plens[] = {1};
    uint64_t seqs[] = {1};
    int res[1] = {-99};
    assert_int_equal(acemq_audit_check_many(NULL, ids, lens, 1, res, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_many(a, NULL, lens, 1, res, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_many(a, ids, NULL, 1, res, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_many(a, ids, lens, 1, NULL, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_seq_many(a, prod, plens, NULL, 1, res, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_seq_many(NULL, prod, plens, seqs, 1, res, NULL),
                     ACEMQ_EINVAL);
    /* Nothing was checked by the refused calls. */
    assert_int_equal(audit_stats(a).checks, 0);
    /* An empty batch needs no arrays. */
    assert_int_equal(acemq_audit_check_many(a, NULL, NULL, 0, NULL, NULL), 0);
    assert_int_equal(acemq_audit_check_seq_many(a, NULL, NULL, NULL, 0, NULL, NULL), 0);
    assert_int_equal(acemq_audit_check_many(a, ids, lens, 1, res, NULL), 0);
    assert_int_equal(res[0], ACEMQ_AUDIT_NEW);
    /* A NULL producer inside a batch is that id's error alone. */
    const void *bad[] = {NULL};
    assert_int_equal(acemq_audit_check_seq_many(a, bad, plens, seqs, 1, res, NULL), 0);
    assert_int_equal(res[0], ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_seq_many(a, prod, plens, seqs, 1, res, NULL), 0);
    assert_int_equal(res[0], ACEMQ_AUDIT_DUPLICATE);
    acemq_audit_free(a);
}
