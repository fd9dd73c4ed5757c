/* test_memory_idem.c — what only the memory backend does: its entry bound,
 * evictions and the refusal to drop a live claim, its records (ids kept in
 * the entry or beside it, slab reuse) and its batch path. */
#define _GNU_SOURCE /* mincore, MADV_POPULATE_WRITE (memory_pages.h) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "acemq/acemq.h"
#include "backends/test_control.h"
#include "memory_pages.h"

#define T0 1700000000000LL

typedef struct fixture {
    acemq_manual_clock *clock;
    acemq_idem *store;
} fixture;

static fixture *open_bounded(const char *url)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(acemq_manual_clock_new(&f->clock, T0), 0);
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(f->clock);
    o.lease_ms = 1000;
    o.retention_ms = 60000;
    assert_int_equal(acemq_idem_open(&f->store, url, &o), 0);
    return f;
}

static void close_fixture(fixture *f)
{
    acemq_idem_close(f->store);
    acemq_manual_clock_free(f->clock);
    free(f);
}

enum { ID_CAP = 32 };

/* Test id number i, "id-<i>", written to id (ID_CAP bytes); its length. */
static size_t id_of(int i, char *id)
{
    return (size_t)snprintf(id, ID_CAP, "id-%d", i);
}

static int claim_n(fixture *f, int i, acemq_claim *c)
{
    char id[ID_CAP];
    size_t len = id_of(i, id);
    return acemq_idem_try_claim(f->store, id, len, NULL, c);
}

static int confirm_n(fixture *f, int i, uint64_t token)
{
    char id[ID_CAP];
    size_t len = id_of(i, id);
    return acemq_idem_confirm(f->store, id, len, token);
}

static int release_n(fixture *f, int i, uint64_t token)
{
    char id[ID_CAP];
    size_t len = id_of(i, id);
    return acemq_idem_release(f->store, id, len, token);
}

static int is_confirmed_n(fixture *f, int i)
{
    char id[ID_CAP];
    size_t len = id_of(i, id);
    return acemq_idem_is_confirmed(f->store, id, len);
}

/* Claims ids 0..n-1, each new to the store, and confirms each in turn. */
static void claim_and_confirm_first(fixture *f, int n)
{
    acemq_claim c;
    for (int i = 0; i < n; i++) {
        assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
        assert_int_equal(confirm_n(f, i, c.token), 0);
    }
}

/* Past the bound, the oldest confirmations go first, and are counted. */
static void bound_evicts_oldest_confirmed(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=10");
    claim_and_confirm_first(f, 25);
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    assert_int_equal(s.evictions, 15);
    /* The newest ten are remembered, the oldest fifteen are not. */
    for (int i = 0; i < 25; i++)
        assert_int_equal(is_confirmed_n(f, i), i >= 15);
    close_fixture(f);
}

/* A store full of live claims refuses a new one rather than drop a claim;
 * once a lease runs out that claim may make room. */
static void live_claims_are_never_evicted(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=4");
    acemq_claim held[4], c;
    for (int i = 0; i < 4; i++)
        assert_int_equal(claim_n(f, i, &held[i]), ACEMQ_CLAIMED);
    assert_int_equal(claim_n(f, 99, &c), ACEMQ_EFULL);
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "live claims"));
    for (int i = 0; i < 4; i++)
        assert_int_equal(claim_n(f, i, &c), ACEMQ_IN_PROGRESS);
    /* Release frees a slot at once. */
    assert_int_equal(acemq_idem_release(f->store, "id-0", 4, held[0].token), 0);
    assert_int_equal(claim_n(f, 99, &c), ACEMQ_CLAIMED);
    /* An expired lease is no longer live: it may go. */
    assert_int_equal(claim_n(f, 100, &c), ACEMQ_EFULL);
    acemq_manual_clock_advance(f->clock, 1000);
    assert_int_equal(claim_n(f, 100, &c), ACEMQ_CLAIMED);
    assert_int_equal(confirm_n(f, 1, held[1].token), ACEMQ_ESTALE);
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.errors, 2);
    close_fixture(f);
}

