/* test_idem_conformance.c — the idempotency store's contract, run against
 * every backend: `test_idem_conformance memory|sqlite|postgres|redis`.
 *
 * Time moves only through a manual clock; nothing sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"
#include "conformance/backends.h"
#include "conformance/idem_fixture.h"

#define LEASE 30000LL
#define RETENTION 3600000LL

static int setup(void **state)
{
    return open_fixture(state, LEASE, RETENTION);
}

static int try_claim(fixture *f, const char *id, acemq_claim *c)
{
    return acemq_idem_try_claim(f->store, id, strlen(id), NULL, c);
}

static void advance(fixture *f, int64_t ms)
{
    acemq_manual_clock_advance(f->clock, ms);
}

static acemq_idem_stats stats(fixture *f)
{
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    return s;
}

/* The three answers, and that only a confirmation makes a duplicate. */
static void three_results(void **state)
{
    fixture *f = *state;
    acemq_claim c, c2;
    assert_int_equal(try_claim(f, "order-1", &c), ACEMQ_CLAIMED);
    assert_true(c.token > 0);
    assert_int_equal(c.lease_until_ms, T0 + LEASE);
    assert_int_equal(c.takeover, 0);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "order-1", 7), 0);

    assert_int_equal(try_claim(f, "order-1", &c2), ACEMQ_IN_PROGRESS);
    assert_int_equal(c2.lease_until_ms, T0 + LEASE);

    assert_int_equal(acemq_idem_confirm(f->store, "order-1", 7, c.token), 0);
    assert_int_equal(try_claim(f, "order-1", &c2), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(c2.has_result, 0);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "order-1", 7), 1);

    /* Another id is untouched by all of this. */
    assert_int_equal(try_claim(f, "order-2", &c2), ACEMQ_CLAIMED);
    assert_true(c2.token > 0);

    acemq_idem_stats s = stats(f);
    assert_int_equal(s.claimed, 2);
    assert_int_equal(s.in_progress, 1);
    assert_int_equal(s.duplicates, 1);
    assert_int_equal(s.confirms, 1);
    assert_string_equal(acemq_claim_status_name(ACEMQ_IN_PROGRESS), "IN_PROGRESS");
}

/* The two-state form keeps the seed's boolean claim. */
static void boolean_claim(void **state)
{
    fixture *f = *state;
    uint64_t token = 0, other = 0;
    assert_int_equal(acemq_idem_claim(f->store, "b", 1, &token), 1);
    assert_true(token > 0);
    assert_int_equal(acemq_idem_claim(f->store, "b", 1, &other), 0);
    assert_int_equal(other, 0);
    assert_int_equal(acemq_idem_confirm(f->store, "b", 1, token), 0);
    assert_int_equal(acemq_idem_claim(f->store, "b", 1, &other), 0);
}

/* A holder that died stops blocking when its lease runs out, and its stale
 * token can then change nothing. */
static void lease_expiry_and_takeover(void **state)
{
    fixture *f = *state;
    acemq_claim first, c;
    assert_int_equal(try_claim(f, "m", &first), ACEMQ_CLAIMED);
    advance(f, LEASE - 1);
    assert_int_equal(try_claim(f, "m", &c), ACEMQ_IN_PROGRESS);
    advance(f, 1);
    assert_int_equal(try_claim(f, "m", &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 1);
    assert_true(c.token > first.token);
    assert_int_equal(c.lease_until_ms, T0 + 2 * LEASE);

    assert_int_equal(acemq_idem_confirm(f->store, "m", 1, first.token), ACEMQ_ESTALE);
    assert_true(strlen(acemq_idem_errmsg(f->store)) > 0);
    assert_int_equal(acemq_idem_release(f->store, "m", 1, first.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_renew(f->store, "m", 1, first.token, 0), ACEMQ_ESTALE);
    /* The stale calls changed nothing: the new holder still holds it. */
    acemq_claim probe;
    assert_int_equal(try_claim(f, "m", &probe), ACEMQ_IN_PROGRESS);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "m", 1), 0);

    assert_int_equal(acemq_idem_confirm(f->store, "m", 1, c.token), 0);
    assert_int_equal(try_claim(f, "m", &probe), ACEMQ_ALREADY_CONFIRMED);
    acemq_idem_stats s = stats(f);
    assert_int_equal(s.takeovers, 1);
    assert_int_equal(s.stale_tokens, 3);
    assert_int_equal(s.claimed, 2);
}

/* A lease taken per claim overrides the store's default. */
static void per_claim_lease(void **state)
{
    fixture *f = *state;
    acemq_claim_opts o = {.lease_ms = 500};
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(f->store, "p", 1, &o, &c), ACEMQ_CLAIMED);
    assert_int_equal(c.lease_until_ms, T0 + 500);
    advance(f, 500);
    assert_int_equal(try_claim(f, "p", &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 1);
}

