/* test_consumer_rabbitmq.c — the idempotent consumer (acemq/consumer.h)
 * against a real RabbitMQ and the shared stores:
 *
 *   - three consumer processes on one queue and one store (SQLite,
 *     PostgreSQL, Redis), 10,000 messages of which 2,000 published twice:
 *     every id's effect exactly once, the counters add up, the queue ends
 *     empty with nothing unsettled; again on a quorum queue
 *     (consumer_rabbitmq_fleet.c);
 *   - a handler that always fails: dead-lettered after max_attempts runs
 *     counted across a restart, with the reason, the failures and the queue
 *     in headers;
 *   - IN_PROGRESS does not spin: while one consumer holds a message for
 *     5 s, the others see its duplicate only about once per
 *     in_progress_delay_ms;
 *   - a retried message is still the message as published: its routing
 *     key, in the key expression and for the dead letter;
 *   - a dead letter the exchange refuses does not run the handler past
 *     max_attempts.
 *
 * Waits are bounded loops on conditions, never assertions on time. The
 * PostgreSQL and Redis cases are skipped without ACEMQ_PG_URL or
 * ACEMQ_REDIS_URL; without ACEMQ_AMQP_URL the test prints SKIPPED and
 * exits 77 (ctest's Skipped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <amqp.h>
#include <amqp_framing.h>

#include "acemq/broker.h"
#include "acemq/consumer.h"
#include "integration/broker_amqp_fixture.h"
#include "integration/consumer_rabbitmq.h"

/* --- helpers ---------------------------------------------------------------- */