/* A confirmation past its retention makes room as an expiration, not an eviction. */
static void expired_confirmations_make_room_first(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=2");
    acemq_claim c;
    assert_int_equal(claim_n(f, 1, &c), ACEMQ_CLAIMED);
    assert_int_equal(confirm_n(f, 1, c.token), 0);
    acemq_manual_clock_advance(f->clock, 60000);
    assert_int_equal(claim_n(f, 2, &c), ACEMQ_CLAIMED);
    assert_int_equal(claim_n(f, 3, &c), ACEMQ_CLAIMED);
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    assert_int_equal(s.expirations, 1);
    assert_int_equal(s.evictions, 0);
    close_fixture(f);
}

/* Ids as producers make them: UUID text, 36 bytes, version 4 (random) or 7
 * (a millisecond timestamp, then random bits), from a fixed seed so that a
 * failure repeats. Random bits spread over the table as real ids do. */
enum { UUID_LEN = 36 };
typedef struct uuid_text {
    char s[UUID_LEN + 1];
} uuid_text;

static uint64_t next_random(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uuid_text *make_uuids(size_t n, int version, uint64_t seed)
{
    uuid_text *ids = calloc(n, sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++) {
        uint64_t hi = next_random(&seed), lo = next_random(&seed);
        if (version == 7)
            hi = ((uint64_t)(T0 + (int64_t)i) << 16) | (hi & 0x0FFFu) | 0x7000u;
        else
            hi = (hi & ~(uint64_t)0xF000u) | 0x4000u;
        lo = (lo & ~((uint64_t)3 << 62)) | ((uint64_t)2 << 62); /* the RFC 4122 variant */
        int len =
            snprintf(ids[i].s, sizeof ids[i].s, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(hi >> 32),
                     (unsigned)(hi >> 16) & 0xFFFFu, (unsigned)hi & 0xFFFFu, (unsigned)(lo >> 48),
                     (unsigned long long)(lo & 0xFFFFFFFFFFFFull));
        assert_int_equal(len, UUID_LEN);
    }
    return ids;
}

static int claim_uuid(fixture *f, const uuid_text *id, acemq_claim *c)
{
    return acemq_idem_try_claim(f->store, id->s, UUID_LEN, NULL, c);
}

/* Asserts what a claim of each of ids[from..to) answers, and that it
 * changes nothing (a duplicate or an id in progress stays as it was). */
static void expect_each(fixture *f, const uuid_text *ids, size_t from, size_t to, int want)
{
    acemq_claim c;
    for (size_t i = from; i < to; i++)
        assert_int_equal(claim_uuid(f, &ids[i], &c), want);
}

static void expect_counts(fixture *f, uint64_t evictions, uint64_t expirations)
{
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    assert_int_equal(s.evictions, evictions);
    assert_int_equal(s.expirations, expirations);
}

/* A store below max_entries forgets no confirmed id, however the ids fall in
 * its table: max_entries - 1 and then max_entries UUIDs, each claimed and
 * confirmed, are all duplicates afterwards and nothing was evicted. The
 * next new id makes room by evicting the confirmation made longest ago,
 * and only it. */
static void check_filled_to_the_bound(const char *url, size_t max, int version, uint64_t seed)
{
    fixture *f = open_bounded(url);
    uuid_text *ids = make_uuids(max + 1, version, seed);
    acemq_claim c;
    for (size_t i = 0; i < max; i++) {
        assert_int_equal(claim_uuid(f, &ids[i], &c), ACEMQ_CLAIMED);
        assert_int_equal(acemq_idem_confirm(f->store, ids[i].s, UUID_LEN, c.token), 0);
        if (i == max - 2) {
            expect_each(f, ids, 0, max - 1, ACEMQ_ALREADY_CONFIRMED);
            expect_counts(f, 0, 0);
        }
    }
    expect_each(f, ids, 0, max, ACEMQ_ALREADY_CONFIRMED);
    expect_counts(f, 0, 0);
    /* At the bound: the oldest confirmation goes, the rest stay. */
    assert_int_equal(claim_uuid(f, &ids[max], &c), ACEMQ_CLAIMED);
    expect_counts(f, 1, 0);
    assert_int_equal(acemq_idem_is_confirmed(f->store, ids[0].s, UUID_LEN), 0);
    expect_each(f, ids, 1, max, ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(claim_uuid(f, &ids[max], &c), ACEMQ_IN_PROGRESS);
    free(ids);
    close_fixture(f);
}

static void a_store_below_its_bound_forgets_no_confirmed_id(void **state)
{
    (void)state;
    check_filled_to_the_bound("memory:?max_entries=4096", 4096, 4, 1);
    check_filled_to_the_bound("memory:?max_entries=65536", 65536, 7, 3);
}

/* max_entries live claims are all held, none refused; the next new id is
 * refused with ACEMQ_EFULL and drops none of them. Once the leases run out,
 * the next new id takes the place of the claim taken longest ago. */
static void a_store_holds_live_claims_up_to_its_bound(void **state)
{
    (void)state;
    enum { MAX = 4096 };
    fixture *f = open_bounded("memory:?max_entries=4096");
    uuid_text *ids = make_uuids(MAX + 1, 4, 5);
    acemq_claim c;
    uint64_t first_token = 0;
    for (size_t i = 0; i < MAX; i++) {
        assert_int_equal(claim_uuid(f, &ids[i], &c), ACEMQ_CLAIMED);
        if (i == 0) first_token = c.token;
    }
    assert_int_equal(claim_uuid(f, &ids[MAX], &c), ACEMQ_EFULL);
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "live claims"));
    expect_each(f, ids, 0, MAX, ACEMQ_IN_PROGRESS);
    expect_counts(f, 0, 0);
    acemq_manual_clock_advance(f->clock, 1000); /* the 1 s leases run out */
    assert_int_equal(claim_uuid(f, &ids[MAX], &c), ACEMQ_CLAIMED);
    expect_counts(f, 1, 0);
    assert_int_equal(acemq_idem_confirm(f->store, ids[0].s, UUID_LEN, first_token), ACEMQ_ESTALE);
    /* The others ran out but were not dropped: each is taken over. */
    assert_int_equal(claim_uuid(f, &ids[1], &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 1);
    free(ids);
    close_fixture(f);
}

/* At the bound a new id's claim drops, in this order: the confirmation made
 * longest ago if its retention ran out (an expiration), else the claim whose
 * lease was set longest ago if that lease ran out (an eviction), else the
 * confirmation made longest ago (an eviction); with none of these it is
 * refused. A claim past its lease goes before a live confirmation, which
 * still stops a duplicate. */
static void at_the_bound_entries_go_in_the_documented_order(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=3");
    acemq_claim a, b, c, d, e, x;
    assert_int_equal(acemq_idem_try_claim(f->store, "a", 1, NULL, &a), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(f->store, "a", 1, a.token), 0);
    assert_int_equal(acemq_idem_try_claim(f->store, "b", 1, NULL, &b), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_try_claim(f->store, "c", 1, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(f->store, "c", 1, c.token), 0);
    /* b's lease runs out: b goes, not the live confirmation a. */
    acemq_manual_clock_advance(f->clock, 1000);
    assert_int_equal(acemq_idem_try_claim(f->store, "d", 1, NULL, &d), ACEMQ_CLAIMED);
    expect_counts(f, 1, 0);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "a", 1), 1);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "c", 1), 1);
    assert_int_equal(acemq_idem_confirm(f->store, "b", 1, b.token), ACEMQ_ESTALE);
    /* a's and c's retention runs out, and d's lease: a goes first, as an
     * expiration, and d, past its lease but not taken over, still confirms. */
    acemq_manual_clock_advance(f->clock, 59000);
    assert_int_equal(acemq_idem_try_claim(f->store, "e", 1, NULL, &e), ACEMQ_CLAIMED);
    expect_counts(f, 1, 1);
    assert_int_equal(acemq_idem_confirm(f->store, "d", 1, d.token), 0);
    /* c (expired) goes next, then d, a live confirmation, as an eviction. */
    assert_int_equal(acemq_idem_try_claim(f->store, "f", 1, NULL, &x), ACEMQ_CLAIMED);
    expect_counts(f, 1, 2);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "d", 1), 1);
    assert_int_equal(acemq_idem_try_claim(f->store, "g", 1, NULL, &x), ACEMQ_CLAIMED);
    expect_counts(f, 2, 2);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "d", 1), 0);
    /* e, f and g are live claims: the next new id is refused. */
    assert_int_equal(acemq_idem_try_claim(f->store, "h", 1, NULL, &x), ACEMQ_EFULL);
    expect_counts(f, 2, 2);
    /* A renewal counts as the lease's setting: e, renewed, outlives f. */
    assert_int_equal(acemq_idem_renew(f->store, "e", 1, e.token, 5000), 0);
    acemq_manual_clock_advance(f->clock, 1000); /* f's and g's leases run out */
    assert_int_equal(acemq_idem_try_claim(f->store, "h", 1, NULL, &x), ACEMQ_CLAIMED);
    expect_counts(f, 3, 2);
    assert_int_equal(acemq_idem_try_claim(f->store, "e", 1, NULL, &x), ACEMQ_IN_PROGRESS);
    close_fixture(f);
}

