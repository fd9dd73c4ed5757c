/* fault_writer.c — the fault suite's order service: writes orders into an
 * outbox database, each order's row (fault_orders) and its outbox record in
 * ONE transaction on the writer's own connection, through libacemq
 * (acemq_outbox_add_sqlite / _pg). A share of the orders is rolled back on
 * purpose after both were written, and each such id is then recorded in
 * fault_rolled_back (its own commit), so the oracle can prove that none of
 * them is ever delivered.
 *
 *   fault_writer DB_URL ORDERS ROUTING_KEY [--exchange EX] [--first N]
 *                [--rollback-share K] [--seed S] [--per-second R]
 *
 * DB_URL: sqlite:PATH or postgres://... Order n's message id is
 * "fault-order-n", its body {"order":n,"cents":...}; as users send, every
 * third record carries an ordering key (one of seven customers) and every
 * second one headers (x-order, its number, and a tenant) that the shipper
 * checks. Orders first..first+ORDERS-1 are written; which of them roll
 * back (about one in K, default 10; 0: none) follows from the seed (default:
 * time and pid; printed), never from a pattern the pipeline could rely on.
 * --per-second paces the writes so that a run's faults land while it writes.
 *
 * PostgreSQL restarted under it: a lost connection is made again and the
 * order written again. A COMMIT whose answer was lost may have committed;
 * the retry then finds the order's row (a duplicate key) and knows it did.
 * Exit 0 once every order was written or rolled back and recorded.
 */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fault_db.h"

#define RECONNECT_MS 180000 /* a restarted server comes back well within this */

typedef struct opts {
    const char *url, *exchange, *routing_key;
    long first, orders, share, per_second;
    uint64_t seed;
} opts;

static uint64_t mix(uint64_t x) /* splitmix64's finaliser */
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int declined(const opts *o, long n)
{
    return o->share > 0 && mix(o->seed ^ (uint64_t)n) % (uint64_t)o->share == 0;
}

/* One try at order n: FAULT_OK (committed or rolled back as meant),
 * FAULT_DUP (its row exists: an earlier try committed), FAULT_LOST, FAULT_ERR. */
static int try_order(fault_db *d, const opts *o, long n, int decline)
{
    char id[64], key[32], num[24], tenant[16], body[96], sql[160];
    long cents = 100 + n % 900;
    (void)snprintf(id, sizeof id, "fault-order-%ld", n);
    (void)snprintf(key, sizeof key, "customer-%ld", n % 7);
    (void)snprintf(num, sizeof num, "%ld", n);
    (void)snprintf(tenant, sizeof tenant, "t-%ld", n % 5);
    (void)snprintf(body, sizeof body, "{\"order\":%ld,\"cents\":%ld}", n, cents);
    (void)snprintf(sql, sizeof sql, "INSERT INTO fault_orders(id, cents) VALUES(%ld, %ld)", n,
                   cents);
    acemq_outbox_header h[2] = {{"x-order", num}, {"tenant", tenant}};
    acemq_outbox_record r = {.id = id,
                             .destination = o->exchange,
                             .routing_key = o->routing_key,
                             .ordering_key = n % 3 == 0 ? key : NULL,
                             .headers = n % 2 == 0 ? h : NULL,
                             .n_headers = n % 2 == 0 ? 2 : 0,
                             .content_type = "application/json",
                             .body = body,
                             .body_len = strlen(body)};
    int rc = fault_db_begin(d);
    if (rc != FAULT_OK) return rc;
    rc = fault_db_exec(d, sql);
    if (rc == FAULT_OK && fault_db_outbox_add(d, &r) != 0)
        rc = fault_db_lost(d) ? FAULT_LOST : FAULT_ERR;
    if (rc != FAULT_OK) {
        fault_db_rollback(d);
        /* A declined order never committed, so its row cannot exist. */
        return rc == FAULT_DUP && decline ? FAULT_ERR : rc;
    }
    /* The payment is declined after the order and its record were written:
     * both go. */
    return fault_db_exec(d, decline ? "ROLLBACK" : "COMMIT");
}

