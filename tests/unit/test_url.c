/* test_url.c — splitting backend URLs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/common.h"
#include "core/url.h"

static void splits_scheme_rest_and_query(void **state)
{
    (void)state;
    acemq__url u;
    assert_int_equal(
        acemq__url_parse(&u, "sqlite:/var/lib/x.db?synchronous=normal&busy_timeout_ms=250"), 0);
    assert_string_equal(u.scheme, "sqlite");
    assert_string_equal(u.rest, "/var/lib/x.db");
    assert_int_equal(u.nparams, 2);
    assert_string_equal(acemq__url_param(&u, "synchronous"), "normal");
    int64_t v = 0;
    assert_int_equal(acemq__url_param_int(&u, "busy_timeout_ms", 0, 1000, &v), 0);
    assert_int_equal(v, 250);
    assert_int_equal(acemq__url_param_int(&u, "busy_timeout_ms", 0, 100, &v), ACEMQ_EURL);
    assert_int_equal(acemq__url_param_int(&u, "synchronous", 0, 100, &v), ACEMQ_EURL);
    v = 7;
    assert_int_equal(acemq__url_param_int(&u, "absent", 0, 100, &v), 0);
    assert_int_equal(v, 7);
    static const char *const known[] = {"synchronous", NULL};
    const char *bad = NULL;
    assert_int_equal(acemq__url_check_params(&u, known, &bad), ACEMQ_EURL);
    assert_string_equal(bad, "busy_timeout_ms");
    acemq__url_free(&u);

    assert_int_equal(acemq__url_parse(&u, "memory:"), 0);
    assert_string_equal(u.scheme, "memory");
    assert_string_equal(u.rest, "");
    assert_int_equal(u.nparams, 0);
    acemq__url_free(&u);

    assert_int_equal(acemq__url_parse(&u, "sqlite:my%20db?k=a%2Fb+c"), 0);
    assert_string_equal(u.rest, "my%20db"); /* the rest is a path: kept as given */
    assert_string_equal(acemq__url_param(&u, "k"), "a/b c");
    acemq__url_free(&u);
}

static void refuses_malformed(void **state)
{
    (void)state;
    acemq__url u;
    assert_int_equal(acemq__url_parse(&u, NULL), ACEMQ_EURL);
    assert_int_equal(acemq__url_parse(&u, "no scheme here"), ACEMQ_EURL);
    assert_int_equal(acemq__url_parse(&u, ":empty"), ACEMQ_EURL);
    assert_int_equal(acemq__url_parse(&u, "1abc:x"), ACEMQ_EURL);
    assert_int_equal(acemq__url_parse(&u, "sq lite:x"), ACEMQ_EURL);
    assert_int_equal(acemq__url_parse(&u, "sqlite:x?novalue"), ACEMQ_EURL);
    assert_int_equal(acemq__url_parse(&u, "sqlite:x?=v"), ACEMQ_EURL);
    assert_int_equal(acemq__url_parse(&u, "sqlite:x?k=%zz"), ACEMQ_EURL);
    assert_int_equal(acemq__url_parse(&u, "sqlite:x?k=%00"), ACEMQ_EURL);
    assert_int_equal(acemq__url_parse(&u, "sqlite:x?k=%4"), ACEMQ_EURL);
    char many[512];
    int at = snprintf(many, sizeof many, "memory:?");
    for (int i = 0; i < 17; i++)
        at += snprintf(many + at, sizeof many - (size_t)at, "%sk%d=1", i ? "&" : "", i);
    assert_int_equal(acemq__url_parse(&u, many), ACEMQ_EURL);
    acemq__url_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(splits_scheme_rest_and_query),
        cmocka_unit_test(refuses_malformed),
    };
    return cmocka_run_group_tests_name("url", tests, NULL, NULL);
}
