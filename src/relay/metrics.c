/* metrics.c — see metrics.h. libmicrohttpd runs the listener in its own
 * thread; each request copies the relay's counters under the relay's lock
 * (acemq_relay_stats_get) and renders them, so a scrape never waits on a
 * publish. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/metrics.h"

struct acemq__metrics {
    struct MHD_Daemon *daemon;
    acemq_relay *relay;
    const acemq_broker *broker;
};

typedef struct page_buf {
    char *buf;
    size_t cap, len;
} page_buf;

static void put(page_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(page_buf *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

static void counter(page_buf *o, const char *name, const char *help, uint64_t v)
{
    put(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

static void gauge(page_buf *o, const char *name, const char *help, double v)
{
    put(o, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

size_t acemq__metrics_render(const acemq_relay_stats *s, int broker_blocked, char *buf, size_t cap)
{
    page_buf o = {buf, cap, 0};
    counter(&o, "acemq_relay_published_total", "Records the broker confirmed, marked published.",
            s->published);
    counter(&o, "acemq_relay_failed_total", "Records marked failed (nacked or returned).",
            s->failed);
    counter(&o, "acemq_relay_returned_total", "Records the broker returned as unroutable.",
            s->returned);
    counter(&o, "acemq_relay_nacked_total", "Records the broker refused (basic.nack).", s->nacked);
    counter(&o, "acemq_relay_unknown_total",
            "Records with no confirm (timeout, lost connection): left to their lease.", s->unknown);
    counter(&o, "acemq_relay_released_total",
            "Records given back unsent: the broker was unreachable, or an earlier record "
            "of their ordering key was not confirmed.",
            s->released);
    gauge(&o, "acemq_outbox_pending", "Records waiting to be published (claimed or not).",
          (double)s->pending);
    gauge(&o, "acemq_outbox_dead", "Records past the attempt limit, kept for a person.",
          (double)s->dead);
    gauge(&o, "acemq_outbox_oldest_pending_age_seconds",
          "Age of the oldest record still to publish.", (double)s->oldest_age_ms / 1000.0);
    gauge(&o, "acemq_relay_broker_blocked",
          "1 while the broker holds the relay's connection blocked (a resource alarm).",
          (double)broker_blocked);
    const char *h = "acemq_relay_confirm_latency_seconds";
    put(&o,
        "# HELP %s Time from publishing each record to the broker's confirm of it.\n# TYPE %s "
        "histogram\n",
        h, h);
    uint64_t cumulative = 0;
    for (size_t k = 0; k < ACEMQ_RELAY_LATENCY_BUCKETS; k++) {
        cumulative += s->latency_count[k];
        if (k < ACEMQ_RELAY_LATENCY_BUCKETS - 1)
            put(&o, "%s_bucket{le=\"%g\"} %llu\n", h, acemq_relay_latency_bounds_ms[k] / 1000.0,
                (unsigned long long)cumulative);
        else
            put(&o, "%s_bucket{le=\"+Inf\"} %llu\n", h, (unsigned long long)cumulative);
    }
    put(&o, "%s_sum %.6f\n%s_count %llu\n", h, s->latency_sum_ms / 1000.0, h,
        (unsigned long long)cumulative);
    return o.len;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **req)
{
    (void)version, (void)upload, (void)upload_size, (void)req;
    acemq__metrics *m = cls;
    if (strcmp(method, "GET") != 0 || strcmp(url, "/metrics") != 0) {
        static const char nf[] = "only GET /metrics is served here\n";
        struct MHD_Response *r =
            MHD_create_response_from_buffer(sizeof nf - 1, (void *)nf, MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_NOT_FOUND, r);
        MHD_destroy_response(r);
        return rc;
    }
    acemq_relay_stats s;
    acemq_relay_stats_get(m->relay, &s);
    int blocked = acemq_broker_blocked(m->broker);
    size_t need = acemq__metrics_render(&s, blocked, NULL, 0) + 1;
    char *page = malloc(need);
    if (!page) return MHD_NO;
    size_t len = acemq__metrics_render(&s, blocked, page, need);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, page, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(page);
        return MHD_NO;
    }
    enum MHD_Result rc = MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    if (rc == MHD_YES) rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

int acemq__metrics_start(acemq__metrics **out, const char *addr, acemq_relay *r,
                         const acemq_broker *b, char *err, size_t err_cap)
{
    *out = NULL;
    const char *colon = strrchr(addr, ':');
    char host[64];
    if (!colon || (size_t)(colon - addr) >= sizeof host || colon == addr) {
        snprintf(err, err_cap, "--metrics wants host:port, got '%s'", addr);
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (!*(colon + 1) || *end || port < 1 || port > 65535) {
        snprintf(err, err_cap, "--metrics: bad port in '%s'", addr);
        return -1;
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (strcmp(host, "localhost") == 0) snprintf(host, sizeof host, "127.0.0.1");
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        snprintf(err, err_cap, "--metrics: '%s' is not an IPv4 address", host);
        return -1;
    }
    acemq__metrics *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    m->relay = r;
    m->broker = b;
    m->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                                 (uint16_t)port, NULL, NULL, answer, m, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&sa, MHD_OPTION_END);
    if (!m->daemon) {
        snprintf(err, err_cap, "--metrics: cannot listen on %s (in use, or not this machine's)",
                 addr);
        free(m);
        return -1;
    }
    *out = m;
    return 0;
}

void acemq__metrics_stop(acemq__metrics *m)
{
    if (!m) return;
    MHD_stop_daemon(m->daemon);
    free(m);
}
