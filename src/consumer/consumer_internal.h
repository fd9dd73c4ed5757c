/* consumer_internal.h — the consumer's state, shared by its files:
 * consumer.c (open, close, counters), run.c (the loop and the held
 * deliveries), deliver.c (one delivery, from key to settlement), keeper.c
 * (lease renewal), settle.c (publishing retries and dead letters), key.c
 * (the key expression).
 */
#ifndef ACEMQ_CONSUMER_INTERNAL_H
#define ACEMQ_CONSUMER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "acemq/consumer.h"

#define ACEMQ__CONSUMER_REASON_MAX 1000

/* A delivery the consumer keeps in hand for a while before it gives it
 * back: republished for another attempt (retry), or returned to the queue
 * (an IN_PROGRESS answer or a store error). */
typedef struct acemq__held {
    acemq_delivery *d;
    int64_t due_ms; /* monotonic */
    int retry;      /* 1: publish back with failures counted; 0: requeue */
    int failures;   /* retry: the count the copy carries */
    char *why;      /* retry: the copy's x-acemq-error (owned), or NULL for none */
} acemq__held;

/* One claim the keeper renews. */
typedef struct acemq__keeper_slot {
    char *key;
    size_t key_len, key_cap;
    uint64_t token;
    int64_t renewed_ms; /* monotonic: when the claim was taken or last renewed */
    int active;         /* renewed */
    int held;           /* the caller's until it drops it (a lost claim is no longer active) */
    int lost;           /* the store refused a renewal as stale */
} acemq__keeper_slot;

/* The lease keeper (keeper.c): from its claim until its confirm or release,
 * a thread of its own renews each claim about every third of the lease, so
 * a batch whose handlers run longer than the lease is not taken over while
 * the consumer lives. */
typedef struct acemq__keeper {
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC; signalled only to quit */
    int quit;
    acemq__keeper_slot *slot;
    size_t n;
} acemq__keeper;

/* The most deliveries settled together: one claim call and one confirm
 * call for all of them (the store's batch calls take 64 at a time). */
#define ACEMQ__BATCH_MAX 64

struct acemq_consumer {
    acemq_consumer_options opts;
    acemq_broker_options broker_opts;
    char *broker_url, *queue, *key_expr, *dlx;
    acemq_idem *store;
    acemq_broker *in;  /* consumes */
    acemq_broker *out; /* publishes retries and dead letters; opened when first needed */
    acemq__held *held;
    size_t n_held, cap_held;
    /* Deliveries to acknowledge, in the order their acks were decided:
     * sent together by acemq__consumer_flush_acks. */
    acemq_delivery *acks[ACEMQ__BATCH_MAX];
    size_t n_acks;
    acemq__keeper keeper;
    atomic_int stop_requested;
    /* The message in the handler's hands: its confirm and its reason. */
    int confirmed;    /* acemq_consumer_confirm succeeded */
    int stale;        /* acemq_consumer_confirm answered ACEMQ_ESTALE */
    int current_slot; /* the keeper's slot of the message in the handler's hands */
    char reason[ACEMQ__CONSUMER_REASON_MAX + 1];
    unsigned char *result; /* ACEMQ_IDEM_RESULT_MAX bytes: a duplicate's stored result */
    pthread_mutex_t stats_lock;
    acemq_consumer_stats stats;
    char errmsg[512];
};

/* deliver.c: settles ds[0..n) (n <= ACEMQ__BATCH_MAX) one way or another;
 * each is then owned by the held list or freed. An error only for a broken
 * broker connection (the caller drops what it holds); everything else is
 * handled. */
int acemq__consumer_deliver(acemq_consumer *c, acemq_delivery **ds, size_t n);

/* message.c: the failures counted in d's x-acemq-failures header (0
 * without it); its x-acemq-error (malloc'd), or NULL; and view, d as first
 * published, returning the parsed headers view points into (json_decref
 * them after), or NULL when d is no copy. */
int acemq__consumer_failures_of(const acemq_delivery *d);
char *acemq__consumer_error_of(const acemq_delivery *d);
void *acemq__consumer_as_published(const acemq_delivery *d, acemq_delivery *view);

/* run.c: keeps d in hand until now + delay_ms (why, for a retry: copied,
 * may be NULL). ACEMQ_ENOMEM leaves d with the caller. */
int acemq__consumer_hold(acemq_consumer *c, acemq_delivery *d, int delay_ms, int retry,
                         int failures, const char *why);
int64_t acemq__consumer_now_ms(void);

/* settle.c: publishes a copy of d back to the queue with failures counted
 * (and why as x-acemq-error unless NULL), then acknowledges d; or, when
 * the copy is not confirmed, requeues d. */
int acemq__consumer_retry(acemq_consumer *c, acemq_delivery *d, int failures, const char *why);
/* Sends d to the dead-letter exchange with why and failures, then
 * acknowledges it; or, without one, rejects it without requeue. A copy the
 * broker does not confirm leaves d held, then published back to the queue
 * with failures and why, to be dead-lettered again without another run of
 * the handler (deliver.c). */
int acemq__consumer_dead_letter(acemq_consumer *c, acemq_delivery *d, const char *why,
                                int failures);
/* Takes d to be acknowledged with the others of its batch at the next
 * flush, which frees it (a stale delivery is only freed). An error only for
 * a broken connection, from a flush the list needed to make room. */
int acemq__consumer_ack(acemq_consumer *c, acemq_delivery *d);
/* Acknowledges the deliveries taken by acemq__consumer_ack, in one write
 * (acemq_broker_ack_many), and frees them: an error only for a broken
 * connection. */
int acemq__consumer_flush_acks(acemq_consumer *c);
/* Gives d back to the queue and frees it. */
int acemq__consumer_requeue(acemq_consumer *c, acemq_delivery *d);

/* key.c: the key of d under expr into *out (malloc'd, NUL-terminated,
 * *len bytes): 0; ACEMQ_ENOENT with why when d lacks a part; ACEMQ_ENOMEM.
 * acemq__consumer_key_check: 0 when expr is well formed, else ACEMQ_EINVAL
 * with why. */
int acemq__consumer_key(const char *expr, const acemq_delivery *d, char **out, size_t *len,
                        const char **why);
int acemq__consumer_key_check(const char *expr, const char **why);

/* keeper.c */
int acemq__keeper_start(acemq_consumer *c);
void acemq__keeper_stop(acemq__keeper *k);
/* Renews key's claim from now until it is dropped: its slot, or -1 on
 * ENOMEM (the claim then runs on its first lease alone). */
int acemq__keeper_add(acemq__keeper *k, const char *key, size_t key_len, uint64_t token);
/* Stops renewing slot (-1: nothing); 1 when a renewal was refused as stale
 * meanwhile. */
int acemq__keeper_drop(acemq__keeper *k, int slot);

/* consumer.c */
void acemq__consumer_count(acemq_consumer *c, uint64_t *counter);
void acemq__consumer_latency(acemq_consumer *c, double ms);
void acemq__consumer_log(acemq_consumer *c, const char *event, const char *k1, const char *v1,
                         const char *k2, const char *v2);

#endif
