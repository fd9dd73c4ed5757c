/* bench_relay_mq.c — the rabbitmq-c side of bench_relay: the queue every case
 * publishes to, the raw publisher the relay is measured beside, RabbitMQ's
 * own confirm latency at a relay's schedule, and a turn's consumer. */
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "bench_consumer.h"
#include "bench_relay.h"

/* The queue every case publishes to, made anew (deleted and declared) so that
 * no case inherits another's messages or index: durable, of the kind
 * --queue names. Both the relay and its peers publish to it. */
void fresh_queue(const config *cfg)
{
    amqp_connection_state_t c = mq_connect(cfg->amqp_url);
    amqp_queue_delete(c, 1, amqp_cstring_bytes(QUEUE), 0, 0);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("queue.delete failed");
    amqp_table_entry_t arg = {.key = amqp_cstring_bytes("x-queue-version")};
    arg.value.kind = AMQP_FIELD_KIND_I32;
    arg.value.value.i32 = 2;
    if (strcmp(cfg->queue, "quorum") == 0) {
        arg.key = amqp_cstring_bytes("x-queue-type");
        arg.value.kind = AMQP_FIELD_KIND_UTF8;
        arg.value.value.bytes = amqp_cstring_bytes("quorum");
    }
    /* classic-v2-lazy: version 2, and its messages kept on disk rather than
     * in the queue process's memory, as every classic queue is from 3.12. */
    amqp_table_entry_t lazy_args[2] = {arg, {.key = amqp_cstring_bytes("x-queue-mode")}};
    lazy_args[1].value.kind = AMQP_FIELD_KIND_UTF8;
    lazy_args[1].value.value.bytes = amqp_cstring_bytes("lazy");
    amqp_table_t args = {1, &arg};
    if (strcmp(cfg->queue, "classic-v2-lazy") == 0) args = (amqp_table_t){2, lazy_args};
    amqp_queue_declare(c, 1, amqp_cstring_bytes(QUEUE), 0, 1, 0, 0,
                       strcmp(cfg->queue, "classic-v1") == 0 ? amqp_empty_table : args);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("queue.declare failed");
    mq_close(c);
}

/* The properties the relay gives each of the benchmark's records (no
 * content type, no headers of its own): persistent, its id as message_id,
 * and the attempt count as the x-acemq-attempts header (src/broker/amqp091.c).
 * The peers send the same, so the broker has the same message to parse and
 * store from either; without the header table a peer's messages were the
 * lighter ones. `id` and `attempts` must outlive the publish. */
static amqp_basic_properties_t relay_properties(const char *id, amqp_table_entry_t *attempts)
{
    attempts->key = amqp_cstring_bytes("x-acemq-attempts");
    attempts->value.kind = AMQP_FIELD_KIND_I32;
    attempts->value.value.i32 = 0;
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_HEADERS_FLAG;
    p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p.message_id = amqp_cstring_bytes(id);
    p.headers.num_entries = 1;
    p.headers.entries = attempts;
    return p;
}

/* The peer: what a careful person writes with rabbitmq-c to publish n
 * persistent, mandatory messages with confirms, `window` in flight. */
double raw_publish(const char *url, long n, int window)
{
    amqp_connection_state_t c = mq_connect(url);
    amqp_confirm_select(c, 1);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("confirm.select failed");
    static char body[BODY_LEN];
    memset(body, 'x', sizeof body);
    long sent = 0, acked = 0;
    double t0 = mono_now();
    while (acked < n) {
        while (sent < n && sent - acked < window) {
            char id[32];
            snprintf(id, sizeof id, "r%08ld", sent + 1); /* the relay's ids: r00000001.. */
            amqp_table_entry_t attempts;
            amqp_basic_properties_t p = relay_properties(id, &attempts);
            amqp_bytes_t b = {sizeof body, body};
            if (amqp_basic_publish(c, 1, amqp_cstring_bytes(""), amqp_cstring_bytes(QUEUE), 1, 0,
                                   &p, b) != AMQP_STATUS_OK)
                die("basic.publish failed");
            sent++;
        }
        amqp_frame_t f;
        if (amqp_simple_wait_frame(c, &f) != AMQP_STATUS_OK) die("waiting for confirms failed");
        if (f.frame_type != AMQP_FRAME_METHOD) continue;
        if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
            const amqp_basic_ack_t *a = f.payload.method.decoded;
            long tag = (long)a->delivery_tag;
            acked = a->multiple ? tag : acked + 1;
        } else if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
            die("the broker nacked a message");
        } else if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD) {
            die("the broker returned a message: no queue %s?", QUEUE);
        }
    }
    double elapsed = mono_now() - t0;
    mq_close(c);
    return (double)n / elapsed;
}

/* p50 and p99 of v's n values; sorts v (median does). */
void p50_p99(double *v, long n, double *p50, double *p99)
{
    *p50 = median(v, (int)n);
    *p99 = v[(n * 99) / 100];
}

/* The floor under any relay's latency: one persistent message published and
 * its confirm awaited, `n` times at `rate` per second. */
void raw_confirm_latency(const char *url, long n, int rate, raw_latency *out)
{
    amqp_connection_state_t c = mq_connect(url);
    amqp_confirm_select(c, 1);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("confirm.select failed");
    double *lat = malloc((size_t)n * sizeof *lat);
    double *due_lat = malloc((size_t)n * sizeof *due_lat);
    if (!lat || !due_lat) die("out of memory");
    static char body[BODY_LEN];
    double start = mono_now();
    for (long i = 0; i < n; i++) {
        double due = start + (double)i / rate;
        double wait = due - mono_now();
        if (wait > 0) {
            struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            nanosleep(&ts, NULL);
        }
        char id[32];
        snprintf(id, sizeof id, "r%08ld", i + 1);
        amqp_table_entry_t attempts;
        amqp_basic_properties_t p = relay_properties(id, &attempts);
        amqp_bytes_t b = {sizeof body, body};
        double t0 = mono_now();
        if (amqp_basic_publish(c, 1, amqp_cstring_bytes(""), amqp_cstring_bytes(QUEUE), 1, 0, &p,
                               b) != AMQP_STATUS_OK)
            die("basic.publish failed");
        for (;;) {
            amqp_frame_t f;
            if (amqp_simple_wait_frame(c, &f) != AMQP_STATUS_OK) die("waiting for a confirm");
            if (f.frame_type == AMQP_FRAME_METHOD && f.payload.method.id == AMQP_BASIC_ACK_METHOD)
                break;
        }
        double confirmed = mono_now();
        lat[i] = (confirmed - t0) * 1000;
        due_lat[i] = (confirmed - due) * 1000;
    }
    mq_close(c);
    p50_p99(lat, n, &out->p50, &out->p99);
    p50_p99(due_lat, n, &out->due_p50, &out->due_p99);
    free(due_lat);
    free(lat);
}

/* A turn's consumer on the queue fresh_queue just made when `on`; NULL
 * otherwise. */
bench_consumer *start_consumer(const config *cfg, int on)
{
    return on ? bench_consumer_start(mq_connect(cfg->amqp_url), QUEUE) : NULL;
}

/* Ends a turn's consumer: every one of the turn's n messages must have
 * reached it. More is possible (at least once), and said. */
void finish_consumer(bench_consumer *k, long n, const char *turn)
{
    if (!k) return;
    long got = bench_consumer_finish(k, n, 30.0);
    if (got < n) die("the consumer received %ld of the %ld messages %s sent", got, n, turn);
    if (got > n)
        fprintf(stderr, "%s: the consumer received %ld messages for the %ld %s sent\n", bench_name,
                got, n, turn);
}
