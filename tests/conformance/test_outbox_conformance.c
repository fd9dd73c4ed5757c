/* test_outbox_conformance.c — the outbox contract, run against SQLite and
 * PostgreSQL alike: `test_outbox_conformance sqlite|postgres`.
 * The cases are in outbox_add_claim.c, outbox_marks.c, outbox_refused.c,
 * outbox_wait.c and outbox_postgres.c; this file runs them in cmocka groups.
 *
 * Time moves only through the fixture's manual clock: back-off, leases and
 * retention are tested by moving it, never by sleeping.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "conformance/outbox_cases.h"

static int use_pg;

static int setup(void **state)
{
    outbox_fixture *f = malloc(sizeof *f);
    if (!f) return -1;
    outbox_fixture_init(f, use_pg);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    outbox_fixture_free(*state);
    free(*state);
    return 0;
}

int main(int argc, char **argv)
{
    use_pg = outbox_backend_from_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(rollback_is_never_claimed, setup, teardown),
        cmocka_unit_test_setup_teardown(add_without_transaction_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(oldest_first, setup, teardown),
        cmocka_unit_test_setup_teardown(fields_come_back_as_written, setup, teardown),
        cmocka_unit_test(uuid7_ids_sort_in_order),
        cmocka_unit_test_setup_teardown(lease_expiry_hands_over_and_fences, setup, teardown),
        cmocka_unit_test_setup_teardown(mark_published_batch_answers_each, setup, teardown),
        cmocka_unit_test_setup_teardown(release_makes_due_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(backoff_attempt_limit_dead_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(long_reason_is_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(purge_keeps_what_is_young, setup, teardown),
        cmocka_unit_test_setup_teardown(purge_in_batches_misses_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(delete_on_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(ordering_keys_hold_back_only_their_own, setup, teardown),
        cmocka_unit_test_setup_teardown(claim_runs_takes_a_keys_records_together, setup, teardown),
        cmocka_unit_test_setup_teardown(dead_record_holds_back_its_key, setup, teardown),
        cmocka_unit_test_setup_teardown(pending_counts_and_oldest_age, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_records_are_refused_and_write_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_calls_get_einval, setup, teardown),
        cmocka_unit_test_setup_teardown(unopenable_urls_say_why, setup, teardown),
        cmocka_unit_test_setup_teardown(a_slow_writer_is_not_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(a_held_lock_costs_only_the_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(wait_wakes_on_a_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(add_before_the_schema_exists, setup, teardown),
        cmocka_unit_test_setup_teardown(newer_schema_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(default_clock_is_the_database_s, setup, teardown),
        cmocka_unit_test_setup_teardown(synchronous_reaches_the_session, setup, teardown),
    };
    const struct CMUnitTest sqlite_tests[] = {
        cmocka_unit_test_setup_teardown(an_idle_wait_sleeps_until_a_write, setup, teardown),
    };
    const struct CMUnitTest postgres_tests[] = {
        cmocka_unit_test_setup_teardown(claims_stay_on_their_page, setup, teardown),
        cmocka_unit_test_setup_teardown(marks_pay_for_no_index_they_do_not_need, setup, teardown),
        cmocka_unit_test_setup_teardown(a_lost_connection_comes_back, setup, teardown),
        cmocka_unit_test_setup_teardown(only_a_waiting_handle_listens, setup, teardown),
    };
    int failed = cmocka_run_group_tests_name(use_pg ? "outbox conformance (postgres)"
                                                    : "outbox conformance (sqlite)",
                                             tests, NULL, NULL);
    if (use_pg)
        failed += cmocka_run_group_tests_name("outbox on postgres", postgres_tests, NULL, NULL);
    else
        failed += cmocka_run_group_tests_name("outbox on sqlite", sqlite_tests, NULL, NULL);
    return failed;
}