/* Writes order n, again after a lost connection, then records a rollback. */
static int write_order(fault_db *d, const opts *o, long n)
{
    int decline = declined(o, n);
    for (;;) {
        int rc = try_order(d, o, n, decline);
        if (rc == FAULT_OK || rc == FAULT_DUP) break;
        if (rc != FAULT_LOST || fault_db_reconnect(d, RECONNECT_MS) != 0) {
            fprintf(stderr, "fault_writer: order %ld: %s\n", n, fault_db_errmsg(d));
            return -1;
        }
    }
    if (!decline) return 0;
    char sql[120];
    (void)snprintf(sql, sizeof sql,
                   "INSERT INTO fault_rolled_back(id) VALUES(%ld) ON CONFLICT DO NOTHING", n);
    for (;;) {
        int rc = fault_db_exec(d, sql);
        if (rc == FAULT_OK) return 1;
        if (rc != FAULT_LOST || fault_db_reconnect(d, RECONNECT_MS) != 0) {
            fprintf(stderr, "fault_writer: order %ld: %s\n", n, fault_db_errmsg(d));
            return -1;
        }
    }
}

static int64_t mono_ms(void)
{
    struct timespec t;
    (void)clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int usage(const char *self)
{
    fprintf(stderr,
            "usage: %s DB_URL ORDERS ROUTING_KEY [--exchange EX] [--first N]\n"
            "       [--rollback-share K] [--seed S] [--per-second R]\n",
            self);
    return 2;
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option longs[] = {
        {"exchange", required_argument, NULL, 'e'},       {"first", required_argument, NULL, 'f'},
        {"rollback-share", required_argument, NULL, 'k'}, {"seed", required_argument, NULL, 's'},
        {"per-second", required_argument, NULL, 'r'},     {NULL, 0, NULL, 0}};
    *o = (opts){.exchange = "", .first = 1, .share = 10};
    o->seed = mix((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
    for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
        if (c == 'e')
            o->exchange = optarg;
        else if (c == 'f')
            o->first = atol(optarg);
        else if (c == 'k')
            o->share = atol(optarg);
        else if (c == 's')
            o->seed = strtoull(optarg, NULL, 10);
        else if (c == 'r')
            o->per_second = atol(optarg);
        else
            return -1;
    }
    if (argc - optind != 3) return -1;
    o->url = argv[optind];
    o->orders = atol(argv[optind + 1]);
    o->routing_key = argv[optind + 2];
    return o->orders > 0 && o->first > 0 && o->share >= 0 && o->per_second >= 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o) != 0) return usage(argv[0]);
    /* The draining side's open makes the outbox table; the relay opens it
     * the same way later. */
    acemq_outbox *ob = NULL;
    if (acemq_outbox_open(&ob, o.url, NULL) != 0) {
        fprintf(stderr, "fault_writer: outbox: %s\n", acemq_outbox_errmsg(NULL));
        return 1;
    }
    acemq_outbox_close(ob);
    fault_db d;
    if (fault_db_open(&d, o.url) != 0 ||
        fault_db_exec(&d, "CREATE TABLE IF NOT EXISTS fault_orders(id BIGINT PRIMARY KEY, cents "
                          "INTEGER NOT NULL);"
                          "CREATE TABLE IF NOT EXISTS fault_rolled_back(id BIGINT PRIMARY KEY)") !=
            FAULT_OK) {
        fprintf(stderr, "fault_writer: %s\n", fault_db_errmsg(&d));
        fault_db_close(&d);
        return 1;
    }
    fprintf(stderr, "fault_writer: orders %ld..%ld, one in %ld rolled back, seed %llu\n", o.first,
            o.first + o.orders - 1, o.share, (unsigned long long)o.seed);
    int64_t start = mono_ms();
    long rolled_back = 0;
    int status = 0;
    for (long i = 0; i < o.orders; i++) {
        int rc = write_order(&d, &o, o.first + i);
        if (rc < 0) {
            status = 1;
            break;
        }
        rolled_back += rc;
        if (o.per_second > 0) {
            int64_t due = start + (i + 1) * 1000 / o.per_second, now = mono_ms();
            if (due > now) {
                struct timespec t = {(due - now) / 1000, (long)((due - now) % 1000) * 1000000L};
                (void)nanosleep(&t, NULL);
            }
        }
    }
    if (status == 0)
        fprintf(stderr, "fault_writer: done: %ld committed, %ld rolled back\n",
                o.orders - rolled_back, rolled_back);
    fault_db_close(&d);
    return status;
}
