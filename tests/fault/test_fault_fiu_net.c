/* test_fault_fiu_net.c — the library's calls to the real servers while
 * libfiu fails send and recv (and, more rarely, malloc) at random
 * (fiu_faults.h): the relay publishing from an SQLite outbox to RabbitMQ,
 * and the PostgreSQL and Redis idempotency stores.
 *
 * An injected socket failure is a lost connection: fiu_net.c shuts the
 * socket down as the reset it stands for would. Every call under faults
 * answers success or an error a lost connection or a failed malloc may
 * cause, with a message; never crashes or leaks (ASan's build). With the
 * faults off the handles connect again by themselves: the relay's next
 * step, or the one after, publishes its whole batch; a store's next call
 * succeeds. The data agree with the answers: every committed record is in
 * the queue at least once (again when its confirm was lost or its mark
 * failed, once its lease ran out) and nothing else is; a confirmed id is
 * never claimed again (fiu_world.h's model, which knows that a server may
 * have acted on a call whose reply was lost).
 *
 * Needs ACEMQ_AMQP_URL, ACEMQ_PG_URL and ACEMQ_REDIS_URL (scripts/services.sh
 * start all; exits 77 without them). FIU_SEED reproduces a run, FIU_ITERATIONS sizes
 * it.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "acemq/acemq.h"
#include "acemq/relay.h"
#include "acemq/sqlite.h"
#include "conformance/backends.h"
#include "fault/fiu_faults.h"
#include "fault/fiu_net.h"
#include "fault/fiu_world.h"
#include "integration/broker_amqp_fixture.h"

static uint64_t base_seed = 20241205;
static int iterations;

/* ------------------------------------------------------------ the relay */

/* What one step of the relay meets: nothing, sockets failing, or sockets
 * and malloc. A step makes a few socket calls (a dozen more when it
 * connects) and hundreds of allocations (SQLite's, rabbitmq-c's): the
 * socket probabilities fail the first call, a late one (after the broker
 * took a message, so its confirm is lost) or none; the memory ones are
 * lower for the same spread. */
static const struct {
    unsigned kinds;
    double p;
} relay_mix[] = {{0, 0.0},
                 {FIU_NET, 0.01},
                 {FIU_NET, 0.03},
                 {FIU_NET, 0.1},
                 {FIU_NET, 0.3},
                 {FIU_MEM | FIU_NET, 0.001},
                 {FIU_MEM | FIU_NET, 0.005},
                 {FIU_MEM | FIU_NET, 0.02}};

typedef struct relay_counts {
    long calls, ok, eio, enomem, ebackend;
    long recovered_first, recovered_second; /* clean steps that published all after a fault */
} relay_counts;

/* rc, the answer of a step (or of acemq_broker_open) under faults of
 * kinds. The amqp backend answers every failure of a socket call ACEMQ_EIO
 * (connection.c: connect, login, channel.open, confirm.select; broker.c:
 * a lost connection, a confirm timeout), and a failed malloc ACEMQ_ENOMEM;
 * under memory faults the SQLite outbox may also answer ACEMQ_EIO or
 * ACEMQ_EBACKEND for its own failed allocations (test_fault_fiu.c). With
 * sockets failing alone, the error is the broker's, and says so. Anything
 * else (EINVAL, ESTALE, EEXIST, ...) took a lost connection for something
 * it is not. */
static void judge_step(relay_counts *c, unsigned kinds, const char *call, int i, int rc,
                       const char *msg)
{
    c->calls++;
    int mem = (kinds & FIU_MEM) != 0;
    if (rc == 0) {
        c->ok++;
        return;
    }
    if (!msg || !*msg) {
        fail_msg("step %d: %s answered %s with no message", i, call, acemq_err_name(rc));
        return;
    }
    if (rc == ACEMQ_EIO && (mem || strstr(msg, "amqp"))) {
        c->eio++;
        return;
    }
    if (rc == ACEMQ_ENOMEM && mem) {
        c->enomem++;
        return;
    }
    if (rc == ACEMQ_EBACKEND && mem) {
        c->ebackend++;
        return;
    }
    fail_msg("step %d: %s answered %s ('%s') under %s faults: not what a lost connection%s "
             "causes",
             i, call, acemq_err_name(rc), msg, mem ? "socket and memory" : "socket",
             mem ? " or a failed malloc" : "");
}