/* Renew pushes the lease out; the token keeps fencing. */
static void renew_extends_lease(void **state)
{
    fixture *f = *state;
    acemq_claim c, probe;
    assert_int_equal(try_claim(f, "r", &c), ACEMQ_CLAIMED);
    advance(f, LEASE - 10);
    assert_int_equal(acemq_idem_renew(f->store, "r", 1, c.token, 1000), 0);
    advance(f, 999);
    assert_int_equal(try_claim(f, "r", &probe), ACEMQ_IN_PROGRESS);
    assert_int_equal(probe.lease_until_ms, T0 + LEASE - 10 + 1000);
    advance(f, 1);
    assert_int_equal(try_claim(f, "r", &probe), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_renew(f->store, "r", 1, c.token, 1000), ACEMQ_ESTALE);
    assert_int_equal(stats(f).renewals, 1);
}

/* Release hands the id back; the old token stays dead. */
static void release_then_reclaim(void **state)
{
    fixture *f = *state;
    acemq_claim c, c2;
    assert_int_equal(try_claim(f, "x", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_release(f->store, "x", 1, c.token), 0);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "x", 1), 0);
    assert_int_equal(try_claim(f, "x", &c2), ACEMQ_CLAIMED);
    assert_int_equal(c2.takeover, 0);
    assert_true(c2.token > c.token);
    assert_int_equal(acemq_idem_release(f->store, "x", 1, c.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(f->store, "x", 1, c.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(f->store, "x", 1, c2.token), 0);
    /* A confirmed id cannot be released back into play. */
    assert_int_equal(acemq_idem_release(f->store, "x", 1, c2.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "x", 1), 1);
    assert_int_equal(stats(f).releases, 1);
}

/* The token fences, not the clock: a slow holder that nobody overtook may
 * still finish; confirming twice is harmless; confirming what was never
 * claimed is refused. */
static void confirm_edges(void **state)
{
    fixture *f = *state;
    acemq_claim c;
    assert_int_equal(try_claim(f, "slow", &c), ACEMQ_CLAIMED);
    advance(f, LEASE * 3);
    assert_int_equal(acemq_idem_confirm(f->store, "slow", 4, c.token), 0);
    assert_int_equal(acemq_idem_confirm(f->store, "slow", 4, c.token), 0);
    assert_int_equal(acemq_idem_confirm(f->store, "slow", 4, c.token + 1), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(f->store, "never", 5, 1), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_release(f->store, "never", 5, 1), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_renew(f->store, "never", 5, 1, 0), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "never", 5), 0);
}

/* Confirmed ids are remembered for the retention, then forgotten; purge
 * removes them and claims abandoned for longer than the retention. */
static void retention_and_purge(void **state)
{
    fixture *f = *state;
    acemq_claim a, b, c, probe;
    assert_int_equal(try_claim(f, "a", &a), ACEMQ_CLAIMED);
    assert_int_equal(try_claim(f, "b", &b), ACEMQ_CLAIMED);
    assert_int_equal(try_claim(f, "abandoned", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(f->store, "a", 1, a.token), 0);
    assert_int_equal(acemq_idem_confirm(f->store, "b", 1, b.token), 0);

    uint64_t purged = 99;
    assert_int_equal(acemq_idem_purge(f->store, &purged), 0);
    assert_int_equal(purged, 0);

    advance(f, RETENTION - 1);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "a", 1), 1);
    assert_int_equal(try_claim(f, "a", &probe), ACEMQ_ALREADY_CONFIRMED);
    advance(f, 1);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "a", 1), 0);

    advance(f, LEASE); /* the abandoned claim is now idle for a whole retention */
    assert_int_equal(acemq_idem_purge(f->store, &purged), 0);
    assert_int_equal(purged, 3);
    assert_int_equal(stats(f).expirations, 3);
    assert_int_equal(acemq_idem_purge(f->store, &purged), 0);
    assert_int_equal(purged, 0);

    /* Forgotten means new again, with a token larger than any before. */
    assert_int_equal(try_claim(f, "a", &probe), ACEMQ_CLAIMED);
    assert_int_equal(probe.takeover, 0);
    assert_true(probe.token > a.token);
    assert_int_equal(acemq_idem_confirm(f->store, "abandoned", 9, c.token), ACEMQ_ESTALE);
}

/* A token never comes back for its id, even after the id was forgotten:
 * three claims in one millisecond, a purge once the retention (1 ms) ran
 * out, then a new claim. The old holders' calls change nothing. */
static int setup_short_retention(void **state)
{
    return open_fixture(state, LEASE, 1);
}

