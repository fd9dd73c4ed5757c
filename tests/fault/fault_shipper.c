/* fault_shipper.c — the fault suite's consumer: libacemq's idempotent
 * consumer with the inbox, shipping each order at most once however often
 * its message comes. The effect (a row in fault_effects) and the store's
 * confirm commit in ONE transaction of the shipper's database: SQLite
 * (acemq_idem_open_sqlite) or PostgreSQL (acemq_idem_open_pg on the
 * shipper's own PGconn), with ACEMQ_IDEM_CONFIRM_IN_CALLER_TX, so a kill at
 * any point leaves both or neither. fault_effects has NO unique constraint:
 * an order shipped twice must stay visible to the oracle, not be hidden by
 * the database.
 *
 *   fault_shipper DB_URL BROKER_URL QUEUE NAME [--lease-ms N] [--heartbeat S]
 *                 [--prefetch N] [--crash-after N] [--work-ms N]
 *
 * Every delivery the handler sees is logged in fault_deliveries (its own
 * short transaction, before the effect's): kind 'run' (the handler ran),
 * 'dup' (absorbed as a duplicate), 'bad' (a message whose id, body or
 * x-order header is not what fault_writer wrote: the oracle counts it as
 * unexpected). NAME (letters, digits, '-', '_') is stored with each row.
 *
 * --crash-after N: SIGKILL itself right after its Nth effect committed and
 * before the message is acknowledged. --heartbeat S: the AMQP heartbeat
 * (acemq_broker_options.heartbeat_s; a frozen shipper is dropped by the
 * broker after about twice this). --work-ms N: the handler works N ms
 * before its transaction (outside the database, as a call to another
 * service would), so that a freeze lands in a handler. SIGTERM or SIGINT: finish the message in
 * hand, give back the rest, exit 0.
 *
 * PostgreSQL restarted under it: the inbox store's statements are prepared
 * on the shipper's connection and die with its session, so a lost
 * connection stops the consumer (what it holds goes back to the queue),
 * connects again and consumes again with a new inbox store.
 */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <acemq/consumer.h>

#include "fault_db.h"

#define RECONNECT_MS 180000

typedef struct shipper {
    fault_db db;
    const char *name;
    long crash_after, effects, work_ms;
    volatile sig_atomic_t db_lost;
} shipper;

static volatile sig_atomic_t stop; /* a signal asked us to end */
static volatile sig_atomic_t halt; /* run must return: stop, or the database lost */

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
    halt = 1;
}

/* The order's number from its key, "fault-order-N"; -1 if it is not one. */
static long order_of(const acemq_consumer_msg *m)
{
    long n = -1;
    int end = 0;
    if (m->key_len >= 40 || sscanf(m->key, "fault-order-%ld%n", &n, &end) != 1 ||
        (size_t)end != m->key_len || n <= 0)
        return -1;
    return n;
}

/* Whether the body and the x-order header are the writer's for order n. */
static int as_written(const acemq_delivery *d, long n)
{
    char want[96];
    int len = snprintf(want, sizeof want, "{\"order\":%ld,\"cents\":%ld}", n, 100 + n % 900);
    if ((size_t)len != d->body_len || memcmp(d->body, want, d->body_len) != 0) return 0;
    if (!d->headers_json) return n % 2 != 0;
    json_t *h = json_loads(d->headers_json, 0, NULL);
    const char *v = json_string_value(json_object_get(h, "x-order"));
    int ok = n % 2 == 0 ? v && atol(v) == n : v == NULL;
    json_decref(h);
    return ok;
}

/* The database went away under a call: stop consuming so that main can
 * connect again (see the header). */
static void check_lost(shipper *s)
{
    if (fault_db_lost(&s->db)) {
        s->db_lost = 1;
        halt = 1;
    }
}

static int note(shipper *s, long order, const char *kind, int redelivered)
{
    char sql[200];
    (void)snprintf(sql, sizeof sql,
                   "INSERT INTO fault_deliveries(order_id, shipper, kind, redelivered) "
                   "VALUES(%ld, '%s', '%s', %d)",
                   order, s->name, kind, redelivered);
    int rc = fault_db_exec(&s->db, sql);
    if (rc != FAULT_OK) {
        fprintf(stderr, "fault_shipper: %s\n", fault_db_errmsg(&s->db));
        check_lost(s);
    }
    return rc;
}

