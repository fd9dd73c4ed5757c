/* test_audit.c — the message audit's rules, one test each, in one cmocka
 * group: id parsing (audit_ids.c), the sliding window against a plain model
 * and rollback (audit_window.c), the producer LRU and its UNKNOWN answers
 * under both policies (audit_lru.c), agreement with ActiveMQ's own audit
 * (audit_activemq.c), the batch calls (audit_batch.c), and the connection
 * audit's queue/topic split (audit_conn.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "audit_fixture.h"

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_activemq_ids),
        cmocka_unit_test(producers_one_byte_apart),
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