/* Publishes one message to exchange ex under routing key rk, confirmed. */
static void publish_to(const char *ex, const char *rk, const char *id, const char *headers_json)
{
    acemq_broker *pub = open_broker(16);
    acemq_broker_msg m = {.exchange = ex,
                          .routing_key = rk,
                          .message_id = id,
                          .headers_json = headers_json,
                          .body = id,
                          .body_len = strlen(id)};
    acemq_publish_result r;
    int rc = acemq_broker_publish(pub, &m, 1, &r);
    if (rc != 0) fail_msg("publish: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(pub));
    if (r.outcome != ACEMQ_PUBLISH_CONFIRMED) fail_msg("publish %s: outcome %d", id, r.outcome);
    acemq_broker_close(pub);
}

/* ...to the queue q, through the default exchange. */
static void publish_one(const char *q, const char *id, const char *headers_json)
{
    publish_to("", q, id, headers_json);
}

static acemq_consumer *open_consumer(const char *q, acemq_idem *store,
                                     const acemq_consumer_options *o)
{
    acemq_consumer *c = NULL;
    int rc = acemq_consumer_open(&c, broker_url, q, store, o);
    if (rc != 0) fail_msg("consumer: %s: %s", acemq_err_name(rc), acemq_consumer_errmsg(NULL));
    return c;
}

/* The text of header name in m, or NULL when it has none (or not text). */
static char *header_text(const amqp_message_t *m, const char *name, char *buf, size_t len)
{
    if (!(m->properties._flags & AMQP_BASIC_HEADERS_FLAG)) return NULL;
    const amqp_table_t *h = &m->properties.headers;
    for (int i = 0; i < h->num_entries; i++) {
        const amqp_table_entry_t *e = &h->entries[i];
        if (!bytes_eq(e->key, name)) continue;
        if (e->value.kind != AMQP_FIELD_KIND_UTF8 && e->value.kind != AMQP_FIELD_KIND_BYTES)
            return NULL;
        (void)snprintf(buf, len, "%.*s", (int)e->value.value.bytes.len,
                       (const char *)e->value.value.bytes.bytes);
        return buf;
    }
    return NULL;
}

static void assert_header(const amqp_message_t *m, const char *name, const char *want)
{
    char buf[1100];
    const char *got = header_text(m, name, buf, sizeof buf);
    if (!got) {
        fail_msg("the dead letter has no text header %s", name);
        return;
    }
    if (strcmp(got, want) != 0) fail_msg("header %s: \"%s\", not \"%s\"", name, got, want);
}

/* --- a handler that always fails ---------------------------------------------- */

#define DOOMED_REASON "the ledger refused it: account 42 is closed"

typedef struct doomed_ctx {
    atomic_int runs;
    int failures_seen[8]; /* m->failures on each run */
    int stop_after_failing;
} doomed_ctx;

static int always_fail(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    doomed_ctx *x = ctx;
    int n = atomic_fetch_add(&x->runs, 1);
    if (n < 8) x->failures_seen[n] = m->failures;
    acemq_consumer_fail(c, DOOMED_REASON);
    /* The restart comes right after the first failure: the failed message
     * is in the consumer's hands, waiting out its back-off. */
    if (x->stop_after_failing) acemq_consumer_stop(c);
    return 1;
}

/* max_attempts 3 over a restart after the first failure: the message is
 * published back with its failure counted when the first consumer stops,
 * the second one (a new store handle, a new process's worth of state)
 * sees failures 1, fails twice more, and dead-letters it with the reason,
 * the count and the queue in headers. The handler ran 3 times, no more. */
static void always_failing_is_dead_lettered_across_a_restart(void **state)
{
    (void)state;
    char q[160], dx[160], dq[160], dir[512], url[600];
    work_queue(q, sizeof q, "doomed", 0);
    test_name(dx, sizeof dx, "consumer.doomed.dlx");
    test_name(dq, sizeof dq, "consumer.doomed.dead");
    declare_exchange(dx);
    /* A dead letter keeps its routing key: the work queue's name. */
    declare_queue(dq, dx, q, amqp_empty_table);
    make_tmpdir(dir, sizeof dir);
    assert_int_equal(store_url(url, sizeof url, "sqlite", dir), 0);
    publish_one(q, "doomed-1", "{\"origin\":\"test\"}");

    doomed_ctx x;
    memset(&x, 0, sizeof x);
    x.stop_after_failing = 1;
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    o.handler = always_fail;
    o.ctx = &x;
    o.max_attempts = 3;
    o.retry_delay_ms = 100;
    o.retry_delay_max_ms = 1000;
    o.dead_letter_exchange = dx;

    acemq_idem *store = open_store(url);
    acemq_consumer *c = open_consumer(q, store, &o);
    runner *r = start_runner(c);
    for (int64_t until = mono_ms() + 60000; !runner_done(r) && mono_ms() < until;)
        sleep_ms(20);
    assert_true(runner_done(r)); /* the handler stopped it */
    assert_int_equal(stop_runner(r), 0);
    acemq_consumer_stats s1;
    acemq_consumer_stats_get(c, &s1);
    acemq_consumer_close(c);
    acemq_idem_close(store);
    assert_int_equal(atomic_load(&x.runs), 1);
    assert_int_equal(s1.failed, 1);
    assert_int_equal(s1.retried, 1); /* published back with the count when it stopped */
    assert_int_equal(s1.dead_lettered, 0);
    assert_int_equal(ready_once_idle(q), 1);

    x.stop_after_failing = 0;
    store = open_store(url);
    c = open_consumer(q, store, &o);
    r = start_runner(c);
    amqp_message_t dead;
    int got = 0;
    for (int64_t until = mono_ms() + 60000; !(got = get_one(dq, &dead)) && mono_ms() < until;)
        sleep_ms(50);
    assert_int_equal(stop_runner(r), 0);
    acemq_consumer_stats s2;
    acemq_consumer_stats_get(c, &s2);
    acemq_consumer_close(c);
    acemq_idem_close(store);
    if (!got)
        fail_msg("no dead letter within a minute: %d runs, failed %llu, retried %llu",
                 atomic_load(&x.runs), (unsigned long long)s2.failed,
                 (unsigned long long)s2.retried);

    assert_int_equal(atomic_load(&x.runs), 3);
    assert_int_equal(x.failures_seen[0], 0);
    assert_int_equal(x.failures_seen[1], 1); /* counted across the restart */
    assert_int_equal(x.failures_seen[2], 2);
    assert_int_equal(s2.failed, 2);
    assert_int_equal(s2.retried, 1);
    assert_int_equal(s2.dead_lettered, 1);
    assert_int_equal(s2.processed, 0);
    assert_true(dead.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG);
    assert_true(bytes_eq(dead.properties.message_id, "doomed-1"));
    assert_true(bytes_eq(dead.body, "doomed-1"));
    assert_header(&dead, "x-acemq-failures", "3");
    assert_header(&dead, "x-acemq-error", DOOMED_REASON);
    assert_header(&dead, "x-acemq-queue", q);
    assert_header(&dead, "origin", "test");
    amqp_destroy_message(&dead);
    assert_int_equal(get_one(dq, &dead), 0); /* one dead letter, not two */
    assert_int_equal(ready_once_idle(q), 0);
    drop_queue(q);
    drop_queue(dq);
    rm_tmpdir(dir);
}

/* --- IN_PROGRESS does not spin ------------------------------------------------- */

typedef struct slow_shared {
    atomic_int runs;
    atomic_int holding;
} slow_shared;

typedef struct slow_ctx {
    slow_shared *shared;
    int hold_ms;
} slow_ctx;

static int slow_handler(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    (void)c;
    (void)m;
    slow_ctx *x = ctx;
    atomic_fetch_add(&x->shared->runs, 1);
    atomic_store(&x->shared->holding, 1);
    if (x->hold_ms) sleep_ms(x->hold_ms); /* the scenario: a slow handler, not a wait */
    return 0;
}

static acemq_consumer_stats stats_of(acemq_consumer *c)
{
    acemq_consumer_stats s;
    acemq_consumer_stats_get(c, &s);
    return s;
}

/* A holds the message for 5 s (prefetch 1, so nothing more comes to it);
 * meanwhile a second copy of it (same message_id) circulates between B and
 * C, each answered IN_PROGRESS and held for in_progress_delay_ms (1 s)
 * before it goes back: about five answers in all, where a copy requeued
 * at once would come round thousands of times. Once A confirms, the copy
 * is a duplicate: the handler ran once. */
static void in_progress_does_not_spin(void **state)
{
    (void)state;
    char q[160], dir[512], url[600];
    work_queue(q, sizeof q, "in-progress", 0);
    make_tmpdir(dir, sizeof dir);
    assert_int_equal(store_url(url, sizeof url, "sqlite", dir), 0);
    slow_shared shared;
    memset(&shared, 0, sizeof shared);
    slow_ctx ctx_a = {&shared, 5000}, ctx_bc = {&shared, 0};

    acemq_idem *stores[3];
    acemq_consumer *cs[3];
    runner *rs[3];
    for (int i = 0; i < 3; i++) {
        acemq_consumer_options o;
        acemq_consumer_options_init(&o);
        o.handler = slow_handler;
        o.ctx = i == 0 ? &ctx_a : &ctx_bc;
        o.prefetch = i == 0 ? 1 : 32;
        o.in_progress_delay_ms = 1000;
        stores[i] = open_store(url);
        cs[i] = open_consumer(q, stores[i], &o);
    }
    rs[0] = start_runner(cs[0]);
    publish_one(q, "held-1", NULL);
    for (int64_t until = mono_ms() + 30000; !atomic_load(&shared.holding) && mono_ms() < until;)
        sleep_ms(10);
    assert_true(atomic_load(&shared.holding));
    rs[1] = start_runner(cs[1]);
    rs[2] = start_runner(cs[2]);
    /* B and C consume before the copy comes, or A could take it later. */
    uint32_t consumers = 0;
    for (int64_t until = mono_ms() + 30000; consumers < 3 && mono_ms() < until; sleep_ms(20))
        queue_counts(q, NULL, &consumers);
    assert_int_equal(consumers, 3);
    publish_one(q, "held-1", NULL);

    uint64_t dups = 0, processed = 0;
    for (int64_t until = mono_ms() + 60000; (dups < 1 || processed < 1) && mono_ms() < until;
         sleep_ms(20)) {
        dups = processed = 0;
        for (int i = 0; i < 3; i++) {
            acemq_consumer_stats s = stats_of(cs[i]);
            dups += s.duplicates;
            processed += s.processed;
        }
    }
    acemq_consumer_stats s[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(stop_runner(rs[i]), 0);
        s[i] = stats_of(cs[i]);
        acemq_consumer_close(cs[i]);
        acemq_idem_close(stores[i]);
    }
    uint64_t seen = s[1].in_progress + s[2].in_progress;
    print_message("IN_PROGRESS answers to B and C: %llu (%llu + %llu); deliveries %llu + %llu\n",
                  (unsigned long long)seen, (unsigned long long)s[1].in_progress,
                  (unsigned long long)s[2].in_progress, (unsigned long long)s[1].delivered,
                  (unsigned long long)s[2].delivered);
    assert_int_equal(atomic_load(&shared.runs), 1);
    assert_int_equal(s[0].processed, 1);
    assert_int_equal(s[0].in_progress, 0);
    assert_int_equal(s[0].processed + s[1].processed + s[2].processed, 1);
    assert_int_equal(s[0].duplicates + s[1].duplicates + s[2].duplicates, 1);
    assert_true(seen >= 1);  /* the copy did meet the claim */
    assert_true(seen <= 15); /* ...about once a second, not at the broker's speed */
    assert_int_equal(ready_once_idle(q), 0);
    drop_queue(q);
    rm_tmpdir(dir);
}

/* --- a retried message keeps its routing key ----------------------------------- */

#define ROUTE "order.created"

/* A work queue bound to a fresh exchange by ROUTE, and a dead-letter
 * exchange whose dead queue is bound by ROUTE too, as an application binds
 * them: by the routing keys its messages are published under. */
static void routed_setup(char *q, char *ex, char *dx, char *dq, size_t len, const char *what)
{
    char tag[96];
    work_queue(q, len, what, 0);
    (void)snprintf(tag, sizeof tag, "consumer.%s.ex", what);
    test_name(ex, len, tag);
    declare_exchange(ex);
    amqp_queue_bind(admin_conn, 1, amqp_cstring_bytes(q), amqp_cstring_bytes(ex),
                    amqp_cstring_bytes(ROUTE), amqp_empty_table);
    must_ok(amqp_get_rpc_reply(admin_conn), "queue.bind");
    (void)snprintf(tag, sizeof tag, "consumer.%s.dlx", what);
    test_name(dx, len, tag);
    (void)snprintf(tag, sizeof tag, "consumer.%s.dead", what);
    test_name(dq, len, tag);
    declare_exchange(dx);
    declare_queue(dq, dx, ROUTE, amqp_empty_table);
}

typedef struct routed_ctx {
    atomic_int runs;
    int fail_runs; /* the first fail_runs runs fail; -1: all */
    char routing_key[4][256];
    char key[4][300];
} routed_ctx;

static int routed_handler(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    routed_ctx *x = ctx;
    int n = atomic_fetch_add(&x->runs, 1);
    if (n < 4) {
        (void)snprintf(x->routing_key[n], sizeof x->routing_key[n], "%s",
                       m->delivery->routing_key ? m->delivery->routing_key : "(none)");
        (void)snprintf(x->key[n], sizeof x->key[n], "%s", m->key);
    }
    if (x->fail_runs >= 0 && n >= x->fail_runs) return 0;
    acemq_consumer_fail(c, "not yet");
    return 1;
}

/* The key ${routing_key}:${message_id} over a failure: the retry (a copy
 * the consumer publishes back to the queue itself) must still be the
 * message published under ROUTE, to the handler and to the key. Otherwise
 * the retry is confirmed under another key than the one the first attempt
 * released, and a later duplicate of the message (a relay publishing it
 * again under ROUTE) finds its key free and runs the handler a second time. */
static void retried_message_keeps_its_routing_key(void **state)
{
    (void)state;
    char q[160], ex[160], dx[160], dq[160], dir[512], url[600];
    routed_setup(q, ex, dx, dq, sizeof q, "routed");
    make_tmpdir(dir, sizeof dir);
    assert_int_equal(store_url(url, sizeof url, "sqlite", dir), 0);
    routed_ctx x;
    memset(&x, 0, sizeof x);
    x.fail_runs = 1;
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    o.handler = routed_handler;
    o.ctx = &x;
    o.key = "${routing_key}:${message_id}";
    o.retry_delay_ms = 100;
    o.dead_letter_exchange = dx;
    acemq_idem *store = open_store(url);
    acemq_consumer *c = open_consumer(q, store, &o);
    runner *r = start_runner(c);
    publish_to(ex, ROUTE, "routed-1", NULL);
    for (int64_t until = mono_ms() + 30000; stats_of(c).processed < 1 && mono_ms() < until;)
        sleep_ms(20);
    assert_int_equal(stats_of(c).processed, 1);
    publish_to(ex, ROUTE, "routed-1", NULL); /* the relay, publishing it again */
    for (int64_t until = mono_ms() + 30000;
         stats_of(c).processed + stats_of(c).duplicates < 2 && mono_ms() < until;)
        sleep_ms(20);
    assert_int_equal(stop_runner(r), 0);
    acemq_consumer_stats s = stats_of(c);
    acemq_consumer_close(c);
    acemq_idem_close(store);
    print_message("runs %d: routing keys \"%s\", \"%s\", \"%s\"; keys \"%s\", \"%s\", \"%s\"\n",
                  atomic_load(&x.runs), x.routing_key[0], x.routing_key[1], x.routing_key[2],
                  x.key[0], x.key[1], x.key[2]);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.processed, 1);  /* the effect once... */
    assert_int_equal(s.duplicates, 1); /* ...and the second publication a duplicate */
    assert_int_equal(atomic_load(&x.runs), 2);
    assert_string_equal(x.routing_key[1], ROUTE);
    assert_string_equal(x.key[1], ROUTE ":routed-1");
    assert_int_equal(ready_once_idle(q), 0);
    drop_queue(q);
    drop_queue(dq);
    rm_tmpdir(dir);
}

