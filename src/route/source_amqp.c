/* source_amqp.c — amqp:queue:NAME as a source (io.h): deliveries of the
 * route file's broker turned into exchanges, acknowledged when they
 * complete and given back to the queue retryDelay ms after they fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "acemq/broker.h"
#include "acemq/common.h"
#include "os/mono_time.h"
#include "route/io_internal.h"

typedef struct held_delivery {
    struct held_delivery *next;
    int64_t due_ms;
    acemq_delivery *d;
} held_delivery;

/* Every delivery the source hands out is in an exchange's source_ctx
 * (until done) or in `held` (failed, waiting for its due time), and is
 * freed after one ack or reject. After the connection is lost the
 * deliveries in hand are stale: settling them sends nothing (ACEMQ_ESTALE)
 * and the broker delivers them again. */
typedef struct amqp_source {
    acemq_broker *b;
    char *queue;
    int64_t retry_ms;
    held_delivery *held; /* failed, given back to the queue at due_ms */
} amqp_source;

static int amqp_open(const acemq__uri *from, const acemq__route_env *env, void **state,
                     acemq__buf *why)
{
    int64_t prefetch, retry;
    int rc = acemq__io_int_param(from, "prefetch", 16, 0, 65535, &prefetch, why);
    if (rc == 0) rc = acemq__io_int_param(from, "retryDelay", 1000, 0, INT32_MAX, &retry, why);
    if (rc != 0) return rc;
    const char *path = from->path ? from->path : "";
    if (strncmp(path, "queue:", 6) != 0 || !path[6])
        return acemq__io_fail(why, ACEMQ_EINVAL, "amqp: source needs queue:NAME, not '%s'", path);
    if (!env || !env->broker_url)
        return acemq__io_fail(why, ACEMQ_EINVAL, "no broker: the route file names none");
    amqp_source *s = calloc(1, sizeof *s);
    if (s) s->queue = strdup(path + 6);
    if (!s || !s->queue) {
        free(s);
        return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    }
    s->retry_ms = retry;
    acemq_broker_options o;
    acemq_broker_options_init(&o);
    rc = acemq_broker_open(&s->b, env->broker_url, &o);
    if (rc != 0) {
        (void)acemq__io_fail(why, rc, "broker: %s", acemq_broker_errmsg(NULL));
    } else if ((rc = acemq_broker_consume(s->b, s->queue, (int)prefetch)) != 0) {
        (void)acemq__io_fail(why, rc, "queue %s: %s", s->queue, acemq_broker_errmsg(s->b));
        acemq_broker_close(s->b);
    }
    if (rc != 0) {
        free(s->queue);
        free(s);
        return rc;
    }
    *state = s;
    return 0;
}

/* Gives d back to the queue (requeue) and frees it: 0, or the broker's
 * error. A stale delivery is fine: the broker delivers it again anyway. */
static int give_back(amqp_source *s, acemq_delivery *d)
{
    int rc = acemq_broker_reject(s->b, d, 1);
    acemq_delivery_free(d);
    return rc == ACEMQ_ESTALE ? 0 : rc;
}

/* Gives back the held deliveries that are due (all with all set). */
static void release_held(amqp_source *s, int all)
{
    int64_t now = acemq__mono_ms();
    for (held_delivery **p = &s->held; *p;) {
        held_delivery *h = *p;
        if (all || h->due_ms <= now) {
            *p = h->next;
            /* A reject that fails leaves the message with the broker, which
             * delivers it again once the connection ends. */
            (void)give_back(s, h->d);
            free(h);
        } else {
            p = &h->next;
        }
    }
}

/* Forgets the held deliveries without a word to the broker: for after a
 * lost connection, when they are void. */
static void drop_held(amqp_source *s)
{
    while (s->held) {
        held_delivery *h = s->held;
        s->held = h->next;
        acemq_delivery_free(h->d);
        free(h);
    }
}

/* A header's value as text: strings as they are, numbers and booleans
 * written out (into out when made); NULL for the types that are skipped. */
