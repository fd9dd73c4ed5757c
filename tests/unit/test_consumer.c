/* test_consumer.c — the idempotent consumer on the in-process broker and
 * the memory store: each id's effect once among duplicates, duplicates
 * acknowledged, failures retried with their count in a header and then
 * dead-lettered with the reason, keyless messages dead-lettered without the
 * handler, IN_PROGRESS held in hand rather than spun, a lost lease's
 * confirm refused and counted, header keys, the audit in front, and the
 * lease renewed under a long handler. Against RabbitMQ and the shared
 * stores: tests/integration/test_consumer_*.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "acemq/consumer.h"
#include "backends/test_control.h"
#include "broker/broker_internal.h"
#include "consumer/consumer_internal.h"

#define MAX_IDS 256

/* What the handler saw and does. */
typedef struct world {
    acemq_idem *store;
    int effects[MAX_IDS]; /* by the number in the key "id-N" */
    atomic_int runs;      /* polled by the test's thread while the handler runs */
    int fail_first;       /* fail this many runs of each id */
    int fail_runs[MAX_IDS];
    int seen_failures[8]; /* m->failures of the runs, in order */
    int sleep_ms;         /* each run takes this long */
    int steal;            /* during the run, the test takes the claim over */
    int duplicates_told;
} world;

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static int id_number(const acemq_consumer_msg *m)
{
    const char *dash = strrchr(m->key, '-');
    int n = dash ? atoi(dash + 1) : -1;
    if (n < 0 || n >= MAX_IDS) fail_msg("unexpected key %s", m->key);
    return n;
}

static int handler(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    world *w = ctx;
    int n = id_number(m);
    int run = atomic_fetch_add(&w->runs, 1);
    if (run < 8) w->seen_failures[run] = m->failures;
    if (w->sleep_ms) sleep_ms(w->sleep_ms);
    if (w->steal) {
        acemq_claim cl;
        assert_int_equal(acemq_idem_forget(w->store, m->key, m->key_len), 1);
        assert_int_equal(acemq_idem_try_claim(w->store, m->key, m->key_len, NULL, &cl),
                         ACEMQ_CLAIMED);
    }
    if (w->fail_runs[n] < w->fail_first) {
        w->fail_runs[n]++;
        acemq_consumer_fail(c, "the test's handler fails");
        return 1;
    }
    w->effects[n]++;
    return 0;
}

static void on_duplicate(void *ctx, const acemq_consumer_msg *m, const void *result, size_t len)
{
    (void)m;
    (void)result;
    (void)len;
    ((world *)ctx)->duplicates_told++;
}

static acemq_broker *open_broker(const char *url)
{
    acemq_broker *b = NULL;
    if (acemq_broker_open(&b, url, NULL) != 0)
        fail_msg("open %s: %s", url, acemq_broker_errmsg(NULL));
    return b;
}

static void publish(acemq_broker *pub, const char *id, const char *headers_json)
{
    acemq_broker_msg m = {.exchange = "",
                          .routing_key = "q",
                          .message_id = id,
                          .headers_json = headers_json,
                          .body = "body",
                          .body_len = 4};
    acemq_publish_result r;
    assert_int_equal(acemq_broker_publish(pub, &m, 1, &r), 0);
    assert_int_equal(r.outcome, ACEMQ_PUBLISH_CONFIRMED);
}

static void depth(acemq_broker *b, const char *q, size_t *ready, size_t *in_hand)
{
    assert_int_equal(acemq__memory_broker_depth(b, q, ready, in_hand), 0);
}

/* One test's broker, store and consumer. */
typedef struct rig {
    char url[64];
    acemq_broker *pub; /* publishes, declares, looks */
    acemq_idem *store;
    acemq_consumer *c;
    acemq_consumer_options o;
    world w;
    pthread_t thread;
    int running;
    volatile sig_atomic_t stop;
} rig;

