/* bench_relay.h — what the parts of bench_relay share: the run's options (one
 * config, filled by main from the command line), the queue and the records'
 * size, and each part's entry points. */
#ifndef ACEMQ_BENCH_RELAY_H
#define ACEMQ_BENCH_RELAY_H

#include <stdio.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include "acemq/outbox.h"
#include "bench_amqp.h"
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

/* ---- bench_relay_mq.c: rabbitmq-c */

/* The queue every case publishes to, made anew (deleted and declared) so that
 * no case inherits another's messages or index: durable, of the kind
 * --queue names. Both the relay and its peers publish to it. */
void fresh_queue(const config *cfg);
/* The peer: what a careful person writes with rabbitmq-c to publish n
 * persistent, mandatory messages with confirms, `window` in flight. */
double raw_publish(const char *url, long n, int window);
/* p50 and p99 of v's n values; sorts v (median does). */
void p50_p99(double *v, long n, double *p50, double *p99);

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
void raw_confirm_latency(const char *url, long n, int rate, raw_latency *out);
/* A turn's consumer on the queue fresh_queue just made when `on`; NULL
 * otherwise. */
bench_consumer *start_consumer(const config *cfg, int on);
/* Ends a turn's consumer: every one of the turn's n messages must have
 * reached it. More is possible (at least once), and said. */
void finish_consumer(bench_consumer *k, long n, const char *turn);

/* ---- bench_relay_outbox.c: outboxes */

/* The outbox options the relay's handles are opened with, and a relay-side
 * handle opened with them, as acemq relay opens its three. */
acemq_outbox_options relay_outbox_options(const config *cfg);
acemq_outbox *open_relay_outbox(const config *cfg, const char *url);
/* sql on the caller's connection (db, or conn when pg); dies on failure. */
void exec_sql(int pg, sqlite3 *db, PGconn *conn, const char *sql);
/* A backlog of n records; with keys > 0 each carries one of that many
 * ordering keys, UUID-shaped customer ids drawn at random per record, as a
 * burst of orders from many customers arrives. */
void refill_keyed(int pg, sqlite3 *db, PGconn *conn, long n, int keys);
/* A backlog of n records without ordering keys. */
void refill(int pg, sqlite3 *db, PGconn *conn, long n);

/* ---- bench_relay_run.c: the relay */

/* The relay as `acemq relay` runs it: opened on the outbox's URL, run()
 * on a thread; timed from the start until the last record is marked
 * published. */
double run_relay(const config *cfg, const char *outbox_url, long n, int poll_ms);
/* Writes `n` records at `rate` per second, each in its own committed
 * transaction, while a relay runs; then reads published_at - created_at of
 * each (both the database's clock on PostgreSQL, the machine's on SQLite).
 * `consumed`: a consumer takes the messages as they come in, for the relay
 * and the broker-alone peer alike (see bench_backend). */
void latency_case(const config *cfg, FILE *out, const char *name, int pg, const char *outbox_url,
                  sqlite3 *db, PGconn *conn, int consumed);

/* ---- bench_relay_pipeline.c: outbox to consumer */

/* The whole pipeline, exactly once: a backlog of the outbox's records
 * through the relay, RabbitMQ and acemq's idempotent consumer on a SQLite
 * store, beside a raw rabbitmq-c publisher feeding a raw consumer that
 * acknowledges each message, at least once; messages per second from the
 * start until the consumer has the last one, turn about. */
void pipeline_case(const config *cfg, FILE *out, const char *name, const char *outbox_url,
                   sqlite3 *db);

/* ---- bench_relay_pin.c: --broker-cpu */

/* The broker alone on cfg->broker_cpu, everything else on the other CPUs;
 * put back by unpin_at_exit, which atexit runs too. */
void pin_broker(const config *cfg);
void unpin_at_exit(void);

#endif
