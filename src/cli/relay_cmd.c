/* relay_cmd.c — `acemq relay`: drains an outbox to a broker until SIGTERM or
 * SIGINT, then finishes the batch in flight and exits 0. docs/cli.md is the
 * user's page; include/acemq/relay.h has the rules it follows.
 */
#include "cli/cli.h"

#include <acemq/broker.h>
#include <acemq/relay.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/relay_metrics.h"

#define CMD "relay"

/* The broker for acemq__cli_wait_for_broker. */
typedef struct broker_open {
    acemq_broker **b;
    const char *url;
    const acemq_broker_options *bo;
} broker_open;

static int try_broker(void *ctx)
{
    broker_open *o = ctx;
    return acemq_broker_open(o->b, o->url, o->bo);
}

static const char *broker_why(void)
{
    return acemq_broker_errmsg(NULL);
}

static void usage_line(FILE *f)
{
    fputs("usage: acemq relay --outbox URL --broker URL [--batch N] [--lease S] [--window N]\n"
          "                   [--poll S] [--confirm-timeout S] [--heartbeat S]\n"
          "                   [--synchronous MODE]\n"
          "                   [--delete-published] [--metrics HOST:PORT] [-v]\n",
          f);
}

static void help(void)
{
    usage_line(stdout);
    fputs("\n"
          "Publishes committed outbox records to the broker with publisher confirms,\n"
          "oldest first, at least once, and marks each: published on a confirm; failed\n"
          "(back-off, dead past the attempt limit) on a nack or a return; untouched\n"
          "when no confirm came, so its lease hands it out again. Several relays may\n"
          "share one outbox. SIGTERM or SIGINT: stop claiming, finish the batch in\n"
          "flight, exit 0. While the broker blocks publishers (a memory or disk alarm)\n"
          "the relay waits on the same connection, past the confirm timeout, so that\n"
          "nothing goes out twice; a signal ends that wait too.\n"
          "\n"
          "  --outbox URL         sqlite:/path/app.db or postgres://user@host:port/db\n"
          "  --broker URL         amqp://user:pass@host:port/vhost (or memory:NAME for tests)\n"
          "  --batch N            records per claim (default 100)\n"
          "  --lease S            seconds a claim is held before another relay may take it\n"
          "                       (default 30; keep it above the confirm timeout)\n"
          "  --window N           unconfirmed messages in flight (default 256)\n"
          "  --poll S             seconds between looks when idle; PostgreSQL wakes at once\n"
          "                       on NOTIFY (default 1; decimals allowed, e.g. 0.05)\n"
          "  --confirm-timeout S  a confirm later than this is unknown (default 20)\n"
          "  --heartbeat S        AMQP heartbeat: a broker silent for twice S is taken as\n"
          "                       gone and connected again; 0 off (default 30)\n"
          "  --synchronous MODE   full, normal or off: whether the relay's own marks wait\n"
          "                       for the disk (default full; SQLite claims never do).\n"
          "                       Below full a database crash can forget the last marks,\n"
          "                       and those records go out again: duplicates, never a loss\n"
          "  --delete-published   delete a record once its confirm came, instead of keeping\n"
          "                       it as published (state 1) until `acemq outbox purge`:\n"
          "                       no history, but less database work per record (on\n"
          "                       PostgreSQL no second row version: claim + publish at\n"
          "                       1.4-1.9x the records per second)\n"
          "  --metrics HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics\n"
          "  -v, --verbose        a log line per batch as well as per event\n"
          "\n"
          "Logs: one logfmt line per event on standard error (start, stop, failures,\n"
          "unknown outcomes, broker unavailable, broker blocked and unblocked).\n"
          "Exit status: 0 stopped by a signal; 1 could not start (bad URL, no database,\n"
          "the broker refused the user, password or vhost); 2 usage error. A broker\n"
          "that cannot be reached at start is waited for, not an error.\n"
          "\n"
          "Examples:\n"
          "  acemq relay --outbox sqlite:/var/lib/shop/shop.db \\\n"
          "              --broker amqp://guest:guest@127.0.0.1:5672/ --metrics 127.0.0.1:9464\n"
          "  acemq relay --outbox postgres://relay@db/shop --broker amqp://relay:pw@mq/shop \\\n"
          "              --batch 500 --window 1000 --delete-published\n",
          stdout);
}

static int usage_error(void)
{
    usage_line(stderr);
    fputs("Try 'acemq relay --help'.\n", stderr);
    return ACEMQ_CLI_USAGE;
}

static int parse_synchronous(const char *text, int *mode)
{
    static const char *const names[] = {"off", "normal", "full"}; /* acemq_sync_mode order */
    for (int i = 0; i < 3; i++)
        if (strcmp(text, names[i]) == 0) {
            *mode = i;
            return 0;
        }
    fprintf(stderr, "acemq relay: --synchronous must be full, normal or off, not '%s'\n", text);
    return -1;
}