/* Dead letters go "under their own routing key": after retries too, where
 * the copy in the queue came from the consumer, not from the application.
 * The dead queue is bound by ROUTE only; a dead letter under any other key
 * is unroutable, held, given back, and the handler runs again and again,
 * past max_attempts. */
static void dead_letter_keeps_its_routing_key_after_retries(void **state)
{
    (void)state;
    char q[160], ex[160], dx[160], dq[160], dir[512], url[600];
    routed_setup(q, ex, dx, dq, sizeof q, "routed-dead");
    make_tmpdir(dir, sizeof dir);
    assert_int_equal(store_url(url, sizeof url, "sqlite", dir), 0);
    routed_ctx x;
    memset(&x, 0, sizeof x);
    x.fail_runs = -1;
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    o.handler = routed_handler;
    o.ctx = &x;
    o.max_attempts = 2;
    o.retry_delay_ms = 100;
    o.retry_delay_max_ms = 500;
    o.dead_letter_exchange = dx;
    acemq_idem *store = open_store(url);
    acemq_consumer *c = open_consumer(q, store, &o);
    runner *r = start_runner(c);
    publish_to(ex, ROUTE, "routed-2", NULL);
    amqp_message_t dead;
    int got = 0;
    for (int64_t until = mono_ms() + 30000; !(got = get_one(dq, &dead)) && mono_ms() < until;)
        sleep_ms(50);
    assert_int_equal(stop_runner(r), 0);
    acemq_consumer_stats s = stats_of(c);
    acemq_consumer_close(c);
    acemq_idem_close(store);
    if (!got)
        fail_msg("no dead letter under %s in 30 s: the handler ran %d times (max_attempts 2), "
                 "routing keys \"%s\", \"%s\", \"%s\"",
                 ROUTE, atomic_load(&x.runs), x.routing_key[0], x.routing_key[1], x.routing_key[2]);
    assert_true(bytes_eq(dead.properties.message_id, "routed-2"));
    assert_header(&dead, "x-acemq-failures", "2");
    assert_header(&dead, "x-acemq-queue", q);
    amqp_destroy_message(&dead);
    assert_int_equal(atomic_load(&x.runs), 2);
    assert_int_equal(s.dead_lettered, 1);
    assert_int_equal(ready_once_idle(q), 0);
    drop_queue(q);
    drop_queue(dq);
    rm_tmpdir(dir);
}

