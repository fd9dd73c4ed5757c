/* gauges.h — the relay's outbox gauges (stats.pending, dead, oldest_age_ms):
 * how often to count, and a thread that counts on a handle of its own.
 *
 * Counting is not cheap: the query reads every pending record, so on a
 * large backlog, just when the relay has the most to drain, counting often
 * would take its time from publishing. A count therefore waits twenty
 * times its own duration before the next (a twentieth of one connection's
 * time at most, never more often than once a second), and with a handle of
 * its own it runs on a thread, where the publishing loop never waits for it.
 */
#ifndef ACEMQ_RELAY_GAUGES_H
#define ACEMQ_RELAY_GAUGES_H

#include <pthread.h>

#include "acemq/outbox.h"
#include "acemq/relay.h"
#include "relay/worker.h"

/* Never more often than this. */
#define ACEMQ__GAUGES_MIN_INTERVAL_MS 1000.0
/* The wait after a count, in multiples of what the count took. */
#define ACEMQ__GAUGES_COST_FACTOR 20.0

/* CLOCK_MONOTONIC, in milliseconds. */
double acemq__gauges_now_ms(void);

/* Milliseconds from the end of a count that took took_ms to the next. */
double acemq__gauges_interval_ms(double took_ms);

/* Counts once on ob and, when that worked, stores the gauges in *stats
 * under *lock; returns how long the count took, in milliseconds. A failed
 * count leaves the last gauges as they were (the next call tries again). */
double acemq__gauges_refresh(acemq_outbox *ob, pthread_mutex_t *lock, acemq_relay_stats *stats);

typedef struct acemq__gauges {
    acemq_outbox *ob;
    pthread_mutex_t *stats_lock;
    acemq_relay_stats *stats;
    acemq__worker w; /* its cv on CLOCK_MONOTONIC */
    int quit;
} acemq__gauges;

/* Starts a thread that refreshes *stats from ob now and then at the
 * intervals above: 0, or ACEMQ_ENOMEM when it could not be started. */
int acemq__gauges_start(acemq__gauges *g, acemq_outbox *ob, pthread_mutex_t *stats_lock,
                        acemq_relay_stats *stats);
/* Stops the thread (a count in progress is finished first) and joins it. */
void acemq__gauges_stop(acemq__gauges *g);

#endif