static void forgotten_tokens_stay_dead(void **state)
{
    fixture *f = *state;
    uint64_t old[3];
    acemq_claim c;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(try_claim(f, "p", &c), ACEMQ_CLAIMED);
        old[i] = c.token;
        assert_int_equal(acemq_idem_release(f->store, "p", 1, c.token), 0);
    }
    advance(f, 1);
    uint64_t purged = 0;
    assert_int_equal(acemq_idem_purge(f->store, &purged), 0);
    assert_int_equal(try_claim(f, "p", &c), ACEMQ_CLAIMED);
    for (int i = 0; i < 3; i++) {
        if (c.token == old[i]) fail_msg("token %llu issued twice", (unsigned long long)c.token);
        assert_int_equal(acemq_idem_confirm(f->store, "p", 1, old[i]), ACEMQ_ESTALE);
        assert_int_equal(acemq_idem_release(f->store, "p", 1, old[i]), ACEMQ_ESTALE);
        assert_int_equal(acemq_idem_renew(f->store, "p", 1, old[i], 0), ACEMQ_ESTALE);
    }
    acemq_claim probe;
    assert_int_equal(try_claim(f, "p", &probe), ACEMQ_IN_PROGRESS);
    assert_int_equal(acemq_idem_confirm(f->store, "p", 1, c.token), 0);
}

