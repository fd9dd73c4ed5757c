/* bench_relay.c — the relay's throughput from outbox to confirmed in RabbitMQ,
 * beside a raw rabbitmq-c publisher that publishes the same messages with
 * confirms and the same window in the same run; and the latency from commit
 * to confirm at 1,000 records/s.
 *
 * Targets (issue 5): throughput >= 0.9 x the raw publisher on both outboxes;
 * on PostgreSQL with NOTIFY, p99 commit-to-confirm <= 10 ms. The keyed cases
 * (issue 37): a backlog over 50 ordering keys drains at >= 0.5 x the same
 * backlog without keys, the same relay in the same run.
 *
 *   bench_relay [--amqp URL] [--pg URL] [--out FILE] [--records N] [--reps N]
 *               [--batch N] [--window N] [--latency-inline] [--filter TEXT]
 *               [--queue classic-v2|classic-v2-lazy|classic-v1|quorum] [--broker-cpu N]
 *               [--delete-published] [--writer-busy-wait] [--consumer]
 *               [--control] [--quick]
 *
 * --filter runs only the cases whose name contains TEXT. --queue is the kind
 * of the durable queue every case publishes to, relay and peers alike:
 * classic-v2 by default (x-queue-version 2, the classic queue storage that
 * RabbitMQ recommends from 3.13 and the only one from 4.0; Debian 12's 3.10
 * still declares version 1 when not asked). classic-v2-lazy adds
 * x-queue-mode lazy: the messages go to disk instead of staying in the
 * queue process's memory, whose garbage collection costs the broker much
 * of its CPU once a backlog grows (3.12 and later keep every classic queue
 * so). The queue's kind sets how fast the broker confirms, hence the
 * latency's floor and the raw publisher's pace: docs/performance.md has
 * the kinds measured. --broker-cpu N runs the broker's node alone on CPU N
 * and everything else on the others, as if the broker had a host of its
 * own (bench_relay_pin.c); its cases' names end in /broker-own-cpu.
 * --delete-published has the relay delete each record once confirmed
 * (acemq relay --delete-published) instead of marking it published; its
 * cases' names end in /delete-published. The latency case also times the
 * writer's transactions; --writer-busy-wait has the SQLite writer wait for
 * the lock with acemq_sqlite_busy_wait instead of sqlite3_busy_timeout.
 *
 * The latency case runs the relay as `acemq relay` does (opened on the URL:
 * its own threads and handles); --latency-inline runs it on one handle,
 * claim, publish and mark in turn.
 *
 * --reps N (9 by default) is how many turns each side of a throughput case
 * takes, relay and raw publisher in turn, ABBA; the case prints the median
 * of each side's rates and their ratio. A single turn's rate moves by a few
 * percent from one turn to the next on a machine of two shared vCPUs, so
 * the ratio of three turns a side spread about 0.05 either way from run to
 * run; nine turns a side halve that (docs/performance.md, "The bench's own
 * noise"). --control publishes with the raw publisher in the relay's turns
 * too, after the same refill, and prints the ratio of two identical
 * publishers, with no target: how far the ratio moves by itself. Its cases'
 * names end in /control, and it measures no latency.
 *
 * Without --consumer every message of a throughput turn stays in the
 * queue. With it, a consumer takes them as they come in, relay and peer
 * alike, and a turn fails unless each of its messages reached it
 * (bench_consumer.h; docs/performance.md, "Fifteenth round", has both).
 * The latency cases run twice whatever --consumer says: with a consumer
 * (the target's figure, as a queue is at a steady rate), then without
 * (the case's name ends in /unconsumed; for reading).
 *
 * URLs default to ACEMQ_AMQP_URL and ACEMQ_PG_URL (scripts/services.sh env);
 * without a broker nothing is measured, without PostgreSQL its cases are
 * skipped, and each says so.
 *
 * This file holds the options, the throughput and keyed cases and the report;
 * bench_relay_mq.c the rabbitmq-c peer, bench_relay_outbox.c the outboxes and
 * their backlogs, bench_relay_run.c the relay's runs and the latency case,
 * bench_relay_pin.c --broker-cpu.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <libpq-fe.h>
#include <sched.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/relay.h"
#include "bench_common.h"
#include "bench_consumer.h"
#include "bench_relay.h"

/* The relay against the raw publisher, turn about, median of the reps.
 * With --control the relay's turns (their refill included) publish with the
 * raw publisher instead: what the ratio does when both sides are the same. */
