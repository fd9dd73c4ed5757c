/* broker_amqp_outcomes.c — every outcome of a publish on a healthy broker:
 * 10,000 confirmed and intact, bodies across frame boundaries, an unroutable
 * message returned, a full queue's nack, a missing exchange closing the
 * channel, and pipelined sends keeping their outcomes apart. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <amqp.h>
#include <amqp_framing.h>

#include "acemq/broker.h"
#include "integration/broker_amqp_fixture.h"

static const amqp_field_value_t *header(const amqp_basic_properties_t *p, const char *key)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG)) return NULL;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len == strlen(key) && memcmp(e->key.bytes, key, e->key.len) == 0)
            return &e->value;
    }
    return NULL;
}

#define N_MANY 10000

/* 10,000 messages, window 256: all confirmed, and in the queue each once, in
 * order, persistent, with content type, headers and body intact. */
void many_confirmed_and_intact(void **state)
{
    (void)state;
    char ex[128], q[128];
    bound_route(ex, q, "many");

    acemq_broker_msg *msgs = calloc(N_MANY, sizeof *msgs);
    acemq_publish_result *res = calloc(N_MANY, sizeof *res);
    char(*ids)[32] = calloc(N_MANY, sizeof *ids);
    char(*hdrs)[64] = calloc(N_MANY, sizeof *hdrs);
    char(*bodies)[32] = calloc(N_MANY, sizeof *bodies);
    assert_true(msgs && res && ids && hdrs && bodies);
    for (int i = 0; i < N_MANY; i++) {
        (void)snprintf(ids[i], sizeof ids[i], "m-%05d", i);
        (void)snprintf(hdrs[i], sizeof hdrs[i], "{\"tenant\":\"t%d\",\"kind\":\"order\"}", i % 13);
        (void)snprintf(bodies[i], sizeof bodies[i], "body %d", i);
        msgs[i] = make_msg(ex, "k", ids[i]);
        msgs[i].content_type = "text/plain";
        msgs[i].headers_json = hdrs[i];
        msgs[i].attempts = i % 7 - 1; /* -1 too: a signed 32-bit header */
        msgs[i].body = bodies[i];
        msgs[i].body_len = strlen(bodies[i]);
    }
    acemq_broker *b = open_broker(256);
    struct timespec t0, t1;
    assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &t0), 0);
    assert_int_equal(acemq_broker_publish(b, msgs, N_MANY, res), 0);
    assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &t1), 0);
    long long whole_us =
        (long long)(t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000 + 1;
    for (int i = 0; i < N_MANY; i++) {
        if (res[i].outcome != ACEMQ_PUBLISH_CONFIRMED)
            fail_msg("message %d: outcome %d (%s)", i, res[i].outcome,
                     res[i].reason ? res[i].reason : "");
        /* Each its own publish-to-ack time: some, and within the call. */
        if (res[i].confirm_us == 0 || res[i].confirm_us > whole_us)
            fail_msg("message %d: confirm_us %u, not within 1..%lld", i, res[i].confirm_us,
                     whole_us);
    }
    acemq_broker_close(b);

    for (int i = 0; i < N_MANY; i++) {
        amqp_message_t m;
        if (!get_one(q, &m)) fail_msg("queue ran dry at %d of %d", i, N_MANY);
        const amqp_basic_properties_t *p = &m.properties;
        assert_true(p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG);
        if (!bytes_eq(p->message_id, ids[i]))
            fail_msg("position %d: message_id %.*s, expected %s", i, (int)p->message_id.len,
                     (const char *)p->message_id.bytes, ids[i]);
        assert_true(p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG);
        assert_int_equal(p->delivery_mode, AMQP_DELIVERY_PERSISTENT);
        assert_true(p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG);
        assert_true(bytes_eq(p->content_type, "text/plain"));
        const amqp_field_value_t *v = header(p, "x-acemq-attempts");
        assert_non_null(v);
        assert_int_equal(v->kind, AMQP_FIELD_KIND_I32);
        assert_int_equal(v->value.i32, i % 7 - 1);
        char tenant[16];
        (void)snprintf(tenant, sizeof tenant, "t%d", i % 13);
        v = header(p, "tenant");
        assert_non_null(v);
        assert_int_equal(v->kind, AMQP_FIELD_KIND_UTF8);
        assert_true(bytes_eq(v->value.bytes, tenant));
        v = header(p, "kind");
        assert_non_null(v);
        assert_true(bytes_eq(v->value.bytes, "order"));
        assert_int_equal(p->headers.num_entries, 3);
        assert_true(bytes_eq(m.body, bodies[i]));
        amqp_destroy_message(&m);
    }
    amqp_message_t extra;
    if (get_one(q, &extra)) {
        amqp_destroy_message(&extra);
        fail_msg("more than %d messages in the queue: a duplicate", N_MANY);
    }
    free(msgs);
    free(res);
    free(ids);
    free(hdrs);
    free(bodies);
}

