/* idem_url.h — what a runtime may ask the idempotency contract about a
 * store URL without opening it (`acemq route --check` does not create an
 * SQLite file to find out that its URL is fine). */
#ifndef ACEMQ_IDEM_URL_H
#define ACEMQ_IDEM_URL_H

#include <stddef.h>

/* 0 when url names a store this build has; ACEMQ_EURL with why (cut to
 * cap) otherwise: a malformed URL, or an unknown scheme and the known ones. */
int acemq__idem_url_check(const char *url, char *why, size_t cap);

#endif
