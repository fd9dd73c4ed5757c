/* outbox_cases.h — what the parts of test_outbox_conformance share: helpers
 * on an outbox_fixture that fail the test when the outbox refuses, and the
 * tests each part defines, which test_outbox_conformance.c runs in its
 * cmocka groups. */
#ifndef ACEMQ_TEST_OUTBOX_CASES_H
#define ACEMQ_TEST_OUTBOX_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "conformance/outbox_fixture.h"

/* A record for "orders" / "order.created" with this id, ordering key (may be
 * NULL) and text body (may be NULL). */
acemq_outbox_record outbox_rec(const char *id, const char *key, const char *body);
/* Adds records ids[0..n) with ordering keys keys[i] (keys may be NULL) in one
 * committed transaction. */
void outbox_add_committed(outbox_fixture *f, const char *const *ids, const char *const *keys,
                          size_t n);
/* acemq_outbox_claim_batch; the number of records claimed. */
size_t outbox_claim(acemq_outbox *h, size_t max, int64_t lease, const acemq_outbox_msg **m);
/* Moves the fixture's manual clock ms forward. */
void outbox_advance(outbox_fixture *f, int64_t ms);

/* outbox_add_claim.c */
void rollback_is_never_claimed(void **state);
void add_without_transaction_is_refused(void **state);
void oldest_first(void **state);
void fields_come_back_as_written(void **state);
void uuid7_ids_sort_in_order(void **state);
void ordering_keys_hold_back_only_their_own(void **state);
void claim_runs_takes_a_keys_records_together(void **state);
void dead_record_holds_back_its_key(void **state);
void pending_counts_and_oldest_age(void **state);

/* outbox_marks.c */
void lease_expiry_hands_over_and_fences(void **state);
void mark_published_batch_answers_each(void **state);
void release_makes_due_at_once(void **state);
void backoff_attempt_limit_dead_retry(void **state);
void long_reason_is_cut(void **state);
void purge_keeps_what_is_young(void **state);
void purge_in_batches_misses_nothing(void **state);
void delete_on_publish(void **state);

/* outbox_refused.c */
void bad_records_are_refused_and_write_nothing(void **state);
void bad_calls_get_einval(void **state);
void unopenable_urls_say_why(void **state);
void add_before_the_schema_exists(void **state);
void newer_schema_is_refused(void **state);
void default_clock_is_the_database_s(void **state);
void synchronous_reaches_the_session(void **state);

/* outbox_wait.c */
void a_slow_writer_is_not_skipped(void **state);
void a_held_lock_costs_only_the_budget(void **state);
void wait_wakes_on_a_commit(void **state);
void an_idle_wait_sleeps_until_a_write(void **state);

/* outbox_postgres.c */
void claims_stay_on_their_page(void **state);
void marks_pay_for_no_index_they_do_not_need(void **state);
void only_a_waiting_handle_listens(void **state);
void a_lost_connection_comes_back(void **state);

#endif
