/* audit_fixture.h — what the parts of test_audit share: helpers that open
 * an audit (failing the test when it does not open) and check ids on it, and
 * the tests each part defines, which test_audit.c runs as one cmocka group. */
#ifndef ACEMQ_TESTS_AUDIT_FIXTURE_H
#define ACEMQ_TESTS_AUDIT_FIXTURE_H

#include <stdint.h>

#include "acemq/acemq.h"

/* An audit with these options; the test fails unless it opens. */
acemq_audit *audit_make(uint32_t depth, uint32_t producers, int policy, unsigned flags);
/* One check by producer and sequence, and one by text id. */
int audit_check(acemq_audit *a, const char *producer, uint64_t seq, int *cause);
int audit_check_id(acemq_audit *a, const char *id, int *cause);
/* The audit's counters; the test fails unless they are read. */
acemq_audit_stats audit_stats(acemq_audit *a);
/* By producer and sequence, or (text != 0) by the id "producer:seq". */
int audit_check_either(acemq_audit *a, const char *producer, uint64_t seq, int text, int *cause);

/* audit_ids.c */
void parses_activemq_ids(void **state);
void producers_one_byte_apart(void **state);
void rejects_malformed_ids(void **state);
void parse_agrees_with_reference(void **state);
void options_are_checked(void **state);
void names(void **state);

/* audit_window.c */
void new_then_duplicate(void **state);
void out_of_order_within_window(void **state);
void before_start(void **state);
void slides_across_many_windows(void **state);
void window_matches_model(void **state);
void window_matches_model_thread_safe(void **state);
void rollback_lets_a_sequence_pass_again(void **state);
void window_edge_keeps_activemqs_slack(void **state);
void sequences_near_2_64(void **state);

/* audit_lru.c */
void lru_matches_model(void **state);
void shard_tables_grow(void **state);
void eviction_fail_closed(void **state);
void eviction_fail_open(void **state);
void sharded_eviction(void **state);
void forgotten_evictions_are_counted(void **state);
void evicted_producer_return_is_recorded(void **state);

/* audit_activemq.c */
void catches_what_activemq_catches(void **state);

/* audit_batch.c */
void batch_agrees_with_one_by_one(void **state);
void batch_errors(void **state);

/* audit_conn.c */
void queue_audit_is_shared(void **state);
void topic_audit_is_per_consumer(void **state);
void audit_lru_evicts_whole_audits(void **state);
void check_for_duplicates_switch(void **state);
void conn_audit_errors(void **state);

#endif