int acemq__cli_relay(int argc, char **argv)
{
    const char *outbox_url = NULL, *broker_url = NULL, *metrics_addr = NULL, *v = NULL;
    acemq_relay_options ro;
    acemq_relay_options_init(&ro);
    acemq_broker_options bo;
    acemq_broker_options_init(&bo);
    bo.confirm_timeout_ms = 20000;
    /* --synchronous below full lets the relay's own commits skip the fsync:
     * a mark lost in a crash only sends its record again, which
     * at-least-once allows. Full by default: the safe choice costs no
     * throughput worth trading it for (docs/performance.md). */
    acemq_outbox_options oo;
    acemq_outbox_options_init(&oo);
    for (int i = 1; i < argc; i++) {
        int m;
        uint32_t u;
        int64_t ms;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help();
            return ACEMQ_CLI_OK;
        } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            ro.verbose = 1;
        } else if (strcmp(argv[i], "--delete-published") == 0) {
            oo.delete_on_publish = 1;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--outbox", &v)) != 0) {
            if (m < 0) return usage_error();
            outbox_url = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--broker", &v)) != 0) {
            if (m < 0) return usage_error();
            broker_url = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--metrics", &v)) != 0) {
            if (m < 0) return usage_error();
            metrics_addr = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--batch", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_u32(CMD, "--batch", v, 1, 100000, &u) != 0)
                return usage_error();
            ro.batch = u;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--window", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_u32(CMD, "--window", v, 1, 65535, &u) != 0)
                return usage_error();
            bo.window = (int)u;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--lease", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_seconds(CMD, "--lease", v, 100, 7 * 86400000LL, &ms) != 0)
                return usage_error();
            ro.lease_ms = ms;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--poll", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_seconds(CMD, "--poll", v, 1, 3600000, &ms) != 0)
                return usage_error();
            ro.poll_ms = (int)ms;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--confirm-timeout", &v)) != 0) {
            if (m < 0 ||
                acemq__cli_parse_seconds(CMD, "--confirm-timeout", v, 1, 3600000, &ms) != 0)
                return usage_error();
            bo.confirm_timeout_ms = (int)ms;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--heartbeat", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_u32(CMD, "--heartbeat", v, 0, 3600, &u) != 0)
                return usage_error();
            bo.heartbeat_s = (int)u;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--synchronous", &v)) != 0) {
            if (m < 0 || parse_synchronous(v, &oo.synchronous) != 0) return usage_error();
        } else {
            fprintf(stderr, "acemq relay: unknown argument '%s'\n", argv[i]);
            return usage_error();
        }
    }
    if (!outbox_url || !broker_url) {
        fputs("acemq relay: --outbox and --broker are required\n", stderr);
        return usage_error();
    }
    if (ro.lease_ms <= bo.confirm_timeout_ms) {
        fputs("acemq relay: --lease must be longer than --confirm-timeout, or another relay\n"
              "could take a batch while this one still waits for its confirms\n",
              stderr);
        return usage_error();
    }
    ro.log = stderr;

    acemq_broker *b = NULL;
    acemq_relay *r = NULL;
    acemq__metrics *metrics = NULL;
    acemq__cli_catch_stop_signals();
    /* A relay started with its broker, or before it, waits for it as it
     * does for one that restarts later. */
    broker_open bopen = {&b, broker_url, &bo};
    int rc = acemq__cli_wait_for_broker(try_broker, broker_why, &bopen);
    if (rc != 0) {
        /* Stopped while waiting for the broker: nothing was claimed. */
        if (rc == ACEMQ_EIO && acemq__cli_stop_requested) return ACEMQ_CLI_OK;
        fprintf(stderr, "acemq relay: broker: %s\n", acemq_broker_errmsg(NULL));
        return ACEMQ_CLI_FAIL;
    }
    /* The relay opens its own connections to the outbox: one per thread. */
    rc = acemq_relay_open(&r, outbox_url, &oo, b, &ro);
    if (rc != 0) {
        fprintf(stderr, "acemq relay: %s\n", acemq_relay_errmsg(NULL));
        acemq_broker_close(b);
        return ACEMQ_CLI_FAIL;
    }
    acemq__relay_metrics_ctx page = {r, b};
    if (metrics_addr) {
        char err[256];
        if (acemq__metrics_start(&metrics, metrics_addr, acemq__relay_metrics_render, &page, err,
                                 sizeof err) != 0) {
            fprintf(stderr, "acemq relay: %s\n", err);
            rc = ACEMQ_EINVAL;
        }
    }
    int status = ACEMQ_CLI_OK;
    if (rc == 0) rc = acemq_relay_run(r, &acemq__cli_stop_requested);
    if (rc != 0) {
        fprintf(stderr, "acemq relay: %s\n", acemq_relay_errmsg(r));
        status = ACEMQ_CLI_FAIL;
    }
    acemq__metrics_stop(metrics);
    acemq_relay_free(r);
    acemq_broker_close(b);
    return status;
}
