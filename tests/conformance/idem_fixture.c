/* idem_fixture.c — the per-backend suites' store on a manual clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "conformance/backends.h"
#include "conformance/idem_fixture.h"

const char *backend;

int open_fixture(void **state, int64_t lease, int64_t retention)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(acemq_manual_clock_new(&f->clock, T0), 0);
    assert_int_equal(test_backend_fresh_url(backend, f->url, sizeof f->url), 0);
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(f->clock);
    o.lease_ms = lease;
    o.retention_ms = retention;
    o.synchronous = ACEMQ_SYNC_NORMAL;
    int rc = acemq_idem_open(&f->store, f->url, &o);
    if (rc != 0) fail_msg("open %s: %s", f->url, acemq_idem_errmsg(NULL));
    assert_string_equal(acemq_idem_backend(f->store), test_backend_kind(backend));
    *state = f;
    return 0;
}

int teardown(void **state)
{
    fixture *f = *state;
    acemq_idem_close(f->store);
    acemq_manual_clock_free(f->clock);
    free(f);
    return 0;
}
