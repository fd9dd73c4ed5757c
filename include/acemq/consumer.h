/* acemq/consumer.h — the idempotent consumer: each message's effect once,
 * over a broker that delivers at least once.
 *
 * For each delivery the consumer finds the message's key, claims it in the
 * idempotency store and acts on the answer:
 *   CLAIMED            runs the handler; success: confirm, then acknowledge;
 *                      failure: release, and the message comes back after a
 *                      back-off, until max_attempts failures send it to the
 *                      dead-letter exchange with the reason;
 *   ALREADY_CONFIRMED  acknowledges without running the handler (a duplicate);
 *   IN_PROGRESS        holds the delivery for in_progress_delay_ms, then
 *                      gives it back to the queue; never acknowledges it;
 *   a store error      holds it as IN_PROGRESS does: nothing is acknowledged.
 * A message with no key goes to the dead-letter exchange at once; the
 * handler never runs unguarded. The claim's lease is renewed while the
 * handler runs, so a slow handler is not taken over. docs/consumer.md has
 * the whole story: the retry path, the headers, the inbox, what happens on
 * a crash at each step.
 *
 * Handler failures are counted in the header x-acemq-failures of the copy
 * the consumer publishes back to the queue for the next attempt, so the
 * count survives restarts and moves between consumers.
 */
#ifndef ACEMQ_CONSUMER_H
#define ACEMQ_CONSUMER_H

#include <signal.h>
#include <stdio.h>

#include "acemq/audit.h"
#include "acemq/broker.h"
#include "acemq/idem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acemq_consumer acemq_consumer;

/* One message the handler owns: the delivery as the broker gave it, its
 * key, the claim's fencing token, and how many times a handler failed on
 * it before (0 the first time). */
typedef struct acemq_consumer_msg {
    const acemq_delivery *delivery;
    const char *key; /* NUL-terminated; key_len bytes, which may hold NULs */
    size_t key_len;
    uint64_t token;
    int failures;
} acemq_consumer_msg;

/* The work: 0 is success, anything else a failure (acemq_consumer_fail
 * says why). Runs on the thread that called acemq_consumer_run. */
typedef int (*acemq_consumer_handler)(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m);

/* What a batch handler says about one message: failed 0 is success, 1 a
 * failure (counted, retried, dead-lettered past max_attempts), 2 not
 * handled at all (a worker that died before it got to the message: the
 * claim is released and the message given back to the queue, no failure
 * counted). why (may be NULL) says why, and stays valid until the batch
 * handler is called again. */
typedef struct acemq_consumer_outcome {
    int failed;
    const char *why;
} acemq_consumer_outcome;

/* The work for the claimed messages of a batch at once, in delivery order:
 * out[i] for m[i]. For handlers that keep several messages in flight (a
 * child process fed through a pipe, a remote service); instead of
 * `handler`, and without acemq_consumer_confirm (the consumer confirms). */
typedef void (*acemq_consumer_batch_handler)(void *ctx, acemq_consumer *c,
                                             const acemq_consumer_msg *m, size_t n,
                                             acemq_consumer_outcome *out);

/* Told about each duplicate, with the result stored at its confirm
 * (result NULL and result_len 0 when none was stored). m->token is 0. */
typedef void (*acemq_consumer_duplicate_fn)(void *ctx, const acemq_consumer_msg *m,
                                            const void *result, size_t result_len);

typedef struct acemq_consumer_options {
    acemq_consumer_handler handler;             /* this, or batch_handler */
    acemq_consumer_batch_handler batch_handler; /* this, or handler */
    void *ctx;
    acemq_consumer_duplicate_fn on_duplicate; /* NULL: none */
    int prefetch;                             /* unacknowledged deliveries at most; default 32 */
    int64_t lease_ms;         /* each claim's lease, renewed every third of it; default 30,000 */
    int max_attempts;         /* handler runs before dead-lettering; default 5 */
    int retry_delay_ms;       /* wait after the first failure, doubling; default 1,000 */
    int retry_delay_max_ms;   /* default 60,000 */
    int in_progress_delay_ms; /* how long an IN_PROGRESS delivery waits; default 1,000 */
    /* The key: text with ${message_id}, ${routing_key} and ${header.NAME}
     * substituted, "$$" for a "$". NULL: "${message_id}". A message that
     * lacks any of them has no key. */
    const char *key;
    /* Where failed and keyless messages go, published with the reason
     * (x-acemq-error), the failures (x-acemq-failures) and the queue
     * (x-acemq-queue) in headers, under their own routing key. NULL: they are
     * rejected without requeue, to the queue's own dead-letter exchange
     * (x-dead-letter-exchange), or dropped by the broker when it has none. */
    const char *dead_letter_exchange;
    /* A message audit in front of the store, not owned: a key that is an
     * audit id (<producer>:<sequence>) and that the audit saw confirmed is
     * acknowledged without asking the store. Its bit is set only once the
     * store confirmed the key. Used by the consumer's thread only. */
    acemq_audit *audit;
    /* The inbox: the store on the handler's own database connection, opened
     * with ACEMQ_IDEM_CONFIRM_IN_CALLER_TX, not owned. The handler calls
     * acemq_consumer_confirm inside its transaction, before its COMMIT. */
    acemq_idem *inbox;
    const acemq_broker_options *broker; /* NULL: the defaults */
    FILE *log;                          /* logfmt lines; NULL: none */
    int verbose;                        /* 1: a line per message too */
} acemq_consumer_options;