/* 100,000 ids through a store of 65,536: it keeps exactly the newest
 * 65,536, evicting the rest oldest first, and its table stops at what the
 * bound needs (slots, at the store's load bound, in whole lines of tags),
 * never a power of two past it. */
static void check_bound(const char *url, size_t slots)
{
    fixture *f = open_bounded(url);
    enum { N = 100000, MAX = 65536 };
    claim_and_confirm_first(f, N);
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    assert_int_equal(s.evictions, N - MAX);
    for (int i = 0; i < N; i++)
        assert_int_equal(is_confirmed_n(f, i), i >= N - MAX);
    assert_int_equal(acemq__memory_idem_slots(f->store), slots);
    close_fixture(f);
}

/* 65,536 entries is a small store: its table is at most half full, 131,136
 * slots (131,073 rounded up to lines of tags), grown to that. */
static void bound_holds(void **state)
{
    (void)state;
    check_bound("memory:?max_entries=65536", 131136);
}

/* A table that holds max_entries has as many slots as that needs, not a
 * power of two (70,000 entries at 7/8: 80,064 slots, 87% full when the
 * store is), so probe runs, long at that load,
 * wrap at its end, from its last group of sixteen tags to its first.
 * Filled to the bound with live claims, every id is found, the next claim
 * is refused, and releasing every third (each release shifts later members
 * of a run back, across the end too) leaves each id findable or claimable
 * as it should be. */
