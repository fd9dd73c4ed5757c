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
 * own (place_processes below); its cases' names end in /broker-own-cpu.
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
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <libpq-fe.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acemq/postgres.h"
#include "acemq/relay.h"
#include "acemq/sqlite.h"
#include "bench_common.h"
#include "bench_consumer.h"

#define QUEUE "acemq-bench-relay"
#define BODY_LEN 200

typedef struct config {
    const char *amqp_url, *pg_url, *out_path;
    long records;
    int reps, batch, window, quick, latency_inline;
    int writer_busy_wait; /* the SQLite writer waits as acemq does (acemq_sqlite_busy_wait) */
    const char *filter;   /* only the cases whose name contains this */
    const char *queue;    /* classic-v1, classic-v2, quorum */
    int broker_cpu;       /* >= 0: the broker's node runs on this CPU alone */
    int synchronous;      /* the relay's handles; acemq relay's default, FULL */
    int delete_published; /* the relay deletes what it publishes (--delete-published) */
    int consumer;         /* a consumer empties the queue during every turn (--consumer) */
    int control;          /* the raw publisher in the relay's turns too (--control) */
    char dir[256];
} config;

/* A relay-side outbox handle, opened as acemq relay opens its three. */
/* The outbox options the relay's handles are opened with. */
static acemq_outbox_options relay_outbox_options(const config *cfg)
{
    acemq_outbox_options o;
    acemq_outbox_options_init(&o);
    o.synchronous = cfg->synchronous;
    o.delete_on_publish = cfg->delete_published;
    return o;
}

static acemq_outbox *open_relay_outbox(const config *cfg, const char *url)
{
    acemq_outbox_options o = relay_outbox_options(cfg);
    acemq_outbox *h = NULL;
    if (acemq_outbox_open(&h, url, &o) != 0) die("outbox: %s", acemq_outbox_errmsg(NULL));
    return h;
}

/* ------------------------------------------------------------ rabbitmq-c */

static amqp_connection_state_t mq_connect(const char *url)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s", url);
    struct amqp_connection_info info;
    amqp_default_connection_info(&info);
    if (amqp_parse_url(buf, &info) != AMQP_STATUS_OK) die("bad AMQP URL");
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (!s || amqp_socket_open(s, info.host, info.port) != AMQP_STATUS_OK)
        die("cannot connect to RabbitMQ at %s:%d", info.host, info.port);
    const char *vhost = info.vhost && info.vhost[0] ? info.vhost : "/";
    if (amqp_login(c, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user, info.password)
            .reply_type != AMQP_RESPONSE_NORMAL)
        die("RabbitMQ login failed");
    amqp_channel_open(c, 1);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("channel.open failed");
    return c;
}

