/* bench_relay_run.c — the relay run as `acemq relay` runs it, timed until the
 * last record is published, and the latency case: records written at a
 * steady rate, commit to confirm, beside RabbitMQ alone at that rate. */
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acemq/postgres.h"
#include "acemq/relay.h"
#include "acemq/sqlite.h"
#include "bench_common.h"
#include "bench_consumer.h"
#include "bench_relay.h"

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
double run_relay(const config *cfg, const char *outbox_url, long n, int poll_ms)
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
void latency_case(const config *cfg, FILE *out, const char *name, int pg, const char *outbox_url,
                  sqlite3 *db, PGconn *conn, int consumed)
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