static void check_table_of_any_size(const char *url, int n, size_t slots)
{
    fixture *f = open_bounded(url);
    uint64_t *tokens = calloc((size_t)n, sizeof *tokens);
    assert_non_null(tokens);
    acemq_claim c;
    for (int i = 0; i < n; i++) {
        assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
        tokens[i] = c.token;
    }
    assert_int_equal(acemq__memory_idem_slots(f->store), slots);
    assert_int_equal(claim_n(f, n, &c), ACEMQ_EFULL);
    for (int i = 0; i < n; i++)
        assert_int_equal(claim_n(f, i, &c), ACEMQ_IN_PROGRESS);
    for (int i = 0; i < n; i += 3)
        assert_int_equal(release_n(f, i, tokens[i]), 0);
    for (int i = 0; i < n; i++) {
        if (i % 3 == 0) {
            assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
            tokens[i] = c.token;
        } else {
            assert_int_equal(claim_n(f, i, &c), ACEMQ_IN_PROGRESS);
        }
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(confirm_n(f, i, tokens[i]), 0);
    for (int i = 0; i < n; i++)
        assert_true(is_confirmed_n(f, i));
    assert_int_equal(acemq__memory_idem_slots(f->store), slots);
    free(tokens);
    close_fixture(f);
}

/* A growing table doubles and then takes the slots max_entries needs at
 * its load, skipping the power of two between, never past it. A small
 * store stays half full: 1,000 entries, 256 ids fill 512 slots, the 257th
 * takes 1,024 (the bound, 2,048, is not more than twice 1,024), the 513th
 * 2,048. A store above 65,536 entries fills to 7/8: 70,000 entries,
 * 28,672 ids fill 32,768 slots, the next takes the 80,064 that 70,000
 * need (80,001 rounded up to lines of tags), skipping 65,536, never
 * 131,072, and the store then holds every id to its bound in a table of
 * that size. */
static void a_growing_table_stops_at_what_max_entries_needs(void **state)
{
    (void)state;
    check_table_of_any_size("memory:?max_entries=1000", 1000, 2048);
    fixture *f = open_bounded("memory:?max_entries=1000");
    acemq_claim c;
    for (int i = 0; i < 256; i++)
        assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq__memory_idem_slots(f->store), 512);
    assert_int_equal(claim_n(f, 256, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq__memory_idem_slots(f->store), 1024);
    for (int i = 257; i < 513; i++)
        assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq__memory_idem_slots(f->store), 2048);
    close_fixture(f);

    f = open_bounded("memory:?max_entries=70000");
    for (int i = 0; i < 28672; i++)
        assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq__memory_idem_slots(f->store), 32768);
    assert_int_equal(claim_n(f, 28672, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq__memory_idem_slots(f->store), 80064);
    close_fixture(f);
    check_table_of_any_size("memory:?max_entries=70000", 70000, 80064);
}