/* Bodies of every size the framing treats apart: empty (no body frame),
 * one byte, exactly one frame's room, one byte more, and several frames
 * (frame_max is 131,072), in one run beside small neighbours: all
 * confirmed, and read back byte for byte, in order. */
void bodies_across_frames_arrive_intact(void **state)
{
    (void)state;
    char ex[128], q[128];
    bound_route(ex, q, "bodies");
    const size_t room = 131072 - 8; /* a body frame's payload at most */
    const size_t sizes[] = {0, 1, room - 1, room, room + 1, 3 * room + 17, 5, 0, 700000};
    enum { N = sizeof sizes / sizeof sizes[0] };
    acemq_broker_msg msgs[N];
    acemq_publish_result res[N];
    char ids[N][16];
    unsigned char *bodies[N];
    for (int i = 0; i < N; i++) {
        bodies[i] = malloc(sizes[i] ? sizes[i] : 1);
        assert_non_null(bodies[i]);
        for (size_t k = 0; k < sizes[i]; k++)
            bodies[i][k] = (unsigned char)(k * 31 + (size_t)i * 7 + k / 251);
        (void)snprintf(ids[i], sizeof ids[i], "b-%d", i);
        msgs[i] = make_msg(ex, "k", ids[i]);
        msgs[i].body = bodies[i];
        msgs[i].body_len = sizes[i];
    }
    acemq_broker *b = open_broker(256);
    assert_int_equal(acemq_broker_publish(b, msgs, N, res), 0);
    for (int i = 0; i < N; i++)
        if (res[i].outcome != ACEMQ_PUBLISH_CONFIRMED)
            fail_msg("message %d (%zu bytes): outcome %d (%s)", i, sizes[i], res[i].outcome,
                     res[i].reason ? res[i].reason : "");
    acemq_broker_close(b);
    for (int i = 0; i < N; i++) {
        amqp_message_t m;
        if (!get_one(q, &m)) fail_msg("queue ran dry at %d of %d", i, N);
        if (!bytes_eq(m.properties.message_id, ids[i]))
            fail_msg("position %d: message_id %.*s, expected %s", i,
                     (int)m.properties.message_id.len, (const char *)m.properties.message_id.bytes,
                     ids[i]);
        if (m.body.len != sizes[i] || (sizes[i] && memcmp(m.body.bytes, bodies[i], sizes[i]) != 0))
            fail_msg("message %d: %zu bytes back of %zu, or other bytes", i, m.body.len, sizes[i]);
        amqp_destroy_message(&m);
        free(bodies[i]);
    }
}

/* No binding for the key: basic.return, then RabbitMQ's ack. RETURNED with
 * the reply text, never CONFIRMED; routable neighbours stay CONFIRMED. */