static void throughput_case(const config *cfg, FILE *out, const char *name, int pg, const char *url,
                            sqlite3 *db, PGconn *conn)
{
    double a[16], p[16];
    for (int rep = 0; rep < cfg->reps; rep++) {
        for (int turn = 0; turn < 2; turn++) {
            fresh_queue(cfg);
            bench_consumer *consumer = start_consumer(cfg, cfg->consumer);
            if ((turn + rep) % 2 == 0) {
                refill(pg, db, conn, cfg->records);
                a[rep] = cfg->control ? raw_publish(cfg->amqp_url, cfg->records, cfg->window)
                                      : run_relay(cfg, url, cfg->records, 5);
                finish_consumer(consumer, cfg->records, "the relay");
            } else {
                p[rep] = raw_publish(cfg->amqp_url, cfg->records, cfg->window);
                finish_consumer(consumer, cfg->records, "the raw publisher");
            }
        }
    }
    double v = median(a, cfg->reps), pv = median(p, cfg->reps), ratio = v / pv;
    const char *met = cfg->control ? "-" : ratio >= 0.9 ? "yes" : "NO";
    printf("%-42s %10.0f  %-28s %10.0f %7.3f  %-7s %s\n", name, v, "raw rabbitmq-c, confirms", pv,
           ratio, cfg->control ? "none" : ">= 0.9", met);
    fprintf(out,
            "{\"bench\":\"relay\",\"case\":\"%s\",\"value\":%.0f,\"unit\":\"records/s\","
            "\"peer\":\"raw rabbitmq-c publisher with confirms, window %d\",\"peer_value\":%.0f,"
            "\"ratio\":%.4f,\"target\":\"%s\",\"target_met\":%s,\"batch\":%d,"
            "\"consumer\":%s,\"reps\":%d}\n",
            name, v, cfg->window, pv, ratio, cfg->control ? "none: a control" : ">= 0.9",
            cfg->control   ? "null"
            : ratio >= 0.9 ? "true"
                           : "false",
            cfg->batch, cfg->consumer ? "true" : "false", cfg->reps);
    fflush(out);
}

/* The same relay, as `acemq relay` runs it (its default poll of a second),
 * draining a backlog whose records carry ordering keys, beside the same
 * backlog without keys, turn about, median of the reps. One record per key
 * is in flight at a time, so a keyed claim takes at most one record per
 * key: KEYS records per round trip to the broker instead of a full batch. */
enum { KEYS = 50 };

static void keyed_case(const config *cfg, FILE *out, const char *name, int pg, const char *url,
                       sqlite3 *db, PGconn *conn)
{
    acemq_relay_options defaults;
    acemq_relay_options_init(&defaults);
    double a[16], p[16];
    for (int rep = 0; rep < cfg->reps; rep++) {
        for (int turn = 0; turn < 2; turn++) {
            int keyed = (turn + rep) % 2 == 0;
            fresh_queue(cfg);
            bench_consumer *consumer = start_consumer(cfg, cfg->consumer);
            refill_keyed(pg, db, conn, cfg->records, keyed ? KEYS : 0);
            double v = run_relay(cfg, url, cfg->records, defaults.poll_ms);
            finish_consumer(consumer, cfg->records, keyed ? "the keyed relay" : "the relay");
            *(keyed ? &a[rep] : &p[rep]) = v;
        }
    }
    double v = median(a, cfg->reps), pv = median(p, cfg->reps), ratio = v / pv;
    const char *met = ratio >= 0.5 ? "yes" : "NO";
    printf("%-42s %10.0f  %-28s %10.0f %7.3f  %-7s %s\n", name, v, "the relay, no keys", pv, ratio,
           ">= 0.5", met);
    fprintf(out,
            "{\"bench\":\"relay\",\"case\":\"%s\",\"value\":%.0f,\"unit\":\"records/s\","
            "\"peer\":\"the same relay on the same backlog without ordering keys\","
            "\"peer_value\":%.0f,\"ratio\":%.4f,\"target\":\">= 0.5\",\"target_met\":%s,"
            "\"keys\":%d,\"batch\":%d,\"consumer\":%s,\"reps\":%d}\n",
            name, v, pv, ratio, ratio >= 0.5 ? "true" : "false", KEYS, cfg->batch,
            cfg->consumer ? "true" : "false", cfg->reps);
    fflush(out);
}