ACEMQ_EXTERN void acemq_consumer_options_init(acemq_consumer_options *o);

/* Handler latency buckets, in milliseconds (upper bounds; the last is +Inf). */
#define ACEMQ_CONSUMER_LATENCY_BUCKETS 12
ACEMQ_EXTERN extern const double
    acemq_consumer_latency_bounds_ms[ACEMQ_CONSUMER_LATENCY_BUCKETS - 1];

typedef struct acemq_consumer_stats {
    uint64_t delivered;     /* deliveries taken from the broker */
    uint64_t processed;     /* handler succeeded, confirmed, acknowledged */
    uint64_t duplicates;    /* ALREADY_CONFIRMED (or the audit's hit): acknowledged */
    uint64_t in_progress;   /* IN_PROGRESS answers: held, then given back */
    uint64_t failed;        /* handler failures */
    uint64_t retried;       /* failed messages published back for another attempt */
    uint64_t dead_lettered; /* sent to the dead-letter exchange (or rejected there) */
    uint64_t stale;         /* confirms refused: the lease was lost to another consumer */
    uint64_t store_errors;  /* claims the store failed: held, then given back */
    uint64_t renewals;      /* leases renewed while a handler ran */
    uint64_t latency_count[ACEMQ_CONSUMER_LATENCY_BUCKETS]; /* handler runs, not cumulative */
    double latency_sum_ms;
} acemq_consumer_stats;

/* A consumer of queue on the broker at broker_url, with store (not owned:
 * close it after the consumer). It opens its own broker connections: one
 * that consumes, and one, when first needed, that publishes retries and
 * dead letters with confirms. Nothing is consumed before run. */
ACEMQ_EXTERN int acemq_consumer_open(acemq_consumer **out, const char *broker_url,
                                     const char *queue, acemq_idem *store,
                                     const acemq_consumer_options *o);
ACEMQ_EXTERN void acemq_consumer_close(acemq_consumer *c);

/* Consumes until *stop becomes nonzero (or acemq_consumer_stop): the
 * message being handled then finishes, the held ones go back to the queue,
 * and run returns 0. A lost broker connection is reconnected with back-off;
 * the deliveries in hand then are left to the broker, which delivers them
 * again. Returns an error only when the queue cannot be consumed at all
 * (ACEMQ_ENOENT: no such queue; ACEMQ_EAUTH). */
ACEMQ_EXTERN int acemq_consumer_run(acemq_consumer *c, volatile sig_atomic_t *stop);

/* Asks run to stop, from any thread. */
ACEMQ_EXTERN void acemq_consumer_stop(acemq_consumer *c);

/* Inside the handler: confirms m now, storing result (may be NULL) for
 * duplicates to get. With the inbox it writes in the handler's open
 * transaction, which must then commit; without, it commits on its own.
 * 0; ACEMQ_ESTALE when the lease was lost to another consumer (roll back);
 * ACEMQ_ENOTX (inbox, no transaction open); another error from the store.
 * After a 0 the consumer does not confirm again. */
ACEMQ_EXTERN int acemq_consumer_confirm(acemq_consumer *c, const acemq_consumer_msg *m,
                                        const void *result, size_t result_len);

/* Inside the handler, before it returns a failure: why, for the log and
 * the dead letter's x-acemq-error (copied; at most 1,000 bytes kept). */
ACEMQ_EXTERN void acemq_consumer_fail(acemq_consumer *c, const char *why);

/* A consistent copy of the counters; safe from any thread. */
ACEMQ_EXTERN void acemq_consumer_stats_get(acemq_consumer *c, acemq_consumer_stats *out);

/* The last error on c; with c NULL, why the last acemq_consumer_open in
 * this thread failed. */
ACEMQ_EXTERN const char *acemq_consumer_errmsg(const acemq_consumer *c);

#ifdef __cplusplus
}
#endif
#endif
