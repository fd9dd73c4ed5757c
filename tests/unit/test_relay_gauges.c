/* test_relay_gauges.c — how long the relay waits between two counts of the
 * outbox (src/relay/gauges.h): a second at least, else twenty times what the
 * last count took. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "relay/gauges.h"

static void a_quick_count_waits_a_second(void **state)
{
    (void)state;
    assert_true(acemq__gauges_interval_ms(0) == 1000.0);
    assert_true(acemq__gauges_interval_ms(0.5) == 1000.0);
    assert_true(acemq__gauges_interval_ms(50) == 1000.0);
}

static void a_slow_count_waits_twenty_times_its_length(void **state)
{
    (void)state;
    assert_true(acemq__gauges_interval_ms(50.5) == 1010.0);
    assert_true(acemq__gauges_interval_ms(100) == 2000.0);
    assert_true(acemq__gauges_interval_ms(650) == 13000.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_quick_count_waits_a_second),
        cmocka_unit_test(a_slow_count_waits_twenty_times_its_length),
    };
    return cmocka_run_group_tests_name("relay gauges", tests, NULL, NULL);
}
