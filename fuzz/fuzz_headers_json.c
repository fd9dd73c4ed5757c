/* fuzz_headers_json.c — libFuzzer target for an outbox record's headers
 * JSON (the `headers` column: text anyone with the database can write) on
 * its way out through the relay's AMQP publish path, and for a delivery's
 * headers JSON as the consumer reads it.
 *
 * What must hold: the publish check (acemq__amqp_prepare) accepts exactly a
 * JSON object of strings with names of at most 255 bytes that fits the
 * frame, and what it accepts encodes (a record that passes the check and
 * fails to encode would drop the connection on every attempt). The encoded
 * content header, decoded by rabbitmq-c and turned back into JSON as a
 * consumer sees it (acemq__amqp_headers_json), is the same object with the
 * attempt count as x-acemq-attempts. The consumer's readers of a delivery's
 * headers (failures, error, as-published view, key expressions) take the
 * text whatever it is. Nothing leaks, crashes or reads out of bounds.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <jansson.h>

#include "acemq/common.h"
#include "backends/amqp/amqp_self.h"
#include "broker/broker_backend.h"
#include "consumer_view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { ATTEMPTS = 3 };

/* The check's contract, written plainly: 1 when text should be sent. */
static int sendable(const char *text)
{
    json_t *o = json_loads(text, 0, NULL);
    int ok = json_is_object(o);
    size_t bytes = 0;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        if (!json_is_string(v) || strlen(k) > 255) ok = 0;
        bytes += 6 + strlen(k) + json_string_length(v);
    }
    json_decref(o);
    return ok && bytes <= FRAME_MAX - 2048;
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The content header frame's properties in s's run: the second frame. */
static amqp_bytes_t header_properties(const acemq__frame_buf *f)
{
    if (f->len < 8) abort();
    size_t first = 8 + get32(f->data + 3);
    if (f->len < first + 8 || f->data[first] != AMQP_FRAME_HEADER) abort();
    size_t len = get32(f->data + first + 3);
    if (len < 12 || f->len < first + 8 + len || f->data[first + 7 + len] != AMQP_FRAME_END) abort();
    /* class, weight and body size come before the properties */
    amqp_bytes_t b = {len - 12, f->data + first + 7 + 12};
    return b;
}

/* The headers that arrive: what was sent, with our attempt count. */
static void check_round_trip(const acemq__frame_buf *f, json_t *sent)
{
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    void *decoded = NULL;
    if (amqp_decode_properties(AMQP_BASIC_CLASS, &pool, header_properties(f), &decoded) !=
        AMQP_STATUS_OK)
        abort();
    const amqp_basic_properties_t *p = decoded;
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG)) abort();
    char *json = NULL;
    int attempts = -1;
    if (acemq__amqp_headers_json(&p->headers, &json, &attempts) == 0) {
        json_t *got = json_loads(json, 0, NULL);
        json_t *want = json_deep_copy(sent);
        if (!got || !want || attempts != ATTEMPTS ||
            json_object_set_new(want, ATTEMPTS_HEADER, json_integer(ATTEMPTS)) != 0 ||
            !json_equal(got, want))
            abort();
        json_decref(got);
        json_decref(want);
    }
    free(json);
    empty_amqp_pool(&pool);
}

/* The relay's publish path: check, encode, read back. */
static void publish_path(const char *text)
{
    static const char body[] = "{\"order\":42}";
    acemq_broker_msg m = {"orders",
                          "order.created",
                          "0190c6c3-8e1f-7a3b-9c2d-5e6f7a8b9c0d",
                          "application/json",
                          text,
                          ATTEMPTS,
                          body,
                          sizeof body - 1};
    amqp_self s;
    memset(&s, 0, sizeof s);
    s.channel = 1;
    int rc = acemq__amqp_prepare(NULL, &s, &m, 1);
    if (rc != ACEMQ_ENOMEM) {
        if ((rc == 0) != sendable(text) || (rc != 0 && rc != ACEMQ_EINVAL)) abort();
        if (rc != 0 && acemq_broker_errmsg(NULL)[0] == '\0') abort();
    }
    if (rc == 0) {
        int st = acemq__amqp_encode_one(&s, &m, s.parsed[0], FRAME_MAX);
        if (st != AMQP_STATUS_OK && st != AMQP_STATUS_NO_MEMORY) abort();
        if (st == AMQP_STATUS_OK) check_round_trip(&s.frames, s.parsed[0]);
    }
    acemq__amqp_unparse(&s, 1);
    free(s.parsed);
    free(s.entries);
    acemq__frames_free(&s.frames);
}

/* The consumer's readers on a delivery carrying text as its headers. */
static void consumer_view(const char *text)
{
    acemq__delivery_parts parts = {.tag = 1,
                                   .message_id = "m-1",
                                   .message_id_len = 3,
                                   .exchange = "orders",
                                   .exchange_len = 6,
                                   .routing_key = "order.created",
                                   .routing_key_len = 13,
                                   .headers_json = text};
    void *body = NULL;
    acemq_delivery *d = acemq__delivery_new(&parts, &body);
    if (!d) return;
    fuzz_consumer_view(d);
    acemq_delivery_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    text[size] = '\0';
    publish_path(text);
    consumer_view(text);
    free(text);
    return 0;
}
