/* test_memory_idem.c — what only the memory backend does: its entry bound,
 * evictions and the refusal to drop a live claim. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"

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

static int claim_n(fixture *f, int i, acemq_claim *c)
{
    char id[32];
    int len = snprintf(id, sizeof id, "id-%d", i);
    return acemq_idem_try_claim(f->store, id, (size_t)len, NULL, c);
}

static int confirm_n(fixture *f, int i, uint64_t token)
{
    char id[32];
    int len = snprintf(id, sizeof id, "id-%d", i);
    return acemq_idem_confirm(f->store, id, (size_t)len, token);
}

/* Past the bound, the oldest confirmations go first, and are counted. */
static void bound_evicts_oldest_confirmed(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=10");
    acemq_claim c;
    for (int i = 0; i < 25; i++) {
        assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
        assert_int_equal(confirm_n(f, i, c.token), 0);
    }
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    assert_int_equal(s.evictions, 15);
    /* The newest ten are remembered, the oldest fifteen are not. */
    for (int i = 0; i < 25; i++) {
        char id[32];
        int len = snprintf(id, sizeof id, "id-%d", i);
        assert_int_equal(acemq_idem_is_confirmed(f->store, id, (size_t)len), i >= 15);
    }
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

/* A big store spreads over shards; the bound still holds in sum. */
static void sharded_bound_holds(void **state)
{
    (void)state;
    fixture *f = open_bounded("memory:?max_entries=65536");
    acemq_claim c;
    enum { N = 100000 };
    for (int i = 0; i < N; i++) {
        assert_int_equal(claim_n(f, i, &c), ACEMQ_CLAIMED);
        assert_int_equal(confirm_n(f, i, c.token), 0);
    }
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    assert_true(s.evictions >= N - 65536);
    int remembered = 0;
    for (int i = 0; i < N; i++) {
        char id[32];
        int len = snprintf(id, sizeof id, "id-%d", i);
        remembered += acemq_idem_is_confirmed(f->store, id, (size_t)len);
    }
    assert_int_equal(remembered, N - (int)s.evictions);
    assert_true(remembered <= 65536);
    close_fixture(f);
}

static void url_errors(void **state)
{
    (void)state;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open(&h, "memory:?max_entries=0", NULL), ACEMQ_EURL);
    assert_int_equal(acemq_idem_open(&h, "memory:?max_entries=abc", NULL), ACEMQ_EURL);
    assert_int_equal(acemq_idem_open(&h, "memory:/some/path", NULL), ACEMQ_EURL);
    assert_null(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bound_evicts_oldest_confirmed),
        cmocka_unit_test(live_claims_are_never_evicted),
        cmocka_unit_test(expired_confirmations_make_room_first),
        cmocka_unit_test(sharded_bound_holds),
        cmocka_unit_test(url_errors),
    };
    return cmocka_run_group_tests_name("memory idem", tests, NULL, NULL);
}
