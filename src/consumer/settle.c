/* settle.c — how a delivery leaves the consumer's hands: acknowledged,
 * given back to the queue, published back for another attempt, or sent to
 * the dead-letter exchange. Each takes the delivery and frees it.
 *
 * Acknowledgements wait in a list until the batch that decided them is
 * settled, and then go to the broker together (one write, one basic.ack
 * for them all where the tags allow): one system call and one frame for a
 * batch instead of one each. Each is decided only once its message is
 * confirmed (or moved on as a confirmed copy), so the wait is safe: a
 * connection lost meanwhile voids them as it voids any ack not yet sent,
 * and the store answers the redelivery as a duplicate.
 *
 * A copy published back or dead-lettered is acknowledged only once the
 * broker confirmed the copy, so a message is never lost between the two;
 * a crash in between leaves both, a duplicate the store absorbs. A copy
 * the broker does not confirm leaves the delivery held and then given
 * back, so that a dead-letter exchange nobody can reach slows the message
 * down instead of spinning it through the broker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "consumer/consumer_internal.h"

/* The result of a broker call on d, which is freed: a stale delivery (the
 * connection that gave it is gone, and the broker delivers it again) is no
 * error of the loop's; a broken connection is. */
static int settled(acemq_consumer *c, acemq_delivery *d, int rc, const char *doing)
{
    if (rc != 0 && rc != ACEMQ_ESTALE)
        acemq__consumer_log(c, doing, "error", acemq_err_name(rc), "reason",
                            acemq_broker_errmsg(c->in));
    acemq_delivery_free(d);
    return rc == ACEMQ_EIO ? rc : 0;
}

int acemq__consumer_ack(acemq_consumer *c, acemq_delivery *d)
{
    int rc = 0;
    if (c->n_acks == ACEMQ__BATCH_MAX) rc = acemq__consumer_flush_acks(c);
    c->acks[c->n_acks++] = d;
    return rc;
}

int acemq__consumer_flush_acks(acemq_consumer *c)
{
    int status[ACEMQ__BATCH_MAX] = {0};
    size_t n = c->n_acks;
    c->n_acks = 0;
    int rc = acemq_broker_ack_many(c->in, (const acemq_delivery *const *)c->acks, n, status);
    for (size_t i = 0; i < n; i++)
        (void)settled(c, c->acks[i], rc == 0 ? 0 : status[i], "ack_failed");
    return rc == ACEMQ_EIO ? rc : 0;
}

int acemq__consumer_requeue(acemq_consumer *c, acemq_delivery *d)
{
    return settled(c, d, acemq_broker_reject(c->in, d, 1), "requeue_failed");
}

/* Sets name to text in headers; 0 or -1. */
static int set_text(json_t *headers, const char *name, const char *text)
{
    return json_object_set_new(headers, name, json_string(text));
}

/* d's headers for its copy: the AMQP adapter publishes string values, so
 * numbers and booleans become their text and nested values (RabbitMQ's
 * x-death, which the broker keeps itself) are left out; x-acemq-attempts
 * is the publish call's own. NULL on ENOMEM. */
static json_t *copy_headers(const acemq_delivery *d)
{
    json_t *in = d->headers_json ? json_loads(d->headers_json, 0, NULL) : NULL;
    json_t *out = json_object();
    if (!out) {
        json_decref(in);
        return NULL;
    }
    const char *name;
    json_t *v;
    json_object_foreach(in, name, v)
    {
        if (strcmp(name, "x-acemq-attempts") == 0) continue;
        char *text = NULL;
        if (json_is_string(v))
            text = strdup(json_string_value(v));
        else if (json_is_number(v) || json_is_boolean(v))
            text = json_dumps(v, JSON_ENCODE_ANY);
        else
            continue;
        int rc = text ? set_text(out, name, text) : -1;
        free(text);
        if (rc != 0) {
            json_decref(in);
            json_decref(out);
            return NULL;
        }
    }
    json_decref(in);
    return out;
}

/* Publishes a copy of d to exchange/routing_key with headers, confirmed:
 * 0 when the broker confirmed it. */
