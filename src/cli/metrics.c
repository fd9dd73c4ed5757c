/* metrics.c — see metrics.h. libmicrohttpd runs the listener in its own
 * thread; each request renders the page afresh from counters the runtime
 * copies under its own lock, so a scrape never waits on the runtime's work.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/metrics.h"

struct acemq__metrics {
    struct MHD_Daemon *daemon;
    acemq__page_render render;
    void *ctx;
};

void acemq__page_put(acemq__page *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

void acemq__page_counter(acemq__page *o, const char *name, const char *help, uint64_t v)
{
    acemq__page_put(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                    (unsigned long long)v);
}

void acemq__page_gauge(acemq__page *o, const char *name, const char *help, double v)
{
    acemq__page_put(o, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

void acemq__page_histogram(acemq__page *o, const char *name, const char *help,
                           const uint64_t *count, const double *bounds_ms, size_t n, double sum_ms)
{
    acemq__page_put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cumulative = 0;
    for (size_t k = 0; k < n; k++) {
        cumulative += count[k];
        if (k < n - 1)
            acemq__page_put(o, "%s_bucket{le=\"%g\"} %llu\n", name, bounds_ms[k] / 1000.0,
                            (unsigned long long)cumulative);
        else
            acemq__page_put(o, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                            (unsigned long long)cumulative);
    }
    acemq__page_put(o, "%s_sum %.6f\n%s_count %llu\n", name, sum_ms / 1000.0, name,
                    (unsigned long long)cumulative);
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
    /* Rendered again into a larger buffer while it does not fit: each
     * render reads the counters afresh, and a page is one render whole. */
    char *page = NULL;
    acemq__page o = {NULL, 4096, 0};
    for (;;) {
        char *p = realloc(page, o.cap);
        if (!p) {
            free(page);
            return MHD_NO;
        }
        page = o.buf = p;
        o.len = 0;
        m->render(m->ctx, &o);
        if (o.len < o.cap) break;
        o.cap = o.len + 1024;
    }
    size_t len = o.len;
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

int acemq__metrics_start(acemq__metrics **out, const char *addr, acemq__page_render render,
                         void *ctx, char *err, size_t err_cap)
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
    m->render = render;
    m->ctx = ctx;
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
