/* bench_consume.c — messages per second through acemq's idempotent
 * consumer (C API, a handler that does nothing) with each store, beside a
 * raw rabbitmq-c consumer that only acknowledges, on the same queue with the
 * same prefetch and the same messages, in turns in the same run. Targets:
 * memory >= 0.9 x raw, SQLite >= 0.6 x, PostgreSQL and Redis >= 0.5 x.
 * The pipe/ case sends each message through `acemq consume --pipe`'s
 * handler to a Python child that does nothing (the memory store, so the
 * figure is the pipe's): >= 20,000 messages per second.
 *
 * Each turn fills the queue with --messages persistent messages (UUIDv7
 * message ids, 200-byte bodies, 10 % of them published twice, as a relay
 * that lost its marks sends them), then times one consumer draining it:
 * from its consume to its last acknowledgement. Each store starts empty
 * every turn. Figures are medians over --reps turns; the ratio is the
 * median of the turns' ratios. A missed target is printed, never a failure.
 *
 * Needs ACEMQ_AMQP_URL; the PostgreSQL and Redis cases need ACEMQ_PG_URL and
 * ACEMQ_REDIS_URL (make bench starts the servers) and are skipped without.
 * Exit status: 0 measured, 1 something broke, 2 usage.
 */
#include "bench_amqp.h"
#include "bench_common.h"

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "acemq/consumer.h"
#include "cli/consume_handlers.h"
#include "acemq/outbox.h"

#ifndef ACEMQ_SOURCE_DIR
#define ACEMQ_SOURCE_DIR "."
#endif

#define QUEUE "acemq-bench-consume"
#define BODY_LEN 200

typedef struct config {
    const char *amqp_url, *pg_url, *redis_url, *out_path, *filter;
    long messages;
    int prefetch, reps;
} config;

/* An empty durable queue, and then the turn's messages in it, through
 * acemq's publisher with confirms. Returns how many were published. */
static long fill_queue(const config *cfg)
{
    amqp_connection_state_t c = mq_connect(cfg->amqp_url);
    amqp_queue_delete(c, 1, amqp_cstring_bytes(QUEUE), 0, 0);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("queue.delete failed");
    amqp_queue_declare(c, 1, amqp_cstring_bytes(QUEUE), 0, 1, 0, 0, amqp_empty_table);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("queue.declare failed");
    mq_close(c);

    acemq_broker *b = NULL;
    if (acemq_broker_open(&b, cfg->amqp_url, NULL) != 0)
        die("broker: %s", acemq_broker_errmsg(NULL));
    enum { BATCH = 500 };
    char ids[BATCH][ACEMQ_OUTBOX_UUID_LEN + 1], body[BODY_LEN];
    memset(body, 'x', sizeof body);
    acemq_broker_msg msgs[BATCH];
    acemq_publish_result res[BATCH];
    long sent = 0, unique = 0;
    while (unique < cfg->messages) {
        size_t n = 0;
        while (n < BATCH && unique < cfg->messages) {
            if (acemq_uuid7(ids[n]) != 0) die("uuid7 failed");
            msgs[n] = (acemq_broker_msg){"", QUEUE, ids[n], NULL, NULL, 0, body, sizeof body};
            n++;
            unique++;
            /* Every tenth again, right after: a relay's resend. */
            if (unique % 10 == 0 && n < BATCH) {
                msgs[n] = msgs[n - 1];
                n++;
            }
        }
        if (acemq_broker_publish(b, msgs, n, res) != 0) die("publish: %s", acemq_broker_errmsg(b));
        for (size_t i = 0; i < n; i++)
            if (res[i].outcome != ACEMQ_PUBLISH_CONFIRMED) die("a message was not confirmed");
        sent += (long)n;
    }
    acemq_broker_close(b);
    return sent;
}

/* The peer: basic.qos, basic.consume with manual acks, one basic.ack per
 * message, as a hand-written consumer does. Messages per second. */
static double drain_raw(const config *cfg, long total)
{
    amqp_connection_state_t c = mq_connect(cfg->amqp_url);
    double t0 = mono_now();
    amqp_basic_qos(c, 1, 0, (uint16_t)cfg->prefetch, 0);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("basic.qos failed");
    amqp_basic_consume(c, 1, amqp_cstring_bytes(QUEUE), amqp_empty_bytes, 0, 0, 0,
                       amqp_empty_table);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("basic.consume failed");
    for (long got = 0; got < total;) {
        amqp_maybe_release_buffers(c);
        amqp_envelope_t env;
        struct timeval tv = {30, 0};
        amqp_rpc_reply_t r = amqp_consume_message(c, &env, &tv, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) die("raw consumer: no message in 30 s");
        if (amqp_basic_ack(c, 1, env.delivery_tag, 0) != 0) die("basic.ack failed");
        amqp_destroy_envelope(&env);
        got++;
    }
    double t1 = mono_now();
    mq_close(c);
    return (double)total / (t1 - t0);
}