static void on_duplicate(void *ctx, const acemq_consumer_msg *m, const void *result, size_t len)
{
    (void)result;
    (void)len;
    /* A lost note costs a figure in the counts, never a verdict: the
     * oracle judges by effects. */
    (void)note(ctx, order_of(m), "dup", m->delivery->redelivered);
}

static int failed(shipper *s, acemq_consumer *c, const char *why)
{
    fault_db_rollback(&s->db);
    acemq_consumer_fail(c, why);
    check_lost(s);
    return 1;
}

/* The effect and the confirm in one transaction: both or neither. */
static int ship(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    shipper *s = ctx;
    long order = order_of(m);
    int ok = order > 0 && as_written(m->delivery, order);
    if (note(s, order, ok ? "run" : "bad", m->delivery->redelivered) != FAULT_OK)
        return failed(s, c, fault_db_errmsg(&s->db));
    if (!ok) return failed(s, c, "not a message fault_writer wrote");
    if (s->work_ms > 0) {
        struct timespec t = {s->work_ms / 1000, (s->work_ms % 1000) * 1000000L};
        (void)nanosleep(&t, NULL);
    }
    char sql[160];
    (void)snprintf(sql, sizeof sql,
                   "INSERT INTO fault_effects(order_id, shipper, pid) VALUES(%ld, '%s', %ld)",
                   order, s->name, (long)getpid());
    if (fault_db_begin(&s->db) != FAULT_OK || fault_db_exec(&s->db, sql) != FAULT_OK)
        return failed(s, c, fault_db_errmsg(&s->db));
    /* ACEMQ_ESTALE: another shipper took the message over; ours must not
     * stand. */
    int rc = acemq_consumer_confirm(c, m, NULL, 0);
    if (rc != 0) return failed(s, c, acemq_strerror(rc));
    /* A COMMIT whose answer was lost may have committed: the claim is then
     * confirmed and the redelivery a duplicate; if not, it runs again. */
    if (fault_db_exec(&s->db, "COMMIT") != FAULT_OK) return failed(s, c, fault_db_errmsg(&s->db));
    if (s->crash_after > 0 && ++s->effects == s->crash_after) {
        fprintf(stderr, "fault_shipper: %s: order %ld shipped, not yet acknowledged: SIGKILL\n",
                s->name, order);
        (void)raise(SIGKILL);
    }
    return 0;
}

typedef struct settings {
    const char *db_url, *broker_url, *queue;
    long lease_ms, heartbeat_s, prefetch;
} settings;

/* One consumer on a new inbox store until halt: 0 when stopped or the
 * database was lost, -1 when it cannot consume at all. */
static int consume(shipper *s, acemq_idem *store, const settings *st)
{
    acemq_idem *inbox = NULL;
    if (fault_db_idem_open(&s->db, &inbox, ACEMQ_IDEM_CONFIRM_IN_CALLER_TX) != 0) {
        fprintf(stderr, "fault_shipper: %s\n", fault_db_errmsg(&s->db));
        check_lost(s);
        return s->db_lost ? 0 : -1;
    }
    acemq_broker_options bo;
    acemq_broker_options_init(&bo);
    if (st->heartbeat_s > 0) bo.heartbeat_s = (int)st->heartbeat_s;
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    o.handler = ship;
    o.on_duplicate = on_duplicate;
    o.ctx = s;
    o.inbox = inbox;
    o.broker = &bo;
    o.log = stderr;
    o.lease_ms = st->lease_ms;
    if (st->prefetch > 0) o.prefetch = (int)st->prefetch;
    /* Failures here are the infrastructure's (a lost or busy database),
     * not the message's: it is retried, soon, until it goes through. A dead
     * letter would be a lost order, which is what the suite looks for. */
    o.max_attempts = 1000;
    o.retry_delay_ms = 200;
    o.retry_delay_max_ms = 2000;
    acemq_consumer *c = NULL;
    int status = 0;
    if (acemq_consumer_open(&c, st->broker_url, st->queue, store, &o) != 0) {
        fprintf(stderr, "fault_shipper: %s\n", acemq_consumer_errmsg(NULL));
        status = -1;
    } else if (acemq_consumer_run(c, &halt) != 0) {
        fprintf(stderr, "fault_shipper: %s\n", acemq_consumer_errmsg(c));
        status = -1;
    }
    acemq_consumer_close(c);
    acemq_idem_close(inbox);
    return status;
}

