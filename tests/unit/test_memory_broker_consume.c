/* test_memory_broker_consume.c — the consuming half of the broker contract
 * on the in-process broker: every field of a delivery round-trips, acks
 * empty the queue, rejects requeue (redelivered set) or dead-letter, the
 * prefetch bounds what is in hand, and a lost connection voids the
 * deliveries in hand (ACEMQ_ESTALE, nothing settled) and gives them back;
 * acemq_broker_ack_many judges each delivery as ack does and uses one
 * multiple ack exactly when nothing held lies below its highest tag.
 * The same contract runs against RabbitMQ in
 * tests/integration/test_broker_consume.c. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "acemq/broker.h"
#include "backends/test_control.h"
#include "broker/broker_internal.h"

static acemq_broker *open_named(const char *url)
{
    acemq_broker *b = NULL;
    int rc = acemq_broker_open(&b, url, NULL);
    if (rc != 0) fail_msg("open %s: %s", url, acemq_broker_errmsg(NULL));
    return b;
}

/* Publishes n messages "<prefix><i>" to exchange ex, key k, all confirmed. */
static void publish_n(acemq_broker *pub, const char *ex, const char *prefix, int n)
{
    for (int i = 0; i < n; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s%d", prefix, i);
        acemq_broker_msg m = {.exchange = ex,
                              .routing_key = "k",
                              .message_id = id,
                              .body = id,
                              .body_len = strlen(id)};
        acemq_publish_result r;
        assert_int_equal(acemq_broker_publish(pub, &m, 1, &r), 0);
        assert_int_equal(r.outcome, ACEMQ_PUBLISH_CONFIRMED);
    }
}

