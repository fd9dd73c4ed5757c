/* endpoint.c — a `to` (io.h): the scheme picks one of the kinds (log:,
 * amqp:, file:) from a table, and the calls go through its ops. log: lives
 * here: one logfmt line per exchange on the route's log. */
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "route/io_internal.h"
#include "route/logline.h"

struct acemq__endpoint {
    const acemq__endpoint_ops *ops;
    void *state;
};

/* --- log: ------------------------------------------------------------------ */

typedef struct log_endpoint {
    FILE *log; /* NULL: lines go nowhere */
    char *name, *step_id;
    int show_body, show_headers;
} log_endpoint;

static int log_open(const acemq__step *step, const acemq__route_env *env, void **state,
                    acemq__buf *why)
{
    int show_body, show_headers;
    int rc = acemq__io_bool_param(&step->to, "showBody", 1, &show_body, why);
    if (rc == 0) rc = acemq__io_bool_param(&step->to, "showHeaders", 0, &show_headers, why);
    if (rc != 0) return rc;
    log_endpoint *l = calloc(1, sizeof *l);
    if (l) {
        l->name = strdup(step->to.path ? step->to.path : "");
        l->step_id = strdup(step->id ? step->id : "");
    }
    if (!l || !l->name || !l->step_id) {
        if (l) {
            free(l->name);
            free(l->step_id);
        }
        free(l);
        return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    }
    l->log = env ? env->log : NULL;
    l->show_body = show_body;
    l->show_headers = show_headers;
    *state = l;
    return 0;
}

/* "k=v, k=v" of the headers, as Camel's log: shows them. */
static int headers_text(const acemq__fields *h, acemq__buf *out)
{
    int rc = 0;
    for (size_t i = 0; i < h->n && rc == 0; i++)
        rc = acemq__buf_printf(out, "%s%s=%s", i ? ", " : "", h->names[i], h->values[i]);
    return rc;
}

static int log_send(void *state, const acemq__exchange *x, acemq__buf *why)
{
    const log_endpoint *l = state;
    if (!l->log) return 0;
    acemq__buf line = {0}, headers = {0};
    int rc = acemq__logline_puts(&line, "route", x->route_id ? x->route_id : "");
    if (rc == 0) rc = acemq__logline_puts(&line, "step", l->step_id);
    if (rc == 0) rc = acemq__logline_puts(&line, "log", l->name);
    if (rc == 0) rc = acemq__logline_puts(&line, "exchange", x->id);
    if (rc == 0 && l->show_body)
        rc = acemq__logline_put(&line, "body", acemq__buf_str(&x->body), x->body.len);
    if (rc == 0 && l->show_headers) rc = headers_text(&x->headers, &headers);
    if (rc == 0 && l->show_headers)
        rc = acemq__logline_put(&line, "headers", acemq__buf_str(&headers), headers.len);
    if (rc == 0) acemq__logline_write(l->log, &line);
    acemq__buf_free(&line);
    acemq__buf_free(&headers);
    return rc == 0 ? 0 : acemq__io_fail(why, rc, "out of memory");
}

static void log_close(void *state)
{
    log_endpoint *l = state;
    if (!l) return;
    free(l->name);
    free(l->step_id);
    free(l);
}

static const acemq__endpoint_ops log_ops = {"log", log_open, log_send, log_close};

/* --- dispatch ---------------------------------------------------------------- */

static const acemq__endpoint_ops *const kinds[] = {
    &log_ops,
    &acemq__endpoint_amqp_ops,
    &acemq__endpoint_file_ops,
};

int acemq__endpoint_open(const acemq__step *step, const acemq__route_env *env,
                         acemq__endpoint **out, acemq__buf *why)
{
    *out = NULL;
    const char *scheme = step->to.scheme ? step->to.scheme : "";
    const acemq__endpoint_ops *ops = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !ops; i++)
        if (strcmp(scheme, kinds[i]->scheme) == 0) ops = kinds[i];
    if (!ops)
        return acemq__io_fail(why, ACEMQ_EINVAL, "'%s:' is not an endpoint (log:, amqp:, file:)",
                              scheme);
    acemq__endpoint *e = calloc(1, sizeof *e);
    if (!e) return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    e->ops = ops;
    int rc = ops->open(step, env, &e->state, why);
    if (rc != 0) {
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

int acemq__endpoint_send(acemq__endpoint *e, const acemq__exchange *x, acemq__buf *why)
{
    return e->ops->send(e->state, x, why);
}

void acemq__endpoint_close(acemq__endpoint *e)
{
    if (!e) return;
    e->ops->close(e->state);
    free(e);
}
