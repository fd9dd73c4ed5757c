/* test_registry.c — the contracts find their backends by URL scheme in
 * registries (core/registry.h) that the built-in backends fill, and a
 * backend registered later is opened by the public open call like a
 * built-in one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"
#include "broker/broker_backend.h"
#include "core/registry.h"
#include "core/url.h"
#include "idem/idem_backend.h"
#include "outbox/outbox_backend.h"

static void builtins_are_found_by_scheme(void **state)
{
    (void)state;
    const char *idem[] = {"memory", "sqlite", "postgres", "postgresql", "redis"},
               *outbox[] = {"sqlite", "postgres", "postgresql"}, *broker[] = {"amqp", "memory"};
    for (size_t i = 0; i < 5; i++)
        assert_non_null(acemq__registry_find(&acemq__idem_registry, idem[i]));
    for (size_t i = 0; i < 3; i++)
        assert_non_null(acemq__registry_find(&acemq__outbox_registry, outbox[i]));
    for (size_t i = 0; i < 2; i++)
        assert_non_null(acemq__registry_find(&acemq__broker_registry, broker[i]));
    assert_null(acemq__registry_find(&acemq__idem_registry, "amqp"));
    assert_null(acemq__registry_find(&acemq__outbox_registry, "memory"));
    assert_null(acemq__registry_find(&acemq__broker_registry, "sqlite"));
    /* The same backend is found by both of PostgreSQL's schemes. */
    const acemq__outbox_backend *pg = (const void *)acemq__registry_find(&acemq__outbox_registry,
                                                                         "postgres"),
                                *pgsql = (const void *)acemq__registry_find(&acemq__outbox_registry,
                                                                            "postgresql");
    assert_ptr_equal(pg->open, pgsql->open);

    char known[128];
    acemq__registry_names(&acemq__outbox_registry, known, sizeof known);
    assert_string_equal(known, "sqlite:, postgres://");
}

static int opens; /* how many times a fake backend's open ran */

static void fake_close(acemq_idem *h)
{
    (void)h;
}

static const acemq__idem_methods fake_methods = {
    .version = ACEMQ__IDEM_METHODS_VERSION,
    .name = "fake",
    .close = fake_close,
};

static int fake_open(acemq_idem *h, const acemq__url *url)
{
    assert_string_equal(url->scheme, "fake");
    assert_string_equal(url->rest, "x");
    opens++;
    h->methods = &fake_methods;
    return 0;
}

static int fake_open_refusing(acemq_idem *h, const acemq__url *url)
{
    (void)url;
    opens += 100;
    return acemq__idem_fail(h, ACEMQ_EIO, "fake: refused");
}

static void a_registered_backend_is_opened_by_its_scheme(void **state)
{
    (void)state;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open(&h, "fake:x", NULL), ACEMQ_EURL);
    assert_null(h);
    assert_string_equal(acemq_idem_errmsg(NULL),
                        "unknown store 'fake:'; known: memory:, sqlite:, postgres://, redis://");

    static const acemq__idem_backend fake = {{"fake", "fake:"}, fake_open};
    assert_int_equal(acemq__registry_add(&acemq__idem_registry, &fake.entry), 0);
    opens = 0;
    assert_int_equal(acemq_idem_open(&h, "fake:x", NULL), 0);
    assert_int_equal(opens, 1);
    assert_string_equal(acemq_idem_backend(h), "fake");
    acemq_idem_close(h);

    /* A second backend under the same scheme replaces the first. */
    static const acemq__idem_backend refusing = {{"fake", "fake:"}, fake_open_refusing};
    assert_int_equal(acemq__registry_add(&acemq__idem_registry, &refusing.entry), 0);
    opens = 0;
    h = NULL;
    assert_int_equal(acemq_idem_open(&h, "fake:x", NULL), ACEMQ_EIO);
    assert_null(h);
    assert_int_equal(opens, 100);
    assert_string_equal(acemq_idem_errmsg(NULL), "fake: refused");
    assert_int_equal(acemq_idem_open(&h, "nope:x", NULL), ACEMQ_EURL);
    assert_string_equal(
        acemq_idem_errmsg(NULL),
        "unknown store 'nope:'; known: memory:, sqlite:, postgres://, redis://, fake:");
    /* The built-ins are still there. */
    assert_int_equal(acemq_idem_open(&h, "memory:", NULL), 0);
    assert_string_equal(acemq_idem_backend(h), "memory");
    acemq_idem_close(h);
}

static void a_full_table_refuses_a_new_scheme(void **state)
{
    (void)state;
    static acemq__registry r;
    static char names[ACEMQ__REGISTRY_MAX + 1][8];
    static acemq__registry_entry e[ACEMQ__REGISTRY_MAX + 1];
    for (size_t i = 0; i <= ACEMQ__REGISTRY_MAX; i++) {
        (void)snprintf(names[i], sizeof names[i], "s%zu", i);
        e[i].scheme = names[i];
        e[i].shown = NULL;
    }
    for (size_t i = 0; i < ACEMQ__REGISTRY_MAX; i++)
        assert_int_equal(acemq__registry_add(&r, &e[i]), 0);
    assert_int_equal(acemq__registry_add(&r, &e[ACEMQ__REGISTRY_MAX]), ACEMQ_ENOMEM);
    assert_null(acemq__registry_find(&r, names[ACEMQ__REGISTRY_MAX]));
    /* Replacing needs no room. */
    assert_int_equal(acemq__registry_add(&r, &e[3]), 0);
    assert_ptr_equal(acemq__registry_find(&r, "s3"), &e[3]);
    char known[16] = "x";
    acemq__registry_names(&r, known, sizeof known);
    assert_string_equal(known, ""); /* none is shown */
}

static void url_scheme_is_split_off(void **state)
{
    (void)state;
    char s[9]; /* "postgres" and its NUL */
    assert_int_equal(acemq__url_scheme("postgres://h/db", s, sizeof s), 0);
    assert_string_equal(s, "postgres");
    assert_int_equal(acemq__url_scheme("postgresql://h/db", s, sizeof s),
                     ACEMQ_EURL); /* too long */
    assert_int_equal(acemq__url_scheme("nourl", s, sizeof s), ACEMQ_EURL);
    assert_int_equal(acemq__url_scheme(":x", s, sizeof s), ACEMQ_EURL);
    assert_int_equal(acemq__url_scheme("1a:x", s, sizeof s), ACEMQ_EURL);
    assert_int_equal(acemq__url_scheme(NULL, s, sizeof s), ACEMQ_EURL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(builtins_are_found_by_scheme),
        cmocka_unit_test(a_registered_backend_is_opened_by_its_scheme),
        cmocka_unit_test(a_full_table_refuses_a_new_scheme),
        cmocka_unit_test(url_scheme_is_split_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
