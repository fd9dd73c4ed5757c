/* endpoint_amqp.c — amqp:exchange:NAME?routingKey=KEY as a `to` (io.h):
 * one persistent message per exchange, its headers as AMQP string headers
 * and its id as message_id, sent only when the broker confirms it. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "acemq/broker.h"
#include "acemq/common.h"
#include "route/expr.h"
#include "route/io_internal.h"

typedef struct amqp_endpoint {
    acemq_broker *b;
    char *exchange;           /* "" the default exchange */
    acemq__expr *routing_key; /* a template, evaluated per exchange */
} amqp_endpoint;

static void amqp_close(void *state)
{
    amqp_endpoint *a = state;
    if (!a) return;
    acemq_broker_close(a->b);
    acemq__expr_free(a->routing_key);
    free(a->exchange);
    free(a);
}

static int amqp_open(const acemq__step *step, const acemq__route_env *env, void **state,
                     acemq__buf *why)
{
    const acemq__uri *u = &step->to;
    const char *path = u->path ? u->path : "";
    if (strncmp(path, "exchange:", 9) != 0)
        return acemq__io_fail(why, ACEMQ_EINVAL, "amqp: endpoint needs exchange:NAME, not '%s'",
                              path);
    if (!env || !env->broker_url)
        return acemq__io_fail(why, ACEMQ_EINVAL, "no broker: the route file names none");
    const char *key = acemq__uri_param(u, "routingKey");
    amqp_endpoint *a = calloc(1, sizeof *a);
    if (!a) return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    a->exchange = strdup(path + 9);
    if (!a->exchange) {
        amqp_close(a);
        return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    }
    acemq__expr_error err;
    memset(&err, 0, sizeof err);
    int rc = acemq__expr_compile(key ? key : "", &a->routing_key, &err);
    if (rc != 0) {
        amqp_close(a);
        return rc == ACEMQ_EINVAL
                   ? acemq__io_fail(why, rc, "routingKey at byte %zu: %s", err.offset, err.message)
                   : acemq__io_fail(why, rc, "out of memory");
    }
    acemq_broker_options o;
    acemq_broker_options_init(&o);
    rc = acemq_broker_open(&a->b, env->broker_url, &o);
    if (rc != 0) {
        a->b = NULL;
        (void)acemq__io_fail(why, rc, "broker: %s", acemq_broker_errmsg(NULL));
        amqp_close(a);
        return rc;
    }
    *state = a;
    return 0;
}

/* The headers as one JSON object of strings: 0 with *out (NULL when there
 * are none), or an error with why. */
static int headers_json(const acemq__fields *h, char **out, acemq__buf *why)
{
    *out = NULL;
    if (h->n == 0) return 0;
    json_t *o = json_object();
    if (!o) return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < h->n && rc == 0; i++) {
        json_t *v = json_string(h->values[i]);
        if (!v)
            rc =
                acemq__io_fail(why, ACEMQ_EINVAL, "header %s: its value is not UTF-8", h->names[i]);
        else if (json_object_set_new(o, h->names[i], v) != 0)
            rc = acemq__io_fail(why, ACEMQ_EINVAL, "header %s: its name is not UTF-8", h->names[i]);
    }
    if (rc == 0) {
        *out = json_dumps(o, JSON_COMPACT);
        if (!*out) rc = acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    }
    json_decref(o);
    return rc;
}

static const char *outcome_words(int outcome)
{
    switch (outcome) {
    case ACEMQ_PUBLISH_NACKED:
        return "refused by the broker (nack)";
    case ACEMQ_PUBLISH_RETURNED:
        return "unroutable (returned)";
    default:
        return "not confirmed";
    }
}

static int amqp_send(void *state, const acemq__exchange *x, acemq__buf *why)
{
    amqp_endpoint *a = state;
    acemq__buf key = {0};
    char *headers = NULL;
    int rc = acemq__expr_eval(a->routing_key, x, &key);
    if (rc != 0) {
        acemq__buf_free(&key);
        return acemq__io_fail(why, rc, "out of memory");
    }
    rc = headers_json(&x->headers, &headers, why);
    if (rc == 0) {
        acemq_broker_msg m;
        memset(&m, 0, sizeof m);
        m.exchange = a->exchange;
        m.routing_key = acemq__buf_str(&key);
        m.message_id = x->id;
        m.headers_json = headers;
        m.body = x->body.p ? x->body.p : "";
        m.body_len = x->body.len;
        acemq_publish_result r;
        memset(&r, 0, sizeof r);
        rc = acemq_broker_publish(a->b, &m, 1, &r);
        if (rc != 0)
            rc = acemq__io_fail(why, rc, "publish: %s", acemq_broker_errmsg(a->b));
        else if (r.outcome != ACEMQ_PUBLISH_CONFIRMED)
            rc = acemq__io_fail(why, ACEMQ_EBACKEND, "exchange '%s', routing key '%s': %s: %s",
                                a->exchange, m.routing_key, outcome_words(r.outcome),
                                r.reason ? r.reason : "");
    }
    free(headers);
    acemq__buf_free(&key);
    return rc;
}

const acemq__endpoint_ops acemq__endpoint_amqp_ops = {"amqp", amqp_open, amqp_send, amqp_close};