/* A store that grows past its first 2 MiB of records has them faulted in
 * ahead of its claims on a thread of its own. Every id claimed stays
 * claimed and confirmed. */
static void a_growing_store_faults_in_ahead(void **state)
{
    (void)state;
    if (!kernel_populates()) skip();
    enum { N = 100000 }; /* 6.1 MiB of records, taken in runs */
    fixture *f = open_bounded("memory:?max_entries=1000000");
    claim_and_confirm_first(f, N);
    assert_true(acemq__memory_idem_wait_ahead(f->store) >= (size_t)N * 64 + ((size_t)4 << 20));
    for (int i = 0; i < N; i += 97)
        assert_int_equal(is_confirmed_n(f, i), 1);
    close_fixture(f);
}

/* Ids on both sides of the in-entry limit (21 bytes) and the longest, through
 * every path that reads or frees them: claim, duplicate, release, eviction
 * (reusing a dropped record for an id of the other kind), purge, close. */
static void short_and_long_ids(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=6");
    static char ids[6][ACEMQ_IDEM_ID_MAX];
    static const size_t lens[6] = {2, 20, 21, 22, 36, ACEMQ_IDEM_ID_MAX};
    for (int round = 0; round < 3; round++) {
        acemq_claim c[6], probe;
        for (int i = 0; i < 6; i++) {
            memset(ids[i], 'a' + round, lens[i]);
            ids[i][lens[i] - 1] = (char)('0' + i);
            assert_int_equal(acemq_idem_try_claim(f->store, ids[i], lens[i], NULL, &c[i]),
                             ACEMQ_CLAIMED);
        }
        for (int i = 0; i < 6; i++)
            assert_int_equal(acemq_idem_try_claim(f->store, ids[i], lens[i], NULL, &probe),
                             ACEMQ_IN_PROGRESS);
        /* Odd ones released (unlinked, their records back on the free
         * list), even ones confirmed; the next round's ids push the
         * confirmed ones out. */
        for (int i = 0; i < 6; i++) {
            if (i % 2)
                assert_int_equal(acemq_idem_release(f->store, ids[i], lens[i], c[i].token), 0);
            else
                assert_int_equal(acemq_idem_confirm(f->store, ids[i], lens[i], c[i].token), 0);
        }
        for (int i = 0; i < 6; i++)
            assert_int_equal(acemq_idem_is_confirmed(f->store, ids[i], lens[i]), i % 2 == 0);
        /* Same bytes, one shorter: another id. */
        assert_int_equal(acemq_idem_is_confirmed(f->store, ids[4], lens[4] - 1), 0);
    }
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    assert_int_equal(s.evictions, 6); /* rounds 2 and 3 each pushed out 3 confirmed */
    acemq_manual_clock_advance(f->clock, 60000);
    uint64_t purged = 0;
    assert_int_equal(acemq_idem_purge(f->store, &purged), 0);
    assert_int_equal(purged, 3);
    close_fixture(f);
}

/* A record that went (released, evicted, purged) is reused; results and
 * fingerprints it carried do not leak into the id that reuses it. */
