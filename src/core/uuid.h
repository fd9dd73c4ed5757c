/* uuid.h — the UUIDv7 generator as the core declares it, so that core/uuid.c
 * needs no header of the layers above. acemq/outbox.h declares the same
 * exported function for the library's users (ACEMQ_OUTBOX_UUID_LEN there
 * equals ACEMQ__UUID_LEN; outbox/record.c checks it).
 */
#ifndef ACEMQ_CORE_UUID_H
#define ACEMQ_CORE_UUID_H

#include "acemq/common.h"

#define ACEMQ__UUID_LEN 36 /* characters, without the NUL */

/* Writes a new UUIDv7 (RFC 9562), ACEMQ__UUID_LEN characters and a NUL,
 * into buf: 0, or a negative error. */
ACEMQ_EXTERN int acemq_uuid7(char buf[ACEMQ__UUID_LEN + 1]);

#endif