static int publish_copy(acemq_consumer *c, const acemq_delivery *d, const char *exchange,
                        const char *routing_key, json_t *headers)
{
    if (!c->out) {
        int rc = acemq_broker_open(&c->out, c->broker_url, &c->broker_opts);
        if (rc != 0) {
            acemq__consumer_log(c, "publish_failed", "error", acemq_err_name(rc), "reason",
                                acemq_broker_errmsg(NULL));
            return rc;
        }
    }
    char *text = json_dumps(headers, JSON_COMPACT);
    if (!text) return ACEMQ_ENOMEM;
    /* A message without an id goes on with an empty one: publish needs text. */
    acemq_broker_msg msg = {exchange,        routing_key, d->message_id ? d->message_id : "",
                            d->content_type, text,        d->attempts,
                            d->body,         d->body_len};
    acemq_publish_result res = {ACEMQ_PUBLISH_UNKNOWN, 0, NULL};
    int rc = acemq_broker_publish(c->out, &msg, 1, &res);
    free(text);
    if (rc == 0 && res.outcome != ACEMQ_PUBLISH_CONFIRMED) rc = ACEMQ_EIO;
    if (rc != 0)
        acemq__consumer_log(c, "publish_failed", "exchange", exchange, "reason",
                            rc == ACEMQ_EIO && res.reason ? res.reason
                                                          : acemq_broker_errmsg(c->out));
    return rc;
}

/* d could not move on as a copy: it waits, then goes back to the queue. */
static int copy_failed(acemq_consumer *c, acemq_delivery *d)
{
    if (acemq__consumer_hold(c, d, c->opts.retry_delay_max_ms, 0, 0, NULL) == 0) return 0;
    return acemq__consumer_requeue(c, d);
}

/* Where d was first published, kept on its copies: the first copy records
 * d's own exchange and routing key, later ones keep the record they
 * carry (deliver.c reads it back). 0 or -1. */
static int keep_origin(json_t *headers, const acemq_delivery *d)
{
    if (json_object_get(headers, "x-acemq-routing-key")) return 0;
    return set_text(headers, "x-acemq-exchange", d->exchange ? d->exchange : "") == 0 &&
                   set_text(headers, "x-acemq-routing-key", d->routing_key ? d->routing_key : "") ==
                       0
               ? 0
               : -1;
}

/* The routing key d was first published under (its copies carry it). */
static const char *origin_key(json_t *headers, const acemq_delivery *d)
{
    const char *rk = json_string_value(json_object_get(headers, "x-acemq-routing-key"));
    return rk ? rk : d->routing_key ? d->routing_key : "";
}

int acemq__consumer_retry(acemq_consumer *c, acemq_delivery *d, int failures, const char *why)
{
    json_t *headers = copy_headers(d);
    char n[16];
    snprintf(n, sizeof n, "%d", failures);
    int rc = headers && set_text(headers, "x-acemq-failures", n) == 0 &&
                     keep_origin(headers, d) == 0 &&
                     (!why || set_text(headers, "x-acemq-error", why) == 0)
                 ? publish_copy(c, d, "", c->queue, headers)
                 : ACEMQ_ENOMEM;
    json_decref(headers);
    if (rc != 0) return copy_failed(c, d);
    acemq__consumer_count(c, &c->stats.retried);
    return acemq__consumer_ack(c, d);
}

int acemq__consumer_dead_letter(acemq_consumer *c, acemq_delivery *d, const char *why, int failures)
{
    if (!c->dlx) {
        acemq__consumer_count(c, &c->stats.dead_lettered);
        return settled(c, d, acemq_broker_reject(c->in, d, 0), "reject_failed");
    }
    json_t *headers = copy_headers(d);
    char n[16];
    snprintf(n, sizeof n, "%d", failures);
    int rc = headers && set_text(headers, "x-acemq-failures", n) == 0 &&
                     set_text(headers, "x-acemq-error", why) == 0 &&
                     set_text(headers, "x-acemq-queue", c->queue) == 0
                 ? publish_copy(c, d, c->dlx, origin_key(headers, d), headers)
                 : ACEMQ_ENOMEM;
    json_decref(headers);
    if (rc != 0) {
        /* Refused: the message waits, then goes back to the queue with its
         * failures and reason, and its next delivery tries the exchange
         * again without running the handler (deliver.c): max_attempts
         * bounds the handler's runs however long the exchange refuses. */
        if (acemq__consumer_hold(c, d, c->opts.retry_delay_max_ms, 1, failures, why) == 0) return 0;
        return acemq__consumer_requeue(c, d);
    }
    acemq__consumer_count(c, &c->stats.dead_lettered);
    acemq__consumer_log(c, "dead_lettered", "exchange", c->dlx, "reason", why);
    return acemq__consumer_ack(c, d);
}