static void rig_init(rig *r, const char *name)
{
    memset(r, 0, sizeof *r);
    snprintf(r->url, sizeof r->url, "memory:%s", name);
    r->pub = open_broker(r->url);
    assert_int_equal(acemq__memory_broker_declare(r->pub, "q", NULL), 0);
    assert_int_equal(acemq__memory_broker_declare(r->pub, "dead", NULL), 0);
    assert_int_equal(acemq__memory_broker_bind(r->pub, "dead", "dlx", "q"), 0);
    assert_int_equal(acemq_idem_open(&r->store, "memory:", NULL), 0);
    r->w.store = r->store;
    acemq_consumer_options_init(&r->o);
    r->o.handler = handler;
    r->o.on_duplicate = on_duplicate;
    r->o.ctx = &r->w;
    r->o.retry_delay_ms = 0;
    r->o.dead_letter_exchange = "dlx";
}

static void *run_main(void *arg)
{
    rig *r = arg;
    int rc = acemq_consumer_run(r->c, &r->stop);
    if (rc != 0) fprintf(stderr, "run: %s: %s\n", acemq_err_name(rc), acemq_consumer_errmsg(r->c));
    return NULL;
}

static void rig_start(rig *r)
{
    if (acemq_consumer_open(&r->c, r->url, "q", r->store, &r->o) != 0)
        fail_msg("consumer_open: %s", acemq_consumer_errmsg(NULL));
    r->stop = 0;
    assert_int_equal(pthread_create(&r->thread, NULL, run_main, r), 0);
    r->running = 1;
}

/* Waits until q is empty and nothing is in hand (or in_hand are), then
 * stops the consumer. */
static void rig_drain(rig *r, size_t in_hand)
{
    for (int i = 0; i < 3000; i++) {
        size_t ready, held;
        depth(r->pub, "q", &ready, &held);
        if (ready == 0 && held == in_hand) break;
        sleep_ms(5);
    }
}

static void rig_stop(rig *r)
{
    if (!r->running) return;
    acemq_consumer_stop(r->c);
    assert_int_equal(pthread_join(r->thread, NULL), 0);
    r->running = 0;
}

static void rig_end(rig *r)
{
    rig_stop(r);
    acemq_consumer_close(r->c);
    acemq_idem_close(r->store);
    acemq_broker_close(r->pub);
}

static acemq_consumer_stats stats_of(rig *r)
{
    acemq_consumer_stats s;
    acemq_consumer_stats_get(r->c, &s);
    return s;
}

/* The first dead letter: its headers as JSON (the caller frees). */
static json_t *dead_letter_headers(rig *r)
{
    acemq_broker *b = open_broker(r->url);
    assert_int_equal(acemq_broker_consume(b, "dead", 10), 0);
    acemq_delivery *d = NULL;
    assert_int_equal(acemq_broker_next(b, 1000, &d), 0);
    json_t *h = json_loads(d->headers_json ? d->headers_json : "{}", 0, NULL);
    assert_non_null(h);
    assert_int_equal(acemq_broker_ack(b, d), 0);
    acemq_delivery_free(d);
    acemq_broker_close(b);
    return h;
}

static void each_id_takes_effect_once(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "once");
    for (int i = 0; i < 100; i++) {
        char id[32];
        snprintf(id, sizeof id, "id-%d", i);
        publish(r.pub, id, NULL);
        if (i % 5 == 0) publish(r.pub, id, NULL); /* 20 published twice */
    }
    rig_start(&r);
    rig_drain(&r, 0);
    rig_stop(&r);
    for (int i = 0; i < 100; i++)
        assert_int_equal(r.w.effects[i], 1);
    acemq_consumer_stats s = stats_of(&r);
    assert_int_equal(s.delivered, 120);
    assert_int_equal(s.processed, 100);
    assert_int_equal(s.duplicates, 20);
    assert_int_equal(r.w.duplicates_told, 20);
    size_t ready, held;
    depth(r.pub, "q", &ready, &held);
    assert_int_equal(ready + held, 0);
    /* Whole batches in hand, nothing held: acknowledged by one multiple ack each. */
    assert_true(acemq__broker_multiple_acks(r.c->in) > 0);
    rig_end(&r);
}