static void bench_backend(const config *cfg, FILE *out, int pg)
{
    /* The cases' names, as printed, written to the JSON lines and matched
     * by --filter. */
    char suffix[64]; /* the four suffixes together: 52 */
    snprintf(suffix, sizeof suffix, "%s%s%s", cfg->delete_published ? "/delete-published" : "",
             cfg->broker_cpu >= 0 ? "/broker-own-cpu" : "", cfg->control ? "/control" : "");
    char throughput_name[96], keyed_name[96], latency_name[96], unconsumed_name[112],
        pipeline_name[96];
    snprintf(throughput_name, sizeof throughput_name, "throughput/%s%s", pg ? "postgres" : "sqlite",
             suffix);
    snprintf(keyed_name, sizeof keyed_name, "keyed/%s%s", pg ? "postgres" : "sqlite", suffix);
    snprintf(latency_name, sizeof latency_name, "%s%s",
             pg ? "latency/postgres-notify" : "latency/sqlite-poll", suffix);
    snprintf(unconsumed_name, sizeof unconsumed_name, "%s/unconsumed", latency_name);
    /* The pipeline ends in the consumer's SQLite store: with the outbox on
     * SQLite too, it is the embedded default end to end. */
    snprintf(pipeline_name, sizeof pipeline_name, "pipeline/sqlite%s", suffix);
    int pipeline =
        !pg && !cfg->control && !cfg->consumer && bench_wanted(cfg->filter, pipeline_name);
    if (!bench_wanted(cfg->filter, throughput_name) && !bench_wanted(cfg->filter, latency_name) &&
        !bench_wanted(cfg->filter, unconsumed_name) &&
        (cfg->control || !bench_wanted(cfg->filter, keyed_name)) && !pipeline)
        return;
    char url[1200], path[512];
    sqlite3 *db = NULL;
    PGconn *conn = NULL;
    if (pg) {
        snprintf(url, sizeof url, "%s", cfg->pg_url);
    } else {
        snprintf(path, sizeof path, "%s/relay.db", cfg->dir);
        snprintf(url, sizeof url, "sqlite:%s", path);
    }
    acemq_outbox *h = NULL;
    if (acemq_outbox_open(&h, url, NULL) != 0) die("open: %s", acemq_outbox_errmsg(NULL));
    acemq_outbox_close(h);
    if (pg) {
        conn = PQconnectdb(url);
        if (PQstatus(conn) != CONNECTION_OK) die("postgres: %s", PQerrorMessage(conn));
    } else if (sqlite3_open(path, &db) != SQLITE_OK ||
               sqlite3_busy_timeout(db, 10000) != SQLITE_OK) {
        die("sqlite3_open(%s)", path);
    }
    if (bench_wanted(cfg->filter, throughput_name))
        throughput_case(cfg, out, throughput_name, pg, url, db, conn);
    if (!cfg->control && bench_wanted(cfg->filter, keyed_name))
        keyed_case(cfg, out, keyed_name, pg, url, db, conn);
    if (pipeline) pipeline_case(cfg, out, pipeline_name, url, db);
    /* The latency at a steady 1,000 records a second is judged with the
     * queue consumed, as a queue is at a steady rate, and then measured
     * again with nobody consuming, for reading: into a classic queue that
     * grows in its process's memory RabbitMQ confirms in bursts, and the
     * broker-alone peer's own p99 from due time then comes near 10 ms, once
     * over it (docs/performance.md, "The latency with the queue consumed"). */
    for (int consumed = 1; consumed >= 0; consumed--) {
        const char *name = consumed ? latency_name : unconsumed_name;
        if (cfg->control || !bench_wanted(cfg->filter, name)) continue;
        if (cfg->delete_published)
            printf("%-42s not measured: latency is read from published rows' published_at,"
                   " and --delete-published keeps none\n",
                   name);
        else
            latency_case(cfg, out, name, pg, url, db, conn, consumed);
    }
    fresh_queue(cfg);
    if (db) sqlite3_close(db);
    if (conn) PQfinish(conn);
}