static acemq_delivery *must_next(acemq_broker *b)
{
    acemq_delivery *d = NULL;
    int rc = acemq_broker_next(b, 0, &d);
    if (rc != 0) fail_msg("next: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(b));
    assert_non_null(d);
    return d;
}

static void assert_depth(acemq_broker *b, const char *q, size_t ready, size_t in_hand)
{
    size_t r = 99, u = 99;
    assert_int_equal(acemq__memory_broker_depth(b, q, &r, &u), 0);
    if (r != ready || u != in_hand)
        fail_msg("queue %s: %zu ready, %zu in hand; expected %zu, %zu", q, r, u, ready, in_hand);
}

static void assert_none(acemq_broker *b)
{
    acemq_delivery *d = (acemq_delivery *)1;
    assert_int_equal(acemq_broker_next(b, 0, &d), ACEMQ_ENOENT);
    assert_null(d);
}

/* A broker "memory:<name>" with queue q bound to ("ex", "k"), a publisher
 * and a consumer of q with this prefetch. */
typedef struct fixture {
    acemq_broker *pub, *con;
} fixture;

static fixture setup_queue(const char *name, const char *dlx, int prefetch)
{
    char url[128];
    snprintf(url, sizeof url, "memory:%s", name);
    fixture f = {open_named(url), open_named(url)};
    assert_int_equal(acemq__memory_broker_declare(f.pub, "q", dlx), 0);
    assert_int_equal(acemq__memory_broker_bind(f.pub, "q", "ex", "k"), 0);
    assert_int_equal(acemq_broker_consume(f.con, "q", prefetch), 0);
    return f;
}

static void teardown_fixture(fixture *f)
{
    acemq_broker_close(f->con);
    acemq_broker_close(f->pub);
}

/* Every field as published, a binary body and a 1 MiB one byte for byte;
 * acks leave the queue empty. */
static void fields_round_trip_and_acks_empty_the_queue(void **state)
{
    (void)state;
    fixture f = setup_queue("fields", NULL, 10);
    static const unsigned char binary[] = {0, 1, 2, 0xFF, 0, 0x80, 'x'};
    size_t big_len = (size_t)1 << 20;
    unsigned char *big = malloc(big_len);
    assert_non_null(big);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (unsigned char)(i * 7 + 3);
    acemq_broker_msg m[3] = {
        {.exchange = "ex",
         .routing_key = "k",
         .message_id = "m-binary",
         .content_type = "application/octet-stream",
         .headers_json = "{\"trace\":\"abc\",\"tenant\":\"t1\"}",
         .attempts = 2,
         .body = binary,
         .body_len = sizeof binary},
        {.exchange = "ex",
         .routing_key = "k",
         .message_id = "m-big",
         .attempts = 0,
         .body = big,
         .body_len = big_len},
        {.exchange = "ex", .routing_key = "k", .message_id = "m-empty"},
    };
    acemq_publish_result r[3];
    assert_int_equal(acemq_broker_publish(f.pub, m, 3, r), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(r[i].outcome, ACEMQ_PUBLISH_CONFIRMED);
    assert_depth(f.pub, "q", 3, 0);

    acemq_delivery *d[3];
    for (int i = 0; i < 3; i++)
        d[i] = must_next(f.con);
    assert_string_equal(d[0]->message_id, "m-binary");
    assert_int_equal(d[0]->message_id_len, strlen("m-binary"));
    assert_string_equal(d[0]->exchange, "ex");
    assert_string_equal(d[0]->routing_key, "k");
    assert_string_equal(d[0]->content_type, "application/octet-stream");
    assert_int_equal(d[0]->attempts, 2);
    assert_int_equal(d[0]->redelivered, 0);
    assert_int_equal(d[0]->body_len, sizeof binary);
    assert_memory_equal(d[0]->body, binary, sizeof binary);
    json_t *h = json_loads(d[0]->headers_json, 0, NULL);
    assert_non_null(h);
    assert_string_equal(json_string_value(json_object_get(h, "trace")), "abc");
    assert_string_equal(json_string_value(json_object_get(h, "tenant")), "t1");
    assert_int_equal(json_integer_value(json_object_get(h, "x-acemq-attempts")), 2);
    assert_int_equal(json_object_size(h), 3);
    json_decref(h);

    assert_string_equal(d[1]->message_id, "m-big");
    assert_null(d[1]->content_type);
    assert_int_equal(d[1]->body_len, big_len);
    assert_memory_equal(d[1]->body, big, big_len);

    assert_string_equal(d[2]->message_id, "m-empty");
    assert_non_null(d[2]->body);
    assert_int_equal(d[2]->body_len, 0);
    assert_depth(f.pub, "q", 0, 3);
    assert_none(f.con);

    for (int i = 0; i < 3; i++) {
        assert_int_equal(acemq_broker_ack(f.con, d[i]), 0);
        acemq_delivery_free(d[i]);
    }
    assert_depth(f.pub, "q", 0, 0);
    assert_none(f.con);
    free(big);
    teardown_fixture(&f);
}

/* reject(requeue 1) gives the message back, delivered again with
 * redelivered set; reject(requeue 0) sends it to the dead-letter exchange,
 * where it arrives as new, or drops it from a queue without one. */
static void reject_requeues_or_dead_letters(void **state)
{
    (void)state;
    fixture f = setup_queue("reject", "dlx", 10);
    assert_int_equal(acemq__memory_broker_declare(f.pub, "dlq", NULL), 0);
    assert_int_equal(acemq__memory_broker_bind(f.pub, "dlq", "dlx", "k"), 0);
    publish_n(f.pub, "ex", "r", 2);

    acemq_delivery *d = must_next(f.con);
    assert_string_equal(d->message_id, "r0");
    assert_int_equal(d->redelivered, 0);
    assert_int_equal(acemq_broker_reject(f.con, d, 1), 0);
    acemq_delivery_free(d);
    d = must_next(f.con);
    assert_string_equal(d->message_id, "r0"); /* back at the head */
    assert_int_equal(d->redelivered, 1);
    assert_int_equal(acemq_broker_reject(f.con, d, 0), 0);
    acemq_delivery_free(d);
    assert_depth(f.pub, "dlq", 1, 0);

    acemq_broker *dl = open_named("memory:reject");
    assert_int_equal(acemq_broker_consume(dl, "dlq", 1), 0);
    d = must_next(dl);
    assert_string_equal(d->message_id, "r0");
    assert_string_equal(d->exchange, "dlx");
    assert_int_equal(d->redelivered, 0);
    /* dlq has no dead-letter exchange of its own: a reject there drops. */
    assert_int_equal(acemq_broker_reject(dl, d, 0), 0);
    acemq_delivery_free(d);
    assert_depth(f.pub, "dlq", 0, 0);
    acemq_broker_close(dl);

    d = must_next(f.con);
    assert_string_equal(d->message_id, "r1");
    assert_int_equal(acemq_broker_ack(f.con, d), 0);
    acemq_delivery_free(d);
    assert_depth(f.pub, "q", 0, 0);
    teardown_fixture(&f);
}

/* With prefetch 5 and five in hand, nothing more comes although more is
 * ready; one ack makes room for one more. */
static void prefetch_bounds_what_is_in_hand(void **state)
{
    (void)state;
    fixture f = setup_queue("prefetch", NULL, 5);
    publish_n(f.pub, "ex", "p", 8);
    acemq_delivery *d[6];
    for (int i = 0; i < 5; i++)
        d[i] = must_next(f.con);
    assert_none(f.con);
    assert_depth(f.pub, "q", 3, 5);
    assert_int_equal(acemq_broker_ack(f.con, d[0]), 0);
    d[5] = must_next(f.con);
    assert_string_equal(d[5]->message_id, "p5");
    assert_none(f.con);
    for (int i = 1; i < 6; i++)
        assert_int_equal(acemq_broker_ack(f.con, d[i]), 0);
    for (int i = 0; i < 6; i++)
        acemq_delivery_free(d[i]);
    assert_depth(f.pub, "q", 2, 0);
    teardown_fixture(&f);
}

/* A lost connection: next answers ACEMQ_EIO, the deliveries in hand are
 * void (ack and reject answer ACEMQ_ESTALE and settle nothing, not even the
 * new delivery that reuses the old one's number), a refused reconnect is
 * ACEMQ_EIO again, and the next call consumes again and gets them back,
 * redelivered, in order. */
static void lost_connection_voids_deliveries_in_hand(void **state)
{
    (void)state;
    fixture f = setup_queue("lost", NULL, 10);
    publish_n(f.pub, "ex", "l", 3);
    acemq_delivery *old[3];
    for (int i = 0; i < 3; i++)
        old[i] = must_next(f.con);
    assert_int_equal(acemq_broker_ack(f.con, old[0]), 0);

    acemq__memory_broker_cut(f.con);
    assert_depth(f.pub, "q", 2, 0); /* given back at once, as RabbitMQ does */
    acemq_delivery *d = (acemq_delivery *)1;
    assert_int_equal(acemq_broker_next(f.con, 0, &d), ACEMQ_EIO);
    assert_null(d);
    assert_non_null(strstr(acemq_broker_errmsg(f.con), "lost connection"));
    assert_int_equal(acemq_broker_ack(f.con, old[1]), ACEMQ_ESTALE);
    assert_int_equal(acemq_broker_reject(f.con, old[2], 1), ACEMQ_ESTALE);

    acemq__memory_broker_fault(f.pub, ACEMQ__FAULT_REFUSE, 1, 0);
    assert_int_equal(acemq_broker_next(f.con, 0, &d), ACEMQ_EIO);
    assert_non_null(strstr(acemq_broker_errmsg(f.con), "refused"));

    acemq_delivery *again[2];
    for (int i = 0; i < 2; i++) {
        again[i] = must_next(f.con);
        assert_string_equal(again[i]->message_id, i == 0 ? "l1" : "l2");
        assert_int_equal(again[i]->redelivered, 1);
    }
    assert_none(f.con);
    /* The old deliveries' numbers are the new ones' on the new consumer:
     * still refused, and the new ones stay in hand. */
    assert_int_equal(acemq_broker_ack(f.con, old[0]), ACEMQ_ESTALE);
    assert_int_equal(acemq_broker_ack(f.con, old[1]), ACEMQ_ESTALE);
    assert_depth(f.pub, "q", 0, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(acemq_broker_ack(f.con, again[i]), 0);
        acemq_delivery_free(again[i]);
    }
    for (int i = 0; i < 3; i++)
        acemq_delivery_free(old[i]);
    assert_depth(f.pub, "q", 0, 0);
    teardown_fixture(&f);
}

/* A deleted queue cancels its consumer (ACEMQ_EBACKEND, in the broker's
 * words, naming the queue); consuming again meets 404 until the queue is
 * back. */
static void deleted_queue_cancels_the_consumer(void **state)
{
    (void)state;
    fixture f = setup_queue("deleted", NULL, 10);
    publish_n(f.pub, "ex", "d", 1);
    acemq_delivery *d = must_next(f.con);
    assert_int_equal(acemq__memory_broker_delete(f.pub, "q"), 0);
    acemq_delivery *none = NULL;
    assert_int_equal(acemq_broker_next(f.con, 0, &none), ACEMQ_EBACKEND);
    assert_non_null(strstr(acemq_broker_errmsg(f.con), "cancel"));
    assert_non_null(strstr(acemq_broker_errmsg(f.con), "'q'"));
    assert_int_equal(acemq_broker_ack(f.con, d), ACEMQ_ESTALE);
    acemq_delivery_free(d);
    assert_int_equal(acemq_broker_next(f.con, 0, &none), ACEMQ_EBACKEND);
    assert_non_null(strstr(acemq_broker_errmsg(f.con), "404"));
    assert_int_equal(acemq__memory_broker_declare(f.pub, "q", NULL), 0);
    assert_none(f.con);
    teardown_fixture(&f);
}

/* A tag settled twice: as RabbitMQ, the broker closes the channel (406),
 * the next call says so, and what was in hand comes back redelivered. */
/* A delivery settled twice: the second is refused in the handle (nothing
 * reaches the broker, so the channel and the other deliveries in hand stay
 * as they were), and so is a settle after a reject, and a tag the handle
 * never handed out. */
static void second_settle_is_refused_and_nothing_else_changes(void **state)
{
    (void)state;
    fixture f = setup_queue("twice", NULL, 10);
    publish_n(f.pub, "ex", "t", 3);
    acemq_delivery *a = must_next(f.con), *b = must_next(f.con), *c = must_next(f.con);
    assert_int_equal(acemq_broker_ack(f.con, a), 0);
    assert_int_equal(acemq_broker_ack(f.con, a), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_broker_errmsg(f.con), "settled already"));
    assert_non_null(strstr(acemq_broker_errmsg(f.con), "'t0'"));
    assert_int_equal(acemq_broker_reject(f.con, a, 1), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_reject(f.con, b, 1), 0);
    assert_int_equal(acemq_broker_ack(f.con, b), ACEMQ_EINVAL);
    acemq_delivery made_up = *c;
    made_up.tag += 100;
    assert_int_equal(acemq_broker_ack(f.con, &made_up), ACEMQ_EINVAL);
    /* c is still in hand on the same channel, and t1 comes back. */
    assert_int_equal(acemq_broker_ack(f.con, c), 0);
    acemq_delivery *d = must_next(f.con);
    assert_string_equal(d->message_id, "t1");
    assert_int_equal(d->redelivered, 1);
    assert_int_equal(acemq_broker_ack(f.con, d), 0);
    acemq_delivery_free(d);
    acemq_delivery_free(a);
    acemq_delivery_free(b);
    acemq_delivery_free(c);
    assert_depth(f.pub, "q", 0, 0);
    assert_none(f.con);
    teardown_fixture(&f);
}

/* The handle's mode and the arguments: a consuming handle does not publish,
 * a handle that does not consume has nothing to settle, a missing queue is
 * named and leaves the handle publishing. */
static void modes_and_arguments(void **state)
{
    (void)state;
    acemq_broker *b = open_named("memory:modes");
    acemq_delivery *d = NULL;
    acemq_delivery fake = {0};
    assert_int_equal(acemq_broker_next(b, 0, &d), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_ack(b, &fake), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_consume(b, NULL, 1), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_consume(b, "q", -1), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_consume(b, "nowhere", 1), ACEMQ_ENOENT);
    assert_non_null(strstr(acemq_broker_errmsg(b), "'nowhere'"));
    publish_n(b, "ex", "still-publishing", 1);

    assert_int_equal(acemq__memory_broker_declare(b, "q", NULL), 0);
    assert_int_equal(acemq_broker_consume(b, "q", 1), 0);
    assert_int_equal(acemq_broker_consume(b, "q", 1), ACEMQ_EINVAL);
    acemq_broker_msg m = {.exchange = "", .routing_key = "q", .message_id = "x"};
    acemq_publish_result r;
    assert_int_equal(acemq_broker_publish(b, &m, 1, &r), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_send(b, &m, 1, &r), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_broker_errmsg(b), "does not publish"));
    assert_int_equal(acemq_broker_next(b, -1, &d), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_next(b, 0, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_ack(b, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_ack(NULL, &fake), ACEMQ_EINVAL);
    acemq_delivery_free(NULL);
    acemq_broker_close(b);
}

struct late {
    acemq_broker *pub;
};

static void *publish_later(void *arg)
{
    struct late *l = arg;
    acemq_broker_msg m = {.exchange = "ex", .routing_key = "k", .message_id = "late"};
    acemq_publish_result r;
    if (acemq_broker_publish(l->pub, &m, 1, &r) != 0) return (void *)1;
    return NULL;
}

/* next waits for a message published while it waits (from another thread),
 * and takes it when it comes. */
static void next_waits_for_a_message(void **state)
{
    (void)state;
    fixture f = setup_queue("wait", NULL, 1);
    struct late l = {f.pub};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, publish_later, &l), 0);
    acemq_delivery *d = NULL;
    int rc = acemq_broker_next(f.con, 60000, &d);
    void *res = (void *)2;
    assert_int_equal(pthread_join(t, &res), 0);
    assert_null(res);
    if (rc != 0) fail_msg("next: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(f.con));
    assert_string_equal(d->message_id, "late");
    assert_int_equal(acemq_broker_ack(f.con, d), 0);
    acemq_delivery_free(d);
    teardown_fixture(&f);
}

/* A consumer closed with deliveries in hand gives them back. */
static void close_gives_back(void **state)
{
    (void)state;
    fixture f = setup_queue("close", NULL, 10);
    publish_n(f.pub, "ex", "c", 2);
    acemq_delivery *d = must_next(f.con);
    acemq_broker_close(f.con);
    acemq_delivery_free(d);
    assert_depth(f.pub, "q", 2, 0);
    f.con = open_named("memory:close");
    assert_int_equal(acemq_broker_consume(f.con, "q", 10), 0);
    d = must_next(f.con);
    assert_string_equal(d->message_id, "c0");
    assert_int_equal(d->redelivered, 1);
    acemq_delivery_free(d);
    teardown_fixture(&f);
}

/* ack_many over every delivery in hand, in any order: one basic.ack with
 * multiple set settles them all, and the queue is empty. */
static void ack_many_covering_all_in_hand_acks_with_multiple(void **state)
{
    (void)state;
    fixture f = setup_queue("many-all", NULL, 10);
    publish_n(f.pub, "ex", "a", 4);
    acemq_delivery *d[4];
    for (int i = 0; i < 4; i++)
        d[i] = must_next(f.con);
    const acemq_delivery *batch[4] = {d[2], d[0], d[3], d[1]};
    int status[4] = {-1, -1, -1, -1};
    assert_int_equal(acemq__broker_multiple_acks(f.con), 0);
    assert_int_equal(acemq_broker_ack_many(f.con, batch, 4, status), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(status[i], 0);
    assert_int_equal(acemq__broker_multiple_acks(f.con), 1);
    assert_depth(f.pub, "q", 0, 0);
    /* Each is settled now: a second ack of any is refused. */
    assert_int_equal(acemq_broker_ack(f.con, d[1]), ACEMQ_EINVAL);
    for (int i = 0; i < 4; i++)
        acemq_delivery_free(d[i]);
    /* Nothing else changed on the channel. */
    publish_n(f.pub, "ex", "b", 1);
    acemq_delivery *e = must_next(f.con);
    assert_int_equal(acemq_broker_ack_many(f.con, (const acemq_delivery *const *)&e, 1, NULL), 0);
    assert_int_equal(acemq__broker_multiple_acks(f.con), 1); /* one alone: a plain ack */
    acemq_delivery_free(e);
    assert_depth(f.pub, "q", 0, 0);
    assert_none(f.con);
    teardown_fixture(&f);
}

/* Tags that interleave with deliveries settled otherwise and with ones
 * still held: multiple only when nothing held lies below the batch's
 * highest tag, and the held ones stay in hand either way. */
static void ack_many_leaves_held_deliveries_alone(void **state)
{
    (void)state;
    fixture f = setup_queue("many-held", NULL, 10);
    publish_n(f.pub, "ex", "h", 6);
    acemq_delivery *d[6];
    for (int i = 0; i < 6; i++)
        d[i] = must_next(f.con);
    assert_int_equal(acemq_broker_reject(f.con, d[1], 1), 0); /* tag 2: back to the queue */
    /* Tag 4 held below the batch's highest: one ack each. */
    const acemq_delivery *batch[3] = {d[0], d[2], d[4]};
    int status[3];
    assert_int_equal(acemq_broker_ack_many(f.con, batch, 3, status), 0);
    assert_int_equal(status[0] + status[1] + status[2], 0);
    assert_int_equal(acemq__broker_multiple_acks(f.con), 0);
    assert_depth(f.pub, "q", 1, 2); /* h1 requeued; h3 and h5 in hand */
    /* Tags 4 and 6 with nothing held below: multiple. */
    const acemq_delivery *rest[2] = {d[5], d[3]};
    assert_int_equal(acemq_broker_ack_many(f.con, rest, 2, status), 0);
    assert_int_equal(acemq__broker_multiple_acks(f.con), 1);
    assert_depth(f.pub, "q", 1, 0);
    /* A batch below a held tag: multiple, and the held one stays. */
    acemq_delivery *again = must_next(f.con); /* h1, redelivered */
    assert_string_equal(again->message_id, "h1");
    publish_n(f.pub, "ex", "k", 2);
    acemq_delivery *k0 = must_next(f.con), *k1 = must_next(f.con);
    const acemq_delivery *low[2] = {k0, again};
    assert_int_equal(acemq_broker_ack_many(f.con, low, 2, status), 0);
    assert_int_equal(acemq__broker_multiple_acks(f.con), 2);
    assert_depth(f.pub, "q", 0, 1);
    assert_int_equal(acemq_broker_reject(f.con, k1, 1), 0); /* still in hand: settles */
    assert_depth(f.pub, "q", 1, 0);
    acemq_delivery *k1b = must_next(f.con);
    assert_string_equal(k1b->message_id, "k1");
    assert_int_equal(k1b->redelivered, 1);
    assert_int_equal(acemq_broker_ack(f.con, k1b), 0);
    for (int i = 0; i < 6; i++)
        acemq_delivery_free(d[i]);
    acemq_delivery_free(again);
    acemq_delivery_free(k0);
    acemq_delivery_free(k1);
    acemq_delivery_free(k1b);
    assert_depth(f.pub, "q", 0, 0);
    assert_none(f.con);
    teardown_fixture(&f);
}

/* Each delivery judged as acemq_broker_ack judges it: NULL, settled
 * already, named twice, made up: EINVAL for it alone, nothing sent for it,
 * the others acknowledged; the return is the first refusal. */
static void ack_many_refuses_each_bad_delivery_alone(void **state)
{
    (void)state;
    fixture f = setup_queue("many-rules", NULL, 10);
    publish_n(f.pub, "ex", "r", 4);
    acemq_delivery *d[4];
    for (int i = 0; i < 4; i++)
        d[i] = must_next(f.con);
    assert_int_equal(acemq_broker_ack(f.con, d[0]), 0);
    acemq_delivery made_up = *d[3];
    made_up.tag += 100;
    const acemq_delivery *batch[6] = {d[1], NULL, d[0], d[2], d[1], &made_up};
    int status[6] = {-1, -1, -1, -1, -1, -1};
    assert_int_equal(acemq_broker_ack_many(f.con, batch, 6, status), ACEMQ_EINVAL);
    int want[6] = {0, ACEMQ_EINVAL, ACEMQ_EINVAL, 0, ACEMQ_EINVAL, ACEMQ_EINVAL};
    for (int i = 0; i < 6; i++)
        if (status[i] != want[i])
            fail_msg("status[%d] %s, expected %s", i, acemq_err_name(status[i]),
                     acemq_err_name(want[i]));
    assert_depth(f.pub, "q", 0, 1); /* r3 alone in hand: the channel stands */
    assert_int_equal(acemq_broker_ack(f.con, d[3]), 0);
    assert_depth(f.pub, "q", 0, 0);
    /* Nothing to do, and the arguments. */
    assert_int_equal(acemq_broker_ack_many(f.con, NULL, 0, NULL), 0);
    assert_int_equal(acemq_broker_ack_many(f.con, NULL, 1, status), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_ack_many(NULL, batch, 1, status), ACEMQ_EINVAL);
    for (int i = 0; i < 4; i++)
        acemq_delivery_free(d[i]);
    assert_none(f.con);
    teardown_fixture(&f);

    /* A handle that does not consume has nothing to acknowledge. */
    acemq_broker *b = open_named("memory:many-modes");
    acemq_delivery fake = {0};
    const acemq_delivery *one[1] = {&fake};
    status[0] = -1;
    assert_int_equal(acemq_broker_ack_many(b, one, 1, status), ACEMQ_EINVAL);
    assert_int_equal(status[0], ACEMQ_EINVAL);
    acemq_broker_close(b);
}

/* A lost connection: the deliveries it gave are stale (nothing sent, the
 * broker gives them back), beside the new connection's, which are
 * acknowledged. */
static void ack_many_after_a_lost_connection(void **state)
{
    (void)state;
    fixture f = setup_queue("many-lost", NULL, 10);
    publish_n(f.pub, "ex", "l", 3);
    acemq_delivery *old[3];
    for (int i = 0; i < 3; i++)
        old[i] = must_next(f.con);
    acemq__memory_broker_cut(f.con);
    int status[4] = {-1, -1, -1, -1};
    assert_int_equal(acemq_broker_ack_many(f.con, (const acemq_delivery *const *)old, 3, status),
                     ACEMQ_EIO); /* the handle learns of the cut here */
    for (int i = 0; i < 3; i++)
        assert_int_not_equal(status[i], 0);
    assert_depth(f.pub, "q", 3, 0);
    assert_int_equal(acemq_broker_ack_many(f.con, (const acemq_delivery *const *)old, 3, status),
                     ACEMQ_ESTALE);
    for (int i = 0; i < 3; i++)
        assert_int_equal(status[i], ACEMQ_ESTALE);
    acemq_delivery *fresh = must_next(f.con); /* reconnects: l0 again */
    assert_string_equal(fresh->message_id, "l0");
    assert_int_equal(fresh->redelivered, 1);
    const acemq_delivery *mixed[4] = {old[0], fresh, old[1], old[2]};
    assert_int_equal(acemq_broker_ack_many(f.con, mixed, 4, status), ACEMQ_ESTALE);
    assert_int_equal(status[0], ACEMQ_ESTALE);
    assert_int_equal(status[1], 0);
    assert_int_equal(status[2], ACEMQ_ESTALE);
    assert_int_equal(status[3], ACEMQ_ESTALE);
    assert_depth(f.pub, "q", 2, 0);
    for (int i = 0; i < 3; i++)
        acemq_delivery_free(old[i]);
    acemq_delivery_free(fresh);
    teardown_fixture(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fields_round_trip_and_acks_empty_the_queue),
        cmocka_unit_test(reject_requeues_or_dead_letters),
        cmocka_unit_test(prefetch_bounds_what_is_in_hand),
        cmocka_unit_test(lost_connection_voids_deliveries_in_hand),
        cmocka_unit_test(deleted_queue_cancels_the_consumer),
        cmocka_unit_test(second_settle_is_refused_and_nothing_else_changes),
        cmocka_unit_test(modes_and_arguments),
        cmocka_unit_test(next_waits_for_a_message),
        cmocka_unit_test(close_gives_back),
        cmocka_unit_test(ack_many_covering_all_in_hand_acks_with_multiple),
        cmocka_unit_test(ack_many_leaves_held_deliveries_alone),
        cmocka_unit_test(ack_many_refuses_each_bad_delivery_alone),
        cmocka_unit_test(ack_many_after_a_lost_connection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
