/* broker_internal.h — what the broker contract offers the runtimes above it
 * (the relay) beyond the public API. Not a backend's header: a runtime
 * includes this, never broker_backend.h.
 */
#ifndef ACEMQ_BROKER_INTERNAL_H
#define ACEMQ_BROKER_INTERNAL_H

#include <signal.h>
#include "acemq/broker.h"

/* Watches flag (NULL: none) as acemq_broker_stop_waiting would be called
 * once it is set; the caller keeps flag valid until it watches NULL. */
void acemq__broker_watch_stop(acemq_broker *b, volatile sig_atomic_t *flag);

/* Calls fn (NULL: nobody) on each change of acemq_broker_blocked, on the
 * thread that publishes, with the broker's reason (or why it ended). */
void acemq__broker_watch_blocked(acemq_broker *b,
                                 void (*fn)(void *ctx, int blocked, const char *reason), void *ctx);

/* How many times acemq_broker_ack_many acknowledged with one basic.ack
 * with multiple set, over b's life: tests see the batch path taken. */
uint64_t acemq__broker_multiple_acks(const acemq_broker *b);

#endif
