/* test_idem_admin.c — the operator's calls, run against every backend:
 * `test_idem_admin memory|sqlite|postgres|redis`. acemq_idem_counts_get,
 * acemq_idem_inspect and acemq_idem_forget answer what the claims, confirms
 * and releases before them left, and a forgotten id is processed again.
 *
 * A store may drop a released claim or a confirmation past its retention at
 * once (memory, Redis) or keep it until purge (SQLite, PostgreSQL); the
 * tests accept either, and nothing else. Time moves only through a manual
 * clock. */
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
#define RETENTION 10000LL

static int setup(void **state)
{
    return open_fixture(state, LEASE, RETENTION);
}

static uint64_t claim(fixture *f, const char *id, int64_t lease_ms)
{
    acemq_claim_opts o = {0};
    o.lease_ms = lease_ms;
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(f->store, id, strlen(id), &o, &c), ACEMQ_CLAIMED);
    return c.token;
}

static int inspect(fixture *f, const char *id, acemq_idem_record *r)
{
    return acemq_idem_inspect(f->store, id, strlen(id), r);
}

/* An empty store counts nothing and holds no lease. */
static void empty_store(void **state)
{
    fixture *f = *state;
    acemq_idem_counts c;
    memset(&c, 0xff, sizeof c);
    assert_int_equal(acemq_idem_counts_get(f->store, &c), 0);
    assert_int_equal(c.held + c.abandoned + c.confirmed + c.expired, 0);
    assert_int_equal(c.has_next_lease, 0);
    acemq_idem_record r;
    assert_int_equal(inspect(f, "nothing", &r), ACEMQ_ENOENT);
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "no record"));
    assert_int_equal(acemq_idem_forget(f->store, "nothing", 7), 0);
}

/* Every state, counted and shown as the calls before left it. */
static void states_counted_and_shown(void **state)
{
    fixture *f = *state;
    /* expired: confirmed, then its retention runs out. */
    uint64_t t = claim(f, "expired", 0);
    assert_int_equal(acemq_idem_confirm(f->store, "expired", 7, t), 0);
    /* lapsed: its lease runs out while nobody confirms. */
    uint64_t lapsed = claim(f, "lapsed", 1000);
    acemq_manual_clock_advance(f->clock, 2 * RETENTION);
    const int64_t now = T0 + 2 * RETENTION;

    uint64_t slow = claim(f, "held-slow", 3 * LEASE);
    uint64_t soon = claim(f, "held-soon", LEASE);
    t = claim(f, "done", 0);
    assert_int_equal(acemq_idem_confirm_result(f->store, "done", 4, t, "ok:42", 5), 0);
    t = claim(f, "released", 0);
    assert_int_equal(acemq_idem_release(f->store, "released", 8, t), 0);

    acemq_idem_record r, released, expired;
    int has_released = inspect(f, "released", &released) == 0;
    int has_expired = inspect(f, "expired", &expired) == 0;
    if (has_released) assert_int_equal(released.state, ACEMQ_IDEM_ABANDONED);
    if (has_expired) assert_int_equal(expired.state, ACEMQ_IDEM_EXPIRED);

    acemq_idem_counts c;
    assert_int_equal(acemq_idem_counts_get(f->store, &c), 0);
    assert_int_equal(c.held, 2);
    assert_int_equal(c.abandoned, 1 + (uint64_t)has_released);
    assert_int_equal(c.confirmed, 1);
    assert_int_equal(c.expired, (uint64_t)has_expired);
    assert_int_equal(c.has_next_lease, 1);
    assert_int_equal(c.next_id_len, strlen("held-soon"));
    assert_memory_equal(c.next_id, "held-soon", c.next_id_len);
    assert_int_equal(c.next_token, soon);
    assert_int_equal(c.next_lease_until_ms, now + LEASE);

    assert_int_equal(inspect(f, "held-slow", &r), 0);
    assert_int_equal(r.state, ACEMQ_IDEM_HELD);
    assert_int_equal(r.token, slow);
    assert_int_equal(r.lease_until_ms, now + 3 * LEASE);
    assert_int_equal(r.has_result, 0);

    assert_int_equal(inspect(f, "lapsed", &r), 0);
    assert_int_equal(r.state, ACEMQ_IDEM_ABANDONED);
    assert_int_equal(r.token, lapsed);
    assert_int_equal(r.lease_until_ms, T0 + 1000);

    assert_int_equal(inspect(f, "done", &r), 0);
    assert_int_equal(r.state, ACEMQ_IDEM_CONFIRMED);
    assert_int_equal(r.expires_ms, now + RETENTION);
    assert_int_equal(r.has_result, 1);
    assert_int_equal(r.result_len, 5);
    assert_int_equal(r.fingerprint_len, 0);
    assert_string_equal(acemq_idem_state_name(r.state), "confirmed");
}

