/* test_errors.c — every error code has a name and a message, generated from
 * one list, and the clock helpers behave. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"

static void every_code_has_text(void **state)
{
    (void)state;
    int seen = 0;
#define CHECK_CODE(name, value, msg)                                                               \
    do {                                                                                           \
        assert_true((value) < 0);                                                                  \
        assert_string_equal(acemq_strerror(ACEMQ_##name), msg);                                    \
        assert_string_equal(acemq_err_name(ACEMQ_##name), "ACEMQ_" #name);                         \
        assert_string_not_equal(acemq_strerror(ACEMQ_##name), "unknown error");                    \
        seen++;                                                                                    \
    } while (0);
    ACEMQ_ERRNO_MAP(CHECK_CODE)
#undef CHECK_CODE
    assert_true(seen >= 15);
    assert_string_equal(acemq_strerror(0), "success");
    assert_string_equal(acemq_err_name(0), "ACEMQ_OK");
    assert_string_equal(acemq_strerror(-9999), "unknown error");
    assert_string_equal(acemq_err_name(12345), "ACEMQ_UNKNOWN");
}

/* Codes are distinct: two entries sharing a value would make a switch fail
 * to compile, but check the texts too. */
static void codes_are_distinct(void **state)
{
    (void)state;
    static const int codes[] = {
#define LIST_CODE(name, value, msg) value,
        ACEMQ_ERRNO_MAP(LIST_CODE)
#undef LIST_CODE
    };
    size_t n = sizeof codes / sizeof *codes;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            assert_int_not_equal(codes[i], codes[j]);
            assert_string_not_equal(acemq_strerror(codes[i]), acemq_strerror(codes[j]));
        }
}

static void manual_clock_moves_only_when_told(void **state)
{
    (void)state;
    acemq_manual_clock *c = NULL;
    assert_int_equal(acemq_manual_clock_new(&c, 1000), 0);
    const acemq_clock *k = acemq_manual_clock_get(c);
    assert_int_equal(k->now_ms(k->ctx), 1000);
    acemq_manual_clock_advance(c, 250);
    assert_int_equal(k->now_ms(k->ctx), 1250);
    acemq_manual_clock_set(c, 5);
    assert_int_equal(k->now_ms(k->ctx), 5);
    acemq_manual_clock_free(c);
    acemq_manual_clock_free(NULL);
    assert_int_equal(acemq_manual_clock_new(NULL, 0), ACEMQ_EINVAL);

    const acemq_clock *sys = acemq_clock_system();
    /* After 2023-11-14 and before 2100: a real wall clock in milliseconds. */
    int64_t now = sys->now_ms(sys->ctx);
    assert_true(now > 1700000000000LL && now < 4102444800000LL);
    assert_non_null(strchr(acemq_version(), '.'));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_code_has_text),
        cmocka_unit_test(codes_are_distinct),
        cmocka_unit_test(manual_clock_moves_only_when_told),
    };
    return cmocka_run_group_tests_name("errors and clock", tests, NULL, NULL);
}