static void mq_close(amqp_connection_state_t c)
{
    amqp_channel_close(c, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

/* The queue every case publishes to, made anew (deleted and declared) so that
 * no case inherits another's messages or index: durable, of the kind
 * --queue names. Both the relay and its peers publish to it. */
static void fresh_queue(const config *cfg)
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
static double raw_publish(const char *url, long n, int window)
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
static void p50_p99(double *v, long n, double *p50, double *p99)
{
    *p50 = median(v, (int)n);
    *p99 = v[(n * 99) / 100];
}

/* RabbitMQ alone at a relay's schedule: p50 and p99 in ms, two ways. */
typedef struct raw_latency {
    /* From each message's publish to its confirm: what one message waits.
     * A stall delays the messages due meanwhile, which are published late,
     * and this figure does not count that wait. */
    double p50, p99;
    /* From each message's due time (start + i / rate) to its confirm, as
     * the relay's records are timed from their commit: the waits of the
     * messages due during a stall are counted, as they are for the relay. */
    double due_p50, due_p99;
} raw_latency;

/* The floor under any relay's latency: one persistent message published and
 * its confirm awaited, `n` times at `rate` per second. */
static void raw_confirm_latency(const char *url, long n, int rate, raw_latency *out)
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
static bench_consumer *start_consumer(const config *cfg, int on)
{
    return on ? bench_consumer_start(mq_connect(cfg->amqp_url), QUEUE) : NULL;
}

/* Ends a turn's consumer: every one of the turn's n messages must have
 * reached it. More is possible (at least once), and said. */
static void finish_consumer(bench_consumer *k, long n, const char *turn)
{
    if (!k) return;
    long got = bench_consumer_finish(k, n, 30.0);
    if (got < n) die("the consumer received %ld of the %ld messages %s sent", got, n, turn);
    if (got > n)
        fprintf(stderr, "%s: the consumer received %ld messages for the %ld %s sent\n", bench_name,
                got, n, turn);
}

/* ------------------------------------------------------------ outboxes */

static void exec_sql(int pg, sqlite3 *db, PGconn *conn, const char *sql)
{
    if (pg) {
        PGresult *r = PQexec(conn, sql);
        if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
            die("postgres: %s: %s", sql, PQresultErrorMessage(r));
        PQclear(r);
    } else {
        char *msg = NULL;
        if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) die("sqlite: %s: %s", sql, msg);
    }
}

/* A backlog of n records; with keys > 0 each carries one of that many
 * ordering keys, UUID-shaped customer ids drawn at random per record, as a
 * burst of orders from many customers arrives. */
static void refill_keyed(int pg, sqlite3 *db, PGconn *conn, long n, int keys)
{
    char sql[768];
    exec_sql(pg, db, conn, pg ? "TRUNCATE acemq_outbox" : "DELETE FROM acemq_outbox");
    const char *key = keys <= 0 ? "NULL"
                      : pg      ? "format('%s-4a1e-4b7c-9d2f-%s', lpad(to_hex(k * 40503 + 7), 8,"
                                  " '0'), lpad(k::text, 12, '0'))"
                                : "printf('%08x-4a1e-4b7c-9d2f-%012d', k * 40503 + 7, k)";
    int spread = keys > 0 ? keys : 1;
    if (pg)
        snprintf(
            sql, sizeof sql,
            "INSERT INTO acemq_outbox(id, destination, routing_key, ordering_key, body)"
            " SELECT 'r' || lpad(g::text, 8, '0'), '', '" QUEUE "', %s,"
            " convert_to(repeat('x', %d), 'UTF8')"
            " FROM (SELECT g, floor(random() * %d)::int AS k FROM generate_series(1, %ld) g) s",
            key, BODY_LEN, spread, n);
    else
        snprintf(sql, sizeof sql,
                 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < %ld),"
                 " r(i, k) AS (SELECT i, abs(random() %% %d) FROM g)"
                 " INSERT INTO acemq_outbox(id, destination, routing_key, ordering_key, body)"
                 " SELECT printf('r%%08d', i), '', '" QUEUE "', %s, zeroblob(%d) FROM r",
                 n, spread, key, BODY_LEN);
    exec_sql(pg, db, conn, sql);
    exec_sql(pg, db, conn, pg ? "VACUUM ANALYZE acemq_outbox" : "PRAGMA wal_checkpoint(TRUNCATE)");
    /* The fill's writes reach the table's files before the relay's turn,
     * as SQLite's checkpoint above does for its file: the turn then pays
     * for the relay's own writes, not for the background flush of the
     * fill's. A role that may not (PostgreSQL 15: superuser or
     * pg_checkpoint) runs without, said once. */
    static int checkpoint_refused;
    if (pg && !checkpoint_refused) {
        PGresult *r = PQexec(conn, "CHECKPOINT");
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            checkpoint_refused = 1;
            fprintf(stderr, "%s: CHECKPOINT refused, the fill's writes flush during turns: %s",
                    bench_name, PQresultErrorMessage(r));
        }
        PQclear(r);
    }
}

static void refill(int pg, sqlite3 *db, PGconn *conn, long n)
{
    refill_keyed(pg, db, conn, n, 0);
}

/* ------------------------------------------------------------ latency */

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

typedef struct relay_thread {
    acemq_relay *r;
    volatile sig_atomic_t stop;
} relay_thread;

