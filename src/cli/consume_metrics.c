/* consume_metrics.c — the page `acemq consume --metrics` serves: what
 * became of the deliveries, and how long the handler took. */
#include "cli/consume_metrics.h"

#include <acemq/consumer.h>

void acemq__consume_metrics_render(void *ctx, acemq__page *o)
{
    acemq_consumer_stats s;
    acemq_consumer_stats_get(ctx, &s);
    acemq__page_counter(o, "acemq_consumer_delivered_total", "Deliveries taken from the broker.",
                        s.delivered);
    acemq__page_counter(o, "acemq_consumer_processed_total",
                        "Messages handled, confirmed and acknowledged.", s.processed);
    acemq__page_counter(o, "acemq_consumer_duplicates_total",
                        "Deliveries of messages confirmed before: acknowledged unhandled.",
                        s.duplicates);
    acemq__page_counter(o, "acemq_consumer_in_progress_total",
                        "Deliveries held by another consumer: held, then given back.",
                        s.in_progress);
    acemq__page_counter(o, "acemq_consumer_failed_total", "Handler runs that failed.", s.failed);
    acemq__page_counter(o, "acemq_consumer_retried_total",
                        "Failed messages published back for another attempt.", s.retried);
    acemq__page_counter(o, "acemq_consumer_dead_lettered_total",
                        "Messages sent to the dead-letter exchange.", s.dead_lettered);
    acemq__page_counter(o, "acemq_consumer_stale_total",
                        "Confirms refused because another consumer took the claim over.", s.stale);
    acemq__page_counter(o, "acemq_consumer_store_errors_total",
                        "Store calls that failed: the message was given back.", s.store_errors);
    acemq__page_histogram(
        o, "acemq_consumer_handler_latency_seconds", "Time each handler run took.", s.latency_count,
        acemq_consumer_latency_bounds_ms, ACEMQ_CONSUMER_LATENCY_BUCKETS, s.latency_sum_ms);
}
