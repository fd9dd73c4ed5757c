/* audit_ids.c — ActiveMQ-style ids as the audit reads them (well-formed,
 * malformed, and random ones against a plain byte-by-byte reading), producers
 * one byte apart, the options it accepts, and the names of its answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"
#include "audit/audit_key.h"
#include "audit_fixture.h"

void parses_activemq_ids(void **state)
{
    (void)state;
    const char *id = "ID:host-1234-1700000000000-1:1:1:1:42";
    acemq_audit_id p;
    assert_int_equal(acemq_audit_parse_id(id, strlen(id), &p), 0);
    assert_int_equal(p.producer_len, strlen("ID:host-1234-1700000000000-1:1:1:1"));
    assert_memory_equal(p.producer, "ID:host-1234-1700000000000-1:1:1:1", p.producer_len);
    assert_true(p.sequence == 42);
    assert_null(p.error);

    /* The same id split by hand is the same message. */
    acemq_audit *a = audit_make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    assert_int_equal(audit_check_id(a, id, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(audit_check(a, "ID:host-1234-1700000000000-1:1:1:1", 42, NULL),
                     ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(audit_check_id(a, "ID:host-1234-1700000000000-1:1:1:1:0042", NULL),
                     ACEMQ_AUDIT_DUPLICATE);
    acemq_audit_free(a);
}

static void expect_bad(const char *id, size_t len)
{
    acemq_audit_id p;
    assert_int_equal(acemq_audit_parse_id(id, len, &p), ACEMQ_EINVAL);
    assert_non_null(p.error);
    assert_null(p.producer);
}

void rejects_malformed_ids(void **state)
{
    (void)state;
    expect_bad(NULL, 0);
    expect_bad("", 0);
    expect_bad("no-colon", 8);
    expect_bad(":5", 2);
    expect_bad("p:", 2);
    expect_bad("p:12a", 5);
    expect_bad("p:-1", 4);
    expect_bad("p:+1", 4);
    expect_bad("p: 1", 4);
    expect_bad("p:1:", 4); /* the last ':' decides: the sequence is empty */
    expect_bad("p:18446744073709551616", 22);
    expect_bad("p:99999999999999999999", 22);

    acemq_audit_id p;
    assert_int_equal(acemq_audit_parse_id("p:18446744073709551615", 22, &p), 0);
    assert_true(p.sequence == UINT64_MAX);
    assert_int_equal(acemq_audit_parse_id("::7", 3, &p), 0);
    assert_int_equal(p.producer_len, 1);
    assert_true(p.sequence == 7);
    assert_int_equal(acemq_audit_parse_id("p:1", 3, NULL), ACEMQ_EINVAL);

    /* ACEMQ_AUDIT_ID_MAX bytes pass; one more does not. */
    char big[ACEMQ_AUDIT_ID_MAX + 2];
    memset(big, 'x', sizeof big);
    big[ACEMQ_AUDIT_ID_MAX - 2] = ':';
    big[ACEMQ_AUDIT_ID_MAX - 1] = '1';
    assert_int_equal(acemq_audit_parse_id(big, ACEMQ_AUDIT_ID_MAX, &p), 0);
    assert_int_equal(p.producer_len, ACEMQ_AUDIT_PRODUCER_MAX);
    big[ACEMQ_AUDIT_ID_MAX - 1] = ':';
    big[ACEMQ_AUDIT_ID_MAX] = '1';
    expect_bad(big, ACEMQ_AUDIT_ID_MAX + 1);

    /* A malformed id is an error, never recorded or counted. */
    acemq_audit *a = audit_make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    int cause = 99;
    assert_int_equal(audit_check_id(a, "garbage", &cause), ACEMQ_EINVAL);
    assert_int_equal(cause, ACEMQ_AUDIT_CAUSE_NONE);
    assert_int_equal(acemq_audit_check(a, NULL, 3, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_seq(a, "", 0, 1, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_seq(a, big, ACEMQ_AUDIT_PRODUCER_MAX + 1, 1, NULL),
                     ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_seq(NULL, "p", 1, 1, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_rollback(a, "p:x", 3), ACEMQ_EINVAL);
    assert_true(audit_stats(a).checks == 0);
    acemq_audit_free(a);
}

/* The plain reading of the rule, byte by byte, to hold the fast path to. */
static int reference_parse(const char *id, size_t len, size_t *producer_len, uint64_t *seq)
{
    if (len == 0 || len > ACEMQ_AUDIT_ID_MAX) return -1;
    size_t colon = len;
    while (colon > 0 && id[colon - 1] != ':')
        colon--;
    if (colon <= 1 || colon == len) return -1;
    uint64_t v = 0;
    for (size_t i = colon; i < len; i++) {
        if (id[i] < '0' || id[i] > '9') return -1;
        unsigned d = (unsigned)(id[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *producer_len = colon - 1;
    *seq = v;
    return 0;
}

/* Random ids of every length up to 40 bytes, from an alphabet that makes
 * near misses likely (digits, ':', bytes next to '0' and '9', high bytes). */
void parse_agrees_with_reference(void **state)
{
    (void)state;
    static const char alphabet[] = "0123456789:::/;aZ\xfa\xff\x3a\x40";
    srand(3);
    for (int n = 0; n < 2000000; n++) {
        char id[40];
        size_t len = (size_t)(rand() % 41);
        for (size_t i = 0; i < len; i++) {
            size_t r = (size_t)(rand() % 100);
            if (r < 70) r %= 10; /* a digit */
            id[i] = alphabet[r % (sizeof alphabet - 1)];
        }
        size_t want_len = 0;
        uint64_t want_seq = 0;
        int want = reference_parse(id, len, &want_len, &want_seq);
        acemq_audit_id p;
        int got = acemq_audit_parse_id(id, len, &p);
        if ((got == 0) != (want == 0) || (got == 0 && (p.producer_len != want_len ||
                                                       p.sequence != want_seq || p.producer != id)))
            fail_msg("id '%.*s' (%zu bytes): got %d (%zu, %llu), want %d (%zu, %llu)", (int)len, id,
                     len, got, p.producer_len, (unsigned long long)p.sequence, want, want_len,
                     (unsigned long long)want_seq);
        if (got != 0) assert_non_null(p.error);
    }
}

void options_are_checked(void **state)
{
    (void)state;
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    assert_int_equal(o.depth, 2048);
    assert_int_equal(o.max_producers, 64);
    assert_int_equal(o.policy, ACEMQ_AUDIT_FAIL_OPEN);
    acemq_audit *a = (acemq_audit *)&o;
    const struct {
        uint32_t depth, producers, shards;
        int policy;
        unsigned flags;
    } bad[] = {
        {0, 64, 0, 0, 0},
        {ACEMQ_AUDIT_DEPTH_MAX + 1, 64, 0, 0, 0},
        {2048, 0, 0, 0, 0},
        {2048, ACEMQ_AUDIT_PRODUCERS_MAX + 1, 0, 0, 0},
        {2048, 64, ACEMQ_AUDIT_SHARDS_MAX + 1, 0, ACEMQ_AUDIT_THREAD_SAFE},
        {2048, 64, 0, 2, 0},
        {2048, 64, 0, -1, 0},
        {2048, 64, 0, 0, 1u << 5},
        {2048, 64, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        acemq_audit_options_init(&o);
        o.depth = bad[i].depth;
        o.max_producers = bad[i].producers;
        o.shards = bad[i].shards;
        o.policy = bad[i].policy;
        o.flags = bad[i].flags;
        if (i == sizeof bad / sizeof bad[0] - 1) o.max_evicted = ACEMQ_AUDIT_EVICTED_MAX + 1;
        assert_int_equal(acemq_audit_new(&a, &o), ACEMQ_EINVAL);
        assert_null(a);
    }
    assert_int_equal(acemq_audit_new(NULL, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_new(&a, NULL), 0);
    acemq_audit_free(a);
    acemq_audit_free(NULL);
    assert_int_equal(acemq_audit_stats_get(NULL, NULL), ACEMQ_EINVAL);
}

void names(void **state)
{
    (void)state;
    assert_string_equal(acemq_audit_result_name(ACEMQ_AUDIT_NEW), "NEW");
    assert_string_equal(acemq_audit_result_name(ACEMQ_AUDIT_DUPLICATE), "DUPLICATE");
    assert_string_equal(acemq_audit_result_name(ACEMQ_AUDIT_UNKNOWN), "UNKNOWN");
    assert_string_equal(acemq_audit_result_name(ACEMQ_EINVAL), "ACEMQ_EINVAL");
    assert_string_equal(acemq_audit_cause_name(ACEMQ_AUDIT_CAUSE_NONE), "NONE");
    assert_string_equal(acemq_audit_cause_name(ACEMQ_AUDIT_EVICTED), "EVICTED");
    assert_string_equal(acemq_audit_cause_name(ACEMQ_AUDIT_BEHIND_WINDOW), "BEHIND_WINDOW");
    assert_string_equal(acemq_audit_cause_name(ACEMQ_AUDIT_BEFORE_START), "BEFORE_START");
    assert_string_equal(acemq_audit_cause_name(42), "?");
}

/* Producers one byte apart, at every position of every length from 1 to
 * 100 bytes (both sides of the 16- and 80-byte bounds of the block
 * comparison in audit_key.h), and producers one a prefix of the other, are
 * different producers; the table's hash tells every such pair apart, so
 * that none of them shares a home slot by construction, and so does the
 * comparison. */
void producers_one_byte_apart(void **state)
{
    (void)state;
    enum { LEN_MAX = 100 };
    char base[LEN_MAX + 2], other[LEN_MAX + 2];
    for (size_t len = 1; len <= LEN_MAX; len++) {
        for (size_t i = 0; i <= len; i++)
            base[i] = "ID:broker-7.eu-west.example.net-61616-1700000000000-1:4:1:"[i % 58];
        base[len + 1] = '\0';
        for (size_t at = 0; at <= len; at++) {
            /* at == len: other is base and one byte more. */
            memcpy(other, base, len + 2);
            size_t other_len = at == len ? len + 1 : len;
            if (at < len) other[at] = (char)(other[at] ^ 0x01);
            assert_true(key_hash(base, len) != key_hash(other, other_len));
#ifdef __SSE2__
            /* The comparison alone, since keys whose hashes differ never reach it. */
            if (len >= 16 && len <= 80 && at < len) {
                assert_false(
                    same_bytes_16_to_80((unsigned char *)base, (unsigned char *)other, len));
                other[at] = base[at];
                assert_true(
                    same_bytes_16_to_80((unsigned char *)base, (unsigned char *)other, len));
                other[at] = (char)(other[at] ^ 0x01);
            }
#endif
            acemq_audit *a = audit_make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
            assert_int_equal(acemq_audit_check_seq(a, base, len, 1, NULL), ACEMQ_AUDIT_NEW);
            assert_int_equal(acemq_audit_check_seq(a, other, other_len, 1, NULL), ACEMQ_AUDIT_NEW);
            assert_int_equal(acemq_audit_check_seq(a, base, len, 1, NULL), ACEMQ_AUDIT_DUPLICATE);
            assert_int_equal(acemq_audit_check_seq(a, other, other_len, 1, NULL),
                             ACEMQ_AUDIT_DUPLICATE);
            assert_true(audit_stats(a).producers == 2);
            acemq_audit_free(a);
        }
    }
}
