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
    /* A second handle on the same outbox, or NULL. Given one, run() marks
     * each batch on a thread of its own while the next batch is claimed and
     * published (the relay owns neither handle). step() always marks inline. */
    acemq_outbox *mark_outbox;
    /* A third handle on the same outbox, or NULL; used only with
     * mark_outbox. Given one, run() claims the next batch on a thread of
     * its own while the current one is sent, instead of between sends. */
    acemq_outbox *claim_outbox;
    /* A fourth handle on the same outbox, or NULL. Given one, run() counts
     * the outbox for the gauges (stats.pending, dead, oldest_age_ms) on a
     * thread of its own, so the publishing loop never waits for a count;
     * without one it counts between batches. A count reads every pending
     * record (0.65 s for 2,000,000 on SQLite), so after each the next waits
     * twenty times as long, and at least a second. */
    acemq_outbox *gauge_outbox;
    /* 0 (default): a claim and a mark take turns, whichever handles and
     * threads they run on, which leaves more CPU to a broker on the same
     * machine. 1: they may run at once, for a database with CPUs of its own
     * and a broker that confirms faster than the turns keep up with (tens
     * of thousands of messages a second). */
    int parallel_db;
} acemq_relay_options;

ACEMQ_EXTERN void acemq_relay_options_init(acemq_relay_options *o);

/* Confirm latency buckets, in milliseconds (upper bounds; the last is +Inf). */
#define ACEMQ_RELAY_LATENCY_BUCKETS 12
ACEMQ_EXTERN extern const double acemq_relay_latency_bounds_ms[ACEMQ_RELAY_LATENCY_BUCKETS - 1];

typedef struct acemq_relay_stats {
    uint64_t published, failed, returned, nacked, unknown, released, batches;
    uint64_t latency_count[ACEMQ_RELAY_LATENCY_BUCKETS]; /* not cumulative */
    double latency_sum_ms;
    /* From the outbox, refreshed as the relay goes (see gauge_outbox). */
    uint64_t pending, dead;
    int64_t oldest_age_ms;
} acemq_relay_stats;

typedef struct acemq_relay acemq_relay;

/* The relay uses ob and b and does not own them: close them after the relay. */
ACEMQ_EXTERN int acemq_relay_new(acemq_relay **out, acemq_outbox *ob, acemq_broker *b,
                                 const acemq_relay_options *o);
ACEMQ_EXTERN void acemq_relay_free(acemq_relay *r);

/* One round: claim, publish, mark. *claimed (may be NULL) gets how many
 * records were claimed (0: nothing was due). */
ACEMQ_EXTERN int acemq_relay_step(acemq_relay *r, size_t *claimed);

/* Steps while there is work and waits for more (NOTIFY on PostgreSQL, PRAGMA
 * data_version on SQLite) until *stop becomes nonzero; the step in progress
 * then finishes (its confirms awaited, its records marked), a batch claimed
 * ahead and not yet sent is released, and run returns 0. With mark_outbox,
 * the confirms of one batch are still coming in while the next is sent.
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
 * With r NULL, why the last acemq_relay_new in this thread failed. */
ACEMQ_EXTERN const char *acemq_relay_errmsg(const acemq_relay *r);

#ifdef __cplusplus
}
#endif
#endif
