/* bench_relay_pipeline.c — the whole pipeline: exactly once (outbox →
 * relay → RabbitMQ → acemq's idempotent consumer with a SQLite store)
 * beside at least once (a raw rabbitmq-c publisher with confirms → a raw
 * rabbitmq-c consumer that acknowledges each message), the same number of
 * messages, the same queue, the same prefetch, turn about. Each side's
 * consumer is consuming before the clock starts; the clock stops when it has
 * the last message. Target: >= 0.7 x the raw pipeline.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include <amqp.h>
#include <amqp_framing.h>

#include "acemq/consumer.h"
#include "bench_common.h"
#include "bench_relay.h"

#define PREFETCH 64

/* A consumer on a thread of its own, counting to n. */
typedef struct sink {
    const config *cfg;
    long n, got;
    double done_at; /* mono_now() at the last message */
    acemq_consumer *c;
    acemq_idem *store;
    amqp_connection_state_t raw;
    pthread_t thread;
} sink;

static int handled(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    (void)m;
    sink *k = ctx;
    if (++k->got == k->n) {
        k->done_at = mono_now();
        acemq_consumer_stop(c);
    }
    return 0;
}

static void *acemq_sink_main(void *arg)
{
    sink *k = arg;
    if (acemq_consumer_run(k->c, NULL) != 0) die("consumer: %s", acemq_consumer_errmsg(k->c));
    return NULL;
}

static void *raw_sink_main(void *arg)
{
    sink *k = arg;
    while (k->got < k->n) {
        amqp_maybe_release_buffers(k->raw);
        amqp_envelope_t env;
        struct timeval tv = {60, 0};
        if (amqp_consume_message(k->raw, &env, &tv, 0).reply_type != AMQP_RESPONSE_NORMAL)
            die("raw consumer: no message in 60 s");
        if (amqp_basic_ack(k->raw, 1, env.delivery_tag, 0) != 0) die("basic.ack failed");
        amqp_destroy_envelope(&env);
        k->got++;
    }
    k->done_at = mono_now();
    return NULL;
}

/* acemq's side: the consumer consuming on a fresh store, then the relay
 * on the backlog; messages per second. */
static double exactly_once(const config *cfg, const char *outbox_url, sqlite3 *db, int rep)
{
    refill(0, db, NULL, cfg->records);
    char url[600];
    snprintf(url, sizeof url, "sqlite:%s/pipeline-idem-%d.db", cfg->dir, rep);
    sink k = {.cfg = cfg, .n = cfg->records};
    if (acemq_idem_open(&k.store, url, NULL) != 0) die("store: %s", acemq_idem_errmsg(NULL));
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    o.handler = handled;
    o.ctx = &k;
    o.prefetch = PREFETCH;
    if (acemq_consumer_open(&k.c, cfg->amqp_url, QUEUE, k.store, &o) != 0)
        die("consumer: %s", acemq_consumer_errmsg(NULL));
    if (pthread_create(&k.thread, NULL, acemq_sink_main, &k) != 0) die("pthread_create failed");
    double t0 = mono_now();
    (void)run_relay(cfg, outbox_url, cfg->records, 5);
    if (pthread_join(k.thread, NULL) != 0) die("pthread_join failed");
    acemq_consumer_close(k.c);
    acemq_idem_close(k.store);
    return (double)cfg->records / (k.done_at - t0);
}

/* The raw side: the consumer consuming, then the publisher. */
static double at_least_once(const config *cfg)
{
    sink k = {.cfg = cfg, .n = cfg->records, .raw = mq_connect(cfg->amqp_url)};
    amqp_basic_qos(k.raw, 1, 0, PREFETCH, 0);
    if (amqp_get_rpc_reply(k.raw).reply_type != AMQP_RESPONSE_NORMAL) die("basic.qos failed");
    amqp_basic_consume(k.raw, 1, amqp_cstring_bytes(QUEUE), amqp_empty_bytes, 0, 0, 0,
                       amqp_empty_table);
    if (amqp_get_rpc_reply(k.raw).reply_type != AMQP_RESPONSE_NORMAL) die("basic.consume failed");
    if (pthread_create(&k.thread, NULL, raw_sink_main, &k) != 0) die("pthread_create failed");
    double t0 = mono_now();
    (void)raw_publish(cfg->amqp_url, cfg->records, cfg->window);
    if (pthread_join(k.thread, NULL) != 0) die("pthread_join failed");
    mq_close(k.raw);
    return (double)cfg->records / (k.done_at - t0);
}

void pipeline_case(const config *cfg, FILE *out, const char *name, const char *outbox_url,
                   sqlite3 *db)
{
    double a[16], p[16], r[16];
    for (int rep = 0; rep < cfg->reps; rep++) {
        for (int turn = 0; turn < 2; turn++) {
            fresh_queue(cfg);
            if ((turn + rep) % 2 == 0)
                a[rep] = exactly_once(cfg, outbox_url, db, rep);
            else
                p[rep] = at_least_once(cfg);
        }
        r[rep] = a[rep] / p[rep];
    }
    double v = median(a, cfg->reps), pv = median(p, cfg->reps), ratio = median(r, cfg->reps);
    bench_result res = {"relay",
                        name,
                        v,
                        "msgs/s",
                        "raw rabbitmq-c publisher with confirms to a raw consumer with acks",
                        pv,
                        ratio,
                        ">= 0.7 x peer",
                        ratio >= 0.7};
    bench_report(out, &res);
}
