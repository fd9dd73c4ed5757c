/* backends.h — fresh stores of a named backend for the suites that run per backend. */
#ifndef ACEMQ_TEST_BACKENDS_H
#define ACEMQ_TEST_BACKENDS_H

#include <stddef.h>
#include "acemq/idem.h"

/* Writes a URL naming a new, empty store of backend ("memory", "sqlite",
 * "postgres" or "redis") into url. SQLite files go to a fresh temporary
 * folder that is removed at exit; a PostgreSQL store gets a table of its own
 * (?table=) on $ACEMQ_PG_URL, a Redis store a key prefix of its own
 * (?prefix=) on $ACEMQ_REDIS_URL; without that variable the test exits 77.
 * Returns 0, or -1 for an unknown backend name. */
int test_backend_fresh_url(const char *backend, char *url, size_t cap);

/* The value of key= in url (a fresh URL's "table" or "prefix") into out.
 * 0, or -1 when url has no key= or the value does not fit in cap. */
int test_backend_url_param(const char *url, const char *key, char *out, size_t cap);

/* The name acemq_idem_backend() reports for a store of backend. */
const char *test_backend_kind(const char *backend);

/* Backend name from argv[1], or exits with a usage message. */
const char *test_backend_from_args(int argc, char **argv);

#endif
