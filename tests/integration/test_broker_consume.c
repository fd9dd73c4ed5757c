/* test_broker_consume.c — the consuming half of the broker contract
 * against a real RabbitMQ: every field of a delivery round-trips (binary
 * and 1 MiB bodies, headers of every field type, a message with no
 * properties), acks empty the queue, rejects requeue or dead-letter, the
 * prefetch holds, a second ack of one delivery is refused without costing
 * the channel, acemq_broker_ack_many acks exactly what it names (one
 * multiple ack when it may), a cut connection voids the deliveries in hand and gives
 * them back, a silent broker is noticed by heartbeats, and a deleted or
 * missing queue is a clear error.
 *
 * The consumer of the fault tests connects through a proxy in this process
 * (a thread forwarding bytes), which can cut its connections or stop
 * forwarding, so no fault touches the shared broker. Queues are named after
 * the pid, carry x-expires as a net, and are deleted at the end. Without
 * ACEMQ_AMQP_URL the test prints SKIPPED and exits 77. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include <amqp.h>
#include <amqp_framing.h>

#include "acemq/broker.h"
#include "broker/broker_internal.h"
#include "integration/broker_amqp_fixture.h"
#include "integration/tcp_proxy.h"

/* --- the admin connection (broker_amqp_fixture.c) ------------------------ */

static void qname(char *buf, size_t len, const char *what)
{
    char tag[96];
    (void)snprintf(tag, sizeof tag, "consume.%s", what);
    test_name(buf, len, tag);
}

/* A fresh queue (purged if a crashed run left it), expiring unused after
 * ten minutes whatever happens. dead_key: where its rejected messages go
 * (the default exchange, so to the queue of that name), or NULL. */
static void declare(const char *q, const char *dead_key)
{
    amqp_table_entry_t e[3] = {
        {.key = amqp_cstring_bytes("x-expires"),
         .value = {.kind = AMQP_FIELD_KIND_I32, .value.i32 = 600000}},
        {.key = amqp_cstring_bytes("x-dead-letter-exchange"),
         .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("")}},
        {.key = amqp_cstring_bytes("x-dead-letter-routing-key"),
         .value = {.kind = AMQP_FIELD_KIND_UTF8,
                   .value.bytes = amqp_cstring_bytes(dead_key ? dead_key : "")}},
    };
    amqp_table_t args = {.num_entries = dead_key ? 3 : 1, .entries = e};
    amqp_queue_declare(admin_conn, 1, amqp_cstring_bytes(q), 0, 0, 0, 0, args);
    must_ok(amqp_get_rpc_reply(admin_conn), "queue.declare");
    amqp_queue_purge(admin_conn, 1, amqp_cstring_bytes(q));
    must_ok(amqp_get_rpc_reply(admin_conn), "queue.purge");
}

static void drop_queue(const char *q)
{
    amqp_queue_delete(admin_conn, 1, amqp_cstring_bytes(q), 0, 0);
    must_ok(amqp_get_rpc_reply(admin_conn), "queue.delete");
}

/* Messages ready in q (a passive queue.declare). */
static uint32_t ready(const char *q)
{
    amqp_maybe_release_buffers(admin_conn);
    amqp_queue_declare_ok_t *ok =
        amqp_queue_declare(admin_conn, 1, amqp_cstring_bytes(q), 1, 0, 0, 0, amqp_empty_table);
    must_ok(amqp_get_rpc_reply(admin_conn), "passive queue.declare");
    return ok->message_count;
}

/* --- acemq handles -------------------------------------------------------- */

