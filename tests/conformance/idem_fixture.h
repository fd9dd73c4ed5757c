/* idem_fixture.h — a fresh store of the backend under test on a manual
 * clock, for the suites that run per backend (test_idem_conformance.c,
 * test_idem_admin.c). Include after <cmocka.h>. */
#ifndef ACEMQ_TEST_IDEM_FIXTURE_H
#define ACEMQ_TEST_IDEM_FIXTURE_H

#include <stdint.h>
#include "acemq/acemq.h"

/* Where every fixture's clock starts. */
#define T0 1700000000000LL

typedef struct fixture {
    acemq_manual_clock *clock;
    acemq_idem *store;
    char url[512];
} fixture;

/* The backend under test ("memory", "sqlite", ...), set by main. */
extern const char *backend;

/* Opens a fresh store with this default lease and retention into *state
 * (a fixture), failing the test when it cannot. */
int open_fixture(void **state, int64_t lease, int64_t retention);
/* Closes what open_fixture made. */
int teardown(void **state);

/* idem_batch_calls.c: acemq_idem_confirm_many's cases, and the bad calls
 * of both batch calls. */
void confirm_many_equals_calls(void **state);
void confirm_many_large(void **state);
void batch_bad_calls(void **state);

#endif