/* One batch whose acknowledged deliveries interleave with held ones (their
 * keys claimed elsewhere) and with a duplicate of an earlier delivery of the
 * batch: the acks settle exactly the processed and the duplicate, the held
 * stay in hand until the consumer stops, then go back to the queue. */
static void acks_of_a_batch_leave_its_held_deliveries(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "interleaved");
    r.o.in_progress_delay_ms = 60000;
    acemq_claim cl;
    assert_int_equal(acemq_idem_try_claim(r.store, "id-5", 4, NULL, &cl), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_try_claim(r.store, "id-6", 4, NULL, &cl), ACEMQ_CLAIMED);
    const char *ids[] = {"id-1", "id-5", "id-2", "id-1", "id-6", "id-3"};
    for (int i = 0; i < 6; i++)
        publish(r.pub, ids[i], NULL);
    rig_start(&r);
    rig_drain(&r, 2); /* the batch's acks are sent after all its counting */
    size_t ready, held;
    depth(r.pub, "q", &ready, &held);
    assert_int_equal(ready, 0);
    assert_int_equal(held, 2);
    acemq_consumer_stats s = stats_of(&r);
    assert_int_equal(s.delivered, 6);
    assert_int_equal(s.processed, 3);
    assert_int_equal(s.duplicates, 1);
    assert_int_equal(s.in_progress, 2);
    for (int n = 1; n <= 3; n++)
        assert_int_equal(r.w.effects[n], 1);
    rig_stop(&r);
    /* Held tags lay below the batch's highest: one ack each, no multiple. */
    assert_int_equal(acemq__broker_multiple_acks(r.c->in), 0);
    depth(r.pub, "q", &ready, &held);
    assert_int_equal(ready, 2);
    assert_int_equal(held, 0);
    assert_int_equal(r.w.effects[5] + r.w.effects[6], 0);
    rig_end(&r);
}

static void a_handler_that_fails_twice_runs_three_times(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "fail2");
    r.w.fail_first = 2;
    publish(r.pub, "id-7", NULL);
    rig_start(&r);
    rig_drain(&r, 0);
    for (int i = 0; i < 1000 && stats_of(&r).processed == 0; i++)
        sleep_ms(5);
    rig_stop(&r);
    assert_int_equal(r.w.effects[7], 1);
    assert_int_equal(r.w.runs, 3);
    /* Each run saw the failures before it, carried by the published copy. */
    assert_int_equal(r.w.seen_failures[0], 0);
    assert_int_equal(r.w.seen_failures[1], 1);
    assert_int_equal(r.w.seen_failures[2], 2);
    acemq_consumer_stats s = stats_of(&r);
    assert_int_equal(s.failed, 2);
    assert_int_equal(s.retried, 2);
    assert_int_equal(s.processed, 1);
    rig_end(&r);
}

static void always_failing_is_dead_lettered_with_its_reason(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "dead");
    r.w.fail_first = 1000;
    r.o.max_attempts = 3;
    publish(r.pub, "id-3", "{\"trace\":\"abc\"}");
    rig_start(&r);
    for (int i = 0; i < 1000 && stats_of(&r).dead_lettered == 0; i++)
        sleep_ms(5);
    rig_drain(&r, 0);
    rig_stop(&r);
    assert_int_equal(r.w.runs, 3);
    assert_int_equal(r.w.effects[3], 0);
    json_t *h = dead_letter_headers(&r);
    assert_string_equal(json_string_value(json_object_get(h, "x-acemq-failures")), "3");
    assert_string_equal(json_string_value(json_object_get(h, "x-acemq-error")),
                        "the test's handler fails");
    assert_string_equal(json_string_value(json_object_get(h, "x-acemq-queue")), "q");
    assert_string_equal(json_string_value(json_object_get(h, "trace")), "abc");
    json_decref(h);
    rig_end(&r);
}