typedef struct counted {
    long want, processed, duplicates;
    acemq_consumer *c;
    acemq__pipe_child *pipe; /* the pipe/ case: each message through a --pipe child */
} counted;

static int nothing(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    (void)m;
    counted *k = ctx;
    if (++k->processed + k->duplicates >= k->want) acemq_consumer_stop(c);
    return 0;
}

/* The pipe/ case: the batch through acemq consume --pipe's handler. */
static void through_pipe(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m, size_t n,
                         acemq_consumer_outcome *out)
{
    counted *k = ctx;
    acemq__consume_pipe_batch(k->pipe, c, m, n, out);
    for (size_t i = 0; i < n; i++)
        if (out[i].failed) die("the --pipe child failed: %s", out[i].why ? out[i].why : "?");
    k->processed += (long)n;
    if (k->processed + k->duplicates >= k->want) acemq_consumer_stop(c);
}

static void duplicate(void *ctx, const acemq_consumer_msg *m, const void *r, size_t len)
{
    (void)m, (void)r, (void)len;
    counted *k = ctx;
    if (k->processed + ++k->duplicates >= k->want) acemq_consumer_stop(k->c);
}

/* acemq's consumer on a fresh store at url: messages per second. The
 * handler stops it at the last message; it is then acknowledged before run
 * returns. */
static double drain_acemq(const config *cfg, const char *url, long total, long unique,
                          acemq__pipe_child *pipe)
{
    acemq_idem *store = NULL;
    if (acemq_idem_open(&store, url, NULL) != 0) die("store %s: %s", url, acemq_idem_errmsg(NULL));
    counted k = {total, 0, 0, NULL, pipe};
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    if (pipe)
        o.batch_handler = through_pipe;
    else
        o.handler = nothing;
    o.on_duplicate = duplicate;
    o.ctx = &k;
    o.prefetch = cfg->prefetch;
    acemq_consumer *c = NULL;
    if (acemq_consumer_open(&c, cfg->amqp_url, QUEUE, store, &o) != 0)
        die("consumer: %s", acemq_consumer_errmsg(NULL));
    k.c = c;
    double t0 = mono_now();
    if (acemq_consumer_run(c, NULL) != 0) die("run: %s", acemq_consumer_errmsg(c));
    double t1 = mono_now();
    if (k.processed != unique || k.duplicates != total - unique)
        die("%s: %ld processed and %ld duplicates, expected %ld and %ld", url, k.processed,
            k.duplicates, unique, total - unique);
    acemq_consumer_close(c);
    acemq_idem_close(store);
    return (double)total / (t1 - t0);
}

typedef struct store_case {
    const char *name;
    const char *base; /* the server's URL; NULL for memory and SQLite */
    double target;    /* x peer; for pipe/, messages per second */
    double rate[64], raw[64], ratio[64];
} store_case;

/* What `acemq consume --pipe` runs in the pipe/ case: a Python child that
 * answers every request ok and does nothing else. */
static char *pipe_argv[] = {"python3", "-c",
                            "import sys\n"
                            "for line in sys.stdin:\n"
                            "    sys.stdout.write('{\"ok\":true}\\n')\n"
                            "    sys.stdout.flush()\n",
                            NULL};

/* A fresh, empty store for turn r of case k: a new SQLite file, a new
 * PostgreSQL table, a new Redis key prefix. */
static void store_url(const store_case *k, const char *dir, int r, char *url, size_t cap)
{
    long pid = (long)getpid();
    if (strcmp(k->name, "memory") == 0 || strncmp(k->name, "pipe/", 5) == 0)
        snprintf(url, cap, "memory:");
    else if (strcmp(k->name, "sqlite") == 0)
        snprintf(url, cap, "sqlite:%s/idem-%d.db", dir, r);
    else if (strcmp(k->name, "postgres") == 0)
        snprintf(url, cap, "%s%stable=bench_consume_%ld_%d", k->base,
                 strchr(k->base, '?') ? "&" : "?", pid, r);
    else
        snprintf(url, cap, "%s%sprefix=bench-consume-%ld-%d", k->base,
                 strchr(k->base, '?') ? "&" : "?", pid, r);
}

static void usage(const char *why)
{
    if (why) fprintf(stderr, "bench_consume: %s\n", why);
    fputs("usage: bench_consume [--messages N] [--prefetch N] [--reps N] [--filter TEXT]\n"
          "                     [--out FILE]\n"
          "  --messages N  distinct messages per turn, 10 % sent twice (default 20000)\n"
          "  --prefetch N  basic.qos for both consumers (default 64)\n"
          "  --reps N      turns; medians are reported (default 3)\n"
          "  --filter TEXT only the stores whose name contains TEXT\n"
          "  --out FILE    append JSON lines here (default bench/results/latest.jsonl)\n",
          stderr);
    exit(2);
}