/* --- a dead-letter exchange that refuses ---------------------------------------- */

/* Lines of the log file at path that contain both a and b. */
static int log_lines(const char *path, const char *a, const char *b)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, a) && strstr(line, b);
    fclose(f);
    return n;
}

/* max_attempts bounds the handler's runs, also while the dead letter
 * cannot be delivered (an exchange with nothing bound: the broker returns
 * the copy). The message waits and tries the exchange again, keeping its
 * place in the queue, but the handler already gave up on it: three
 * refused dead letters later it has still run max_attempts times. */
static void refused_dead_letter_does_not_rerun_the_handler(void **state)
{
    (void)state;
    char q[160], dx[160], dir[512], url[600], logpath[600];
    work_queue(q, sizeof q, "refused-dead", 0);
    test_name(dx, sizeof dx, "consumer.refused-dead.dlx");
    declare_exchange(dx); /* nothing bound */
    make_tmpdir(dir, sizeof dir);
    assert_int_equal(store_url(url, sizeof url, "sqlite", dir), 0);
    (void)snprintf(logpath, sizeof logpath, "%s/consumer.log", dir);
    FILE *log = fopen(logpath, "w");
    assert_non_null(log);
    routed_ctx x;
    memset(&x, 0, sizeof x);
    x.fail_runs = -1;
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    o.handler = routed_handler;
    o.ctx = &x;
    o.max_attempts = 2;
    o.retry_delay_ms = 50;
    o.retry_delay_max_ms = 300;
    o.dead_letter_exchange = dx;
    o.log = log;
    acemq_idem *store = open_store(url);
    acemq_consumer *c = open_consumer(q, store, &o);
    runner *r = start_runner(c);
    publish_one(q, "refused-1", NULL);
    int refused = 0;
    for (int64_t until = mono_ms() + 60000;
         (refused = log_lines(logpath, "event=publish_failed", dx)) < 3 && mono_ms() < until;)
        sleep_ms(50);
    assert_int_equal(stop_runner(r), 0);
    acemq_consumer_stats s = stats_of(c);
    acemq_consumer_close(c);
    acemq_idem_close(store);
    fclose(log);
    print_message("dead letters refused %d times; the handler ran %d times\n", refused,
                  atomic_load(&x.runs));
    assert_true(refused >= 3);
    assert_int_equal(atomic_load(&x.runs), 2);
    assert_int_equal(s.failed, 2);
    assert_int_equal(s.dead_lettered, 0);
    assert_int_equal(ready_once_idle(q), 1); /* kept, not lost */
    drop_queue(q);
    rm_tmpdir(dir);
}

/* An argument runs only the tests whose names match it (cmocka's filter,
 * `*` a wildcard): test_consumer_rabbitmq 'fleet_*'. */
int main(int argc, char **argv)
{
    broker_url = getenv("ACEMQ_AMQP_URL"); /* broker_amqp_fixture.h */
    if (!broker_url || !*broker_url) {
        printf("SKIPPED: ACEMQ_AMQP_URL is not set (scripts/services.sh start rabbitmq)\n");
        return 77;
    }
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(always_failing_is_dead_lettered_across_a_restart),
        cmocka_unit_test(in_progress_does_not_spin),
        cmocka_unit_test(retried_message_keeps_its_routing_key),
        cmocka_unit_test(dead_letter_keeps_its_routing_key_after_retries),
        cmocka_unit_test(refused_dead_letter_does_not_rerun_the_handler),
        cmocka_unit_test(fleet_sqlite),
        cmocka_unit_test(fleet_postgres),
        cmocka_unit_test(fleet_redis),
        cmocka_unit_test(fleet_quorum_sqlite),
    };
    return cmocka_run_group_tests(tests, admin_open, admin_close);
}