void unroutable_is_returned(void **state)
{
    (void)state;
    char ex[128], lonely[128], q[128];
    bound_route(ex, q, "routed");
    test_name(lonely, sizeof lonely, "lonely");
    declare_exchange(lonely); /* no binding at all */

    acemq_broker_msg m[6] = {make_msg(ex, "k", "a"),       make_msg(lonely, "nowhere", "b"),
                             make_msg(ex, "k", "c"),       make_msg(lonely, "nowhere", "d"),
                             make_msg(ex, "nowhere", "a"), make_msg(ex, "k", "e")};
    acemq_publish_result r[6];
    acemq_broker *b = open_broker(4);
    assert_int_equal(acemq_broker_publish(b, m, 6, r), 0);
    const int want[6] = {ACEMQ_PUBLISH_CONFIRMED, ACEMQ_PUBLISH_RETURNED, ACEMQ_PUBLISH_CONFIRMED,
                         ACEMQ_PUBLISH_RETURNED,  ACEMQ_PUBLISH_RETURNED, ACEMQ_PUBLISH_CONFIRMED};
    for (int i = 0; i < 6; i++) {
        if (r[i].outcome != want[i])
            fail_msg("message %d: outcome %d, expected %d (%s)", i, r[i].outcome, want[i],
                     r[i].reason ? r[i].reason : "");
        if (want[i] == ACEMQ_PUBLISH_RETURNED) {
            assert_non_null(r[i].reason);
            assert_non_null(strstr(r[i].reason, "NO_ROUTE"));
        }
    }
    /* The same again on the same handle: nothing is left over. */
    assert_int_equal(acemq_broker_publish(b, m, 6, r), 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(r[i].outcome, want[i]);
    acemq_broker_close(b);
}

/* x-max-length 1 with reject-publish: the second message is nacked. */
void full_queue_nacks(void **state)
{
    (void)state;
    char ex[128], q[128];
    test_name(ex, sizeof ex, "full");
    test_name(q, sizeof q, "full.q");
    declare_exchange(ex);
    amqp_table_entry_t args[2];
    args[0].key = amqp_cstring_bytes("x-max-length");
    args[0].value.kind = AMQP_FIELD_KIND_I32;
    args[0].value.value.i32 = 1;
    args[1].key = amqp_cstring_bytes("x-overflow");
    args[1].value.kind = AMQP_FIELD_KIND_UTF8;
    args[1].value.value.bytes = amqp_cstring_bytes("reject-publish");
    amqp_table_t t = {.num_entries = 2, .entries = args};
    declare_queue(q, ex, "k", t);

    acemq_broker_msg m[2] = {make_msg(ex, "k", "first"), make_msg(ex, "k", "second")};
    acemq_publish_result r[2];
    acemq_broker *b = open_broker(256);
    assert_int_equal(acemq_broker_publish(b, m, 2, r), 0);
    assert_int_equal(r[0].outcome, ACEMQ_PUBLISH_CONFIRMED);
    assert_int_equal(r[1].outcome, ACEMQ_PUBLISH_NACKED);
    assert_non_null(r[1].reason);
    assert_non_null(strstr(r[1].reason, "nack"));
    acemq_broker_close(b);
}

/* A missing exchange: the broker closes the channel (404). Those messages
 * stay UNKNOWN with the broker's words, and the next publish reopens the
 * channel and works. */
void missing_exchange_closes_channel_then_recovers(void **state)
{
    (void)state;
    char ex[128], q[128], nope[128];
    bound_route(ex, q, "good");
    test_name(nope, sizeof nope, "no-such-exchange");

    acemq_broker *b = open_broker(256);
    acemq_broker_msg bad[3] = {make_msg(nope, "k", "x1"), make_msg(nope, "k", "x2"),
                               make_msg(nope, "k", "x3")};
    acemq_publish_result r[3];
    assert_int_equal(acemq_broker_publish(b, bad, 3, r), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i].outcome, ACEMQ_PUBLISH_UNKNOWN);
        assert_non_null(r[i].reason);
        if (!strstr(r[i].reason, "404") || !strstr(r[i].reason, "NOT_FOUND"))
            fail_msg("reason: %s", r[i].reason);
    }
    assert_non_null(strstr(acemq_broker_errmsg(b), "404"));
    print_message("missing exchange: %s\n", r[0].reason);

    /* Good, bad, good in one call: the bad one is never confirmed, nor the
     * one after it (the broker ignores the channel once it closed it). */
    acemq_broker_msg mixed[3] = {make_msg(ex, "k", "g1"), make_msg(nope, "k", "x4"),
                                 make_msg(ex, "k", "g2")};
    assert_int_equal(acemq_broker_publish(b, mixed, 3, r), 0);
    assert_true(r[0].outcome == ACEMQ_PUBLISH_CONFIRMED || r[0].outcome == ACEMQ_PUBLISH_UNKNOWN);
    assert_int_equal(r[1].outcome, ACEMQ_PUBLISH_UNKNOWN);
    assert_int_equal(r[2].outcome, ACEMQ_PUBLISH_UNKNOWN);

    acemq_broker_msg good[2] = {make_msg(ex, "k", "g3"), make_msg(ex, "k", "g4")};
    assert_int_equal(acemq_broker_publish(b, good, 2, r), 0);
    assert_int_equal(r[0].outcome, ACEMQ_PUBLISH_CONFIRMED);
    assert_int_equal(r[1].outcome, ACEMQ_PUBLISH_CONFIRMED);
    acemq_broker_close(b);

    /* g1 may or may not have made it; g3 and g4 did, last and in order. */
    amqp_message_t m;
    char got[4][8];
    int n = 0;
    while (n < 4 && get_one(q, &m)) {
        (void)snprintf(got[n++], sizeof got[0], "%.*s", (int)m.properties.message_id.len,
                       (const char *)m.properties.message_id.bytes);
        amqp_destroy_message(&m);
    }
    assert_true(n >= 2);
    assert_string_equal(got[n - 2], "g3");
    assert_string_equal(got[n - 1], "g4");
}

