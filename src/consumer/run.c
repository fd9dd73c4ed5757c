/* run.c — the consumer's loop: take the deliveries in hand, settle them as
 * one batch (deliver.c), and give back the held deliveries whose wait is
 * over.
 *
 * Held deliveries stay unacknowledged in the consumer's hands, each taking
 * one of the prefetch's places, until their due time: an IN_PROGRESS one
 * then goes back to the queue, a failed one is published back with its
 * failures counted. Holding them here, rather than in a delay queue on the
 * broker, needs no topology on the broker and works on every queue type;
 * and a held message never loops through the broker faster than once per
 * delay. When the connection is lost the held ones are void: the broker
 * delivers them again.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "consumer/consumer_internal.h"

int64_t acemq__consumer_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int acemq__consumer_hold(acemq_consumer *c, acemq_delivery *d, int delay_ms, int retry,
                         int failures, const char *why)
{
    char *w = NULL;
    if (why && !(w = strdup(why))) return ACEMQ_ENOMEM;
    if (c->n_held == c->cap_held) {
        size_t cap = c->cap_held ? c->cap_held * 2 : 16;
        acemq__held *h = realloc(c->held, cap * sizeof *h);
        if (!h) {
            free(w);
            return ACEMQ_ENOMEM;
        }
        c->held = h;
        c->cap_held = cap;
    }
    acemq__held *h = &c->held[c->n_held++];
    h->d = d;
    h->due_ms = acemq__consumer_now_ms() + delay_ms;
    h->retry = retry;
    h->failures = failures;
    h->why = w; /* owned by the list now */
    return 0;
}

/* Drops every held delivery: after a lost connection they are void. */
static void drop_held(acemq_consumer *c)
{
    for (size_t i = 0; i < c->n_held; i++) {
        acemq_delivery_free(c->held[i].d);
        free(c->held[i].why);
    }
    c->n_held = 0;
}

/* Gives back the held deliveries that are due (all of them when all is
 * set); an error when the connection broke meanwhile. */
static int release_due(acemq_consumer *c, int all)
{
    int64_t now = acemq__consumer_now_ms();
    size_t keep = 0;
    int rc = 0;
    for (size_t i = 0; i < c->n_held; i++) {
        acemq__held h = c->held[i];
        if (rc != 0 || (!all && h.due_ms > now)) {
            c->held[keep++] = h;
            continue;
        }
        rc = h.retry ? acemq__consumer_retry(c, h.d, h.failures, h.why)
                     : acemq__consumer_requeue(c, h.d);
        free(h.why);
    }
    c->n_held = keep;
    int flushed = acemq__consumer_flush_acks(c);
    return rc ? rc : flushed;
}

/* How long next may wait: until the first held delivery is due, at most
 * 100 ms, so that a stop request is seen soon. */
static int wait_ms(const acemq_consumer *c)
{
    int64_t wait = 100, now = acemq__consumer_now_ms();
    for (size_t i = 0; i < c->n_held; i++) {
        int64_t left = c->held[i].due_ms - now;
        if (left < wait) wait = left < 0 ? 0 : left;
    }
    return (int)wait;
}

static int stopping(acemq_consumer *c, volatile sig_atomic_t *stop)
{
    return (stop && *stop) || atomic_load(&c->stop_requested);
}

int acemq_consumer_run(acemq_consumer *c, volatile sig_atomic_t *stop)
{
    if (!c) return ACEMQ_EINVAL;
    int rc = acemq_broker_consume(c->in, c->queue, c->opts.prefetch);
    if (rc != 0) {
        snprintf(c->errmsg, sizeof c->errmsg, "consuming %s: %s", c->queue,
                 acemq_broker_errmsg(c->in));
        return rc;
    }
    acemq__consumer_log(c, "consuming", "queue", c->queue, NULL, NULL);
    while (!stopping(c, stop)) {
        if (release_due(c, 0) != 0) drop_held(c);
        acemq_delivery *d = NULL;
        rc = acemq_broker_next(c->in, wait_ms(c), &d);
        if (rc == ACEMQ_ENOENT) continue;
        if (rc != 0) {
            /* Lost: what is in hand is void, and the next call reconnects
             * (waiting out the broker handle's back-off) and consumes again. */
            snprintf(c->errmsg, sizeof c->errmsg, "broker: %s", acemq_broker_errmsg(c->in));
            acemq__consumer_log(c, "broker_lost", "error", acemq_err_name(rc), "reason",
                                acemq_broker_errmsg(c->in));
            drop_held(c);
            continue;
        }
        /* With it, whatever else has arrived: one batch for the store. */
        acemq_delivery *batch[ACEMQ__BATCH_MAX] = {d};
        size_t n = 1;
        while (n < ACEMQ__BATCH_MAX && (rc = acemq_broker_next(c->in, 0, &d)) == 0)
            batch[n++] = d;
        for (size_t i = 0; i < n; i++)
            acemq__consumer_count(c, &c->stats.delivered);
        int lost = rc != 0 && rc != ACEMQ_ENOENT;
        if (acemq__consumer_deliver(c, batch, n) != 0 || lost) drop_held(c);
    }
    /* What is held goes back now rather than when its wait ends. */
    if (release_due(c, 1) != 0) drop_held(c);
    acemq__consumer_log(c, "stopped", "queue", c->queue, NULL, NULL);
    return 0;
}
