/* test_broker_amqp.c — the AMQP 0-9-1 broker against a real RabbitMQ on
 * loopback (ACEMQ_AMQP_URL; `scripts/services.sh start rabbitmq`): every
 * outcome, read back through a second, plain rabbitmq-c connection that
 * declares the exchanges and queues and reads what arrived. The cases are in
 * broker_amqp_outcomes.c, broker_amqp_faults.c, broker_amqp_alarm.c and
 * broker_amqp_refused.c; this file runs them as one cmocka group.
 *
 * Without ACEMQ_AMQP_URL it prints SKIPPED and exits 77, which ctest reports
 * as Skipped, never Passed. Names carry the pid, and the queues are exclusive
 * to the admin connection, so runs never see each other's messages.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "integration/broker_amqp_fixture.h"

int main(int argc, char **argv)
{
    services_sh = argc > 1 ? argv[1] : NULL;
    broker_url = getenv("ACEMQ_AMQP_URL");
    if (!broker_url || !*broker_url) {
        printf("SKIPPED: ACEMQ_AMQP_URL is not set (scripts/services.sh start rabbitmq)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(many_confirmed_and_intact),
        cmocka_unit_test(bodies_across_frames_arrive_intact),
        cmocka_unit_test(unroutable_is_returned),
        cmocka_unit_test(full_queue_nacks),
        cmocka_unit_test(missing_exchange_closes_channel_then_recovers),
        cmocka_unit_test(lost_connection_then_reconnects),
        cmocka_unit_test(silent_broker_times_out_then_recovers),
        cmocka_unit_test(stalled_write_times_out_then_recovers),
        cmocka_unit_test(blocked_connection_waits_for_the_alarm),
        cmocka_unit_test(stop_waiting_ends_a_blocked_wait),
        cmocka_unit_test(pipelined_sends_keep_outcomes_apart),
        cmocka_unit_test(cut_with_sends_outstanding),
        cmocka_unit_test(bad_headers_fail_the_call_whole),
        cmocka_unit_test(bad_urls),
        cmocka_unit_test(wrong_password),
    };
    return cmocka_run_group_tests(tests, admin_open, admin_close);
}
