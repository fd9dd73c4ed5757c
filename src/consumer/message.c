/* message.c — what the consumer reads off a delivery besides its body: the
 * failures counted on it, the last failure's reason, and where it was first
 * published when it is a copy the consumer published back for another
 * attempt (settle.c writes those headers).
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "consumer/consumer_internal.h"

int acemq__consumer_failures_of(const acemq_delivery *d)
{
    if (!d->headers_json || !strstr(d->headers_json, "x-acemq-failures")) return 0;
    json_t *h = json_loads(d->headers_json, 0, NULL);
    json_t *v = json_object_get(h, "x-acemq-failures");
    long long n = 0;
    if (json_is_integer(v)) {
        n = json_integer_value(v);
    } else if (json_is_string(v)) {
        char *end;
        n = strtoll(json_string_value(v), &end, 10);
        if (*end != '\0') n = 0;
    }
    json_decref(h);
    return n < 0 ? 0 : n > 1000000 ? 1000000 : (int)n;
}

char *acemq__consumer_error_of(const acemq_delivery *d)
{
    if (!d->headers_json || !strstr(d->headers_json, "x-acemq-error")) return NULL;
    json_t *h = json_loads(d->headers_json, 0, NULL);
    const char *v = json_string_value(json_object_get(h, "x-acemq-error"));
    char *why = v ? strdup(v) : NULL;
    json_decref(h);
    return why;
}

/* A copy travels on the default exchange under the queue's name; its
 * x-acemq-exchange and x-acemq-routing-key headers say where the message
 * was first published, so that every attempt of a message has the same key
 * (a key with ${routing_key} would otherwise change at the first retry, and
 * a later duplicate of the message find its key free). */
void *acemq__consumer_as_published(const acemq_delivery *d, acemq_delivery *view)
{
    *view = *d;
    if (!d->headers_json || !strstr(d->headers_json, "x-acemq-routing-key")) return NULL;
    json_t *h = json_loads(d->headers_json, 0, NULL);
    const char *rk = json_string_value(json_object_get(h, "x-acemq-routing-key"));
    const char *ex = json_string_value(json_object_get(h, "x-acemq-exchange"));
    if (rk) view->routing_key = rk;
    if (ex) view->exchange = ex;
    return h;
}
