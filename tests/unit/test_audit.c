/* test_audit.c — the message audit's rules, one test each: id parsing, the
 * sliding window (checked against a plain model), rollback, the producer LRU
 * and its UNKNOWN answers under both policies, sequences near 2^64, and the
 * connection audit's queue/topic split. */
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

static acemq_audit *make(uint32_t depth, uint32_t producers, int policy, unsigned flags)
{
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.depth = depth;
    o.max_producers = producers;
    o.policy = policy;
    o.flags = flags;
    acemq_audit *a = NULL;
    assert_int_equal(acemq_audit_new(&a, &o), 0);
    assert_non_null(a);
    return a;
}

static int check(acemq_audit *a, const char *producer, uint64_t seq, int *cause)
{
    return acemq_audit_check_seq(a, producer, strlen(producer), seq, cause);
}

static int check_id(acemq_audit *a, const char *id, int *cause)
{
    return acemq_audit_check(a, id, strlen(id), cause);
}

static acemq_audit_stats stats(acemq_audit *a)
{
    acemq_audit_stats s;
    assert_int_equal(acemq_audit_stats_get(a, &s), 0);
    return s;
}

static void parses_activemq_ids(void **state)
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
    acemq_audit *a = make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    assert_int_equal(check_id(a, id, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check(a, "ID:host-1234-1700000000000-1:1:1:1", 42, NULL),
                     ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(check_id(a, "ID:host-1234-1700000000000-1:1:1:1:0042", NULL),
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

static void rejects_malformed_ids(void **state)
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
    acemq_audit *a = make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    int cause = 99;
    assert_int_equal(check_id(a, "garbage", &cause), ACEMQ_EINVAL);
    assert_int_equal(cause, ACEMQ_AUDIT_CAUSE_NONE);
    assert_int_equal(acemq_audit_check(a, NULL, 3, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_seq(a, "", 0, 1, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_seq(a, big, ACEMQ_AUDIT_PRODUCER_MAX + 1, 1, NULL),
                     ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_check_seq(NULL, "p", 1, 1, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_audit_rollback(a, "p:x", 3), ACEMQ_EINVAL);
    assert_true(stats(a).checks == 0);
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
static void parse_agrees_with_reference(void **state)
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

static void options_are_checked(void **state)
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

static void new_then_duplicate(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    int cause = 99;
    assert_int_equal(check_id(a, "p:1", &cause), ACEMQ_AUDIT_NEW);
    assert_int_equal(cause, ACEMQ_AUDIT_CAUSE_NONE);
    assert_int_equal(check_id(a, "p:1", &cause), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(check_id(a, "q:1", NULL), ACEMQ_AUDIT_NEW); /* another producer */
    assert_int_equal(check_id(a, "p:2", NULL), ACEMQ_AUDIT_NEW);
    /* Producers are bytes: "p" and "p\0" differ. */
    assert_int_equal(acemq_audit_check_seq(a, "p\0", 2, 1, NULL), ACEMQ_AUDIT_NEW);
    acemq_audit_stats s = stats(a);
    assert_true(s.checks == 5);
    assert_true(s.news == 4);
    assert_true(s.duplicates == 1);
    assert_true(s.unknowns == 0);
    assert_true(s.producers == 3);
    acemq_audit_free(a);
}

/* Within the window, order does not matter: every sequence is NEW once. */
static void out_of_order_within_window(void **state)
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
    acemq_audit *a = make(N, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(check(a, "p", order[i], NULL), ACEMQ_AUDIT_NEW);
    for (int i = 0; i < N; i++)
        assert_int_equal(check(a, "p", order[i], NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_true(stats(a).unknowns == 0);
    acemq_audit_free(a);
}

/* A first id reaches depth - 1 back; below that the window never was. */
static void before_start(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    int cause;
    assert_int_equal(check(a, "p", 10000, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check(a, "p", 10000 - 2047, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check(a, "p", 10000 - 2048, &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_BEFORE_START);
    /* Not recordable, so a redelivery is UNKNOWN again, never NEW. */
    assert_int_equal(check(a, "p", 10000 - 2048, &cause), ACEMQ_AUDIT_UNKNOWN);
    /* Still before the start after the window has slid far past it. */
    assert_int_equal(check(a, "p", 50000, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check(a, "p", 1, &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_BEFORE_START);
    assert_int_equal(check(a, "p", 20000, &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
    acemq_audit_stats s = stats(a);
    assert_true(s.unknown_before_start == 3);
    assert_true(s.unknown_behind_window == 1);
    assert_true(s.unknowns == 4);
    acemq_audit_free(a);
}

static void slides_across_many_windows(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    int cause;
    for (uint64_t s = 1; s <= 100000; s++) {
        assert_int_equal(check(a, "p", s, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(check(a, "p", s, NULL), ACEMQ_AUDIT_DUPLICATE);
        /* A redelivery from just inside the window is still caught. */
        if (s > 2047) assert_int_equal(check(a, "p", s - 2047, NULL), ACEMQ_AUDIT_DUPLICATE);
    }
    /* Past depth, the 64 sequences of ActiveMQ's slack still have their
     * bits: seen, so duplicates; beyond them nothing is known. */
    for (uint64_t back = 2048; back < 2112; back++)
        assert_int_equal(check(a, "p", 100000 - back, NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(check(a, "p", 100000 - 2112, &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
    /* A jump of less than the window keeps what is still inside it. */
    assert_int_equal(check(a, "p", 101000, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check(a, "p", 101000 - 2047, NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(check(a, "p", 100001, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check(a, "p", 100999, NULL), ACEMQ_AUDIT_NEW);
    /* A jump past the whole window forgets it all, in one step. */
    assert_int_equal(check(a, "p", 1000000000000ULL, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check(a, "p", 1000000000000ULL - 1, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check(a, "p", 101000, &cause), ACEMQ_AUDIT_UNKNOWN);
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

/* A check by split producer or, every other time, by text id. */
static int check_either(acemq_audit *a, const char *producer, uint64_t seq, int text, int *cause)
{
    if (!text) return check(a, producer, seq, cause);
    char id[128];
    snprintf(id, sizeof id, "%s:%llu", producer, (unsigned long long)seq);
    return check_id(a, id, cause);
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
        acemq_audit *a =
            make(depth, 64, fail_open ? ACEMQ_AUDIT_FAIL_OPEN : ACEMQ_AUDIT_FAIL_CLOSED, flags);
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
            int got = check_either(a, p, seq, i & 1, &got_cause);
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

static void window_matches_model(void **state)
{
    (void)state;
    run_against_model(0);
}

static void window_matches_model_thread_safe(void **state)
{
    (void)state;
    run_against_model(ACEMQ_AUDIT_THREAD_SAFE);
}

static void rollback_lets_a_sequence_pass_again(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, 0);
    assert_int_equal(check_id(a, "p:5", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(acemq_audit_rollback(a, "p:5", 3), 1);
    assert_int_equal(acemq_audit_rollback(a, "p:5", 3), 0); /* already clear */
    assert_int_equal(check_id(a, "p:5", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check_id(a, "p:5", NULL), ACEMQ_AUDIT_DUPLICATE);
    /* Nothing to clear: never seen, unknown producer, ahead, behind the window. */
    assert_int_equal(acemq_audit_rollback(a, "p:4", 3), 0);
    assert_int_equal(acemq_audit_rollback(a, "q:5", 3), 0);
    assert_int_equal(acemq_audit_rollback(a, "p:6", 3), 0);
    assert_int_equal(check_id(a, "p:10000", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(acemq_audit_rollback(a, "p:5", 3), 0);
    /* Rolling back the top leaves the top where it is. */
    assert_int_equal(acemq_audit_rollback(a, "p:10000", 7), 1);
    assert_int_equal(check_id(a, "p:9999", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check_id(a, "p:10000", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(acemq_audit_rollback_seq(a, NULL, 1, 1), ACEMQ_EINVAL);
    assert_true(stats(a).rollbacks == 2);
    acemq_audit_free(a);
}

/* The producer LRU is exact: checked against a plain recency list, with
 * producers of every length class drawn at random from a pool larger than
 * max_producers, checks and rollbacks both counting as uses, and every
 * evicted producer coming back UNKNOWN (EVICTED), unless the memory of
 * evictions forgot it (direct-mapped by hash, so two evicted producers can
 * share a slot): such a NEW is allowed only as often as `forgotten` counts.
 * A wrong victim would show as a held producer answering UNKNOWN. Capacities
 * on both sides of the switch from stamps to a linked list (docs/audit.md). */
static void lru_matches_model(void **state)
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
            int got = check_either(a, names[k], ++seq[k], i & 1, &cause);
            if (got == ACEMQ_AUDIT_NEW && want == ACEMQ_AUDIT_UNKNOWN &&
                lenient < stats(a).forgotten) {
                lenient++;
                continue;
            }
            if (got != want || cause != want_cause)
                fail_msg("max_producers %u step %d %s:%llu: got %s/%s, want %s/%s", cap, i,
                         names[k], (unsigned long long)seq[k], acemq_audit_result_name(got),
                         acemq_audit_cause_name(cause), acemq_audit_result_name(want),
                         acemq_audit_cause_name(want_cause));
        }
        acemq_audit_stats st = stats(a);
        assert_true(lenient <= st.forgotten && st.forgotten < evictions / 8 + 2);
        assert_true(st.evictions == evictions);
        assert_true(st.producers == (uint64_t)held);
        acemq_audit_free(a);
    }
}

/* Thread-safe, a shard may hold more than its share of producers (its
 * table grows) and every one of them is still found. */
static void shard_tables_grow(void **state)
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
            assert_int_equal(check(a, name, 1, NULL),
                             round == 0 ? ACEMQ_AUDIT_NEW : ACEMQ_AUDIT_DUPLICATE);
        }
    acemq_audit_stats st = stats(a);
    assert_true(st.producers == 64 && st.evictions == 0 && st.checks == 192);
    acemq_audit_free(a);
}

/* max_producers 4: the least recently used producer goes, and comes back UNKNOWN. */
static void eviction(int policy)
{
    acemq_audit *a = make(2048, 4, policy, 0);
    int unknown = policy == ACEMQ_AUDIT_FAIL_CLOSED ? ACEMQ_AUDIT_UNKNOWN : ACEMQ_AUDIT_NEW;
    int cause;
    for (int i = 0; i < 4; i++) {
        char p[8];
        snprintf(p, sizeof p, "p%d", i);
        assert_int_equal(check(a, p, 1, NULL), ACEMQ_AUDIT_NEW);
    }
    assert_int_equal(check(a, "p0", 2, NULL), ACEMQ_AUDIT_NEW); /* p0 is recent now */
    assert_int_equal(check(a, "p4", 1, NULL), ACEMQ_AUDIT_NEW); /* evicts p1 */
    acemq_audit_stats s = stats(a);
    assert_true(s.evictions == 1);
    assert_true(s.producers == 4);
    assert_int_equal(check(a, "p0", 1, NULL), ACEMQ_AUDIT_DUPLICATE);

    /* p1 was evicted: its return is UNKNOWN (evicts p2). */
    assert_int_equal(check(a, "p1", 2, &cause), unknown);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
    /* Its window starts again at that id: recorded, and anything below it
     * (seen or not before the eviction, nobody knows) is UNKNOWN. */
    assert_int_equal(check(a, "p1", 2, NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(check(a, "p1", 1, &cause), unknown);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
    assert_int_equal(check(a, "p1", 3, &cause), ACEMQ_AUDIT_NEW);
    assert_int_equal(cause, ACEMQ_AUDIT_CAUSE_NONE);
    /* p2, evicted for p1, comes back UNKNOWN too. */
    assert_int_equal(check(a, "p2", 1, &cause), unknown);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);

    s = stats(a);
    assert_true(s.evictions == 3);
    assert_true(s.unknowns == 3);
    assert_true(s.unknown_evicted == 3);
    assert_true(s.checks == 12);
    assert_true(s.duplicates == 2);
    assert_true(s.news == (policy == ACEMQ_AUDIT_FAIL_CLOSED ? 7 : 10));
    assert_true(s.forgotten == 0);
    acemq_audit_free(a);
}

static void eviction_fail_closed(void **state)
{
    (void)state;
    eviction(ACEMQ_AUDIT_FAIL_CLOSED);
}

static void eviction_fail_open(void **state)
{
    (void)state;
    eviction(ACEMQ_AUDIT_FAIL_OPEN);
}

/* Sharded, the LRU is per shard but the bound is the audit's, give or take
 * one producer per shard; an evicted producer still comes back UNKNOWN. */
static void sharded_eviction(void **state)
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
        assert_int_equal(check(a, p, 1, NULL), ACEMQ_AUDIT_NEW);
    }
    acemq_audit_stats s = stats(a);
    assert_true(s.producers >= 8 && s.producers <= 8 + 3);
    assert_true(s.evictions == 100 - s.producers);
    for (int i = 0; i < 100; i++) {
        snprintf(p, sizeof p, "p%d", i);
        int cause;
        int r = check(a, p, 1, &cause);
        if (r == ACEMQ_AUDIT_UNKNOWN)
            assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
        else
            assert_int_equal(r, ACEMQ_AUDIT_DUPLICATE);
    }
    s = stats(a);
    assert_true(s.forgotten == 0);
    assert_true(s.unknown_evicted + s.duplicates == 100);
    assert_true(s.unknown_evicted >= 100 - 11);
    assert_true(s.producers <= 8 + 3);
    acemq_audit_free(a);
}

/* The memory of evictions is bounded too; what it drops is counted. */
static void forgotten_evictions_are_counted(void **state)
{
    (void)state;
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.max_producers = 1;
    o.max_evicted = 1;
    o.policy = ACEMQ_AUDIT_FAIL_CLOSED;
    acemq_audit *a = NULL;
    assert_int_equal(acemq_audit_new(&a, &o), 0);
    assert_int_equal(check(a, "p0", 1, NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(check(a, "p1", 1, NULL), ACEMQ_AUDIT_NEW); /* p0 remembered as evicted */
    assert_int_equal(check(a, "p2", 1, NULL), ACEMQ_AUDIT_NEW); /* p1 overwrites p0 */
    acemq_audit_stats s = stats(a);
    assert_true(s.evictions == 2);
    assert_true(s.forgotten == 1);
    /* The documented limit: p0's return is no longer recognised. */
    assert_int_equal(check(a, "p0", 1, NULL), ACEMQ_AUDIT_NEW);
    acemq_audit_free(a);
}

/* The window's edge, as ActiveMQ keeps it: its BitArrayBin for depth 2048 is
 * 33 bins of 64 bits aligned to multiples of 64, the last holding the top,
 * so with the top at 63 past a multiple of 64 it still remembers sequences
 * 2,048 to 2,111 behind it. Every one of them that was seen is a duplicate
 * here too, under both policies; one that was not is NEW under fail-open
 * and recorded (its next sighting a DUPLICATE), UNKNOWN under fail-closed
 * and not recorded. 2,112 behind has no bit, in ActiveMQ either. */
static void window_edge_keeps_activemqs_slack(void **state)
{
    (void)state;
    const uint64_t top = 4095; /* 63 past a multiple of 64 */
    for (int closed = 0; closed < 2; closed++) {
        int policy = closed ? ACEMQ_AUDIT_FAIL_CLOSED : ACEMQ_AUDIT_FAIL_OPEN;
        acemq_audit *a = make(2048, 64, policy, 0);
        int cause;
        for (uint64_t s = 1; s <= top; s++)
            if (s != top - 2080) assert_int_equal(check(a, "p", s, NULL), ACEMQ_AUDIT_NEW);
        for (uint64_t back = 2048; back < 2112; back++) {
            if (back == 2080) continue;
            assert_int_equal(check(a, "p", top - back, &cause), ACEMQ_AUDIT_DUPLICATE);
            assert_int_equal(cause, ACEMQ_AUDIT_CAUSE_NONE);
        }
        /* Never seen, in the slack: history may be lost, so UNKNOWN. */
        int unknown = closed ? ACEMQ_AUDIT_UNKNOWN : ACEMQ_AUDIT_NEW;
        assert_int_equal(check(a, "p", top - 2080, &cause), unknown);
        assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
        assert_int_equal(check(a, "p", top - 2080, &cause),
                         closed ? ACEMQ_AUDIT_UNKNOWN : ACEMQ_AUDIT_DUPLICATE);
        if (!closed) {
            /* What fail-open recorded a rollback can clear. */
            assert_int_equal(acemq_audit_rollback_seq(a, "p", 1, top - 2080), 1);
            assert_int_equal(check(a, "p", top - 2080, NULL), ACEMQ_AUDIT_NEW);
        }
        /* Beyond the slack no bit is left: nothing recorded, never a duplicate. */
        assert_int_equal(check(a, "p", top - 2112, &cause), unknown);
        assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
        assert_int_equal(check(a, "p", top - 2112, &cause), unknown);
        assert_int_equal(acemq_audit_rollback_seq(a, "p", 1, top - 2112), 0);
        acemq_audit_free(a);
    }
}

/* An evicted producer comes back at 200: its window starts there, but its
 * ring reaches back, and ActiveMQ's fresh window begins at 192 (200 rounded
 * down to 64). A redelivery just below 200 is UNKNOWN (EVICTED), answered
 * NEW under fail-open and recorded, so its second sighting is a DUPLICATE,
 * as in ActiveMQ; so is one below ActiveMQ's base, which ActiveMQ never
 * catches. Under fail-closed both stay UNKNOWN. */
static void evicted_producer_return_is_recorded(void **state)
{
    (void)state;
    for (int closed = 0; closed < 2; closed++) {
        int policy = closed ? ACEMQ_AUDIT_FAIL_CLOSED : ACEMQ_AUDIT_FAIL_OPEN;
        int unknown = closed ? ACEMQ_AUDIT_UNKNOWN : ACEMQ_AUDIT_NEW;
        acemq_audit *a = make(2048, 64, policy, 0);
        int cause;
        for (uint64_t s = 1; s <= 100; s++)
            assert_int_equal(check(a, "p", s, NULL), ACEMQ_AUDIT_NEW);
        char q[16];
        for (int k = 0; k < 64; k++) { /* 64 others: p goes */
            snprintf(q, sizeof q, "q%d", k);
            assert_int_equal(check(a, q, 1, NULL), ACEMQ_AUDIT_NEW);
        }
        assert_true(stats(a).evictions == 1);
        assert_int_equal(check(a, "p", 200, &cause), unknown);
        assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
        const uint64_t below[] = {195, 150};
        for (size_t i = 0; i < 2; i++) {
            assert_int_equal(check(a, "p", below[i], &cause), unknown);
            assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
            assert_int_equal(check(a, "p", below[i], &cause),
                             closed ? ACEMQ_AUDIT_UNKNOWN : ACEMQ_AUDIT_DUPLICATE);
        }
        assert_int_equal(check(a, "p", 201, &cause), ACEMQ_AUDIT_NEW);
        assert_int_equal(check(a, "p", 200, &cause), ACEMQ_AUDIT_DUPLICATE);
        acemq_audit_stats st = stats(a);
        assert_true(st.unknown_evicted == (closed ? 5 : 3));
        assert_true(st.duplicates == (closed ? 1 : 3));
        acemq_audit_free(a);
    }
}

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
static void catches_what_activemq_catches(void **state)
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
            acemq_audit *a = make((uint32_t)depth, (uint32_t)cases[c].max,
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
                int got = check_either(a, name, s, i & 1, &cause);
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
            acemq_audit_stats st = stats(a);
            assert_true(st.evictions > 100 && st.unknown_evicted > 0 &&
                        st.unknown_behind_window > 0);
            assert_true(amq_dups > 1000);
            if (!closed) assert_true(caught > 0); /* and acemq more */
            acemq_audit_free(a);
        }
}

static void sequences_near_2_64(void **state)
{
    (void)state;
    const uint64_t top = UINT64_MAX;
    int cause;
    for (int f = 0; f < 2; f++) {
        acemq_audit *a = make(2048, 64, ACEMQ_AUDIT_FAIL_CLOSED, f ? ACEMQ_AUDIT_THREAD_SAFE : 0);
        for (uint64_t s = top - 5000;; s++) {
            assert_int_equal(check(a, "p", s, NULL), ACEMQ_AUDIT_NEW);
            assert_int_equal(check(a, "p", s, NULL), ACEMQ_AUDIT_DUPLICATE);
            if (s == top) break;
        }
        assert_int_equal(check_id(a, "p:18446744073709551615", NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(check(a, "p", top - 2047, NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(check(a, "p", top - 2111, NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(check(a, "p", top - 2112, &cause), ACEMQ_AUDIT_UNKNOWN);
        assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
        assert_int_equal(check(a, "p", 0, &cause), ACEMQ_AUDIT_UNKNOWN);
        assert_int_equal(cause, ACEMQ_AUDIT_BEFORE_START);
        assert_int_equal(acemq_audit_rollback_seq(a, "p", 1, top), 1);
        assert_int_equal(check(a, "p", top, NULL), ACEMQ_AUDIT_NEW);

        /* First ids at both ends, and one jump across the whole range. */
        assert_int_equal(check(a, "hi", top, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(check(a, "hi", top - 2047, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(check(a, "hi", top - 2048, &cause), ACEMQ_AUDIT_UNKNOWN);
        assert_int_equal(cause, ACEMQ_AUDIT_BEFORE_START);
        assert_int_equal(check(a, "lo", 0, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(check(a, "lo", 0, NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(check(a, "lo", 1, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(check(a, "lo", top, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(check(a, "lo", top - 1, NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(check(a, "lo", top, NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(check(a, "lo", 1, &cause), ACEMQ_AUDIT_UNKNOWN);
        assert_int_equal(cause, ACEMQ_AUDIT_BEHIND_WINDOW);
        /* Beyond 2^31 and 2^63, where 32-bit and signed arithmetic break. */
        const uint64_t edges[] = {(1ULL << 31) - 1, 1ULL << 31, (1ULL << 32) + 5, (1ULL << 63) - 1,
                                  1ULL << 63};
        for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
            assert_int_equal(check(a, "mid", edges[i], NULL), ACEMQ_AUDIT_NEW);
            assert_int_equal(check(a, "mid", edges[i], NULL), ACEMQ_AUDIT_DUPLICATE);
        }
        acemq_audit_free(a);
    }
}

/* acemq_audit_check_many and acemq_audit_check_seq_many answer exactly as
 * one call per id: on a random stream of producers of every length class
 * (so the straight-line check and the general one both run), with
 * evictions (more producers than tracked, so EVICTED answers), jumps and
 * stragglers (BEHIND_WINDOW, BEFORE_START), repeats of one producer inside a
 * batch, malformed ids among them (each answered ACEMQ_EINVAL alone), both
 * policies and both flavours, in batches of odd sizes: the same answers,
 * causes and counters as a twin audit fed one id at a time. */
static void batch_agrees_with_one_by_one(void **state)
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
                acemq_audit_stats s1 = stats(one), s2 = stats(many);
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

static void batch_errors(void **state)
{
    (void)state;
    acemq_audit *a = make(2048, 64, ACEMQ_AUDIT_FAIL_OPEN, 0);
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
    assert_int_equal(stats(a).checks, 0);
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

static void names(void **state)
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

/* ---- the connection audit ---- */

static acemq_conn_audit *make_conn(uint32_t max_audits, int check, unsigned flags)
{
    acemq_conn_audit_options o;
    acemq_conn_audit_options_init(&o);
    assert_int_equal(o.max_audits, 1000);
    assert_int_equal(o.check_for_duplicates, 1);
    o.max_audits = max_audits;
    o.check_for_duplicates = check;
    o.audit.policy = ACEMQ_AUDIT_FAIL_CLOSED;
    o.audit.flags = flags;
    acemq_conn_audit *c = NULL;
    assert_int_equal(acemq_conn_audit_new(&c, &o), 0);
    return c;
}

static int ccheck(acemq_conn_audit *c, int kind, const char *dest, const char *consumer,
                  const char *id, int *cause)
{
    return acemq_conn_audit_check(c, kind, dest, consumer, id, strlen(id), cause);
}

/* A queue's consumers share one audit: a message is handled once per queue. */
static void queue_audit_is_shared(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++) {
        acemq_conn_audit *c = make_conn(1000, 1, f ? ACEMQ_AUDIT_THREAD_SAFE : 0);
        const int Q = ACEMQ_AUDIT_QUEUE;
        assert_int_equal(ccheck(c, Q, "orders", "c1", "p:1", NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(ccheck(c, Q, "orders", "c2", "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(ccheck(c, Q, "orders", NULL, "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(ccheck(c, Q, "invoices", "c1", "p:1", NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(acemq_conn_audit_rollback(c, Q, "orders", "c2", "p:1", 3), 1);
        assert_int_equal(ccheck(c, Q, "orders", "c1", "p:1", NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(acemq_conn_audit_rollback(c, Q, "nowhere", NULL, "p:1", 3), 0);
        acemq_audit_stats s;
        uint64_t audits = 0;
        assert_int_equal(acemq_conn_audit_stats_get(c, &s, &audits), 0);
        assert_true(audits == 2);
        assert_true(s.checks == 5);
        assert_true(s.duplicates == 2);
        assert_true(s.rollbacks == 1);
        acemq_conn_audit_free(c);
    }
}

/* Each topic subscriber gets every message once: one audit per consumer. */
static void topic_audit_is_per_consumer(void **state)
{
    (void)state;
    acemq_conn_audit *c = make_conn(1000, 1, 0);
    const int T = ACEMQ_AUDIT_TOPIC;
    assert_int_equal(ccheck(c, T, "prices", "c1", "p:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, T, "prices", "c2", "p:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, T, "prices", "c1", "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(ccheck(c, T, "prices", "c2", "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
    /* A consumer's audit covers all it subscribes to (wildcards included). */
    assert_int_equal(ccheck(c, T, "other", "c1", "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
    /* A queue and a consumer of the same name are different audits. */
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, "c1", NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    uint64_t audits = 0;
    acemq_audit_stats s;
    assert_int_equal(acemq_conn_audit_stats_get(c, &s, &audits), 0);
    assert_true(audits == 3);
    acemq_conn_audit_free(c);
}

/* Audits are kept in an LRU; one dropped takes its history with it. */
static void audit_lru_evicts_whole_audits(void **state)
{
    (void)state;
    acemq_conn_audit *c = make_conn(2, 1, 0);
    const int Q = ACEMQ_AUDIT_QUEUE;
    int cause;
    assert_int_equal(ccheck(c, Q, "q1", NULL, "a:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q1", NULL, "b:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q2", NULL, "a:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q3", NULL, "a:1", NULL), ACEMQ_AUDIT_NEW); /* drops q1 */
    acemq_audit_stats s;
    uint64_t audits = 0;
    assert_int_equal(acemq_conn_audit_stats_get(c, &s, &audits), 0);
    assert_true(audits == 2);
    assert_true(s.evictions == 2); /* q1's two producers */
    assert_true(s.producers == 2);
    assert_true(s.checks == 4);
    /* q1 again: every producer's first id is UNKNOWN, later ones as usual. */
    assert_int_equal(ccheck(c, Q, "q1", NULL, "a:1", &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
    assert_int_equal(ccheck(c, Q, "q1", NULL, "a:1", NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(ccheck(c, Q, "q1", NULL, "a:2", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q1", NULL, "c:9", &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
    assert_int_equal(acemq_conn_audit_stats_get(c, &s, NULL), 0);
    assert_true(s.unknown_evicted == 2);
    acemq_conn_audit_free(c);
}

static void check_for_duplicates_switch(void **state)
{
    (void)state;
    acemq_conn_audit *c = make_conn(1000, 0, 0);
    const int Q = ACEMQ_AUDIT_QUEUE;
    assert_int_equal(ccheck(c, Q, "q", NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q", NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    acemq_conn_audit_set_check_for_duplicates(c, 1);
    assert_int_equal(ccheck(c, Q, "q", NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q", NULL, "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
    acemq_conn_audit_set_check_for_duplicates(c, 0);
    assert_int_equal(ccheck(c, Q, "q", NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    acemq_audit_stats s;
    assert_int_equal(acemq_conn_audit_stats_get(c, &s, NULL), 0);
    assert_true(s.checks == 2);
    acemq_conn_audit_set_check_for_duplicates(NULL, 1);
    acemq_conn_audit_free(c);
    acemq_conn_audit_free(NULL);
}

static void conn_audit_errors(void **state)
{
    (void)state;
    acemq_conn_audit *c = make_conn(1000, 1, 0);
    assert_int_equal(ccheck(c, 7, "q", "c", "p:1", NULL), ACEMQ_EINVAL);
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, NULL, "c", "p:1", NULL), ACEMQ_EINVAL);
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_TOPIC, "t", NULL, "p:1", NULL), ACEMQ_EINVAL);
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, "", NULL, "p:1", NULL), ACEMQ_EINVAL);
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, "q", NULL, "p1", NULL), ACEMQ_EINVAL);
    char *big = malloc(ACEMQ_AUDIT_NAME_MAX + 2);
    assert_non_null(big);
    memset(big, 'n', ACEMQ_AUDIT_NAME_MAX + 1);
    big[ACEMQ_AUDIT_NAME_MAX + 1] = '\0';
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, big, NULL, "p:1", NULL), ACEMQ_EINVAL);
    big[ACEMQ_AUDIT_NAME_MAX] = '\0';
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, big, NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    free(big);
    assert_int_equal(ccheck(NULL, ACEMQ_AUDIT_QUEUE, "q", NULL, "p:1", NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_conn_audit_stats_get(c, NULL, NULL), ACEMQ_EINVAL);
    acemq_conn_audit_free(c);

    acemq_conn_audit_options o;
    acemq_conn_audit_options_init(&o);
    o.max_audits = 0;
    assert_int_equal(acemq_conn_audit_new(&c, &o), ACEMQ_EINVAL);
    assert_null(c);
    acemq_conn_audit_options_init(&o);
    o.audit.depth = 0;
    assert_int_equal(acemq_conn_audit_new(&c, &o), ACEMQ_EINVAL);
    assert_int_equal(acemq_conn_audit_new(&c, NULL), 0);
    acemq_conn_audit_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_activemq_ids),
        cmocka_unit_test(rejects_malformed_ids),
        cmocka_unit_test(parse_agrees_with_reference),
        cmocka_unit_test(options_are_checked),
        cmocka_unit_test(new_then_duplicate),
        cmocka_unit_test(out_of_order_within_window),
        cmocka_unit_test(before_start),
        cmocka_unit_test(slides_across_many_windows),
        cmocka_unit_test(window_matches_model),
        cmocka_unit_test(window_matches_model_thread_safe),
        cmocka_unit_test(rollback_lets_a_sequence_pass_again),
        cmocka_unit_test(eviction_fail_closed),
        cmocka_unit_test(eviction_fail_open),
        cmocka_unit_test(sharded_eviction),
        cmocka_unit_test(lru_matches_model),
        cmocka_unit_test(shard_tables_grow),
        cmocka_unit_test(forgotten_evictions_are_counted),
        cmocka_unit_test(window_edge_keeps_activemqs_slack),
        cmocka_unit_test(evicted_producer_return_is_recorded),
        cmocka_unit_test(catches_what_activemq_catches),
        cmocka_unit_test(sequences_near_2_64),
        cmocka_unit_test(batch_agrees_with_one_by_one),
        cmocka_unit_test(batch_errors),
        cmocka_unit_test(names),
        cmocka_unit_test(queue_audit_is_shared),
        cmocka_unit_test(topic_audit_is_per_consumer),
        cmocka_unit_test(audit_lru_evicts_whole_audits),
        cmocka_unit_test(check_for_duplicates_switch),
        cmocka_unit_test(conn_audit_errors),
    };
    return cmocka_run_group_tests_name("audit", tests, NULL, NULL);
}