static long number(const char *v, long lo, long hi, const char *what)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < lo || n > hi) usage(what);
    return n;
}

int main(int argc, char **argv)
{
    bench_name = "bench_consume";
    config cfg = {getenv("ACEMQ_AMQP_URL"),
                  getenv("ACEMQ_PG_URL"),
                  getenv("ACEMQ_REDIS_URL"),
                  ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl",
                  NULL,
                  20000,
                  64,
                  3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) usage(NULL);
        if (!v) usage("an option needs a value");
        if (strcmp(a, "--messages") == 0)
            cfg.messages = number(v, 10, 10000000, "--messages: 10..10000000");
        else if (strcmp(a, "--prefetch") == 0)
            cfg.prefetch = (int)number(v, 1, 65535, "--prefetch: 1..65535");
        else if (strcmp(a, "--reps") == 0)
            cfg.reps = (int)number(v, 1, 64, "--reps: 1..64");
        else if (strcmp(a, "--filter") == 0)
            cfg.filter = v;
        else if (strcmp(a, "--out") == 0)
            cfg.out_path = v;
        else
            usage("unknown option");
        i++;
    }
    if (!cfg.amqp_url || !*cfg.amqp_url) {
        printf("bench_consume: skipped: ACEMQ_AMQP_URL is not set (scripts/services.sh start)\n");
        return 0;
    }
    static store_case cases[5];
    int n = 0;
    char dir[] = "/tmp/acemq-bench-consume-XXXXXX";
    if (!mkdtemp(dir)) die("mkdtemp failed");
    cases[n++] = (store_case){.name = "memory", .target = 0.9};
    cases[n++] = (store_case){.name = "sqlite", .target = 0.6};
    if (cfg.pg_url && *cfg.pg_url)
        cases[n++] = (store_case){.name = "postgres", .base = cfg.pg_url, .target = 0.5};
    if (cfg.redis_url && *cfg.redis_url)
        cases[n++] = (store_case){.name = "redis", .base = cfg.redis_url, .target = 0.5};
    int have_python = system("python3 -c '' 2>/dev/null") == 0;
    if (have_python)
        cases[n++] = (store_case){.name = "pipe/python-noop", .target = 20000};
    else
        printf("pipe/python-noop skipped: no python3 on PATH\n");
    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("%s: cannot append", cfg.out_path);
    printf("idempotent consumer: messages/s draining %ld messages (%ld distinct), prefetch %d, "
           "beside a raw rabbitmq-c consumer; %d turns\n",
           cfg.messages + cfg.messages / 10, cfg.messages, cfg.prefetch, cfg.reps);
    for (int r = 0; r < cfg.reps; r++) {
        for (int k = 0; k < n; k++) {
            if (!bench_wanted(cfg.filter, cases[k].name)) continue;
            long total = fill_queue(&cfg);
            cases[k].raw[r] = drain_raw(&cfg, total);
            total = fill_queue(&cfg);
            char url[700];
            store_url(&cases[k], dir, r, url, sizeof url);
            int piped = strncmp(cases[k].name, "pipe/", 5) == 0;
            acemq__pipe_child pipe = {.cmd = {pipe_argv, 60000}, .child = {-1, -1, -1}};
            cases[k].rate[r] = drain_acemq(&cfg, url, total, cfg.messages, piped ? &pipe : NULL);
            acemq__consume_pipe_free(&pipe);
            cases[k].ratio[r] = cases[k].rate[r] / cases[k].raw[r];
            printf("  turn %d %-8s raw %.0f/s, acemq %.0f/s: %.2f\n", r + 1, cases[k].name,
                   cases[k].raw[r], cases[k].rate[r], cases[k].ratio[r]);
            fflush(stdout);
        }
    }
    bench_header();
    for (int k = 0; k < n; k++) {
        if (!bench_wanted(cfg.filter, cases[k].name)) continue;
        char name[64], target[64];
        snprintf(name, sizeof name, "%s/prefetch%d", cases[k].name, cfg.prefetch);
        int piped = strncmp(cases[k].name, "pipe/", 5) == 0;
        if (piped)
            snprintf(target, sizeof target, ">= %.0f msgs/s", cases[k].target);
        else
            snprintf(target, sizeof target, ">= %.1f x peer", cases[k].target);
        double ratio = median(cases[k].ratio, cfg.reps);
        double rate = median(cases[k].rate, cfg.reps);
        bench_result res = {"consume",
                            name,
                            rate,
                            "msgs/s",
                            "raw rabbitmq-c consumer",
                            median(cases[k].raw, cfg.reps),
                            ratio,
                            target,
                            piped ? rate >= cases[k].target : ratio >= cases[k].target};
        bench_report(out, &res);
    }
    if (fclose(out) != 0) die("%s: write failed", cfg.out_path);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_consume: could not remove %s\n", dir);
    return 0;
}
