/* test_pause.c — acemq__pause_ms (src/core/pause.h), the relay's and the
 * CLI's wait that a stop request cuts short. What is asserted is how often
 * the stop condition is asked and what the call answers, never how long it
 * slept: a wait is seen to be sliced by the questions between its slices. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "os/mono_time.h"

typedef struct asker {
    int asked;   /* times stop() was called */
    int stop_at; /* answer yes from this question on (1-based); 0: never */
} asker;

static int ask(void *ctx)
{
    asker *a = ctx;
    a->asked++;
    return a->stop_at > 0 && a->asked >= a->stop_at;
}

static void a_stop_already_asked_for_ends_the_wait_before_any_sleep(void **state)
{
    (void)state;
    asker a = {0, 1};
    assert_int_equal(acemq__pause_ms(60L * 1000, ask, &a), 1);
    assert_int_equal(a.asked, 1);
}

static void a_stop_asked_for_during_the_wait_ends_it_at_the_next_slice(void **state)
{
    (void)state;
    /* Ten minutes, stopped at the third question: two slices slept, not
     * the rest of the ten minutes (which would time the test out). */
    asker a = {0, 3};
    assert_int_equal(acemq__pause_ms(10L * 60 * 1000, ask, &a), 1);
    assert_int_equal(a.asked, 3);
}

static void a_wait_nobody_stops_runs_its_slices_and_answers_0(void **state)
{
    (void)state;
    /* 2.5 slices: asked before each of the three and after the last. */
    asker a = {0, 0};
    long ms = ACEMQ__PAUSE_SLICE_MS * 2 + ACEMQ__PAUSE_SLICE_MS / 2;
    assert_int_equal(acemq__pause_ms(ms, ask, &a), 0);
    assert_int_equal(a.asked, 4);
}

static void a_stop_asked_for_in_the_last_slice_is_still_seen(void **state)
{
    (void)state;
    /* Two slices, and the answer turns yes after the second. */
    asker a = {0, 3};
    assert_int_equal(acemq__pause_ms(ACEMQ__PAUSE_SLICE_MS * 2, ask, &a), 1);
    assert_int_equal(a.asked, 3);
}

static void no_time_to_wait_is_no_wait(void **state)
{
    (void)state;
    /* Asked once, not slept. */
    asker a = {0, 0};
    assert_int_equal(acemq__pause_ms(0, ask, &a), 0);
    assert_int_equal(acemq__pause_ms(-5, ask, &a), 0);
    assert_int_equal(a.asked, 2);
    asker b = {0, 1};
    assert_int_equal(acemq__pause_ms(0, ask, &b), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_stop_already_asked_for_ends_the_wait_before_any_sleep),
        cmocka_unit_test(a_stop_asked_for_during_the_wait_ends_it_at_the_next_slice),
        cmocka_unit_test(a_wait_nobody_stops_runs_its_slices_and_answers_0),
        cmocka_unit_test(a_stop_asked_for_in_the_last_slice_is_still_seen),
        cmocka_unit_test(no_time_to_wait_is_no_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
