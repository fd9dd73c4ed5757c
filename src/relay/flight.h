/* flight.h — a claimed batch copied into the relay's own memory, with the
 * broker messages and results that point into it: what stays valid while
 * the batch's confirms are in flight and the outbox handle's buffer is
 * already reused by the next claim. */
#ifndef ACEMQ_RELAY_FLIGHT_H
#define ACEMQ_RELAY_FLIGHT_H

#include <stddef.h>

#include "acemq/broker.h"
#include "acemq/outbox.h"

typedef struct acemq__flight {
    size_t n, cap;
    acemq_outbox_msg *recs; /* copies; their strings and bodies live in text */
    acemq_broker_msg *msgs; /* recs as the broker takes them */
    acemq_publish_result *results;
    char *text;
    size_t text_cap;
} acemq__flight;

/* Copies n claimed records: 0 or ACEMQ_ENOMEM (then f holds nothing). */
int acemq__flight_fill(acemq__flight *f, const acemq_outbox_msg *m, size_t n);
void acemq__flight_free(acemq__flight *f);

#endif
