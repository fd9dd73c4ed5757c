/* broker_self.h — the in-process broker's state, shared by its two files:
 * broker.c takes published messages and tells their confirms, consume.c
 * keeps queues and hands their messages to consumers. Internal to
 * src/backends/memory/.
 */
#ifndef ACEMQ_BACKENDS_MEMORY_BROKER_SELF_H
#define ACEMQ_BACKENDS_MEMORY_BROKER_SELF_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/test_control.h"
#include "broker/broker_backend.h"

typedef struct mq_queue mq_queue; /* consume.c */

typedef struct shared_broker {
    char name[128];
    int refs;
    pthread_mutex_t lock;
    acemq__stored_msg *msgs;
    size_t n, cap;
    int fault, fault_times; /* calls for REFUSE and NO_CONFIRM, messages for NACK */
    size_t fault_after;     /* messages that pass before a NACK or DROP hits */
    char (*unroutable)[256];
    size_t n_unroutable;
    /* Queues declared by tests (acemq__memory_broker_declare), deleted ones
     * included: a consumer may still point at one. arrived is signalled
     * whenever a queue gains a message or a consumer loses its connection. */
    mq_queue *queues;
    pthread_cond_t arrived;
    struct shared_broker *next;
} shared_broker;

/* An outcome the broker decided and has not told yet. */
typedef struct held {
    acemq_publish_result *res;
    int outcome;
    const char *reason;
    int64_t sent_at_us; /* for confirm_us, as a real broker's is measured */
} held;

/* A delivery a consumer holds and has not settled. */
typedef struct unacked {
    uint64_t tag;
    struct mq_msg *m;
    mq_queue *q;
} unacked;

/* One handle: a connection to the shared broker, with its unanswered
 * confirms in publish order and where each outstanding send ends in them;
 * and, once it consumes, its consumer. */
typedef struct mem_handle {
    struct shared_broker *sh;
    held *q;
    size_t q_head, q_len, q_cap;
    size_t q_seq;                        /* outcomes ever queued */
    size_t ends[ACEMQ_BROKER_MAX_SENDS]; /* q_seq after each outstanding send */
    size_t ends_head, n_ends;
    size_t answered_seq; /* outcomes ever told */

    /* Consuming (consume.c), all under sh->lock. queue is the name given to
     * consume, cq the queue consumed now (NULL: none, after a cancel or a
     * lost connection until the next call consumes again). cut: the
     * connection was cut (acemq__memory_broker_cut) and the handle has not
     * noticed yet; down: it noticed, and the next call reconnects. why: a
     * channel the broker closed (an unknown tag settled), told by the next
     * call. */
    char queue[256];
    int prefetch;
    mq_queue *cq;
    int cut, down;
    char why[160];
    uint64_t next_tag;
    unacked *un;
    size_t n_un, cap_un;
} mem_handle;

/* consume.c: queue messages published to a bound exchange and key (under
 * s->lock); free the queues with the broker; give back what a closing
 * handle holds. */
int acemq__mem_route(shared_broker *s, const acemq_broker_msg *m);
void acemq__mem_free_queues(shared_broker *s);
void acemq__mem_consumer_close(mem_handle *h);
int acemq__mem_consume(acemq_broker *b, const char *queue, int prefetch);
int acemq__mem_next(acemq_broker *b, int timeout_ms, acemq_delivery **out);
int acemq__mem_settle(acemq_broker *b, uint64_t tag, int how);
int acemq__mem_ack_many(acemq_broker *b, const uint64_t *tags, size_t n, int multiple);

#endif