/* A fingerprint given at claim shows its size. */
static void fingerprint_shown(void **state)
{
    fixture *f = *state;
    acemq_claim_opts o = {0};
    o.fingerprint = "0123456789abcdef";
    o.fingerprint_len = 16;
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(f->store, "fp", 2, &o, &c), ACEMQ_CLAIMED);
    acemq_idem_record r;
    assert_int_equal(inspect(f, "fp", &r), 0);
    assert_int_equal(r.fingerprint_len, 16);
}

/* A forgotten confirmation is processed again; a forgotten holder's token
 * is dead, and never issued again. */
static void forget_processes_again(void **state)
{
    fixture *f = *state;
    uint64_t t = claim(f, "order-7", 0);
    assert_int_equal(acemq_idem_confirm(f->store, "order-7", 7, t), 0);
    assert_int_equal(acemq_idem_forget(f->store, "order-7", 7), 1);
    acemq_idem_record r;
    assert_int_equal(inspect(f, "order-7", &r), ACEMQ_ENOENT);
    assert_int_equal(acemq_idem_is_confirmed(f->store, "order-7", 7), 0);
    uint64_t again = claim(f, "order-7", 0);
    assert_true(again != t);

    uint64_t old = claim(f, "order-8", 0);
    assert_int_equal(acemq_idem_forget(f->store, "order-8", 7), 1);
    assert_int_equal(acemq_idem_confirm(f->store, "order-8", 7, old), ACEMQ_ESTALE);
    uint64_t fresh = claim(f, "order-8", 0);
    assert_true(fresh != old);
    assert_int_equal(acemq_idem_confirm(f->store, "order-8", 7, old), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_release(f->store, "order-8", 7, old), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(f->store, "order-8", 7, fresh), 0);

    /* Forgetting touches no other id. */
    assert_int_equal(acemq_idem_is_confirmed(f->store, "order-7", 7), 0);
    acemq_idem_counts c;
    assert_int_equal(acemq_idem_counts_get(f->store, &c), 0);
    assert_int_equal(c.held, 1);
    assert_int_equal(c.confirmed, 1);
}

/* Binary ids, NUL included, are shown and forgotten byte for byte. */
static void binary_ids(void **state)
{
    fixture *f = *state;
    const char a[] = {'k', 0, 'x'}, b[] = {'k', 0, 'y'};
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(f->store, a, 3, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_try_claim(f->store, b, 3, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_forget(f->store, a, 3), 1);
    acemq_idem_record r;
    assert_int_equal(acemq_idem_inspect(f->store, a, 3, &r), ACEMQ_ENOENT);
    assert_int_equal(acemq_idem_inspect(f->store, b, 3, &r), 0);
    assert_int_equal(r.token, c.token);
}

/* Bad arguments: a clear error, nothing touched. */
static void bad_input(void **state)
{
    fixture *f = *state;
    acemq_idem_record r;
    acemq_idem_counts c;
    assert_int_equal(acemq_idem_counts_get(NULL, &c), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_counts_get(f->store, NULL), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "out is NULL"));
    assert_int_equal(acemq_idem_inspect(f->store, "x", 1, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_inspect(f->store, "", 0, &r), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "id is empty"));
    assert_int_equal(acemq_idem_forget(f->store, NULL, 3), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "id is NULL"));
    static char big[ACEMQ_IDEM_ID_MAX + 1];
    assert_int_equal(acemq_idem_forget(f->store, big, sizeof big), ACEMQ_EINVAL);
    assert_string_equal(acemq_idem_state_name(99), "unknown");
}

int main(int argc, char **argv)
{
    backend = test_backend_from_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(empty_store, setup, teardown),
        cmocka_unit_test_setup_teardown(states_counted_and_shown, setup, teardown),
        cmocka_unit_test_setup_teardown(fingerprint_shown, setup, teardown),
        cmocka_unit_test_setup_teardown(forget_processes_again, setup, teardown),
        cmocka_unit_test_setup_teardown(binary_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_input, setup, teardown),
    };
    return cmocka_run_group_tests_name(backend, tests, NULL, NULL);
}