/* A confirmation past its retention reads as new even before a purge. */
static void expired_confirmation_is_new(void **state)
{
    fixture *f = *state;
    acemq_claim c, again;
    assert_int_equal(try_claim(f, "e", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(f->store, "e", 1, c.token), 0);
    advance(f, RETENTION);
    assert_int_equal(try_claim(f, "e", &again), ACEMQ_CLAIMED);
    assert_true(again.token > c.token);
    assert_int_equal(acemq_idem_confirm(f->store, "e", 1, c.token), ACEMQ_ESTALE);
}

/* Bytes given at confirm come back to the duplicate. */
static void stored_result(void **state)
{
    fixture *f = *state;
    acemq_claim c;
    assert_int_equal(try_claim(f, "s", &c), ACEMQ_CLAIMED);
    static const char reply[] = "{\"order\":42,\"status\":\"ok\"}\0tail";
    assert_int_equal(acemq_idem_confirm_result(f->store, "s", 1, c.token, reply, sizeof reply - 1),
                     0);

    char buf[128];
    memset(buf, 'z', sizeof buf);
    acemq_claim_opts o = {.result_buf = buf, .result_cap = sizeof buf};
    assert_int_equal(acemq_idem_try_claim(f->store, "s", 1, &o, &c), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(c.has_result, 1);
    assert_int_equal(c.result_len, sizeof reply - 1);
    assert_memory_equal(buf, reply, sizeof reply - 1);

    /* Too small a buffer: a truncated copy and the full length. */
    char small[4];
    acemq_claim_opts so = {.result_buf = small, .result_cap = sizeof small};
    assert_int_equal(acemq_idem_try_claim(f->store, "s", 1, &so, &c), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(c.result_len, sizeof reply - 1);
    assert_memory_equal(small, reply, sizeof small);

    /* No buffer: told there is a result and how long. */
    assert_int_equal(try_claim(f, "s", &c), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(c.has_result, 1);
    assert_int_equal(c.result_len, sizeof reply - 1);

    /* Largest allowed result round-trips; one byte more is refused. */
    static unsigned char big[ACEMQ_IDEM_RESULT_MAX + 1];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (unsigned char)(i * 7);
    assert_int_equal(try_claim(f, "big", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm_result(f->store, "big", 3, c.token, big, sizeof big),
                     ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "big", 3), 0);
    assert_int_equal(
        acemq_idem_confirm_result(f->store, "big", 3, c.token, big, ACEMQ_IDEM_RESULT_MAX), 0);
    static unsigned char back[ACEMQ_IDEM_RESULT_MAX];
    acemq_claim_opts bo = {.result_buf = back, .result_cap = sizeof back};
    assert_int_equal(acemq_idem_try_claim(f->store, "big", 3, &bo, &c), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(c.result_len, ACEMQ_IDEM_RESULT_MAX);
    assert_memory_equal(back, big, ACEMQ_IDEM_RESULT_MAX);
}

/* One id, two payloads: the second is refused, and changes nothing. */
static void fingerprint_mismatch(void **state)
{
    fixture *f = *state;
    acemq_claim_opts fa = {.fingerprint = "sha-A", .fingerprint_len = 5};
    acemq_claim_opts fb = {.fingerprint = "sha-B", .fingerprint_len = 5};
    acemq_claim c, probe;
    assert_int_equal(acemq_idem_try_claim(f->store, "f", 1, &fa, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_try_claim(f->store, "f", 1, &fb, &probe), ACEMQ_EMISMATCH);
    assert_int_equal(acemq_idem_try_claim(f->store, "f", 1, &fa, &probe), ACEMQ_IN_PROGRESS);
    assert_int_equal(acemq_idem_try_claim(f->store, "f", 1, NULL, &probe), ACEMQ_IN_PROGRESS);
    assert_int_equal(acemq_idem_confirm(f->store, "f", 1, c.token), 0);
    assert_int_equal(acemq_idem_try_claim(f->store, "f", 1, &fb, &probe), ACEMQ_EMISMATCH);
    assert_int_equal(acemq_idem_try_claim(f->store, "f", 1, &fa, &probe), ACEMQ_ALREADY_CONFIRMED);
    /* Same prefix, different length is a different fingerprint. */
    acemq_claim_opts flong = {.fingerprint = "sha-A2", .fingerprint_len = 6};
    assert_int_equal(acemq_idem_try_claim(f->store, "f", 1, &flong, &probe), ACEMQ_EMISMATCH);
    assert_int_equal(stats(f).mismatches, 3);

    /* An expired lease is still the same message: a new payload is refused. */
    assert_int_equal(acemq_idem_try_claim(f->store, "g", 1, &fa, &c), ACEMQ_CLAIMED);
    advance(f, LEASE);
    assert_int_equal(acemq_idem_try_claim(f->store, "g", 1, &fb, &probe), ACEMQ_EMISMATCH);
    assert_int_equal(acemq_idem_try_claim(f->store, "g", 1, &fa, &probe), ACEMQ_CLAIMED);
    assert_int_equal(probe.takeover, 1);
}

/* A forgotten confirmation keeps nothing of its past, fingerprint included. */
static void forgotten_fingerprint(void **state)
{
    fixture *f = *state;
    acemq_claim_opts fa = {.fingerprint = "sha-A", .fingerprint_len = 5};
    acemq_claim_opts fb = {.fingerprint = "sha-B", .fingerprint_len = 5};
    acemq_claim c, probe;
    assert_int_equal(acemq_idem_try_claim(f->store, "h", 1, &fa, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(f->store, "h", 1, c.token), 0);
    advance(f, RETENTION);
    assert_int_equal(acemq_idem_try_claim(f->store, "h", 1, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_try_claim(f->store, "h", 1, &fb, &probe), ACEMQ_IN_PROGRESS);
    assert_int_equal(stats(f).mismatches, 0);
}

/* Bad input gets ACEMQ_EINVAL with a message, and writes nothing. */
static void bad_input(void **state)
{
    fixture *f = *state;
    acemq_claim c;
    uint64_t t = 1;
    static char longest[ACEMQ_IDEM_ID_MAX + 1];
    memset(longest, 'k', sizeof longest);

    assert_int_equal(acemq_idem_try_claim(f->store, NULL, 3, NULL, &c), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "NULL"));
    assert_int_equal(acemq_idem_try_claim(f->store, "abc", 0, NULL, &c), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "empty"));
    assert_int_equal(acemq_idem_try_claim(f->store, longest, sizeof longest, NULL, &c),
                     ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "at most"));
    assert_int_equal(acemq_idem_try_claim(f->store, "abc", 3, NULL, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_try_claim(NULL, "abc", 3, NULL, &c), ACEMQ_EINVAL);

    acemq_claim_opts neg = {.lease_ms = -5};
    assert_int_equal(acemq_idem_try_claim(f->store, "abc", 3, &neg, &c), ACEMQ_EINVAL);
    char fp[ACEMQ_IDEM_FINGERPRINT_MAX + 1] = {0};
    acemq_claim_opts longfp = {.fingerprint = fp, .fingerprint_len = sizeof fp};
    assert_int_equal(acemq_idem_try_claim(f->store, "abc", 3, &longfp, &c), ACEMQ_EINVAL);
    acemq_claim_opts nullfp = {.fingerprint = NULL, .fingerprint_len = 4};
    assert_int_equal(acemq_idem_try_claim(f->store, "abc", 3, &nullfp, &c), ACEMQ_EINVAL);
    acemq_claim_opts nullbuf = {.result_buf = NULL, .result_cap = 8};
    assert_int_equal(acemq_idem_try_claim(f->store, "abc", 3, &nullbuf, &c), ACEMQ_EINVAL);

    assert_int_equal(acemq_idem_confirm(f->store, NULL, 1, t), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_release(f->store, "", 0, t), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_renew(f->store, "abc", 3, t, -1), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_is_confirmed(f->store, longest, sizeof longest), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_confirm_result(f->store, "abc", 3, t, NULL, 5), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_stats_get(f->store, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_purge(NULL, NULL), ACEMQ_EINVAL);

    /* None of it wrote anything: "abc" is still new. */
    assert_int_equal(acemq_idem_try_claim(f->store, "abc", 3, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(stats(f).claimed, 1);

    /* The longest id allowed works. */
    assert_int_equal(acemq_idem_try_claim(f->store, longest, ACEMQ_IDEM_ID_MAX, NULL, &c),
                     ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(f->store, longest, ACEMQ_IDEM_ID_MAX, c.token), 0);
    assert_int_equal(acemq_idem_is_confirmed(f->store, longest, ACEMQ_IDEM_ID_MAX), 1);
    assert_int_equal(acemq_idem_is_confirmed(f->store, longest, ACEMQ_IDEM_ID_MAX - 1), 0);
}

/* Ids are bytes: NUL, quotes and high bytes are kept verbatim and distinct. */
static void binary_ids(void **state)
{
    fixture *f = *state;
    static const char *const ids[] = {"a",
                                      "a\0",
                                      "a\0b",
                                      "a\0c",
                                      "'; DROP TABLE acemq_idem;--",
                                      "\"quoted\"",
                                      "\xff\xfe\x00\x01",
                                      "%s%n",
                                      "\\"};
    static const size_t lens[] = {1, 2, 3, 3, 27, 8, 4, 4, 1};
    uint64_t tokens[9];
    for (int i = 0; i < 9; i++) {
        acemq_claim c;
        assert_int_equal(acemq_idem_try_claim(f->store, ids[i], lens[i], NULL, &c), ACEMQ_CLAIMED);
        tokens[i] = c.token;
    }
    for (int i = 0; i < 9; i += 2)
        assert_int_equal(acemq_idem_confirm(f->store, ids[i], lens[i], tokens[i]), 0);
    for (int i = 0; i < 9; i++) {
        acemq_claim c;
        int expect = i % 2 == 0 ? ACEMQ_ALREADY_CONFIRMED : ACEMQ_IN_PROGRESS;
        assert_int_equal(acemq_idem_try_claim(f->store, ids[i], lens[i], NULL, &c), expect);
        assert_int_equal(acemq_idem_is_confirmed(f->store, ids[i], lens[i]), i % 2 == 0);
    }
}

/* Enough ids to make every table grow, each one answered right afterwards. */
static void many_ids(void **state)
{
    fixture *f = *state;
    enum { N = 5000 };
    char id[32];
    for (int i = 0; i < N; i++) {
        acemq_claim c;
        int n = snprintf(id, sizeof id, "order-%06d", i);
        assert_int_equal(acemq_idem_try_claim(f->store, id, (size_t)n, NULL, &c), ACEMQ_CLAIMED);
        if (i % 3 != 0) assert_int_equal(acemq_idem_confirm(f->store, id, (size_t)n, c.token), 0);
    }
    for (int i = 0; i < N; i++) {
        acemq_claim c;
        int n = snprintf(id, sizeof id, "order-%06d", i);
        int expect = i % 3 != 0 ? ACEMQ_ALREADY_CONFIRMED : ACEMQ_IN_PROGRESS;
        assert_int_equal(acemq_idem_try_claim(f->store, id, (size_t)n, NULL, &c), expect);
    }
    acemq_idem_stats s = stats(f);
    assert_int_equal(s.claimed, N);
    assert_int_equal(s.evictions, 0);
}

/* ---------------------------------------------------------- try_claim_many */

static acemq_idem_key key(const char *id)
{
    acemq_idem_key k = {id, id ? strlen(id) : 0};
    return k;
}

/* A batch that meets every kind of id at once: new, confirmed (with a stored
 * result), held, held past its lease, reused with another payload, and bad.
 * Each answer is the one try_claim would give, and a bad element does not
 * stop the others. */
static void batch_mixed(void **state)
{
    fixture *f = *state;
    acemq_claim c, held, stale;
    assert_int_equal(try_claim(f, "done", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm_result(f->store, "done", 4, c.token, "ok", 2), 0);
    assert_int_equal(try_claim(f, "expired", &stale), ACEMQ_CLAIMED);
    advance(f, LEASE);
    assert_int_equal(try_claim(f, "held", &held), ACEMQ_CLAIMED);
    acemq_claim_opts fa = {.fingerprint = "sha-A", .fingerprint_len = 5};
    acemq_claim_opts fb = {.fingerprint = "sha-B", .fingerprint_len = 5};
    assert_int_equal(acemq_idem_try_claim(f->store, "fp", 2, &fa, &c), ACEMQ_CLAIMED);
    acemq_idem_stats before = stats(f);

    static char longest[ACEMQ_IDEM_ID_MAX + 1];
    memset(longest, 'k', sizeof longest);
    char buf[8] = {0};
    enum { N = 10 };
    acemq_idem_key keys[N] = {key("new-1"),   key("done"), key("held"),  key(NULL),
                              key("expired"), key("fp"),   key("new-2"), key("new-3"),
                              key("new-4"),   key("new-5")};
    keys[7].id_len = 0;   /* empty */
    keys[8].id = longest; /* too long */
    keys[8].id_len = sizeof longest;
    acemq_claim_opts opts[N];
    memset(opts, 0, sizeof opts);
    opts[1].result_buf = buf;
    opts[1].result_cap = sizeof buf;
    opts[5] = fb;
    opts[9].lease_ms = -1; /* bad options fail that element alone */
    acemq_claim out[N];
    int st[N];
    memset(out, 0x5a, sizeof out);
    int rc = acemq_idem_try_claim_many(f->store, N, keys, opts, out, st);
    assert_int_equal(rc, 3); /* new-1, expired (taken over), new-2 */

    assert_int_equal(st[0], ACEMQ_CLAIMED);
    assert_true(out[0].token > 0);
    assert_int_equal(out[0].lease_until_ms, T0 + 2 * LEASE);
    assert_int_equal(out[0].takeover, 0);
    assert_int_equal(st[1], ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(out[1].has_result, 1);
    assert_int_equal(out[1].result_len, 2);
    assert_memory_equal(buf, "ok", 2);
    assert_int_equal(st[2], ACEMQ_IN_PROGRESS);
    assert_int_equal(out[2].lease_until_ms, held.lease_until_ms);
    assert_int_equal(out[2].token, 0);
    assert_int_equal(st[3], ACEMQ_EINVAL);
    assert_int_equal(st[4], ACEMQ_CLAIMED);
    assert_int_equal(out[4].takeover, 1);
    assert_true(out[4].token > stale.token);
    assert_int_equal(st[5], ACEMQ_EMISMATCH);
    assert_int_equal(st[6], ACEMQ_CLAIMED);
    assert_int_equal(st[7], ACEMQ_EINVAL);
    assert_int_equal(st[8], ACEMQ_EINVAL);
    assert_int_equal(st[9], ACEMQ_EINVAL);
    /* Errors leave their out zeroed, as try_claim does. */
    acemq_claim zero;
    memset(&zero, 0, sizeof zero);
    assert_memory_equal(&out[3], &zero, sizeof zero);
    assert_memory_equal(&out[9], &zero, sizeof zero);
    assert_true(strlen(acemq_idem_errmsg(f->store)) > 0);

    acemq_idem_stats s = stats(f);
    assert_int_equal(s.claimed - before.claimed, 3);
    assert_int_equal(s.takeovers - before.takeovers, 1);
    assert_int_equal(s.duplicates - before.duplicates, 1);
    assert_int_equal(s.in_progress - before.in_progress, 1);
    assert_int_equal(s.mismatches - before.mismatches, 1);
    assert_int_equal(s.errors - before.errors, 0); /* bad input is not counted */

    /* The bad elements wrote nothing; new-5 (bad options) is still new. */
    assert_int_equal(try_claim(f, "new-5", &c), ACEMQ_CLAIMED);
    assert_int_equal(try_claim(f, "new-1", &c), ACEMQ_IN_PROGRESS);
    /* The stale holder of "expired" was fenced off by the batch's takeover. */
    assert_int_equal(acemq_idem_confirm(f->store, "expired", 7, stale.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(f->store, "expired", 7, out[4].token), 0);
}

/* An id twice (or more) in one batch behaves as calls in a row: the first
 * claims it, the later ones find it held; across the store's internal
 * groups (16) and the core's chunks (64) too. */
static void batch_duplicates(void **state)
{
    fixture *f = *state;
    enum { N = 150 };
    char ids[N][16];
    acemq_idem_key keys[N];
    for (int i = 0; i < N; i++) {
        /* i and i + 70 name the same id: pairs inside one group, across
         * groups and across chunks; and 3 names it thrice. */
        int n = snprintf(ids[i], sizeof ids[i], "dup-%d", i >= 70 ? i - 70 : i);
        if (i == 149) n = snprintf(ids[i], sizeof ids[i], "dup-3");
        keys[i].id = ids[i];
        keys[i].id_len = (size_t)n;
    }
    keys[1] = keys[0]; /* side by side */
    acemq_claim out[N];
    int st[N];
    int rc = acemq_idem_try_claim_many(f->store, N, keys, NULL, out, st);
    int claimed = 0;
    for (int i = 0; i < N; i++) {
        int first = 1;
        for (int j = 0; j < i; j++)
            if (keys[j].id_len == keys[i].id_len &&
                memcmp(keys[j].id, keys[i].id, keys[i].id_len) == 0)
                first = 0;
        if (first) {
            assert_int_equal(st[i], ACEMQ_CLAIMED);
            claimed++;
        } else {
            assert_int_equal(st[i], ACEMQ_IN_PROGRESS);
            assert_int_equal(out[i].token, 0);
            assert_int_equal(out[i].lease_until_ms, T0 + LEASE);
        }
    }
    assert_int_equal(rc, claimed);
    acemq_idem_stats s = stats(f);
    assert_int_equal(s.claimed, (uint64_t)claimed);
    assert_int_equal(s.in_progress, (uint64_t)(N - claimed));

    /* Every claimed id confirms with its token; a second batch then finds
     * them all confirmed. */
    for (int i = 0; i < N; i++)
        if (st[i] == ACEMQ_CLAIMED)
            assert_int_equal(acemq_idem_confirm(f->store, keys[i].id, keys[i].id_len, out[i].token),
                             0);
    rc = acemq_idem_try_claim_many(f->store, N, keys, NULL, out, st);
    assert_int_equal(rc, 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], ACEMQ_ALREADY_CONFIRMED);
}

/* Tokens from a batch fence as try_claim's do. */
static void batch_tokens_fence(void **state)
{
    fixture *f = *state;
    acemq_idem_key keys[3] = {key("t1"), key("t2"), key("t3")};
    acemq_claim out[3], again[3];
    int st[3];
    assert_int_equal(acemq_idem_try_claim_many(f->store, 3, keys, NULL, out, st), 3);
    /* Another id's token is not this id's claim (tokens may be per id, so
     * only where the two differ). */
    uint64_t stale_expected = 2;
    if (out[0].token != out[1].token) {
        assert_int_equal(acemq_idem_confirm(f->store, "t1", 2, out[1].token), ACEMQ_ESTALE);
        stale_expected++;
    }
    assert_int_equal(acemq_idem_confirm(f->store, "t1", 2, out[0].token), 0);
    assert_int_equal(acemq_idem_release(f->store, "t2", 2, out[1].token), 0);
    advance(f, LEASE); /* t3's lease runs out */
    assert_int_equal(acemq_idem_try_claim_many(f->store, 3, keys, NULL, again, st), 2);
    assert_int_equal(st[0], ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(st[1], ACEMQ_CLAIMED);
    assert_int_equal(again[1].takeover, 0);
    assert_true(again[1].token > out[1].token);
    assert_int_equal(st[2], ACEMQ_CLAIMED);
    assert_int_equal(again[2].takeover, 1);
    assert_true(again[2].token > out[2].token);
    assert_int_equal(acemq_idem_confirm(f->store, "t2", 2, out[1].token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_renew(f->store, "t3", 2, out[2].token, 0), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(f->store, "t3", 2, again[2].token), 0);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "t3", 2), 1);
    assert_int_equal(stats(f).stale_tokens, stale_expected);
}

/* One script of calls, played on a fresh store through try_claim and on
 * another through try_claim_many: the same answers and the same counters. */
static void play(fixture *f, int batched, int *st, acemq_claim *out)
{
    static const char *const script[3][6] = {
        {"a", "b", "c", "a", "d", "e"},
        {"a", "b", "c", "f", "b", "g"},
        {"c", "d", "a", "h", "h", "e"},
    };
    acemq_claim_opts fp1 = {.fingerprint = "1", .fingerprint_len = 1};
    acemq_claim_opts fp2 = {.fingerprint = "2", .fingerprint_len = 1};
    acemq_claim_opts opts[6];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 6; i++)
            opts[i] = (i + round) % 3 == 0   ? fp1
                      : (i + round) % 3 == 1 ? fp2
                                             : (acemq_claim_opts){0};
        int *rs = st + (size_t)round * 6;
        acemq_claim *ro = out + (size_t)round * 6;
        if (batched) {
            acemq_idem_key keys[6];
            for (int i = 0; i < 6; i++)
                keys[i] = key(script[round][i]);
            int rc = acemq_idem_try_claim_many(f->store, 6, keys, opts, ro, rs);
            int claimed = 0;
            for (int i = 0; i < 6; i++)
                claimed += rs[i] == ACEMQ_CLAIMED;
            assert_int_equal(rc, claimed);
        } else {
            for (int i = 0; i < 6; i++)
                rs[i] = acemq_idem_try_claim(f->store, script[round][i], 1, &opts[i], &ro[i]);
        }
        /* Between rounds: confirm the first claimed, release the second,
         * let the rest hold; then move time past the lease on round 1. */
        int seen = 0;
        for (int i = 0; i < 6; i++) {
            if (rs[i] != ACEMQ_CLAIMED) continue;
            if (seen == 0)
                assert_int_equal(acemq_idem_confirm(f->store, script[round][i], 1, ro[i].token), 0);
            else if (seen == 1)
                assert_int_equal(acemq_idem_release(f->store, script[round][i], 1, ro[i].token), 0);
            seen++;
        }
        if (round == 1) advance(f, LEASE);
    }
}

static void batch_equals_calls(void **state)
{
    fixture *f = *state;
    void *other_state = NULL;
    assert_int_equal(setup(&other_state), 0);
    fixture *g = other_state;
    int st_calls[18], st_batch[18];
    acemq_claim o_calls[18], o_batch[18];
    play(f, 0, st_calls, o_calls);
    play(g, 1, st_batch, o_batch);
    for (int i = 0; i < 18; i++) {
        assert_int_equal(st_batch[i], st_calls[i]);
        assert_int_equal(o_batch[i].lease_until_ms, o_calls[i].lease_until_ms);
        assert_int_equal(o_batch[i].takeover, o_calls[i].takeover);
        assert_int_equal(o_batch[i].token != 0, o_calls[i].token != 0);
    }
    acemq_idem_stats a = stats(f), b = stats(g);
    assert_memory_equal(&a, &b, sizeof a);
    assert_true(a.claimed > 0 && a.in_progress > 0 && a.mismatches > 0 && a.takeovers > 0);
    teardown(&other_state);
}

/* Opening: bad URLs and options are refused with a reason. */
static void open_errors(void **state)
{
    (void)state;
    acemq_idem *h = (acemq_idem *)1;
    assert_int_equal(acemq_idem_open(&h, "nosuch:x", NULL), ACEMQ_EURL);
    assert_null(h);
    /* The handle is gone, so the reason is kept per thread. */
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "nosuch"));
    assert_int_equal(acemq_idem_open(&h, "no-colon", NULL), ACEMQ_EURL);
    assert_int_equal(acemq_idem_open(&h, NULL, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_open(NULL, "memory:", NULL), ACEMQ_EINVAL);
    char url[512];
    assert_int_equal(test_backend_fresh_url(backend, url, sizeof url), 0);
    char bad[600];
    snprintf(bad, sizeof bad, "%s%sno_such_param=1", url, strchr(url, '?') ? "&" : "?");
    assert_int_equal(acemq_idem_open(&h, bad, NULL), ACEMQ_EURL);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "no_such_param"));
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.lease_ms = 0;
    assert_int_equal(acemq_idem_open(&h, url, &o), ACEMQ_EINVAL);
    acemq_idem_options_init(&o);
    o.retention_ms = -1;
    assert_int_equal(acemq_idem_open(&h, url, &o), ACEMQ_EINVAL);
    acemq_idem_options_init(&o);
    o.flags = 0x80;
    assert_int_equal(acemq_idem_open(&h, url, &o), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "flags"));
    /* Joining the caller's transaction needs a caller's connection. */
    acemq_idem_options_init(&o);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    assert_int_equal(acemq_idem_open(&h, url, &o), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "CONFIRM_IN_CALLER_TX"));
    /* Defaults work and close accepts NULL. */
    assert_int_equal(acemq_idem_open(&h, url, NULL), 0);
    acemq_idem_close(h);
    acemq_idem_close(NULL);
}

int main(int argc, char **argv)
{
    backend = test_backend_from_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(three_results, setup, teardown),
        cmocka_unit_test_setup_teardown(boolean_claim, setup, teardown),
        cmocka_unit_test_setup_teardown(lease_expiry_and_takeover, setup, teardown),
        cmocka_unit_test_setup_teardown(per_claim_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(renew_extends_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(release_then_reclaim, setup, teardown),
        cmocka_unit_test_setup_teardown(confirm_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(retention_and_purge, setup, teardown),
        cmocka_unit_test_setup_teardown(expired_confirmation_is_new, setup, teardown),
        cmocka_unit_test_setup_teardown(forgotten_tokens_stay_dead, setup_short_retention,
                                        teardown),
        cmocka_unit_test_setup_teardown(stored_result, setup, teardown),
        cmocka_unit_test_setup_teardown(fingerprint_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(forgotten_fingerprint, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(binary_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(many_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_mixed, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_duplicates, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_tokens_fence, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_equals_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_bad_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(confirm_many_equals_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(confirm_many_large, setup, teardown),
        cmocka_unit_test(open_errors),
    };
    char name[64];
    snprintf(name, sizeof name, "idem conformance (%s)", backend);
    return cmocka_run_group_tests_name(name, tests, NULL, NULL);
}
