/* metrics.h — the relay's counters in Prometheus text format over HTTP
 * (libmicrohttpd), for `acemq relay --metrics host:port`. Built into the
 * acemq tool, not the library, so libacemq needs no HTTP server. */
#ifndef ACEMQ_RELAY_METRICS_H
#define ACEMQ_RELAY_METRICS_H

#include <stddef.h>
#include "acemq/relay.h"

typedef struct acemq__metrics acemq__metrics;

/* Serves GET /metrics on addr ("host:port", host an IPv4 address or
 * "localhost") from a thread of its own: r's counters, and whether the
 * broker holds b's connection blocked. 0, or -1 with why in err. */
int acemq__metrics_start(acemq__metrics **out, const char *addr, acemq_relay *r,
                         const acemq_broker *b, char *err, size_t err_cap);
void acemq__metrics_stop(acemq__metrics *m);

/* The page itself, written into buf: its length, or the length it would have
 * had when cap is too small (snprintf's rule). */
size_t acemq__metrics_render(const acemq_relay_stats *s, int broker_blocked, char *buf, size_t cap);

#endif
