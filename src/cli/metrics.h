/* metrics.h — GET /metrics over HTTP (libmicrohttpd) for `acemq relay
 * --metrics` and `acemq consume --metrics`, in Prometheus text format.
 * Built into the acemq tool, not the library, so libacemq needs no HTTP
 * server. Each command renders its own page (relay_metrics.c,
 * consume_metrics.c) with the helpers here.
 */
#ifndef ACEMQ_CLI_METRICS_H
#define ACEMQ_CLI_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* A page being written: like snprintf, len counts what would have been
 * written when cap is too small, so a first pass with cap 0 sizes it. */
typedef struct acemq__page {
    char *buf;
    size_t cap, len;
} acemq__page;

void acemq__page_put(acemq__page *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void acemq__page_counter(acemq__page *o, const char *name, const char *help, uint64_t v);
void acemq__page_gauge(acemq__page *o, const char *name, const char *help, double v);
/* A histogram of n buckets (not cumulative) with n - 1 upper bounds in
 * milliseconds, the last +Inf, and the sum in milliseconds; in seconds. */
void acemq__page_histogram(acemq__page *o, const char *name, const char *help,
                           const uint64_t *count, const double *bounds_ms, size_t n, double sum_ms);

/* Writes the page for ctx into o. */
typedef void (*acemq__page_render)(void *ctx, acemq__page *o);

typedef struct acemq__metrics acemq__metrics;

/* Serves GET /metrics on addr ("host:port", host an IPv4 address or
 * "localhost") from a thread of its own, each page rendered by render(ctx,
 * ...) on that thread. 0, or -1 with why in err. */
int acemq__metrics_start(acemq__metrics **out, const char *addr, acemq__page_render render,
                         void *ctx, char *err, size_t err_cap);
void acemq__metrics_stop(acemq__metrics *m);

#endif
