/* consume_cmd.c — `acemq consume`: the idempotent consumer for programs in
 * any language. Each new message runs a command (--exec) or goes to one
 * that stays running (--pipe); duplicates are acknowledged without it.
 * SIGTERM or SIGINT: stop taking deliveries, finish the message in hand,
 * give back the held ones, exit 0. docs/consumer.md is the user's page.
 */
#include "cli/cli.h"

#include <acemq/audit.h>
#include <acemq/consumer.h>
#include <acemq/idem.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/consume_handlers.h"
#include "cli/consume_metrics.h"

#define CMD "consume"

static void usage_line(FILE *f)
{
    fputs("usage: acemq consume --broker URL --queue Q --store URL [--prefetch N] [--lease S]\n"
          "                     [--attempts N] [--retry-delay S] [--dead-letter EXCHANGE]\n"
          "                     [--heartbeat S]\n"
          "                     [--key EXPR] [--audit] [--metrics HOST:PORT] [-v]\n"
          "                     (--exec | --pipe) -- COMMAND [ARGS...]\n",
          f);
}

static void help(void)
{
    usage_line(stdout);
    fputs("\n"
          "Takes each message of the queue, claims its key in the idempotency store,\n"
          "and hands only new ones to COMMAND; duplicates are acknowledged without it.\n"
          "Success confirms the key, then acknowledges the message. A failure releases\n"
          "it: the message comes back after a back-off, its failures counted in the\n"
          "header x-acemq-failures, until --attempts failures send it to the\n"
          "dead-letter exchange with the reason. A message another consumer holds waits\n"
          "in hand and goes back later; nothing unconfirmed is acknowledged.\n"
          "\n"
          "  --broker URL          amqp://user:pass@host:port/vhost\n"
          "  --queue Q             the queue to consume (it must exist)\n"
          "  --store URL           memory:, sqlite:/path/idem.db, postgres://..., redis://...;\n"
          "                        consumers on several machines share postgres or redis\n"
          "  --prefetch N          unacknowledged messages in hand (default 32)\n"
          "  --lease S             seconds a claim lasts, renewed while COMMAND runs; a\n"
          "                        COMMAND still running after S is killed (default 30)\n"
          "  --attempts N          runs of COMMAND on a message before it is dead-lettered\n"
          "                        (default 5)\n"
          "  --retry-delay S       wait after the first failure, doubling after each next\n"
          "                        one, at most 60 (default 1)\n"
          "  --dead-letter EX      publish failed and keyless messages to exchange EX with\n"
          "                        x-acemq-error, x-acemq-failures and x-acemq-queue\n"
          "                        headers; without it they are rejected to the queue's\n"
          "                        own dead-letter exchange (x-dead-letter-exchange)\n"
          "  --heartbeat S         AMQP heartbeat (default 30; 0 off). Heartbeats are\n"
          "                        answered between messages: above COMMAND's longest\n"
          "                        run, or the broker drops the connection meanwhile and\n"
          "                        delivers what was in hand again\n"
          "  --key EXPR            the key: ${message_id} (default), ${routing_key},\n"
          "                        ${header.NAME} and text, e.g. 'order-${header.order_id}'\n"
          "  --audit               a message audit in front of the store, for keys that\n"
          "                        are ActiveMQ ids (<producer>:<sequence>)\n"
          "  --metrics HOST:PORT   serve Prometheus metrics at http://HOST:PORT/metrics\n"
          "  -v, --verbose         a log line per message as well as per event\n"
          "\n"
          "  --exec -- COMMAND     runs COMMAND once per new message: the body on its\n"
          "                        standard input; ACEMQ_MESSAGE_ID, ACEMQ_KEY,\n"
          "                        ACEMQ_ROUTING_KEY, ACEMQ_EXCHANGE, ACEMQ_CONTENT_TYPE,\n"
          "                        ACEMQ_FAILURES and ACEMQ_HEADER_<NAME> in its\n"
          "                        environment; exit status 0 is success\n"
          "  --pipe -- COMMAND     starts COMMAND once and writes one JSON line per message\n"
          "                        to its standard input ({\"id\", \"key\", \"routing_key\",\n"
          "                        \"exchange\", \"headers\", \"failures\", \"body\": base64});\n"
          "                        it answers one line each on its standard output:\n"
          "                        {\"ok\":true} or {\"ok\":false,\"error\":\"why\"}. A child\n"
          "                        that exits is started again; its message fails\n"
          "\n"
          "Logs: one logfmt line per event on standard error.\n"
          "Exit status: 0 stopped by a signal; 1 could not start (bad URL, no such\n"
          "queue, the broker refused the user); 2 usage error. A broker that cannot\n"
          "be reached at start is waited for.\n"
          "\n"
          "Examples:\n"
          "  acemq consume --broker amqp://guest:guest@127.0.0.1:5672/ --queue orders \\\n"
          "                --store sqlite:/var/lib/shop/idem.db --exec -- ./apply-order.sh\n"
          "  acemq consume --broker amqp://shop:pw@mq/shop --queue orders --prefetch 64 \\\n"
          "                --store postgres://shop@db/shop --dead-letter orders.dead \\\n"
          "                --pipe -- python3 worker.py\n",
          stdout);
}

static int usage_error(void)
{
    usage_line(stderr);
    fputs("Try 'acemq consume --help'.\n", stderr);
    return ACEMQ_CLI_USAGE;
}

/* The consumer for acemq__cli_wait_for_broker. */
typedef struct consumer_open {
    acemq_consumer **c;
    const char *broker_url, *queue;
    acemq_idem *store;
    const acemq_consumer_options *o;
} consumer_open;