/* Order i's record, to exchange ex with routing key "k" (bound_route's). */
static void add_record(fiu_world *w, const char *ex, int i)
{
    char id[32];
    world_record_id(id, sizeof id, i);
    acemq_outbox_record r = {
        .id = id, .destination = ex, .routing_key = "k", .body = "x", .body_len = 1};
    if (sqlite3_exec(w->caller, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        fail_msg("BEGIN: %s", sqlite3_errmsg(w->caller));
    if (acemq_outbox_add_sqlite(w->caller, &r, NULL, NULL) != 0)
        fail_msg("add %s: %s", id, acemq_outbox_errmsg(NULL));
    if (sqlite3_exec(w->caller, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        fail_msg("COMMIT: %s", sqlite3_errmsg(w->caller));
}

/* What the last clean_step did, for a failure's message. */
static char last_step[256];

/* A step with the faults off that publishes everything it claimed: 0 and
 * the broker's confirm for each, none unknown, none released. */
static int clean_step(acemq_relay *r, int *rc_out)
{
    acemq_relay_stats before, after;
    acemq_relay_stats_get(r, &before);
    size_t claimed = 0;
    int rc = acemq_relay_step(r, &claimed);
    acemq_relay_stats_get(r, &after);
    *rc_out = rc;
    /* A message cut short is still a message. */
    (void)snprintf(last_step, sizeof last_step,
                   "%s, %zu claimed, %llu published, %llu failed, %llu returned, %llu nacked, %llu "
                   "unknown, %llu released%s%s",
                   acemq_err_name(rc), claimed,
                   (unsigned long long)(after.published - before.published),
                   (unsigned long long)(after.failed - before.failed),
                   (unsigned long long)(after.returned - before.returned),
                   (unsigned long long)(after.nacked - before.nacked),
                   (unsigned long long)(after.unknown - before.unknown),
                   (unsigned long long)(after.released - before.released), rc ? ": " : "",
                   rc ? acemq_relay_errmsg(r) : "");
    return rc == 0 && after.unknown == before.unknown && after.released == before.released &&
           after.published - before.published == claimed;
}

/* After a step under faults: the handle recovers by itself, the next step
 * or the one after publishing its whole batch (the first may still find
 * the connection dead, drop it and answer its records unknown). */
static void expect_recovery(acemq_relay *r, relay_counts *c, int i)
{
    int rc = 0;
    if (clean_step(r, &rc)) {
        c->recovered_first++;
        return;
    }
    if (rc != 0 && rc != ACEMQ_EIO)
        fail_msg("step %d: the first step after the faults: %s", i, last_step);
    char first_step[sizeof last_step];
    memcpy(first_step, last_step, sizeof first_step);
    if (!clean_step(r, &rc))
        fail_msg("step %d: two steps after the faults the broker still fails: first %s; second %s",
                 i, first_step, last_step);
    c->recovered_second++;
}

/* Every message in q (faults off) is one of records 0..n-1, and each of
 * those is there (world_tally); returns how many copies were extra. */
static long expect_queue_holds(const char *q, int n)
{
    world_tally t;
    world_tally_start(&t, n);
    amqp_message_t m;
    while (get_one(q, &m)) {
        amqp_bytes_t mid = m.properties.message_id;
        int bad = world_tally_add(&t, mid.bytes, mid.len);
        amqp_destroy_message(&m);
        if (bad) break;
    }
    return world_tally_end(&t, "relay amqp");
}

/* acemq_broker_open under faults: clean, and nothing left behind. */
static void open_under_faults(relay_counts *c, const acemq_broker_options *bo)
{
    for (int i = 0; i < 20; i++) {
        unsigned kinds = i % 2 ? FIU_NET : FIU_MEM | FIU_NET;
        acemq_broker *b = NULL;
        fiu_faults_on(kinds, kinds & FIU_MEM ? 0.01 : 0.1);
        int rc = acemq_broker_open(&b, broker_url, bo);
        fiu_faults_off();
        judge_step(c, kinds, "acemq_broker_open", i, rc, acemq_broker_errmsg(NULL));
        if (rc != 0 && b) fail_msg("acemq_broker_open failed and left a handle");
        acemq_broker_close(b);
    }
}

/* Faults off: leases run out on the world's clock, so what lost its
 * confirm goes out again, until nothing waits. */
static void drain(fiu_world *w, acemq_relay *r, acemq_outbox *ob)
{
    acemq_outbox_pending p = {0};
    for (int round = 0; round < 1000; round++) {
        acemq_manual_clock_advance(w->clock, 600000);
        int rc = 0;
        if (!clean_step(r, &rc)) fail_msg("drain: %s", last_step);
        assert_int_equal(acemq_outbox_pending_count(ob, &p), 0);
        if (p.unclaimed + p.claimed + p.dead == 0) return;
    }
    fail_msg("the relay never drained: %llu unclaimed, %llu claimed, %llu dead",
             (unsigned long long)p.unclaimed, (unsigned long long)p.claimed,
             (unsigned long long)p.dead);
}

/* The relay to RabbitMQ under socket (and memory) faults: each step
 * answers cleanly and the next clean one recovers; drained with the faults
 * off, the queue holds every record and nothing else. */
static void relay_to_rabbitmq(void **state)
{
    fiu_world *w = *state;
    fiu_faults_seed(base_seed + 1);
    char tag[64], ex[128], q[128];
    snprintf(tag, sizeof tag, "fiu-%08llx", (unsigned long long)(fiu_faults_next() >> 32));
    bound_route(ex, q, tag);
    acemq_broker_options bo;
    acemq_broker_options_init(&bo);
    bo.confirm_timeout_ms = 10000; /* bounds a wait should a reset go unnoticed */
    relay_counts counts = {0};
    open_under_faults(&counts, &bo);

    acemq_outbox *ob = world_outbox(w);
    acemq_broker *b = NULL;
    if (acemq_broker_open(&b, broker_url, &bo) != 0)
        fail_msg("broker open: %s", acemq_broker_errmsg(NULL));
    acemq_relay_options o;
    acemq_relay_options_init(&o);
    o.batch = 8;
    o.lease_ms = 30000;
    acemq_relay *r = NULL;
    assert_int_equal(acemq_relay_new(&r, ob, b, &o), 0);

    const int first = 40;
    int total = 0;
    for (; total < first; total++)
        add_record(w, ex, total);
    int steps = iterations / 2;
    for (int i = 0; i < steps; i++) {
        add_record(w, ex, total++); /* never short of work */
        size_t pick = (size_t)(fiu_faults_next() % (sizeof relay_mix / sizeof relay_mix[0]));
        unsigned kinds = relay_mix[pick].kinds;
        size_t claimed = 0;
        fiu_faults_on(kinds, relay_mix[pick].p);
        int rc = acemq_relay_step(r, &claimed);
        fiu_faults_off();
        judge_step(&counts, kinds, "acemq_relay_step", i, rc, acemq_relay_errmsg(r));
        acemq_manual_clock_advance(w->clock, 1000);
        /* Steps under faults go in pairs: the second meets what the first
         * left behind (a reconnect under faults); the clean steps after a
         * pair must recover. */
        if (i % 2 == 0) continue;
        add_record(w, ex, total++); /* work for the clean step */
        expect_recovery(r, &counts, i);
    }
    drain(w, r, ob);
    acemq_relay_stats st;
    acemq_relay_stats_get(r, &st);
    world_expect_all_published(w, total);
    long duplicates = expect_queue_holds(q, total);
    acemq_relay_free(r);
    acemq_broker_close(b);
    printf("relay amqp: %d steps under faults, %ld calls: %ld ok, %ld EIO, %ld ENOMEM, "
           "%ld EBACKEND; recovered on the next step %ld, on the one after %ld; relay: %llu "
           "published, %llu unknown, %llu released; %d records in the queue, %ld duplicates\n",
           steps, counts.calls, counts.ok, counts.eio, counts.enomem, counts.ebackend,
           counts.recovered_first, counts.recovered_second, (unsigned long long)st.published,
           (unsigned long long)st.unknown, (unsigned long long)st.released, total, duplicates);
}

/* ------------------------------------------------------------ the stores */

/* Drops the store's table and its token sequence. */
static void drop_pg_store(const char *url)
{
    char table[96], sql[256];
    assert_int_equal(test_backend_url_param(url, "table", table, sizeof table), 0);
    PGconn *c = PQconnectdb(getenv("ACEMQ_PG_URL"));
    if (PQstatus(c) != CONNECTION_OK) fail_msg("connect: %s", PQerrorMessage(c));
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS \"%s\"; DROP SEQUENCE IF EXISTS \"%s_token\"",
             table, table);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
}

/* Deletes the store's keys (its prefix), on the server of
 * ACEMQ_REDIS_URL (on loopback, as test_redis_idem.c finds it). */
static void drop_redis_store(const char *url)
{
    char prefix[96];
    assert_int_equal(test_backend_url_param(url, "prefix", prefix, sizeof prefix), 0);
    const char *base = getenv("ACEMQ_REDIS_URL");
    const char *port = base ? strrchr(base, ':') : NULL;
    redisContext *c = redisConnect("127.0.0.1", port ? atoi(port + 1) : 6379);
    if (!c || c->err) {
        fail_msg("redis connect: %s", c ? c->errstr : "out of memory");
        return;
    }
    redisReply *keys = redisCommand(c, "KEYS %s*", prefix);
    if (!keys || keys->type != REDIS_REPLY_ARRAY) {
        fail_msg("redis KEYS: %s", c->errstr);
        return;
    }
    for (size_t i = 0; i < keys->elements; i++) {
        redisReply *d = redisCommand(c, "DEL %b", keys->element[i]->str, keys->element[i]->len);
        if (!d) fail_msg("redis DEL: %s", c->errstr);
        freeReplyObject(d);
    }
    freeReplyObject(keys);
    redisFree(c);
}

/* A store of backend on its server, driven under socket and memory faults
 * against fiu_world's model. */
static void idem_server_store(fiu_world *w, const char *backend, uint64_t seed)
{
    fiu_faults_seed(seed);
    char url[512];
    if (test_backend_fresh_url(backend, url, sizeof url) != 0)
        fail_msg("no fresh %s store", backend);
    w->replies_can_be_lost = 1;
    /* hiredis aborts when an allocation fails (redisConnectWithTimeout):
     * Redis meets socket faults only. */
    world_faults_network(strcmp(backend, "redis") != 0);
    world_idem_model(w, url, iterations);
    if (strcmp(backend, "postgres") == 0)
        drop_pg_store(url);
    else
        drop_redis_store(url);
}

static void idem_postgres_store(void **state)
{
    idem_server_store(*state, "postgres", base_seed + 2);
}

static void idem_redis_store(void **state)
{
    idem_server_store(*state, "redis", base_seed + 3);
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *need[] = {"ACEMQ_AMQP_URL", "ACEMQ_PG_URL", "ACEMQ_REDIS_URL"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        const char *v = getenv(need[i]);
        if (!v || !*v) {
            printf("SKIPPED: %s is not set (scripts/services.sh start all)\n", need[i]);
            return 77;
        }
    }
    fiu_faults_start(argv, base_seed);
    /* A write on a socket that fiu_net.c shut down raises SIGPIPE unless
     * sent with MSG_NOSIGNAL; a server's client ignores it, as acemq's
     * commands do. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) return 1;
    /* libpq's GSSAPI probe at connect (gssencmode=prefer) crashes inside
     * libgssapi_krb5 (gss_acquire_cred) when a malloc there fails: not
     * acemq's code, and the servers here offer no GSSAPI. */
    if (setenv("PGGSSENCMODE", "disable", 1) != 0) return 1;
    broker_url = getenv("ACEMQ_AMQP_URL");
    const char *s = getenv("FIU_SEED");
    if (s && *s) base_seed = strtoull(s, NULL, 0);
    iterations = fiu_faults_iterations(1000);
    printf("fiu: %d iterations per store, %d relay steps, socket faults\n", iterations,
           iterations / 2);
    fflush(stdout);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(relay_to_rabbitmq, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(idem_postgres_store, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(idem_redis_store, world_setup, world_teardown),
    };
    int failed = cmocka_run_group_tests_name("fiu network", tests, admin_open, admin_close);
    char summary[512];
    fiu_faults_summary(summary, sizeof summary);
    printf("fiu: injected %llu failures: %s; %ld sockets shut down after one\n",
           (unsigned long long)fiu_faults_injected(), summary, fiu_net_resets());
    return failed;
}
