/* memory_broker.h — the in-process broker's test hooks.
 *
 * "memory:NAME" names a broker that lives as long as a handle on it is open;
 * every handle on the same NAME shares its queue of accepted messages, so a
 * test can open its own handle beside the relay's, inject faults, and read
 * what arrived. "memory:" alone is a private broker.
 */
#ifndef ACEMQ_MEMORY_BROKER_H
#define ACEMQ_MEMORY_BROKER_H

#include <stddef.h>
#include "acemq/broker.h"

typedef enum acemq__broker_fault {
    ACEMQ__FAULT_NONE = 0,
    ACEMQ__FAULT_REFUSE,     /* the connection is refused: publish returns ACEMQ_EIO */
    ACEMQ__FAULT_NACK,       /* messages are refused with basic.nack */
    ACEMQ__FAULT_DROP,       /* the connection drops after `after` more messages are
                                sent: every confirm not yet told is lost, in this send
                                and in earlier ones still outstanding */
    ACEMQ__FAULT_NO_CONFIRM, /* messages are kept, confirms never come (timeout) */
} acemq__broker_fault;

/* Arms fault: REFUSE and NO_CONFIRM for the next `times` send (or publish)
 * calls; NACK for `times` messages once `after` more have passed normally;
 * DROP once, after `after` more messages. ACEMQ__FAULT_NONE clears it. A
 * handle tells its confirms (oldest first) when its window is full or when
 * a send is collected, so they can be in flight across sends. */
void acemq__memory_broker_fault(acemq_broker *b, int fault, int times, size_t after);
/* Messages to this exchange are unroutable: RETURNED with "NO_ROUTE". */
void acemq__memory_broker_unroutable(acemq_broker *b, const char *exchange);

/* A copy of one message the broker took. */
typedef struct acemq__stored_msg {
    char message_id[256];
    char exchange[256];
    char routing_key[256];
    int attempts;
    size_t body_len;
} acemq__stored_msg;

size_t acemq__memory_broker_count(acemq_broker *b);
/* Copies message i (0 = first taken) into *out: 0, or ACEMQ_ENOENT. */
int acemq__memory_broker_get(acemq_broker *b, size_t i, acemq__stored_msg *out);

#endif