static void *relay_main(void *arg)
{
    relay_thread *t = arg;
    if (acemq_relay_run(t->r, &t->stop) != 0) die("relay_run: %s", acemq_relay_errmsg(t->r));
    return NULL;
}

/* The relay as `acemq relay` runs it: opened on the outbox's URL, run()
 * on a thread; timed from the start until the last record is marked
 * published. */
static double run_relay(const config *cfg, const char *outbox_url, long n, int poll_ms)
{
    acemq_outbox_options oo = relay_outbox_options(cfg);
    acemq_broker *b = NULL;
    acemq_broker_options bo;
    acemq_broker_options_init(&bo);
    bo.window = cfg->window;
    if (acemq_broker_open(&b, cfg->amqp_url, &bo) != 0)
        die("broker: %s", acemq_broker_errmsg(NULL));
    acemq_relay_options ro;
    acemq_relay_options_init(&ro);
    ro.batch = (size_t)cfg->batch;
    ro.poll_ms = poll_ms;
    relay_thread t = {.stop = 0};
    if (acemq_relay_open(&t.r, outbox_url, &oo, b, &ro) != 0)
        die("relay_open: %s", acemq_relay_errmsg(NULL));
    double t0 = mono_now();
    pthread_t th;
    if (pthread_create(&th, NULL, relay_main, &t) != 0) die("pthread_create failed");
    acemq_relay_stats s;
    for (;;) {
        acemq_relay_stats_get(t.r, &s);
        if ((long)s.published >= n || s.failed || s.unknown) break;
        /* Every 2 ms: at most 0.1% on a run of 2 s. Polling every 0.2 ms
         * cost 4.5% of a CPU in wake-ups, taken from the relay and the
         * broker, which the raw peer's run did not pay. */
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    double elapsed = mono_now() - t0;
    acemq_relay_stop(t.r);
    pthread_join(th, NULL);
    if ((long)s.published != n)
        die("relay published %llu of %ld (failed %llu, unknown %llu)",
            (unsigned long long)s.published, n, (unsigned long long)s.failed,
            (unsigned long long)s.unknown);
    acemq_relay_free(t.r);
    acemq_broker_close(b);
    return (double)n / elapsed;
}

/* Writes `n` records at `rate` per second, each in its own committed
 * transaction, while a relay runs; then reads published_at - created_at of
 * each (both the database's clock on PostgreSQL, the machine's on SQLite).
 * `consumed`: a consumer takes the messages as they come in, for the relay
 * and the broker-alone peer alike (see bench_backend). */
static void latency_case(const config *cfg, FILE *out, const char *name, int pg,
                         const char *outbox_url, sqlite3 *db, PGconn *conn, int consumed)
{
    long n = cfg->quick ? 1000 : 5000;
    const int rate = 1000;
    raw_latency raw = {0};
    fresh_queue(cfg);
    bench_consumer *consumer = start_consumer(cfg, consumed);
    raw_confirm_latency(cfg->amqp_url, n, rate, &raw);
    finish_consumer(consumer, n, "RabbitMQ alone");
    fresh_queue(cfg);
    consumer = start_consumer(cfg, consumed);
    exec_sql(pg, db, conn, pg ? "TRUNCATE acemq_outbox" : "DELETE FROM acemq_outbox");
    acemq_outbox *ob = NULL;
    acemq_broker *b = NULL;
    if (acemq_broker_open(&b, cfg->amqp_url, NULL) != 0)
        die("broker: %s", acemq_broker_errmsg(NULL));
    acemq_relay_options ro;
    acemq_relay_options_init(&ro);
    /* PostgreSQL wakes on NOTIFY: the poll is only a fallback. SQLite polls
     * data_version every 5 ms inside the wait. */
    ro.poll_ms = pg ? 1000 : 5;
    relay_thread t = {.stop = 0};
    /* As `acemq relay` runs it (opened on the URL: claims, marks and gauges
     * on threads of their own), unless --latency-inline: one handle. */
    if (cfg->latency_inline) {
        ob = open_relay_outbox(cfg, outbox_url);
        if (acemq_relay_new(&t.r, ob, b, &ro) != 0) die("relay_new: %s", acemq_relay_errmsg(NULL));
    } else {
        acemq_outbox_options oo = relay_outbox_options(cfg);
        if (acemq_relay_open(&t.r, outbox_url, &oo, b, &ro) != 0)
            die("relay_open: %s", acemq_relay_errmsg(NULL));
    }
    pthread_t th;
    if (pthread_create(&th, NULL, relay_main, &t) != 0) die("pthread_create failed");
    static char body[BODY_LEN];
    memset(body, 'x', sizeof body);
    /* The writer is the application: how long its transactions take while
     * the relay claims and marks beside it, SQLite's lock shared. */
    double *txn_ms = malloc((size_t)n * sizeof *txn_ms);
    if (!txn_ms) die("out of memory");
    if (!pg && cfg->writer_busy_wait && acemq_sqlite_busy_wait(db, 10000) != 0)
        die("acemq_sqlite_busy_wait failed");
    double start = mono_now();
    for (long i = 0; i < n; i++) {
        double due = start + (double)i / rate;
        double wait = due - mono_now();
        if (wait > 0) {
            struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            nanosleep(&ts, NULL);
        }
        char id[32];
        snprintf(id, sizeof id, "lat-%08ld", i);
        acemq_outbox_record rec = {
            .id = id, .destination = "", .routing_key = QUEUE, .body = body, .body_len = BODY_LEN};
        double t0 = mono_now();
        exec_sql(pg, db, conn, "BEGIN");
        int rc = pg ? acemq_outbox_add_pg(conn, &rec, NULL, NULL)
                    : acemq_outbox_add_sqlite(db, &rec, NULL, NULL);
        if (rc != 0) die("add: %s", acemq_outbox_errmsg(NULL));
        exec_sql(pg, db, conn, "COMMIT");
        txn_ms[i] = (mono_now() - t0) * 1000;
    }
    double wrote = mono_now() - start;
    if (!pg && cfg->writer_busy_wait && sqlite3_busy_timeout(db, 10000) != SQLITE_OK)
        die("sqlite3_busy_timeout failed"); /* as the other cases have it */
    /* A handle of its own: the relay's belongs to the relay's thread. */
    acemq_outbox *watch = NULL;
    if (acemq_outbox_open(&watch, outbox_url, NULL) != 0)
        die("outbox: %s", acemq_outbox_errmsg(NULL));
    for (int k = 0; k < 3000; k++) { /* until the relay has it all */
        acemq_outbox_pending p;
        if (acemq_outbox_pending_count(watch, &p) != 0)
            die("pending: %s", acemq_outbox_errmsg(watch));
        if (p.unclaimed + p.claimed == 0) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    acemq_outbox_close(watch);
    acemq_relay_stop(t.r);
    pthread_join(th, NULL);
    finish_consumer(consumer, n, "the relay");
    long *lat = malloc((size_t)n * sizeof *lat);
    if (!lat) die("out of memory");
    long got = 0;
    const char *q = "SELECT published_at - created_at FROM acemq_outbox WHERE state = 1";
    if (pg) {
        PGresult *r = PQexec(conn, q);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) die("postgres: %s", PQresultErrorMessage(r));
        for (int i = 0; i < PQntuples(r) && got < n; i++)
            lat[got++] = strtol(PQgetvalue(r, i, 0), NULL, 10);
        PQclear(r);
    } else {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, q, -1, &st, NULL) != SQLITE_OK) die("sqlite: prepare");
        while (sqlite3_step(st) == SQLITE_ROW && got < n)
            lat[got++] = (long)sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    if (got != n) die("latency: %ld of %ld records published", got, n);
    qsort(lat, (size_t)n, sizeof *lat, cmp_long);
    long p50 = lat[n / 2], p99 = lat[(n * 99) / 100];
    /* The target is PostgreSQL's, judged with the queue consumed; SQLite's
     * figures, and the unconsumed queue's, are for reading. */
    int target = pg && consumed;
    printf("%-42s %ld records at %.0f/s: p50 %ld ms, p99 %ld ms, max %ld ms  %s\n", name, n,
           (double)n / wrote, p50, p99, lat[n - 1],
           target ? (p99 <= 10 ? "(target p99 <= 10 ms: yes)" : "(target p99 <= 10 ms: NO)")
           : pg && !consumed ? "(queue not consumed: for reading, no target)"
                             : "");
    printf("%-42s RabbitMQ alone, one persistent message then its confirm, same rate: p50 %.1f ms,"
           " p99 %.1f ms; from each one's due time, as the relay's from commit: p50 %.1f ms,"
           " p99 %.1f ms\n",
           "", raw.p50, raw.p99, raw.due_p50, raw.due_p99);
    double txn_max = 0;
    for (long i = 0; i < n; i++)
        txn_max = txn_ms[i] > txn_max ? txn_ms[i] : txn_max;
    double txn50, txn99;
    p50_p99(txn_ms, n, &txn50, &txn99);
    printf("%-42s the writer's transactions (BEGIN, add, COMMIT), %s: p50 %.2f ms, p99 %.2f ms,"
           " max %.1f ms\n",
           "",
           pg                      ? "PostgreSQL"
           : cfg->writer_busy_wait ? "acemq_sqlite_busy_wait"
                                   : "sqlite3_busy_timeout",
           txn50, txn99, txn_max);
    free(txn_ms);
    fprintf(out,
            "{\"bench\":\"relay\",\"case\":\"%s\",\"value\":%ld,\"unit\":\"ms p99\",\"p50_ms\":%ld,"
            "\"peer\":\"raw rabbitmq-c confirm latency p99 (ms), same rate\",\"peer_value\":%.1f,"
            "\"peer_due_p99_ms\":%.1f,\"ratio\":null,"
            "\"target\":\"%s\",\"target_met\":%s,\"consumer\":%s}\n",
            name, p99, p50, raw.p99, raw.due_p99, target ? "p99 <= 10 ms" : "-",
            target ? (p99 <= 10 ? "true" : "false") : "null", consumed ? "true" : "false");
    free(lat);
    acemq_relay_free(t.r);
    acemq_broker_close(b);
    acemq_outbox_close(ob);
}

