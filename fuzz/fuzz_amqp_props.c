/* fuzz_amqp_props.c — libFuzzer target for a delivery's content header as
 * the broker sends it (any publisher's properties and headers table: nested
 * tables, arrays, RabbitMQ's x-death, every field type), decoded by
 * rabbitmq-c's own decoder exactly as the AMQP adapter receives it, then
 * turned into the consumer's view (acemq__amqp_props_parts, the step
 * backends/amqp/consume.c runs) and read by the consumer.
 *
 * The input is the content header's payload after class, weight and body
 * size: the property flags, then the properties. What must hold: a decoded
 * header becomes a delivery with the same message id and content type
 * bytes, headers that are one JSON object with at most the table's keys,
 * and an attempt count of 0 or more; the consumer's readers answer within
 * their ranges. Nothing leaks, crashes or reads out of bounds.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <jansson.h>

#include "backends/amqp/amqp_self.h"
#include "broker/broker_backend.h"
#include "consumer_view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same_bytes(const void *got, size_t got_len, amqp_bytes_t want)
{
    return got && got_len == want.len && (want.len == 0 || memcmp(got, want.bytes, want.len) == 0);
}

static void check_delivery(const amqp_basic_properties_t *p, const acemq_delivery *d)
{
    int has_id = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0;
    int has_type = (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG) != 0;
    if (has_id != (d->message_id != NULL) || has_type != (d->content_type != NULL)) abort();
    if (has_id && !same_bytes(d->message_id, d->message_id_len, p->message_id)) abort();
    if (has_type && (strlen(d->content_type) > p->content_type.len ||
                     memcmp(d->content_type, p->content_type.bytes, strlen(d->content_type)) != 0))
        abort(); /* a C string: the bytes up to a NUL among them */
    if (d->attempts < 0) abort();
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG)) {
        if (d->headers_json || d->attempts != 0) abort();
        return;
    }
    json_t *h = d->headers_json ? json_loads(d->headers_json, 0, NULL) : NULL;
    if (!json_is_object(h) || json_object_size(h) > (size_t)p->headers.num_entries) abort();
    json_decref(h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    void *decoded = NULL;
    amqp_bytes_t encoded = {size, (void *)data};
    if (amqp_decode_properties(AMQP_BASIC_CLASS, &pool, encoded, &decoded) == AMQP_STATUS_OK) {
        const amqp_basic_properties_t *p = decoded;
        acemq__delivery_parts parts = {.tag = 7,
                                       .exchange = "orders",
                                       .exchange_len = 6,
                                       .routing_key = "order.created",
                                       .routing_key_len = 13,
                                       .redelivered = 1,
                                       .body_len = 2};
        char *headers = NULL;
        if (acemq__amqp_props_parts(p, &parts, &headers) == 0) {
            void *body = NULL;
            acemq_delivery *d = acemq__delivery_new(&parts, &body);
            if (d) {
                memcpy(body, "{}", 2);
                check_delivery(p, d);
                fuzz_consumer_view(d);
                acemq_delivery_free(d);
            }
        } else if (headers) {
            abort(); /* nothing is left to free on failure */
        }
        free(headers);
    }
    empty_amqp_pool(&pool);
    return 0;
}