/* Pipelined sends, window 8: three sends of 100 with two outstanding at a
 * time, the second holding messages that come back unroutable under the
 * same ids as routed ones of the first. Every outcome lands on its own
 * message, and the queue holds the routed ones once each, in order. */
void pipelined_sends_keep_outcomes_apart(void **state)
{
    (void)state;
    char ex[128], lonely[128], q[128];
    bound_route(ex, q, "pipe");
    test_name(lonely, sizeof lonely, "pipe.lonely");
    declare_exchange(lonely); /* no binding at all */
    enum { N = 100 };
    static char ids[3][N][16];
    static acemq_broker_msg m[3][N];
    static acemq_publish_result r[3][N];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < N; i++) {
            snprintf(ids[s][i], sizeof ids[s][i], "p%d", s == 1 ? i : s * N + i);
            int unroutable = s == 1 && i % 10 == 3;
            m[s][i] = make_msg(unroutable ? lonely : ex, "k", ids[s][i]);
        }
    acemq_broker *b = open_broker(8);
    assert_int_equal(acemq_broker_send(b, m[0], N, r[0]), 0);
    assert_int_equal(acemq_broker_send(b, m[1], N, r[1]), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_int_equal(acemq_broker_send(b, m[2], N, r[2]), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_int_equal(acemq_broker_collect(b), ACEMQ_ENOENT);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < N; i++) {
            int want = s == 1 && i % 10 == 3 ? ACEMQ_PUBLISH_RETURNED : ACEMQ_PUBLISH_CONFIRMED;
            if (r[s][i].outcome != want)
                fail_msg("send %d message %d: outcome %d, expected %d (%s)", s, i, r[s][i].outcome,
                         want, r[s][i].reason ? r[s][i].reason : "");
        }
    int got = 0;
    amqp_message_t am;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < N; i++) {
            if (s == 1 && i % 10 == 3) continue;
            if (!get_one(q, &am)) fail_msg("the queue ran dry at send %d message %d", s, i);
            if (!bytes_eq(am.properties.message_id, ids[s][i]))
                fail_msg("send %d message %d: got '%.*s'", s, i, (int)am.properties.message_id.len,
                         (const char *)am.properties.message_id.bytes);
            got++;
            amqp_destroy_message(&am);
        }
    assert_int_equal(get_one(q, &am), 0);
    assert_int_equal(got, 3 * N - 10);
    acemq_broker_close(b);
}