static int try_consumer(void *ctx)
{
    consumer_open *x = ctx;
    return acemq_consumer_open(x->c, x->broker_url, x->queue, x->store, x->o);
}

static const char *consumer_why(void)
{
    return acemq_consumer_errmsg(NULL);
}

/* What the command line asked for. */
typedef struct args {
    const char *broker, *queue, *store, *metrics;
    acemq_broker_options broker_opts; /* the consumer's connection: heartbeat */
    int audit, pipe;
    char **command;
} args;

/* 0: parsed; 1: --help was asked for (and printed); -1: a usage error
 * (said on stderr). */
static int parse(int argc, char **argv, args *a, acemq_consumer_options *o)
{
    const char *v = NULL;
    for (int i = 1; i < argc; i++) {
        int m;
        uint32_t u;
        int64_t ms;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help();
            return 1;
        } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            o->verbose = 1;
        } else if (strcmp(argv[i], "--audit") == 0) {
            a->audit = 1;
        } else if (strcmp(argv[i], "--exec") == 0 || strcmp(argv[i], "--pipe") == 0) {
            a->pipe = argv[i][2] == 'p';
            int first = i + 1 < argc && strcmp(argv[i + 1], "--") == 0 ? i + 2 : i + 1;
            if (first >= argc) {
                fprintf(stderr, "acemq consume: %s needs a command\n", argv[i]);
                return -1;
            }
            a->command = &argv[first];
            return 0;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--broker", &v)) != 0) {
            if (m < 0) return -1;
            a->broker = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--queue", &v)) != 0) {
            if (m < 0) return -1;
            a->queue = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--store", &v)) != 0) {
            if (m < 0) return -1;
            a->store = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--metrics", &v)) != 0) {
            if (m < 0) return -1;
            a->metrics = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--dead-letter", &v)) != 0) {
            if (m < 0) return -1;
            o->dead_letter_exchange = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--key", &v)) != 0) {
            if (m < 0) return -1;
            o->key = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--prefetch", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_u32(CMD, "--prefetch", v, 1, 65535, &u) != 0) return -1;
            o->prefetch = (int)u;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--heartbeat", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_u32(CMD, "--heartbeat", v, 0, 3600, &u) != 0) return -1;
            a->broker_opts.heartbeat_s = (int)u;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--attempts", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_u32(CMD, "--attempts", v, 1, 1000000, &u) != 0) return -1;
            o->max_attempts = (int)u;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--lease", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_seconds(CMD, "--lease", v, 100, 86400000LL, &ms) != 0)
                return -1;
            o->lease_ms = ms;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--retry-delay", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_seconds(CMD, "--retry-delay", v, 0, 60000, &ms) != 0)
                return -1;
            o->retry_delay_ms = (int)ms;
        } else {
            fprintf(stderr, "acemq consume: unknown argument '%s'\n", argv[i]);
            return -1;
        }
    }
    fputs("acemq consume: give --exec -- COMMAND or --pipe -- COMMAND\n", stderr);
    return -1;
}

int acemq__cli_consume(int argc, char **argv)
{
    args a = {0};
    acemq_broker_options_init(&a.broker_opts);
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    int rc = parse(argc, argv, &a, &o);
    if (rc != 0) return rc > 0 ? ACEMQ_CLI_OK : usage_error();
    if (!a.broker || !a.queue || !a.store) {
        fputs("acemq consume: --broker, --queue and --store are required\n", stderr);
        return usage_error();
    }
    acemq__consume_command command = {a.command, o.lease_ms};
    acemq__pipe_child pipe_child = {0};
    pipe_child.cmd = command;
    if (a.pipe)
        o.batch_handler = acemq__consume_pipe_batch;
    else
        o.handler = acemq__consume_exec;
    o.ctx = a.pipe ? (void *)&pipe_child : (void *)&command;
    o.log = stderr;
    o.broker = &a.broker_opts;

    acemq__cli_catch_stop_signals();

    acemq_idem *store = NULL;
    acemq_audit *audit = NULL;
    acemq_consumer *c = NULL;
    acemq__metrics *metrics = NULL;
    int status = ACEMQ_CLI_FAIL;
    if (acemq_idem_open(&store, a.store, NULL) != 0) {
        fprintf(stderr, "acemq consume: --store %s: %s\n", a.store, acemq_idem_errmsg(NULL));
        goto out;
    }
    if (a.audit && (rc = acemq_audit_new(&audit, NULL)) != 0) {
        fprintf(stderr, "acemq consume: the audit: %s\n", acemq_strerror(rc));
        goto out;
    }
    o.audit = audit;
    consumer_open copen = {&c, a.broker, a.queue, store, &o};
    rc = acemq__cli_wait_for_broker(try_consumer, consumer_why, &copen);
    if (rc != 0) {
        if (rc == ACEMQ_EIO && acemq__cli_stop_requested)
            status = ACEMQ_CLI_OK;
        else
            fprintf(stderr, "acemq consume: %s\n", acemq_consumer_errmsg(NULL));
        goto out;
    }
    if (a.metrics) {
        char err[256];
        if (acemq__metrics_start(&metrics, a.metrics, acemq__consume_metrics_render, c, err,
                                 sizeof err) != 0) {
            fprintf(stderr, "acemq consume: %s\n", err);
            goto out;
        }
    }
    rc = acemq_consumer_run(c, &acemq__cli_stop_requested);
    if (rc != 0) {
        fprintf(stderr, "acemq consume: %s\n", acemq_consumer_errmsg(c));
        goto out;
    }
    status = ACEMQ_CLI_OK;
out:
    acemq__metrics_stop(metrics);
    acemq_consumer_close(c);
    acemq__consume_pipe_free(&pipe_child);
    acemq_audit_free(audit);
    acemq_idem_close(store);
    return status;
}