static acemq_broker *open_at(const char *url, int heartbeat_s)
{
    acemq_broker_options o;
    acemq_broker_options_init(&o);
    o.heartbeat_s = heartbeat_s;
    acemq_broker *b = NULL;
    int rc = acemq_broker_open(&b, url, &o);
    if (rc != 0) fail_msg("open: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(NULL));
    return b;
}

static acemq_broker *consumer_at(const char *url, const char *q, int prefetch, int heartbeat_s)
{
    acemq_broker *b = open_at(url, heartbeat_s);
    int rc = acemq_broker_consume(b, q, prefetch);
    if (rc != 0) fail_msg("consume %s: %s: %s", q, acemq_err_name(rc), acemq_broker_errmsg(b));
    return b;
}

/* Publishes msgs (to the default exchange, so routing_key names the queue),
 * every one confirmed. */
static void publish(acemq_broker *pub, const acemq_broker_msg *m, size_t n)
{
    acemq_publish_result r[16];
    assert_true(n <= 16);
    assert_int_equal(acemq_broker_publish(pub, m, n, r), 0);
    for (size_t i = 0; i < n; i++)
        if (r[i].outcome != ACEMQ_PUBLISH_CONFIRMED)
            fail_msg("message %zu: outcome %d: %s", i, r[i].outcome, r[i].reason);
}

static void publish_n(const char *q, const char *prefix, int n)
{
    acemq_broker *pub = open_at(broker_url, 30);
    char ids[16][64];
    acemq_broker_msg m[16];
    for (int i = 0; i < n; i++) {
        (void)snprintf(ids[i], sizeof ids[i], "%s%d", prefix, i);
        m[i] = (acemq_broker_msg){.exchange = "", .routing_key = q, .message_id = ids[i]};
    }
    publish(pub, m, (size_t)n);
    acemq_broker_close(pub);
}

/* The next delivery, waiting up to 10 s for it; fails the test otherwise. */
static acemq_delivery *must_next(acemq_broker *b)
{
    acemq_delivery *d = NULL;
    int rc = acemq_broker_next(b, 10000, &d);
    if (rc != 0) fail_msg("next: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(b));
    return d;
}

static void ack_free(acemq_broker *b, acemq_delivery *d)
{
    int rc = acemq_broker_ack(b, d);
    if (rc != 0) fail_msg("ack: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(b));
    acemq_delivery_free(d);
}

/* The broker's URL with the proxy's port. */
static void proxy_url(char *buf, size_t len)
{
    (void)snprintf(buf, len, "amqp://%s:%s@127.0.0.1:%d/%s", broker_info.user, broker_info.password,
                   tcp_proxy_port(), strcmp(broker_vhost, "/") == 0 ? "%2f" : broker_vhost);
}

static int group_setup(void **state)
{
    if (admin_open(state) != 0) return -1;
    tcp_proxy_start(broker_info.port);
    return 0;
}

static int group_teardown(void **state)
{
    tcp_proxy_stop();
    return admin_close(state);
}

/* --- the tests ------------------------------------------------------------ */

/* A message with headers of every field type RabbitMQ takes, published
 * with rabbitmq-c, and one with no properties at all. */
static void publish_raw(const char *q)
{
    static const char text[] = "caf\xC3\xA9";
    static const char not_utf8[] = "a\xFF"
                                   "b";
    static const char with_nul[] = "a\0b";
    amqp_field_value_t arr[2] = {
        {.kind = AMQP_FIELD_KIND_I32, .value.i32 = 7},
        {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("x")},
    };
    amqp_table_entry_t inner = {.key = amqp_cstring_bytes("deep"),
                                .value = {.kind = AMQP_FIELD_KIND_BOOLEAN, .value.boolean = 0}};
    amqp_table_entry_t e[] = {
        {amqp_cstring_bytes("s"), {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = {5, (void *)text}}},
        {amqp_cstring_bytes("raw"),
         {.kind = AMQP_FIELD_KIND_BYTES, .value.bytes = {3, (void *)not_utf8}}},
        {amqp_cstring_bytes("nul"),
         {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = {3, (void *)with_nul}}},
        {amqp_cstring_bytes("t"), {.kind = AMQP_FIELD_KIND_BOOLEAN, .value.boolean = 1}},
        {amqp_cstring_bytes("b"), {.kind = AMQP_FIELD_KIND_I8, .value.i8 = -5}},
        {amqp_cstring_bytes("s16"), {.kind = AMQP_FIELD_KIND_I16, .value.i16 = -300}},
        {amqp_cstring_bytes("i32"), {.kind = AMQP_FIELD_KIND_I32, .value.i32 = -70000}},
        {amqp_cstring_bytes("i64"),
         {.kind = AMQP_FIELD_KIND_I64, .value.i64 = INT64_C(-5000000000)}},
        {amqp_cstring_bytes("f"), {.kind = AMQP_FIELD_KIND_F32, .value.f32 = 1.5f}},
        {amqp_cstring_bytes("d"), {.kind = AMQP_FIELD_KIND_F64, .value.f64 = -2.25}},
        {amqp_cstring_bytes("dec"), {.kind = AMQP_FIELD_KIND_DECIMAL, .value.decimal = {2, 1234}}},
        /* -5 scaled by 10^1, as the Java client and pika write it. */
        {amqp_cstring_bytes("ndec"),
         {.kind = AMQP_FIELD_KIND_DECIMAL, .value.decimal = {1, (uint32_t)-5}}},
        {amqp_cstring_bytes("u8"), {.kind = AMQP_FIELD_KIND_U8, .value.u8 = 200}},
        {amqp_cstring_bytes("u16"), {.kind = AMQP_FIELD_KIND_U16, .value.u16 = 60000}},
        {amqp_cstring_bytes("u32"), {.kind = AMQP_FIELD_KIND_U32, .value.u32 = 4000000000U}},
        {amqp_cstring_bytes("ts"), {.kind = AMQP_FIELD_KIND_TIMESTAMP, .value.u64 = 1700000000}},
        {amqp_cstring_bytes("v"), {.kind = AMQP_FIELD_KIND_VOID}},
        {amqp_cstring_bytes("arr"), {.kind = AMQP_FIELD_KIND_ARRAY, .value.array = {2, arr}}},
        {amqp_cstring_bytes("tbl"), {.kind = AMQP_FIELD_KIND_TABLE, .value.table = {1, &inner}}},
        {amqp_cstring_bytes("x-acemq-attempts"), {.kind = AMQP_FIELD_KIND_I64, .value.i64 = 4}},
    };
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
    static const char id_with_nul[] = "typed\0id"; /* a shortstr may hold NUL */
    p.message_id = (amqp_bytes_t){sizeof id_with_nul - 1, (void *)id_with_nul};
    p.headers.num_entries = (int)(sizeof e / sizeof e[0]);
    p.headers.entries = e;
    assert_int_equal(amqp_basic_publish(admin_conn, 1, amqp_cstring_bytes(""),
                                        amqp_cstring_bytes(q), 0, 0, &p,
                                        amqp_cstring_bytes("typed body")),
                     AMQP_STATUS_OK);
    assert_int_equal(amqp_basic_publish(admin_conn, 1, amqp_cstring_bytes(""),
                                        amqp_cstring_bytes(q), 0, 0, NULL, amqp_empty_bytes),
                     AMQP_STATUS_OK);
}

static json_t *headers_of(const acemq_delivery *d)
{
    assert_non_null(d->headers_json);
    json_error_t err;
    json_t *h = json_loads(d->headers_json, 0, &err);
    if (!h) fail_msg("headers_json %s: %s", d->headers_json, err.text);
    assert_true(json_is_object(h));
    return h;
}

static void assert_typed_headers(const acemq_delivery *d)
{
    json_t *h = headers_of(d);
    assert_string_equal(json_string_value(json_object_get(h, "s")), "caf\xC3\xA9");
    assert_string_equal(json_string_value(json_object_get(h, "raw")), "a\xEF\xBF\xBD"
                                                                      "b");
    /* A NUL would cut every reader's C string short: U+FFFD instead. */
    assert_string_equal(json_string_value(json_object_get(h, "nul")), "a\xEF\xBF\xBD"
                                                                      "b");
    assert_true(json_is_true(json_object_get(h, "t")));
    assert_int_equal(json_integer_value(json_object_get(h, "b")), -5);
    assert_int_equal(json_integer_value(json_object_get(h, "s16")), -300);
    assert_int_equal(json_integer_value(json_object_get(h, "i32")), -70000);
    assert_true(json_integer_value(json_object_get(h, "i64")) == INT64_C(-5000000000));
    assert_true(json_real_value(json_object_get(h, "f")) == 1.5);
    assert_true(json_real_value(json_object_get(h, "d")) == -2.25);
    assert_string_equal(json_string_value(json_object_get(h, "dec")), "12.34");
    assert_string_equal(json_string_value(json_object_get(h, "ndec")), "-0.5");
    assert_int_equal(json_integer_value(json_object_get(h, "u8")), 200);
    assert_int_equal(json_integer_value(json_object_get(h, "u16")), 60000);
    assert_true(json_integer_value(json_object_get(h, "u32")) == INT64_C(4000000000));
    assert_int_equal(json_integer_value(json_object_get(h, "ts")), 1700000000);
    assert_true(json_is_null(json_object_get(h, "v")));
    json_t *arr = json_object_get(h, "arr");
    assert_int_equal(json_array_size(arr), 2);
    assert_int_equal(json_integer_value(json_array_get(arr, 0)), 7);
    assert_string_equal(json_string_value(json_array_get(arr, 1)), "x");
    assert_true(json_is_false(json_object_get(json_object_get(h, "tbl"), "deep")));
    assert_int_equal(d->attempts, 4);
    json_decref(h);
}

/* Every field round-trips: ids, content type, headers (publish's and every
 * AMQP type), attempts, binary, empty and 1 MiB bodies (many frames), a
 * message without properties; all acked, the queue is empty, and stays so
 * when the consumer goes. */
static void fields_round_trip_and_acks_empty_the_queue(void **state)
{
    (void)state;
    char q[160];
    qname(q, sizeof q, "fields");
    declare(q, NULL);
    static const unsigned char binary[] = {0, 1, 2, 0xFF, 0, 0x80, 'x'};
    size_t big_len = (size_t)1 << 20;
    unsigned char *big = malloc(big_len);
    assert_non_null(big);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (unsigned char)(i * 7 + 3);
    acemq_broker_msg m[3] = {
        {.exchange = "",
         .routing_key = q,
         .message_id = "m-binary",
         .content_type = "application/octet-stream",
         .headers_json = "{\"trace\":\"abc\",\"tenant\":\"t1\"}",
         .attempts = 2,
         .body = binary,
         .body_len = sizeof binary},
        {.exchange = "", .routing_key = q, .message_id = "m-big", .body = big, .body_len = big_len},
        {.exchange = "", .routing_key = q, .message_id = "m-empty"},
    };
    acemq_broker *pub = open_at(broker_url, 30);
    publish(pub, m, 3);
    acemq_broker_close(pub);
    publish_raw(q); /* no confirms on the admin channel: the consumer sees them arrive */

    acemq_broker *c = consumer_at(broker_url, q, 10, 30);
    acemq_delivery *d[5];
    for (int i = 0; i < 5; i++)
        d[i] = must_next(c);
    assert_string_equal(d[0]->message_id, "m-binary");
    assert_int_equal(d[0]->message_id_len, strlen("m-binary"));
    assert_string_equal(d[0]->exchange, "");
    assert_string_equal(d[0]->routing_key, q);
    assert_string_equal(d[0]->content_type, "application/octet-stream");
    assert_int_equal(d[0]->attempts, 2);
    assert_int_equal(d[0]->redelivered, 0);
    assert_int_equal(d[0]->body_len, sizeof binary);
    assert_memory_equal(d[0]->body, binary, sizeof binary);
    json_t *h = headers_of(d[0]);
    assert_string_equal(json_string_value(json_object_get(h, "trace")), "abc");
    assert_string_equal(json_string_value(json_object_get(h, "tenant")), "t1");
    assert_int_equal(json_integer_value(json_object_get(h, "x-acemq-attempts")), 2);
    assert_int_equal(json_object_size(h), 3);
    json_decref(h);

    assert_string_equal(d[1]->message_id, "m-big");
    assert_null(d[1]->content_type);
    assert_int_equal(d[1]->attempts, 0);
    assert_int_equal(d[1]->body_len, big_len);
    assert_memory_equal(d[1]->body, big, big_len);

    assert_string_equal(d[2]->message_id, "m-empty");
    assert_non_null(d[2]->body);
    assert_int_equal(d[2]->body_len, 0);

    assert_string_equal(d[3]->message_id, "typed");
    assert_int_equal(d[3]->message_id_len, 8);
    assert_memory_equal(d[3]->message_id, "typed\0id", 9);
    assert_int_equal(d[3]->body_len, strlen("typed body"));
    assert_memory_equal(d[3]->body, "typed body", d[3]->body_len);
    assert_typed_headers(d[3]);

    assert_null(d[4]->message_id);
    assert_int_equal(d[4]->message_id_len, 0);
    assert_null(d[4]->content_type);
    assert_null(d[4]->headers_json);
    assert_int_equal(d[4]->attempts, 0);
    assert_int_equal(d[4]->body_len, 0);

    acemq_delivery *none = (acemq_delivery *)1;
    assert_int_equal(acemq_broker_next(c, 200, &none), ACEMQ_ENOENT);
    assert_null(none);
    for (int i = 0; i < 5; i++)
        ack_free(c, d[i]);
    acemq_broker_close(c); /* what was not acked would go back now */
    assert_int_equal(ready(q), 0);
    drop_queue(q);
    free(big);
}

/* reject(requeue 1) comes back redelivered; reject(requeue 0) goes to the
 * queue's dead-letter exchange, where RabbitMQ's x-death (an array of
 * tables) comes through as JSON. */
static void reject_requeues_or_dead_letters(void **state)
{
    (void)state;
    char q[160], dlq[160];
    qname(q, sizeof q, "reject");
    qname(dlq, sizeof dlq, "reject.dead");
    declare(dlq, NULL);
    declare(q, dlq);

    publish_n(q, "r", 2);
    /* Prefetch 1: r1 stays in the queue, so the requeued r0 goes back ahead
     * of it (with more in flight, r1 would already be on its way). */
    acemq_broker *c = consumer_at(broker_url, q, 1, 30);
    acemq_delivery *d = must_next(c);
    assert_string_equal(d->message_id, "r0");
    assert_int_equal(d->redelivered, 0);
    assert_int_equal(acemq_broker_reject(c, d, 1), 0);
    acemq_delivery_free(d);
    d = must_next(c);
    assert_string_equal(d->message_id, "r0");
    assert_int_equal(d->redelivered, 1);
    assert_int_equal(acemq_broker_reject(c, d, 0), 0);
    acemq_delivery_free(d);
    d = must_next(c);
    assert_string_equal(d->message_id, "r1");
    ack_free(c, d);
    acemq_broker_close(c);
    assert_int_equal(ready(q), 0);

    acemq_broker *dc = consumer_at(broker_url, dlq, 1, 30);
    d = must_next(dc);
    assert_string_equal(d->message_id, "r0");
    assert_int_equal(d->redelivered, 0);
    json_t *h = headers_of(d);
    json_t *death = json_array_get(json_object_get(h, "x-death"), 0);
    if (!json_is_object(death)) fail_msg("no x-death in %s", d->headers_json);
    assert_string_equal(json_string_value(json_object_get(death, "reason")), "rejected");
    assert_string_equal(json_string_value(json_object_get(death, "queue")), q);
    assert_true(json_is_integer(json_object_get(death, "time")));
    json_decref(h);
    ack_free(dc, d);
    acemq_broker_close(dc);
    assert_int_equal(ready(dlq), 0);
    drop_queue(q);
    drop_queue(dlq);
}

/* With prefetch 5 and five in hand, nothing more comes although three more
 * are ready; one ack lets one more through. */
static void prefetch_is_honoured(void **state)
{
    (void)state;
    char q[160];
    qname(q, sizeof q, "prefetch");
    declare(q, NULL);
    publish_n(q, "p", 8);
    acemq_broker *c = consumer_at(broker_url, q, 5, 30);
    acemq_delivery *d[6];
    for (int i = 0; i < 5; i++)
        d[i] = must_next(c);
    acemq_delivery *none = NULL;
    assert_int_equal(acemq_broker_next(c, 1000, &none), ACEMQ_ENOENT);
    assert_int_equal(ready(q), 3);
    ack_free(c, d[0]);
    d[5] = must_next(c);
    assert_string_equal(d[5]->message_id, "p5");
    for (int i = 1; i < 6; i++)
        ack_free(c, d[i]);
    acemq_broker_close(c);
    assert_int_equal(ready(q), 2);
    drop_queue(q);
}

/* A delivery acked twice: the second ack is refused in the handle and never
 * reaches RabbitMQ, which would close the channel over the unknown tag (406)
 * and send every other delivery in hand back to the queue. The channel
 * stays: the other delivery acks, nothing comes round again. */
static void second_ack_is_refused_and_the_channel_stays(void **state)
{
    (void)state;
    char q[160];
    qname(q, sizeof q, "twice");
    declare(q, NULL);
    publish_n(q, "t", 2);
    acemq_broker *c = consumer_at(broker_url, q, 10, 30);
    acemq_delivery *a = must_next(c), *b = must_next(c);
    assert_int_equal(acemq_broker_ack(c, a), 0);
    assert_int_equal(acemq_broker_ack(c, a), ACEMQ_EINVAL);
    print_message("twice: %s\n", acemq_broker_errmsg(c));
    assert_non_null(strstr(acemq_broker_errmsg(c), "settled already"));
    assert_int_equal(acemq_broker_reject(c, a, 0), ACEMQ_EINVAL);
    acemq_delivery *d = NULL;
    /* A 406 would arrive here as ACEMQ_EBACKEND, with b back in the queue. */
    assert_int_equal(acemq_broker_next(c, 500, &d), ACEMQ_ENOENT);
    ack_free(c, b);
    assert_int_equal(acemq_broker_next(c, 500, &d), ACEMQ_ENOENT);
    acemq_delivery_free(a);
    acemq_broker_close(c);
    assert_int_equal(ready(q), 0);
    drop_queue(q);
}

/* A connection cut under the consumer: next answers ACEMQ_EIO, the
 * deliveries in hand are void (ACEMQ_ESTALE, nothing sent: not even to the
 * new delivery that has the old one's number on the new channel), and the
 * next call connects again and gets them redelivered. */
static void cut_connection_voids_deliveries_and_redelivers(void **state)
{
    (void)state;
    char q[160], url[512];
    qname(q, sizeof q, "cut");
    declare(q, NULL);
    publish_n(q, "c", 3);
    proxy_url(url, sizeof url);
    acemq_broker *c = consumer_at(url, q, 10, 30);
    /* All three held, none acked: an ack still in the proxy when it cuts
     * would be lost with the connection, as on any network. */
    acemq_delivery *old[3];
    for (int i = 0; i < 3; i++)
        old[i] = must_next(c);

    tcp_proxy_cut();
    acemq_delivery *d = NULL;
    assert_int_equal(acemq_broker_next(c, 10000, &d), ACEMQ_EIO);
    print_message("cut: %s\n", acemq_broker_errmsg(c));
    assert_non_null(strstr(acemq_broker_errmsg(c), "lost connection"));
    assert_int_equal(acemq_broker_ack(c, old[0]), ACEMQ_ESTALE);
    assert_int_equal(acemq_broker_reject(c, old[1], 0), ACEMQ_ESTALE);

    acemq_delivery *again[3];
    for (int i = 0; i < 3; i++) {
        char want[8];
        (void)snprintf(want, sizeof want, "c%d", i);
        again[i] = must_next(c);
        assert_string_equal(again[i]->message_id, want);
        assert_int_equal(again[i]->redelivered, 1);
    }
    /* old[i] had tag i + 1 on the old channel, as again[i] has on the new
     * one: refused all the same, and the new ones stay unsettled. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(acemq_broker_ack(c, old[i]), ACEMQ_ESTALE);
        acemq_delivery_free(old[i]);
    }
    for (int i = 0; i < 3; i++)
        acemq_delivery_free(again[i]);
    acemq_broker_close(c); /* the three go back: none was settled */
    c = consumer_at(broker_url, q, 10, 30);
    for (int i = 0; i < 3; i++) {
        d = must_next(c);
        assert_int_equal(d->redelivered, 1);
        ack_free(c, d);
    }
    acemq_broker_close(c);
    drop_queue(q);
}

/* acemq_broker_ack_many on RabbitMQ: with a delivery held below the
 * batch's highest tag, one ack each, and the held one stays unacked (were
 * it acked by a multiple ack, acking it again would cost the channel:
 * 406); with every delivery in hand below the highest, one ack with
 * multiple set, after which nothing is left unacked. */
static void ack_many_acks_what_it_names(void **state)
{
    (void)state;
    char q[160];
    qname(q, sizeof q, "many");
    declare(q, NULL);
    publish_n(q, "m", 6);
    acemq_broker *c = consumer_at(broker_url, q, 10, 30);
    acemq_delivery *d[6];
    for (int i = 0; i < 6; i++)
        d[i] = must_next(c);
    assert_int_equal(acemq_broker_reject(c, d[1], 1), 0); /* tag 2 back to the queue */
    const acemq_delivery *below[3] = {d[4], d[0], d[2]};  /* tag 4 held below 5 */
    int status[4] = {-1, -1, -1, -1};
    assert_int_equal(acemq_broker_ack_many(c, below, 3, status), 0);
    assert_int_equal(status[0] + status[1] + status[2], 0);
    assert_int_equal(acemq__broker_multiple_acks(c), 0);
    assert_int_equal(acemq_broker_ack_many(c, (const acemq_delivery *const *)&d[3], 1, status), 0);
    acemq_delivery *again = must_next(c); /* m1, redelivered; left unsettled, as m5 */
    assert_string_equal(again->message_id, "m1");
    assert_int_equal(again->redelivered, 1);
    acemq_delivery *none = NULL;
    /* A 406 would arrive here as ACEMQ_EBACKEND. */
    assert_int_equal(acemq_broker_next(c, 500, &none), ACEMQ_ENOENT);
    acemq_broker_close(c);
    assert_int_equal(ready(q), 2);
    for (int i = 0; i < 6; i++)
        acemq_delivery_free(d[i]);
    acemq_delivery_free(again);

    c = consumer_at(broker_url, q, 10, 30);
    acemq_delivery *e[2] = {must_next(c), must_next(c)};
    assert_int_equal(acemq_broker_ack_many(c, (const acemq_delivery *const *)e, 2, status), 0);
    assert_int_equal(status[0] + status[1], 0);
    assert_int_equal(acemq__broker_multiple_acks(c), 1);
    assert_int_equal(acemq_broker_ack_many(c, (const acemq_delivery *const *)e, 2, status),
                     ACEMQ_EINVAL); /* settled already: refused, nothing sent */
    assert_int_equal(acemq_broker_next(c, 500, &none), ACEMQ_ENOENT);
    acemq_broker_close(c);
    assert_int_equal(ready(q), 0);
    acemq_delivery_free(e[0]);
    acemq_delivery_free(e[1]);
    drop_queue(q);
}

/* ack_many after a cut: the old connection's deliveries are stale (nothing
 * sent, though their numbers are the new channel's too), the new ones in
 * the same call are acknowledged, by one multiple ack. */
static void ack_many_after_a_cut(void **state)
{
    (void)state;
    char q[160], url[512];
    qname(q, sizeof q, "many-cut");
    declare(q, NULL);
    publish_n(q, "k", 3);
    proxy_url(url, sizeof url);
    acemq_broker *c = consumer_at(url, q, 10, 30);
    acemq_delivery *old[3];
    for (int i = 0; i < 3; i++)
        old[i] = must_next(c);
    tcp_proxy_cut();
    acemq_delivery *d = NULL;
    assert_int_equal(acemq_broker_next(c, 10000, &d), ACEMQ_EIO);
    int status[4] = {-1, -1, -1, -1};
    assert_int_equal(acemq_broker_ack_many(c, (const acemq_delivery *const *)old, 3, status),
                     ACEMQ_ESTALE);
    for (int i = 0; i < 3; i++)
        assert_int_equal(status[i], ACEMQ_ESTALE);
    acemq_delivery *fresh[3];
    for (int i = 0; i < 3; i++) {
        fresh[i] = must_next(c);
        assert_int_equal(fresh[i]->redelivered, 1);
    }
    const acemq_delivery *mixed[4] = {fresh[0], old[0], fresh[1], fresh[2]};
    assert_int_equal(acemq_broker_ack_many(c, mixed, 4, status), ACEMQ_ESTALE);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[1], ACEMQ_ESTALE);
    assert_int_equal(status[2] + status[3], 0);
    assert_int_equal(acemq__broker_multiple_acks(c), 1);
    assert_int_equal(acemq_broker_next(c, 500, &d), ACEMQ_ENOENT);
    acemq_broker_close(c);
    assert_int_equal(ready(q), 0);
    for (int i = 0; i < 3; i++) {
        acemq_delivery_free(old[i]);
        acemq_delivery_free(fresh[i]);
    }
    drop_queue(q);
}

/* A broker that goes silent (the proxy stops forwarding) is noticed by the
 * heartbeat: next ends with ACEMQ_EIO well before its own timeout, and the
 * handle consumes again once the path is back. */
static void silent_broker_is_noticed_by_heartbeats(void **state)
{
    (void)state;
    char q[160], url[512];
    qname(q, sizeof q, "silent");
    declare(q, NULL);
    proxy_url(url, sizeof url);
    acemq_broker *c = consumer_at(url, q, 10, 1);
    tcp_proxy_freeze(1);
    acemq_delivery *d = NULL;
    /* A timeout far past two heartbeats: an ENOENT means none was missed. */
    int rc = acemq_broker_next(c, 120000, &d);
    tcp_proxy_cut();
    tcp_proxy_freeze(0);
    if (rc != ACEMQ_EIO) fail_msg("next: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(c));
    print_message("silent: %s\n", acemq_broker_errmsg(c));
    assert_non_null(strstr(acemq_broker_errmsg(c), "heartbeat"));
    publish_n(q, "s", 1);
    d = must_next(c);
    assert_string_equal(d->message_id, "s0");
    ack_free(c, d);
    acemq_broker_close(c);
    drop_queue(q);
}

/* A queue deleted under its consumer: basic.cancel, ACEMQ_EBACKEND naming
 * it; consuming again meets 404 until it is back. A queue that never was:
 * ACEMQ_ENOENT naming it, and the handle still publishes. */
static void deleted_or_missing_queue_is_a_clear_error(void **state)
{
    (void)state;
    char q[160];
    qname(q, sizeof q, "deleted");
    declare(q, NULL);
    publish_n(q, "x", 1);
    acemq_broker *c = consumer_at(broker_url, q, 10, 30);
    acemq_delivery *held = must_next(c);
    drop_queue(q);
    acemq_delivery *d = NULL;
    assert_int_equal(acemq_broker_next(c, 10000, &d), ACEMQ_EBACKEND);
    print_message("deleted: %s\n", acemq_broker_errmsg(c));
    assert_non_null(strstr(acemq_broker_errmsg(c), "cancel"));
    assert_non_null(strstr(acemq_broker_errmsg(c), q));
    assert_int_equal(acemq_broker_ack(c, held), ACEMQ_ESTALE);
    acemq_delivery_free(held);
    assert_int_equal(acemq_broker_next(c, 1000, &d), ACEMQ_EBACKEND);
    print_message("gone: %s\n", acemq_broker_errmsg(c));
    assert_non_null(strstr(acemq_broker_errmsg(c), "404"));
    declare(q, NULL);
    publish_n(q, "y", 1);
    d = must_next(c);
    assert_string_equal(d->message_id, "y0");
    ack_free(c, d);
    acemq_broker_msg m = {.exchange = "", .routing_key = q, .message_id = "no"};
    acemq_publish_result r;
    assert_int_equal(acemq_broker_publish(c, &m, 1, &r), ACEMQ_EINVAL);
    acemq_broker_close(c);
    drop_queue(q);

    char missing[160];
    qname(missing, sizeof missing, "never-declared");
    acemq_broker *b = open_at(broker_url, 30);
    assert_int_equal(acemq_broker_consume(b, missing, 1), ACEMQ_ENOENT);
    print_message("missing: %s\n", acemq_broker_errmsg(b));
    assert_non_null(strstr(acemq_broker_errmsg(b), "404 NOT_FOUND"));
    assert_non_null(strstr(acemq_broker_errmsg(b), missing));
    char pq[160];
    qname(pq, sizeof pq, "still-publishing");
    declare(pq, NULL);
    m.routing_key = pq;
    assert_int_equal(acemq_broker_publish(b, &m, 1, &r), 0);
    assert_int_equal(r.outcome, ACEMQ_PUBLISH_CONFIRMED);
    acemq_broker_close(b);
    assert_int_equal(ready(pq), 1);
    drop_queue(pq);
}

int main(void)
{
    broker_url = getenv("ACEMQ_AMQP_URL"); /* broker_amqp_fixture.h */
    if (!broker_url || !*broker_url) {
        printf("SKIPPED: ACEMQ_AMQP_URL is not set (scripts/services.sh start rabbitmq)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fields_round_trip_and_acks_empty_the_queue),
        cmocka_unit_test(reject_requeues_or_dead_letters),
        cmocka_unit_test(prefetch_is_honoured),
        cmocka_unit_test(second_ack_is_refused_and_the_channel_stays),
        cmocka_unit_test(cut_connection_voids_deliveries_and_redelivers),
        cmocka_unit_test(ack_many_acks_what_it_names),
        cmocka_unit_test(ack_many_after_a_cut),
        cmocka_unit_test(silent_broker_is_noticed_by_heartbeats),
        cmocka_unit_test(deleted_or_missing_queue_is_a_clear_error),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