int main(int argc, char **argv)
{
    bench_name = "bench_relay";
    config cfg = {.out_path = ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl",
                  .records = 20000,
                  .reps = 9,
                  .batch = 500,
                  .window = 256,
                  .synchronous = ACEMQ_SYNC_FULL,
                  .queue = "classic-v2",
                  .broker_cpu = -1};
    cfg.amqp_url = getenv("ACEMQ_AMQP_URL");
    cfg.pg_url = getenv("ACEMQ_PG_URL");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--amqp") == 0 && i + 1 < argc)
            cfg.amqp_url = argv[++i];
        else if (strcmp(argv[i], "--pg") == 0 && i + 1 < argc)
            cfg.pg_url = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            cfg.out_path = argv[++i];
        else if (strcmp(argv[i], "--records") == 0 && i + 1 < argc)
            cfg.records = atol(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            cfg.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
            cfg.batch = atoi(argv[++i]);
        else if (strcmp(argv[i], "--window") == 0 && i + 1 < argc)
            cfg.window = atoi(argv[++i]);
        else if (strcmp(argv[i], "--synchronous") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            cfg.synchronous = strcmp(v, "full") == 0     ? ACEMQ_SYNC_FULL
                              : strcmp(v, "normal") == 0 ? ACEMQ_SYNC_NORMAL
                              : strcmp(v, "off") == 0    ? ACEMQ_SYNC_OFF
                                                         : -1;
            if (cfg.synchronous < 0) die("--synchronous full|normal|off");
        } else if (strcmp(argv[i], "--latency-inline") == 0)
            cfg.latency_inline = 1;
        else if (strcmp(argv[i], "--delete-published") == 0)
            cfg.delete_published = 1;
        else if (strcmp(argv[i], "--writer-busy-wait") == 0)
            cfg.writer_busy_wait = 1;
        else if (strcmp(argv[i], "--consumer") == 0)
            cfg.consumer = 1;
        else if (strcmp(argv[i], "--control") == 0)
            cfg.control = 1;
        else if (strcmp(argv[i], "--broker-cpu") == 0 && i + 1 < argc) {
            char *end = NULL;
            long v = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end || v < 0 || v >= CPU_SETSIZE)
                die("--broker-cpu: a CPU number, 0..%d", CPU_SETSIZE - 1);
            cfg.broker_cpu = (int)v;
        } else if (strcmp(argv[i], "--queue") == 0 && i + 1 < argc)
            cfg.queue = argv[++i];
        else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc)
            cfg.filter = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0)
            cfg.quick = 1, cfg.reps = 1, cfg.records = 5000;
        else {
            fprintf(stderr, "usage: bench_relay [--amqp URL] [--pg URL] [--out FILE] [--records N]"
                            " [--reps N] [--batch N] [--window N] [--synchronous MODE]"
                            " [--latency-inline] [--filter TEXT] [--queue KIND] [--broker-cpu N]"
                            " [--delete-published] [--writer-busy-wait] [--consumer]"
                            " [--control] [--quick]\n");
            return 2;
        }
    }
    if (strcmp(cfg.queue, "classic-v1") != 0 && strcmp(cfg.queue, "classic-v2") != 0 &&
        strcmp(cfg.queue, "classic-v2-lazy") != 0 && strcmp(cfg.queue, "quorum") != 0)
        die("--queue classic-v1|classic-v2|classic-v2-lazy|quorum");
    if (cfg.reps < 1 || cfg.reps > 16 || cfg.records < 1 || cfg.batch < 1 || cfg.window < 1)
        die("--reps 1..16, --records, --batch and --window positive");
    if (!cfg.amqp_url || !*cfg.amqp_url) {
        printf("relay: skipped: no --amqp and no ACEMQ_AMQP_URL (scripts/services.sh start "
               "rabbitmq)\n");
        return 0;
    }
    snprintf(cfg.dir, sizeof cfg.dir, "/tmp/acemq-bench-relay-XXXXXX");
    if (!mkdtemp(cfg.dir)) die("mkdtemp failed");
    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("opening %s", cfg.out_path);
    static const char *const sync_names[] = {"off", "normal", "full"};
    printf("relay: outbox -> RabbitMQ (persistent, confirms), %ld records of %d bytes, batch %d,"
           " window %d, relay synchronous=%s, median of %d; %s\n",
           cfg.records, BODY_LEN, cfg.batch, cfg.window, sync_names[cfg.synchronous], cfg.reps,
           cfg.consumer ? "throughput: a consumer empties the queue"
                        : "throughput: no consumer, the queue keeps all");
    printf("%-42s %10s  %-28s %10s %7s  %-7s %s\n", "case", "records/s", "peer", "records/s",
           "ratio", "target", "met");
    if (cfg.broker_cpu >= 0) {
        pin_broker(&cfg);
        printf("broker alone on CPU %d; PostgreSQL, the relay and the raw peer on the others\n",
               cfg.broker_cpu);
    }
    bench_backend(&cfg, out, 0);
    if (cfg.pg_url && *cfg.pg_url)
        bench_backend(&cfg, out, 1);
    else
        printf("note: PostgreSQL cases skipped: no --pg and no ACEMQ_PG_URL\n");
    unpin_at_exit();
    fclose(out);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cfg.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", cfg.dir);
    return 0;
}