/* The count lives on the message, not in a consumer: a message that failed
 * twice elsewhere has one attempt left here. */
static void failures_counted_elsewhere_carry_over(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "carry");
    r.w.fail_first = 1000;
    r.o.max_attempts = 3;
    publish(r.pub, "id-4", "{\"x-acemq-failures\":\"2\"}");
    rig_start(&r);
    for (int i = 0; i < 1000 && stats_of(&r).dead_lettered == 0; i++)
        sleep_ms(5);
    rig_stop(&r);
    assert_int_equal(r.w.runs, 1);
    assert_int_equal(r.w.seen_failures[0], 2);
    json_t *h = dead_letter_headers(&r);
    assert_string_equal(json_string_value(json_object_get(h, "x-acemq-failures")), "3");
    json_decref(h);
    rig_end(&r);
}

static void a_message_without_a_key_never_runs_the_handler(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "nokey");
    r.o.key = "${header.order}";
    publish(r.pub, "id-1", "{\"other\":\"x\"}");
    rig_start(&r);
    for (int i = 0; i < 1000 && stats_of(&r).dead_lettered == 0; i++)
        sleep_ms(5);
    rig_stop(&r);
    assert_int_equal(r.w.runs, 0);
    json_t *h = dead_letter_headers(&r);
    assert_non_null(strstr(json_string_value(json_object_get(h, "x-acemq-error")), "no key"));
    json_decref(h);
    rig_end(&r);
}

/* Two messages with different ids and one order header are one effect. */
static void a_header_key(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "hdr");
    r.o.key = "order-${header.order}";
    publish(r.pub, "a", "{\"order\":\"id-9\"}");
    publish(r.pub, "b", "{\"order\":\"id-9\"}");
    rig_start(&r);
    rig_drain(&r, 0);
    rig_stop(&r);
    assert_int_equal(r.w.effects[9], 1);
    assert_int_equal(stats_of(&r).duplicates, 1);
    rig_end(&r);
}

/* Held elsewhere: the delivery stays in the consumer's hands for the delay
 * (not acknowledged, not back in the queue), and goes back at stop. */
static void in_progress_is_held_not_spun(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "held");
    r.o.in_progress_delay_ms = 60000;
    acemq_claim cl;
    assert_int_equal(acemq_idem_try_claim(r.store, "id-5", 4, NULL, &cl), ACEMQ_CLAIMED);
    publish(r.pub, "id-5", NULL);
    rig_start(&r);
    for (int i = 0; i < 1000 && stats_of(&r).in_progress == 0; i++)
        sleep_ms(5);
    rig_drain(&r, 1);
    size_t ready, held;
    depth(r.pub, "q", &ready, &held);
    assert_int_equal(ready, 0);
    assert_int_equal(held, 1);
    assert_int_equal(stats_of(&r).in_progress, 1);
    assert_int_equal(stats_of(&r).delivered, 1);
    rig_stop(&r);
    depth(r.pub, "q", &ready, &held);
    assert_int_equal(ready, 1);
    assert_int_equal(held, 0);
    assert_int_equal(r.w.runs, 0);
    rig_end(&r);
}

/* Another consumer took the claim over mid-run: the confirm is refused as
 * stale, counted, and the delivery acknowledged (the other holds its own copy). */
static void a_lost_lease_is_counted_stale(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "stale");
    r.w.steal = 1;
    publish(r.pub, "id-2", NULL);
    rig_start(&r);
    rig_drain(&r, 0);
    for (int i = 0; i < 1000 && stats_of(&r).stale == 0; i++)
        sleep_ms(5);
    rig_stop(&r);
    acemq_consumer_stats s = stats_of(&r);
    assert_int_equal(s.stale, 1);
    assert_int_equal(s.processed, 0);
    assert_int_equal(acemq_idem_is_confirmed(r.store, "id-2", 4), 0);
    rig_end(&r);
}

/* With the audit in front, a duplicate of a confirmed id is answered
 * without the store. */