static void reused_records_start_clean(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=1");
    acemq_claim_opts fa = {.fingerprint = "sha-A", .fingerprint_len = 5};
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(f->store, "first", 5, &fa, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm_result(f->store, "first", 5, c.token, "r", 1), 0);
    /* "second" takes the record of "first" (evicted). */
    acemq_claim_opts fb = {.fingerprint = "sha-B", .fingerprint_len = 5};
    assert_int_equal(acemq_idem_try_claim(f->store, "second", 6, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_try_claim(f->store, "second", 6, &fb, &c), ACEMQ_IN_PROGRESS);
    acemq_manual_clock_advance(f->clock, 1000);
    assert_int_equal(acemq_idem_try_claim(f->store, "second", 6, &fa, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(f->store, "second", 6, c.token), 0);
    acemq_claim probe;
    assert_int_equal(acemq_idem_try_claim(f->store, "second", 6, NULL, &probe),
                     ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(probe.has_result, 0);
    /* A confirm without a result drops an earlier one. */
    assert_int_equal(acemq_idem_confirm_result(f->store, "second", 6, c.token, "xyz", 3), 0);
    assert_int_equal(acemq_idem_try_claim(f->store, "second", 6, NULL, &probe),
                     ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(probe.result_len, 3);
    assert_int_equal(acemq_idem_confirm(f->store, "second", 6, c.token), 0);
    assert_int_equal(acemq_idem_try_claim(f->store, "second", 6, NULL, &probe),
                     ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(probe.has_result, 0);
    close_fixture(f);
}

/* A batch on a full store: each element answers as its own call would,
 * evicting confirmed records and refusing with EFULL where only live claims
 * are left, without stopping the rest. */
static void batch_on_a_full_store(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=3");
    acemq_claim c;
    assert_int_equal(claim_n(f, 0, &c), ACEMQ_CLAIMED);
    assert_int_equal(confirm_n(f, 0, c.token), 0);
    assert_int_equal(claim_n(f, 1, &c), ACEMQ_CLAIMED);
    acemq_idem_key keys[5] = {{"id-2", 4}, {"id-3", 4}, {"id-4", 4}, {"id-1", 4}, {"id-2", 4}};
    acemq_claim out[5];
    int st[5];
    assert_int_equal(acemq_idem_try_claim_many(f->store, 5, keys, NULL, out, st), 2);
    assert_int_equal(st[0], ACEMQ_CLAIMED);     /* room left */
    assert_int_equal(st[1], ACEMQ_CLAIMED);     /* evicts id-0 */
    assert_int_equal(st[2], ACEMQ_EFULL);       /* three live claims */
    assert_int_equal(st[3], ACEMQ_IN_PROGRESS); /* still held */
    assert_int_equal(st[4], ACEMQ_IN_PROGRESS); /* claimed earlier in the batch */
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "live claims"));
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.errors, 1);
    assert_int_equal(s.in_progress, 2);
    close_fixture(f);
}

/* One batch large enough that the table doubles while it runs (the
 * slots it prefetched then belong to freed arrays): every id is claimed. */
static void batch_across_growth(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=200000");
    enum { N = 20000 };
    static char ids[N][16];
    static acemq_idem_key keys[N];
    static acemq_claim out[N];
    static int st[N];
    for (int i = 0; i < N; i++) {
        int len = snprintf(ids[i], sizeof ids[i], "grow-%d", i);
        keys[i].id = ids[i];
        keys[i].id_len = (size_t)len;
    }
    assert_int_equal(acemq_idem_try_claim_many(f->store, N, keys, NULL, out, st), N);
    for (int i = 0; i < N; i += 7)
        assert_int_equal(acemq_idem_confirm(f->store, ids[i], keys[i].id_len, out[i].token), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(acemq_idem_is_confirmed(f->store, ids[i], keys[i].id_len), i % 7 == 0);
    close_fixture(f);
}

/* A new id's slot is written by the store's next operation that reads
 * slots, not by its own claim (memory_idem.c, flush_pending). Whatever comes
 * right after a claim must still see the id: another claim of it (a lookup),
 * a renew and an is_confirmed (lookups), a release (an unlink, which finds
 * the slot by its record), a claim that grows the table, and a confirm that
 * is not of the latest claim (a lookup again). Every operation meets the
 * one before in the one table. */
static void each_operation_after_a_claim_sees_its_id(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=2000");
    enum { N = 1500 }; /* a multiple of 4; the table doubles from 64 slots to 2,048 */
    static uint64_t token[N];
    acemq_claim c;
    for (int i = 0; i < N; i++) {
        assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
        token[i] = c.token;
        char id[ID_CAP];
        size_t len = id_of(i, id);
        switch (i % 4) {
        case 0:
            assert_int_equal(claim_n(f, i, &c), ACEMQ_IN_PROGRESS);
            break;
        case 1:
            assert_int_equal(acemq_idem_renew(f->store, id, len, token[i], 0), 0);
            assert_false(is_confirmed_n(f, i));
            break;
        case 2: /* released and claimed again: a new claim, a later token */
            assert_int_equal(release_n(f, i, token[i]), 0);
            assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
            assert_true(c.token > token[i]);
            token[i] = c.token;
            break;
        default: /* the previous id's confirm: not the latest claim */
            assert_int_equal(confirm_n(f, i - 1, token[i - 1]), 0);
            break;
        }
    }
    /* The ids released and claimed again were confirmed in the loop. */
    for (int i = 0; i < N; i++) {
        if (i % 4 != 2) assert_int_equal(confirm_n(f, i, token[i]), 0);
        assert_int_equal(claim_n(f, i, &c), ACEMQ_ALREADY_CONFIRMED);
    }
    acemq_idem_stats st;
    assert_int_equal(acemq_idem_stats_get(f->store, &st), 0);
    assert_int_equal(st.claimed, N + N / 4);
    assert_int_equal(st.releases, N / 4);
    close_fixture(f);
}

/* A purge finds nothing to look up first, so it is the unlink that must
 * write the latest claim's slot before it shifts the probe runs the purged
 * records leave (backward shift reads each slot's hash). Each round
 * confirms 60 ids, lets their retention run out, claims one
 * more id and purges at once: the new claim must stay held and findable,
 * the purged ids free. */
static void a_purge_right_after_a_claim_keeps_the_table_whole(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=2000");
    acemq_claim c;
    int next = 0;
    for (int round = 0; round < 20; round++) {
        int first = next;
        for (int k = 0; k < 60; k++, next++) {
            assert_int_equal(claim_n(f, next, &c), ACEMQ_CLAIMED);
            assert_int_equal(confirm_n(f, next, c.token), 0);
        }
        acemq_manual_clock_advance(f->clock, 61000); /* past retention (60 s) */
        int held = next++;
        assert_int_equal(claim_n(f, held, &c), ACEMQ_CLAIMED);
        uint64_t held_token = c.token;
        uint64_t purged = 0;
        assert_int_equal(acemq_idem_purge(f->store, &purged), 0);
        assert_int_equal(purged, 60);
        assert_int_equal(claim_n(f, held, &c), ACEMQ_IN_PROGRESS);
        for (int k = first; k < held; k++) {
            assert_int_equal(claim_n(f, k, &c), ACEMQ_CLAIMED);
            assert_int_equal(acemq_idem_release(f->store, "x", 1, 1), ACEMQ_ESTALE);
            assert_int_equal(release_n(f, k, c.token), 0);
        }
        assert_int_equal(is_confirmed_n(f, held), 0);
        assert_int_equal(claim_n(f, held, &c), ACEMQ_IN_PROGRESS);
        /* Released, so that the next round's purge has only its own 60. */
        assert_int_equal(release_n(f, held, held_token), 0);
    }
    close_fixture(f);
}

/* A confirm right after its claim is found through the store's latest
 * claim, not by hashing the id: that shortcut must take only the claim the
 * token and the id both name. Tokens are unique across the store. */
static void a_confirm_takes_only_its_own_claim(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=65536");
    acemq_claim a, b, probe;
    /* Another id, same length, with the latest claim's token. */
    assert_int_equal(acemq_idem_try_claim(f->store, "order-alpha", 11, NULL, &a), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(f->store, "order-alphb", 11, a.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "order-alpha", 11), 0);
    assert_int_equal(acemq_idem_try_claim(f->store, "order-alpha", 11, NULL, &probe),
                     ACEMQ_IN_PROGRESS);
    /* The right id with a token one off. */
    assert_int_equal(acemq_idem_confirm(f->store, "order-alpha", 11, a.token + 1), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(f->store, "order-alpha", 11, a.token), 0);
    /* Twice is not an error, and leaves one confirmed record. */
    assert_int_equal(acemq_idem_confirm(f->store, "order-alpha", 11, a.token), 0);
    /* Past its retention the record is forgotten: its token confirms
     * nothing, though the record is still the latest claim. */
    acemq_claim old;
    assert_int_equal(acemq_idem_try_claim(f->store, "order-omega", 11, NULL, &old), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(f->store, "order-omega", 11, old.token), 0);
    acemq_manual_clock_advance(f->clock, 61000); /* past the 60 s retention */
    assert_int_equal(acemq_idem_confirm(f->store, "order-omega", 11, old.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "order-omega", 11), 0);
    /* A released claim: its record is back on the free list, its token void. */
    assert_int_equal(acemq_idem_try_claim(f->store, "order-gamma", 11, NULL, &b), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_release(f->store, "order-gamma", 11, b.token), 0);
    assert_int_equal(acemq_idem_confirm(f->store, "order-gamma", 11, b.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "order-gamma", 11), 0);
    /* A taken-over claim: the old holder's token no longer confirms. */
    assert_int_equal(acemq_idem_try_claim(f->store, "order-delta", 11, NULL, &b), ACEMQ_CLAIMED);
    acemq_manual_clock_advance(f->clock, 2000); /* past the 1 s lease */
    assert_int_equal(acemq_idem_try_claim(f->store, "order-delta", 11, NULL, &probe),
                     ACEMQ_CLAIMED);
    assert_true(probe.token > b.token);
    assert_int_equal(acemq_idem_confirm(f->store, "order-delta", 11, b.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(f->store, "order-delta", 11, probe.token), 0);
    /* Tokens differ across the store, not only per id. */
    enum { N = 2000 };
    static uint64_t tokens[N];
    for (int i = 0; i < N; i++) {
        acemq_claim c;
        assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
        tokens[i] = c.token;
        if (i % 2) assert_int_equal(confirm_n(f, i, c.token), 0);
    }
    for (int i = 1; i < N; i++)
        for (int j = 0; j < i; j++)
            assert_true(tokens[i] != tokens[j]);
    /* The even ones, confirmed out of claim order, each by its own token. */
    for (int i = N - 2; i >= 0; i -= 2)
        assert_int_equal(confirm_n(f, i, tokens[i]), 0);
    acemq_idem_stats st;
    assert_int_equal(acemq_idem_stats_get(f->store, &st), 0);
    assert_int_equal(st.confirms, 2 + 1 + 1 + N);
    close_fixture(f);
}

/* The largest bound reserves address space for 2^30 records (64 GiB) and
 * commits only what claims use: it opens, works, and closes, here and under
 * the sanitizers. One past it is refused. */
static void the_largest_bound_opens_and_works(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=1073741824");
    claim_and_confirm_first(f, 5000);
    acemq_claim c;
    for (int i = 0; i < 5000; i++)
        assert_int_equal(claim_n(f, i, &c), ACEMQ_ALREADY_CONFIRMED);
    close_fixture(f);
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open(&h, "memory:?max_entries=1073741825", NULL), ACEMQ_EURL);
    assert_null(h);
}

static void url_errors(void **state)
{
    (void)state;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open(&h, "memory:?max_entries=0", NULL), ACEMQ_EURL);
    assert_int_equal(acemq_idem_open(&h, "memory:?max_entries=abc", NULL), ACEMQ_EURL);
    assert_int_equal(acemq_idem_open(&h, "memory:/some/path", NULL), ACEMQ_EURL);
    /* Tuning knobs are not part of the URL: a store sizes itself. */
    static const char *const gone[] = {"memory:?presize=1", "memory:?prefault_ahead=0",
                                       "memory:?max_load=7"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) {
        assert_int_equal(acemq_idem_open(&h, gone[i], NULL), ACEMQ_EURL);
        assert_non_null(strstr(acemq_idem_errmsg(NULL), "unknown URL parameter"));
    }
    assert_null(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bound_evicts_oldest_confirmed),
        cmocka_unit_test(live_claims_are_never_evicted),
        cmocka_unit_test(expired_confirmations_make_room_first),
        cmocka_unit_test(a_store_below_its_bound_forgets_no_confirmed_id),
        cmocka_unit_test(a_store_holds_live_claims_up_to_its_bound),
        cmocka_unit_test(at_the_bound_entries_go_in_the_documented_order),
        cmocka_unit_test(bound_holds),
        cmocka_unit_test(a_growing_table_stops_at_what_max_entries_needs),
        cmocka_unit_test(a_growing_store_faults_in_ahead),
        cmocka_unit_test(short_and_long_ids),
        cmocka_unit_test(reused_records_start_clean),
        cmocka_unit_test(batch_on_a_full_store),
        cmocka_unit_test(batch_across_growth),
        cmocka_unit_test(each_operation_after_a_claim_sees_its_id),
        cmocka_unit_test(a_purge_right_after_a_claim_keeps_the_table_whole),
        cmocka_unit_test(a_confirm_takes_only_its_own_claim),
        cmocka_unit_test(the_largest_bound_opens_and_works),
        cmocka_unit_test(url_errors),
    };
    return cmocka_run_group_tests_name("memory idem", tests, NULL, NULL);
}
