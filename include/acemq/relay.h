/* acemq/relay.h — the relay: moves committed outbox records to a broker, at
 * least once.
 *
 * One step claims a batch (by lease, oldest first), publishes it with
 * publisher confirms, and marks each record by its outcome:
 *   confirmed          -> mark_published;
 *   nacked or returned -> mark_failed (back-off; dead past the attempt limit);
 *   unknown            -> nothing: the broker may have it, so the record's lease
 *                         runs out and it is published again (a duplicate the
 *                         consumer's idempotency store absorbs), never lost;
 *   not sent at all    -> released (the broker was unreachable, or an earlier
 *                         record of its ordering key in the batch was not
 *                         confirmed), due again at once.
 * A batch holds an ordering key's due records together; they are published
 * one unconfirmed at a time, in order (docs/outbox.md, "Ordering keys").
 * Several relays on one outbox share the work through the outbox's leases.
 */
#ifndef ACEMQ_RELAY_H
#define ACEMQ_RELAY_H

#include <signal.h>
#include <stdio.h>

#include "acemq/broker.h"
#include "acemq/outbox.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acemq_relay_options {
    size_t batch;     /* records per claim; default 100 */
    int64_t lease_ms; /* lease per claim; default 30,000; longer than a publish can take */
    int poll_ms;      /* how long to wait for new records before looking again; default 1,000 */
    FILE *log;        /* logfmt lines, one per event; NULL: none */
    int verbose;      /* 1: a line per batch too */
} acemq_relay_options;

ACEMQ_EXTERN void acemq_relay_options_init(acemq_relay_options *o);

/* Confirm latency buckets, in milliseconds (upper bounds; the last is +Inf). */
#define ACEMQ_RELAY_LATENCY_BUCKETS 12
ACEMQ_EXTERN extern const double acemq_relay_latency_bounds_ms[ACEMQ_RELAY_LATENCY_BUCKETS - 1];

typedef struct acemq_relay_stats {
    uint64_t published, failed, returned, nacked, unknown, released, batches;
    uint64_t latency_count[ACEMQ_RELAY_LATENCY_BUCKETS]; /* not cumulative */
    double latency_sum_ms;
    /* From the outbox, refreshed as the relay goes. */
    uint64_t pending, dead;
    int64_t oldest_age_ms;
} acemq_relay_stats;

typedef struct acemq_relay acemq_relay;

/* A relay on the outbox at outbox_url (acemq_outbox_open's URL; oo as
 * there, NULL for the defaults) and on b, which it does not own: close b
 * after the relay. The relay opens its own connections to the outbox, as
 * many as its threads use, and closes them in acemq_relay_free. run() sends
 * the next batch while the confirms of the last are still coming in, and
 * counts the gauges without holding up the sending. */
ACEMQ_EXTERN int acemq_relay_open(acemq_relay **out, const char *outbox_url,
                                  const acemq_outbox_options *oo, acemq_broker *b,
                                  const acemq_relay_options *o);
/* A relay on one outbox handle the caller has: it uses ob and b and does
 * not own them (close them after the relay). run() claims, publishes and
 * marks one batch at a time on ob, as step() does. */
ACEMQ_EXTERN int acemq_relay_new(acemq_relay **out, acemq_outbox *ob, acemq_broker *b,
                                 const acemq_relay_options *o);
ACEMQ_EXTERN void acemq_relay_free(acemq_relay *r);

/* One round: claim, publish, mark. *claimed (may be NULL) gets how many
 * records were claimed (0: nothing was due). */
ACEMQ_EXTERN int acemq_relay_step(acemq_relay *r, size_t *claimed);

/* Steps while there is work and waits for more (NOTIFY on PostgreSQL, PRAGMA
 * data_version on SQLite) until *stop becomes nonzero; the step in progress
 * then finishes (its confirms awaited, its records marked), a batch claimed
 * ahead and not yet sent is released, and run returns 0.
 * A failing outbox is retried after poll_ms; a failing broker backs off.
 * While the broker holds the connection blocked (a resource alarm: see
 * acemq_broker_blocked) the relay waits for the alarm to clear; *stop ends
 * that wait too, leaving what was in flight to its lease. */
ACEMQ_EXTERN int acemq_relay_run(acemq_relay *r, volatile sig_atomic_t *stop);

/* Asks run() to stop as *stop does, from any thread (a signal handler sets
 * *stop; another thread calls this). It also calls acemq_broker_stop_waiting
 * on the relay's broker handle. */
ACEMQ_EXTERN void acemq_relay_stop(acemq_relay *r);

/* A consistent copy of the counters; safe from any thread. */
ACEMQ_EXTERN void acemq_relay_stats_get(acemq_relay *r, acemq_relay_stats *out);

/* The last error on r: which call failed and why, in the outbox's or the
 * broker's words; "" when none. A step that succeeds leaves it as it was.
 * With r NULL, why the last acemq_relay_open or acemq_relay_new in this
 * thread failed. */
ACEMQ_EXTERN const char *acemq_relay_errmsg(const acemq_relay *r);

#ifdef __cplusplus
}
#endif
#endif