static const char *value_text(json_t *v, char *out, size_t cap)
{
    if (json_is_string(v)) /* A NUL cannot sit in a text header: such a value is skipped. */
        return memchr(json_string_value(v), '\0', json_string_length(v)) ? NULL
                                                                         : json_string_value(v);
    if (json_is_integer(v)) {
        (void)snprintf(out, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return out;
    }
    if (json_is_real(v)) {
        /* The shorter of %.15g and %.17g that reads back as the same value. */
        double r = json_real_value(v);
        (void)snprintf(out, cap, "%.15g", r);
        if (strtod(out, NULL) != r) (void)snprintf(out, cap, "%.17g", r);
        return out;
    }
    if (json_is_boolean(v)) return json_is_true(v) ? "true" : "false";
    return NULL;
}

/* The AMQP headers (as JSON) into x's headers. */
static int put_headers(const char *headers_json, acemq__exchange *x)
{
    if (!headers_json) return 0;
    json_t *o = json_loads(headers_json, JSON_ALLOW_NUL, NULL);
    if (!o) return 0; /* the adapter writes valid JSON; nothing to take otherwise */
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(o, name, v)
    {
        char num[40];
        const char *text = value_text(v, num, sizeof num);
        if (text && (rc = acemq__fields_set(&x->headers, name, text)) != 0) break;
    }
    json_decref(o);
    return rc;
}

static int fill(const acemq_delivery *d, acemq__exchange *x)
{
    int has_id =
        d->message_id && d->message_id_len > 0 && !memchr(d->message_id, '\0', d->message_id_len);
    /* An id too long for the exchange keeps its new UUIDv7; the property
     * below holds the message's own id whatever its length. */
    if (has_id && d->message_id_len < sizeof x->id) {
        memcpy(x->id, d->message_id, d->message_id_len);
        x->id[d->message_id_len] = '\0';
    }
    int rc = acemq__exchange_set_body(x, d->body, d->body_len);
    if (rc == 0) rc = put_headers(d->headers_json, x);
    if (rc == 0 && has_id)
        rc =
            acemq__fields_setn(&x->properties, "amqp.message_id", d->message_id, d->message_id_len);
    if (rc == 0)
        rc = acemq__fields_set(&x->properties, "amqp.exchange", d->exchange ? d->exchange : "");
    if (rc == 0)
        rc = acemq__fields_set(&x->properties, "amqp.routing_key",
                               d->routing_key ? d->routing_key : "");
    if (rc == 0)
        rc = acemq__fields_set(&x->properties, "amqp.redelivered",
                               d->redelivered ? "true" : "false");
    return rc;
}

static int amqp_next(void *state, int timeout_ms, acemq__exchange *x, acemq__buf *why)
{
    amqp_source *s = state;
    int64_t deadline = acemq__mono_ms() + timeout_ms;
    for (;;) {
        release_held(s, 0);
        int64_t now = acemq__mono_ms();
        int64_t wait = deadline - now;
        /* Woken in time to give back the first held delivery that falls due. */
        for (const held_delivery *h = s->held; h; h = h->next)
            if (h->due_ms - now < wait) wait = h->due_ms - now;
        if (wait < 0) wait = 0;
        acemq_delivery *d = NULL;
        int rc = acemq_broker_next(s->b, (int)wait, &d);
        if (rc == 0) {
            rc = fill(d, x);
            if (rc != 0) {
                (void)give_back(s, d);
                return acemq__io_fail(why, rc, "out of memory for a delivery");
            }
            x->source_ctx = d;
            return 0;
        }
        if (rc == ACEMQ_ENOENT) {
            if (acemq__mono_ms() >= deadline) return ACEMQ_ENOENT;
            continue;
        }
        if (rc == ACEMQ_EIO || rc == ACEMQ_EBACKEND) {
            /* The handle connects and consumes again on the next call. */
            drop_held(s);
            return acemq__io_fail(why, ACEMQ_ENOENT, "queue %s: %s; reconnecting", s->queue,
                                  acemq_broker_errmsg(s->b));
        }
        return acemq__io_fail(why, rc, "queue %s: %s", s->queue, acemq_broker_errmsg(s->b));
    }
}

static int amqp_done(void *state, acemq__exchange *x, int completed, acemq__buf *why)
{
    amqp_source *s = state;
    acemq_delivery *d = x->source_ctx;
    if (!d) return acemq__io_fail(why, ACEMQ_EINVAL, "settled twice, or not this source's");
    x->source_ctx = NULL;
    int rc;
    if (completed) {
        rc = acemq_broker_ack(s->b, d);
        acemq_delivery_free(d);
        if (rc == ACEMQ_ESTALE) rc = 0; /* from a lost connection: delivered again */
    } else if (s->retry_ms == 0) {
        rc = give_back(s, d);
    } else {
        held_delivery *h = malloc(sizeof *h);
        if (!h) {
            /* Given back at once rather than lost. */
            (void)give_back(s, d);
            return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
        }
        h->d = d;
        h->due_ms = acemq__mono_ms() + s->retry_ms;
        h->next = s->held;
        s->held = h;
        return 0;
    }
    return rc == 0 ? 0
                   : acemq__io_fail(why, rc, "%s: %s", completed ? "ack" : "reject",
                                    acemq_broker_errmsg(s->b));
}

static void amqp_close(void *state)
{
    amqp_source *s = state;
    if (!s) return;
    release_held(s, 1);
    acemq_broker_close(s->b);
    free(s->queue);
    free(s);
}

const acemq__source_ops acemq__source_amqp_ops = {"amqp", amqp_open, amqp_next, amqp_done,
                                                  amqp_close};