/* ------------------------------------------------------------ pinning */

/* Why the last pin_* or pid_from failed. */
static char pin_error[512];

/* Sets the CPUs of every thread of pid; -1 with pin_error set on failure. */
static int pin_threads(pid_t pid, const cpu_set_t *set)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) {
        snprintf(pin_error, sizeof pin_error, "%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        pid_t tid = (pid_t)strtol(e->d_name, NULL, 10);
        /* A thread that ended since the listing is no matter. */
        if (sched_setaffinity(tid, sizeof *set, set) != 0 && errno != ESRCH) {
            snprintf(pin_error, sizeof pin_error, "sched_setaffinity(%d): %s", (int)tid,
                     strerror(errno));
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

/* pid and every process whose parent it is (a postmaster's server
 * processes; the backends it forks later inherit its CPUs). */
static int pin_tree(pid_t pid, const cpu_set_t *set)
{
    if (pin_threads(pid, set) != 0) return -1;
    DIR *d = opendir("/proc");
    if (!d) {
        snprintf(pin_error, sizeof pin_error, "/proc: %s", strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        char path[300], line[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* gone since the listing */
        int ppid = -1;
        if (fgets(line, sizeof line, f)) {
            const char *rp = strrchr(line, ')'); /* the name may hold spaces */
            if (!rp || sscanf(rp + 1, " %*c %d", &ppid) != 1) ppid = -1;
        }
        fclose(f);
        if (ppid == (int)pid) rc = pin_threads((pid_t)strtol(e->d_name, NULL, 10), set);
    }
    closedir(d);
    return rc;
}

/* The pid in the file env names; -1 with pin_error set when there is none. */
static pid_t pid_from(const char *env, const char *what)
{
    const char *path = getenv(env);
    if (!path || !*path) {
        snprintf(pin_error, sizeof pin_error, "%s is not set (scripts/services.sh env)", env);
        return -1;
    }
    FILE *f = fopen(path, "r");
    long pid = 0;
    int ok = f && fscanf(f, "%ld", &pid) == 1 && pid > 0;
    if (f) fclose(f);
    if (!ok) {
        snprintf(pin_error, sizeof pin_error, "no %s pid in %s", what, path);
        return -1;
    }
    return (pid_t)pid;
}

static int pin_server(const char *env, const char *what, const cpu_set_t *set)
{
    pid_t pid = pid_from(env, what);
    return pid > 0 ? pin_tree(pid, set) : -1;
}

/* --broker-cpu N: the broker's node alone on CPU N, as on a host of its own;
 * PostgreSQL and this process (relay and raw peer alike) on the other CPUs.
 * The two sides then no longer take CPU from each other, which on a
 * machine of two vCPUs is where a relay's database costs it throughput
 * (docs/performance.md, bench_relay, "Fifth round"). all = NULL pins, and
 * a failure stops the bench; all = the CPUs everything had puts them back,
 * as far as it can, saying what it could not (it runs at exit, where
 * stopping again is not allowed). */
static void place_processes(const config *cfg, const cpu_set_t *all)
{
    cpu_set_t broker, rest;
    if (all) {
        broker = *all;
        rest = *all;
    } else {
        cpu_set_t mine;
        if (sched_getaffinity(0, sizeof mine, &mine) != 0) die("sched_getaffinity failed");
        if (!CPU_ISSET(cfg->broker_cpu, &mine) || CPU_COUNT(&mine) < 2)
            die("--broker-cpu %d: not one of at least two CPUs this process may use",
                cfg->broker_cpu);
        CPU_ZERO(&broker);
        CPU_SET(cfg->broker_cpu, &broker);
        rest = mine;
        CPU_CLR(cfg->broker_cpu, &rest);
    }
    int failed = pin_server("ACEMQ_RABBITMQ_PIDFILE", "RabbitMQ", &broker) != 0;
    if (!failed && cfg->pg_url && *cfg->pg_url)
        failed = pin_server("ACEMQ_PG_PIDFILE", "PostgreSQL", &rest) != 0;
    if (!failed) failed = pin_threads(getpid(), &rest) != 0;
    if (failed && !all) die("--broker-cpu: %s", pin_error);
    if (failed) fprintf(stderr, "%s: putting the CPUs back: %s\n", bench_name, pin_error);
}

/* What --broker-cpu changed, put back at exit, however the bench ends: the
 * servers outlive it. */
static config pinned_copy; /* main's own config is gone by exit time */
static const config *pinned_cfg;
static cpu_set_t pinned_from;

static void unpin_at_exit(void)
{
    const config *cfg = pinned_cfg;
    pinned_cfg = NULL; /* once */
    if (cfg) place_processes(cfg, &pinned_from);
}

/* ------------------------------------------------------------ cases */

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
    char throughput_name[96], keyed_name[96], latency_name[96], unconsumed_name[112];
    snprintf(throughput_name, sizeof throughput_name, "throughput/%s%s", pg ? "postgres" : "sqlite",
             suffix);
    snprintf(keyed_name, sizeof keyed_name, "keyed/%s%s", pg ? "postgres" : "sqlite", suffix);
    snprintf(latency_name, sizeof latency_name, "%s%s",
             pg ? "latency/postgres-notify" : "latency/sqlite-poll", suffix);
    snprintf(unconsumed_name, sizeof unconsumed_name, "%s/unconsumed", latency_name);
    if (!bench_wanted(cfg->filter, throughput_name) && !bench_wanted(cfg->filter, latency_name) &&
        !bench_wanted(cfg->filter, unconsumed_name) &&
        (cfg->control || !bench_wanted(cfg->filter, keyed_name)))
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
        if (sched_getaffinity(0, sizeof pinned_from, &pinned_from) != 0)
            die("sched_getaffinity failed");
        pinned_copy = cfg;
        pinned_cfg = &pinned_copy;
        if (atexit(unpin_at_exit) != 0) die("atexit failed");
        place_processes(&cfg, NULL);
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