static void the_audit_answers_confirmed_duplicates(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "audit");
    acemq_audit *a = NULL;
    assert_int_equal(acemq_audit_new(&a, NULL), 0);
    r.o.audit = a;
    publish(r.pub, "ID:host-1-2-3:1:1:1:42", NULL);
    publish(r.pub, "ID:host-1-2-3:1:1:1:42", NULL);
    rig_start(&r);
    rig_drain(&r, 0);
    rig_stop(&r);
    acemq_idem_stats st;
    assert_int_equal(acemq_idem_stats_get(r.store, &st), 0);
    assert_int_equal(st.duplicates, 0);
    assert_int_equal(stats_of(&r).duplicates, 1);
    assert_int_equal(stats_of(&r).processed, 1);
    rig_end(&r);
    acemq_audit_free(a);
}

/* A handler that runs for several leases keeps its claim: meanwhile the id
 * is IN_PROGRESS to everyone else, and the confirm at the end stands. */
static void a_long_handler_keeps_its_lease(void **state)
{
    (void)state;
    rig r;
    rig_init(&r, "long");
    r.o.lease_ms = 900;
    r.w.sleep_ms = 2700;
    publish(r.pub, "id-6", NULL);
    rig_start(&r);
    for (int i = 0; i < 1000 && atomic_load(&r.w.runs) == 0; i++)
        sleep_ms(5);
    sleep_ms(1500);
    acemq_claim cl;
    assert_int_equal(acemq_idem_try_claim(r.store, "id-6", 4, NULL, &cl), ACEMQ_IN_PROGRESS);
    rig_drain(&r, 0);
    rig_stop(&r);
    acemq_consumer_stats s = stats_of(&r);
    assert_int_equal(s.processed, 1);
    assert_true(s.renewals >= 1);
    assert_int_equal(acemq_idem_is_confirmed(r.store, "id-6", 4), 1);
    rig_end(&r);
}

static void bad_options_are_refused(void **state)
{
    (void)state;
    acemq_idem *store = NULL;
    assert_int_equal(acemq_idem_open(&store, "memory:", NULL), 0);
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    acemq_consumer *c = NULL;
    assert_int_equal(acemq_consumer_open(&c, "memory:bad", "q", store, &o), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_consumer_errmsg(NULL), "handler"));
    o.handler = handler;
    o.key = "${body}";
    assert_int_equal(acemq_consumer_open(&c, "memory:bad", "q", store, &o), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_consumer_errmsg(NULL), "key"));
    o.key = "${header.x";
    assert_int_equal(acemq_consumer_open(&c, "memory:bad", "q", store, &o), ACEMQ_EINVAL);
    o.key = NULL;
    o.prefetch = 0;
    assert_int_equal(acemq_consumer_open(&c, "memory:bad", "q", store, &o), ACEMQ_EINVAL);
    o.prefetch = 8;
    assert_int_equal(acemq_consumer_open(&c, "memory:bad", NULL, store, &o), ACEMQ_EINVAL);
    assert_null(c);
    acemq_idem_close(store);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_id_takes_effect_once),
        cmocka_unit_test(a_handler_that_fails_twice_runs_three_times),
        cmocka_unit_test(always_failing_is_dead_lettered_with_its_reason),
        cmocka_unit_test(failures_counted_elsewhere_carry_over),
        cmocka_unit_test(a_message_without_a_key_never_runs_the_handler),
        cmocka_unit_test(a_header_key),
        cmocka_unit_test(in_progress_is_held_not_spun),
        cmocka_unit_test(acks_of_a_batch_leave_its_held_deliveries),
        cmocka_unit_test(a_lost_lease_is_counted_stale),
        cmocka_unit_test(the_audit_answers_confirmed_duplicates),
        cmocka_unit_test(a_long_handler_keeps_its_lease),
        cmocka_unit_test(bad_options_are_refused),
    };
    return cmocka_run_group_tests_name("consumer", tests, NULL, NULL);
}
