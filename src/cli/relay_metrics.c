/* relay_metrics.c — the page `acemq relay --metrics` serves: the relay's
 * counters, the outbox's gauges, whether the broker holds the connection
 * blocked, and the confirm latency. */
#include "cli/relay_metrics.h"

void acemq__relay_metrics_render(void *ctx, acemq__page *o)
{
    const acemq__relay_metrics_ctx *m = ctx;
    acemq_relay_stats s;
    acemq_relay_stats_get(m->relay, &s);
    acemq__page_counter(o, "acemq_relay_published_total",
                        "Records the broker confirmed, marked published.", s.published);
    acemq__page_counter(o, "acemq_relay_failed_total",
                        "Records marked failed (nacked or returned).", s.failed);
    acemq__page_counter(o, "acemq_relay_returned_total",
                        "Records the broker returned as unroutable.", s.returned);
    acemq__page_counter(o, "acemq_relay_nacked_total", "Records the broker refused (basic.nack).",
                        s.nacked);
    acemq__page_counter(o, "acemq_relay_unknown_total",
                        "Records with no confirm (timeout, lost connection): left to their lease.",
                        s.unknown);
    acemq__page_counter(o, "acemq_relay_released_total",
                        "Records given back unsent: the broker was unreachable, or an earlier "
                        "record of their ordering key was not confirmed.",
                        s.released);
    acemq__page_gauge(o, "acemq_outbox_pending",
                      "Records waiting to be published (claimed or not).", (double)s.pending);
    acemq__page_gauge(o, "acemq_outbox_dead", "Records past the attempt limit, kept for a person.",
                      (double)s.dead);
    acemq__page_gauge(o, "acemq_outbox_oldest_pending_age_seconds",
                      "Age of the oldest record still to publish.",
                      (double)s.oldest_age_ms / 1000.0);
    acemq__page_gauge(o, "acemq_relay_broker_blocked",
                      "1 while the broker holds the relay's connection blocked (a resource alarm).",
                      (double)acemq_broker_blocked(m->broker));
    acemq__page_histogram(o, "acemq_relay_confirm_latency_seconds",
                          "Time from publishing each record to the broker's confirm of it.",
                          s.latency_count, acemq_relay_latency_bounds_ms,
                          ACEMQ_RELAY_LATENCY_BUCKETS, s.latency_sum_ms);
}