static int usage(const char *self)
{
    fprintf(stderr,
            "usage: %s DB_URL BROKER_URL QUEUE NAME [--lease-ms N] [--heartbeat S]\n"
            "       [--prefetch N] [--crash-after N] [--work-ms N]\n",
            self);
    return 2;
}

static int parse(int argc, char **argv, settings *st, shipper *s)
{
    static const struct option longs[] = {
        {"lease-ms", required_argument, NULL, 'l'}, {"heartbeat", required_argument, NULL, 'h'},
        {"prefetch", required_argument, NULL, 'p'}, {"crash-after", required_argument, NULL, 'c'},
        {"work-ms", required_argument, NULL, 'w'},  {NULL, 0, NULL, 0}};
    *st = (settings){.lease_ms = 3000};
    for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
        if (c == 'l')
            st->lease_ms = atol(optarg);
        else if (c == 'h')
            st->heartbeat_s = atol(optarg);
        else if (c == 'p')
            st->prefetch = atol(optarg);
        else if (c == 'c')
            s->crash_after = atol(optarg);
        else if (c == 'w')
            s->work_ms = atol(optarg);
        else
            return -1;
    }
    if (argc - optind != 4) return -1;
    st->db_url = argv[optind];
    st->broker_url = argv[optind + 1];
    st->queue = argv[optind + 2];
    s->name = argv[optind + 3];
    if (!*s->name || strlen(s->name) > 32 ||
        strspn(s->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") !=
            strlen(s->name))
        return -1;
    return st->lease_ms > 0 && st->heartbeat_s >= 0 && st->prefetch >= 0 && s->crash_after >= 0 &&
                   s->work_ms >= 0 && s->work_ms <= 60000
               ? 0
               : -1;
}

int main(int argc, char **argv)
{
    static shipper s;
    settings st;
    if (parse(argc, argv, &st, &s) != 0) return usage(argv[0]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) return 1;

    if (fault_db_open(&s.db, st.db_url) != 0 ||
        fault_db_exec(&s.db, "CREATE TABLE IF NOT EXISTS fault_effects(order_id BIGINT NOT NULL, "
                             "shipper TEXT NOT NULL, pid INTEGER NOT NULL);"
                             "CREATE TABLE IF NOT EXISTS fault_deliveries(order_id BIGINT, "
                             "shipper TEXT, kind TEXT, redelivered INTEGER)") != FAULT_OK) {
        /* Two shippers making the tables at once on PostgreSQL: the loser
         * of the race is refused; the tables exist then. */
        if (!s.db.pg || fault_db_exec(&s.db, "SELECT 1 FROM fault_effects, fault_deliveries "
                                             "LIMIT 1") != FAULT_OK) {
            fprintf(stderr, "fault_shipper: %s\n", fault_db_errmsg(&s.db));
            fault_db_close(&s.db);
            return 1;
        }
    }
    /* The consumer's own store (claims, renewals, releases) on its own
     * connection; the inbox is the same store on the shipper's. */
    acemq_idem *store = NULL;
    if (acemq_idem_open(&store, st.db_url, NULL) != 0) {
        fprintf(stderr, "fault_shipper: store: %s\n", acemq_idem_errmsg(NULL));
        fault_db_close(&s.db);
        return 1;
    }
    int status = 0;
    while (!stop) {
        if (consume(&s, store, &st) != 0) {
            status = 1;
            break;
        }
        if (stop || !s.db_lost) break;
        fprintf(stderr, "fault_shipper: %s: database connection lost; connecting again\n", s.name);
        if (fault_db_reconnect(&s.db, RECONNECT_MS) != 0) {
            fprintf(stderr, "fault_shipper: %s\n", fault_db_errmsg(&s.db));
            status = 1;
            break;
        }
        s.db_lost = 0;
        halt = stop;
    }
    acemq_idem_close(store);
    fault_db_close(&s.db);
    return status;
}
