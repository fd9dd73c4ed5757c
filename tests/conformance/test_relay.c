/* test_relay.c — the relay's rules on the in-process broker, whose faults are
 * injected, over a real outbox: `test_relay sqlite|postgres`.
 *
 * Confirmed records are marked published; nacked and returned ones fail and
 * back off; when the outcome is unknown nothing is marked, and the lease hands
 * the record out again (a duplicate, never a loss); when the broker cannot be
 * reached the records are released. The clock is the fixture's manual one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "acemq/relay.h"
#include "backends/test_control.h"
#include "conformance/outbox_fixture.h"
#include "os/mono_time.h"
#include "outbox/outbox_backend.h"
#include "relay/relay_internal.h"

static int use_pg;
static int broker_seq;

typedef struct world {
    outbox_fixture f;
    acemq_outbox *ob;
    acemq_broker *b;     /* the relay's */
    acemq_broker *probe; /* the test's, on the same broker */
    acemq_relay *r;
} world;

static int setup(void **state)
{
    world *w = calloc(1, sizeof *w);
    if (!w) return -1;
    outbox_fixture_init(&w->f, use_pg);
    w->f.opts.jitter_percent = 0;
    w->f.opts.backoff_base_ms = 1000;
    w->f.opts.max_attempts = 3;
    w->ob = outbox_fixture_open(&w->f);
    char url[64];
    snprintf(url, sizeof url, "memory:relay-test-%d", ++broker_seq);
    if (acemq_broker_open(&w->b, url, NULL) != 0 || acemq_broker_open(&w->probe, url, NULL) != 0)
        return -1;
    acemq_relay_options o;
    acemq_relay_options_init(&o);
    o.batch = 10;
    o.lease_ms = 30000;
    if (acemq_relay_new(&w->r, w->ob, w->b, &o) != 0) return -1;
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world *w = *state;
    acemq_relay_free(w->r);
    acemq_broker_close(w->b);
    acemq_broker_close(w->probe);
    acemq_outbox_close(w->ob);
    outbox_fixture_free(&w->f);
    free(w);
    return 0;
}

static void add_n(world *w, int n, const char *destination, const char *key)
{
    outbox_sql(&w->f, NULL, "BEGIN");
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%s-%04d", destination, i);
        acemq_outbox_record r = {.id = id,
                                 .destination = destination,
                                 .routing_key = "rk",
                                 .ordering_key = key,
                                 .body = "b",
                                 .body_len = 1};
        assert_int_equal(outbox_add(&w->f, NULL, &r, NULL), 0);
    }
    outbox_sql(&w->f, NULL, "COMMIT");
}

/* Steps until a step claims nothing. */
static void drain(world *w)
{
    for (int guard = 0; guard < 100000; guard++) {
        size_t n = 0;
        int rc = acemq_relay_step(w->r, &n);
        if (rc != 0) fail_msg("step: %s: %s", acemq_err_name(rc), acemq_relay_errmsg(w->r));
        if (n == 0) return;
    }
    fail_msg("the relay never ran dry");
}

static void stored_id(world *w, size_t i, char *out, size_t cap)
{
    acemq__stored_msg m;
    assert_int_equal(acemq__memory_broker_get(w->probe, i, &m), 0);
    snprintf(out, cap, "%s", m.message_id);
}

static void everything_arrives_once_in_order(void **state)
{
    world *w = *state;
    add_n(w, 95, "orders", NULL);
    drain(w);
    assert_int_equal(acemq__memory_broker_count(w->probe), 95);
    for (size_t i = 0; i < 95; i++) {
        char got[256], want[32];
        stored_id(w, i, got, sizeof got);
        snprintf(want, sizeof want, "orders-%04zu", i);
        assert_string_equal(got, want);
    }
    acemq_relay_stats s;
    acemq_relay_stats_get(w->r, &s);
    assert_int_equal(s.published, 95);
    assert_int_equal(s.failed + s.unknown + s.released, 0);
    uint64_t timed = 0; /* the confirm latency histogram: one count per record published */
    for (int k = 0; k < ACEMQ_RELAY_LATENCY_BUCKETS; k++)
        timed += s.latency_count[k];
    assert_int_equal(timed, 95);
    acemq_outbox_pending p;
    assert_int_equal(acemq_outbox_pending_count(w->ob, &p), 0);
    assert_int_equal(p.unclaimed + p.claimed + p.dead, 0);
}

static void unroutable_fails_and_backs_off(void **state)
{
    world *w = *state;
    acemq__memory_broker_unroutable(w->probe, "nowhere");
    add_n(w, 1, "nowhere", NULL);
    drain(w);
    assert_int_equal(acemq__memory_broker_count(w->probe), 0);
    acemq_relay_stats s;
    acemq_relay_stats_get(w->r, &s);
    assert_int_equal(s.published, 0);
    assert_int_equal(s.returned, 1);
    assert_int_equal(s.failed, 1);
    /* Not published: it comes back after its back-off, twice more, then dies. */
    for (int attempt = 2; attempt <= 3; attempt++) {
        acemq_manual_clock_advance(w->f.clock, 60000);
        drain(w);
    }
    acemq_relay_stats_get(w->r, &s);
    assert_int_equal(s.returned, 3);
    const acemq_outbox_msg *m;
    size_t n;
    assert_int_equal(acemq_outbox_list_dead(w->ob, 10, &m, &n), 0);
    assert_int_equal(n, 1);
    assert_non_null(strstr(m[0].last_error, "returned: NO_ROUTE"));
}

static void nack_is_a_failure(void **state)
{
    world *w = *state;
    add_n(w, 3, "orders", NULL);
    acemq__memory_broker_fault(w->probe, ACEMQ__FAULT_NACK, 3, 0);
    drain(w);
    acemq_relay_stats s;
    acemq_relay_stats_get(w->r, &s);
    assert_int_equal(s.nacked, 3);
    assert_int_equal(s.published, 0);
    acemq_manual_clock_advance(w->f.clock, 1000);
    drain(w);
    acemq_relay_stats_get(w->r, &s);
    assert_int_equal(s.published, 3);
    assert_int_equal(acemq__memory_broker_count(w->probe), 3);
    acemq__stored_msg sm;
    assert_int_equal(acemq__memory_broker_get(w->probe, 0, &sm), 0);
    assert_int_equal(sm.attempts, 1); /* the attempt count travels with the message */
}

static void lost_confirms_mean_duplicates_not_losses(void **state)
{
    world *w = *state;
    add_n(w, 10, "orders", NULL);
    /* The connection drops after the broker took 4: their confirms are lost,
     * the other 6 were never sent. */
    acemq__memory_broker_fault(w->probe, ACEMQ__FAULT_DROP, 1, 4);
    drain(w);
    acemq_relay_stats s;
    acemq_relay_stats_get(w->r, &s);
    assert_int_equal(s.unknown, 10);
    assert_int_equal(s.published, 0);
    assert_int_equal(acemq__memory_broker_count(w->probe), 4);
    /* Nothing was marked: the leases run out and all ten go again. */
    acemq_manual_clock_advance(w->f.clock, 30000);
    drain(w);
    acemq_relay_stats_get(w->r, &s);
    assert_int_equal(s.published, 10);
    assert_int_equal(acemq__memory_broker_count(w->probe), 14); /* 4 duplicates, 0 lost */
    for (int i = 0; i < 10; i++) {
        char want[32];
        snprintf(want, sizeof want, "orders-%04d", i);
        int seen = 0;
        for (size_t k = 0; k < 14; k++) {
            char got[256];
            stored_id(w, k, got, sizeof got);
            seen += strcmp(got, want) == 0;
        }
        assert_true(seen == 1 || (seen == 2 && i < 4));
    }
}

static void confirm_timeout_marks_nothing(void **state)
{
    world *w = *state;
    add_n(w, 2, "orders", NULL);
    acemq__memory_broker_fault(w->probe, ACEMQ__FAULT_NO_CONFIRM, 1, 0);
    drain(w);
    acemq_outbox_pending p;
    assert_int_equal(acemq_outbox_pending_count(w->ob, &p), 0);
    assert_int_equal(p.claimed, 2); /* still held under the lease, unmarked */
    acemq_manual_clock_advance(w->f.clock, 30000);
    drain(w);
    assert_int_equal(acemq_outbox_pending_count(w->ob, &p), 0);
    assert_int_equal(p.unclaimed + p.claimed, 0);
}

static void unreachable_broker_releases(void **state)
{
    world *w = *state;
    add_n(w, 5, "orders", NULL);
    acemq__memory_broker_fault(w->probe, ACEMQ__FAULT_REFUSE, 1, 0);
    size_t n = 0;
    assert_int_equal(acemq_relay_step(w->r, &n), ACEMQ_EIO);
    assert_int_equal(n, 5);
    acemq_relay_stats s;
    acemq_relay_stats_get(w->r, &s);
    assert_int_equal(s.released, 5);
    /* Due again at once, with no attempt counted: nothing was sent. */
    drain(w);
    acemq_relay_stats_get(w->r, &s);
    assert_int_equal(s.published, 5);
    acemq__stored_msg sm;
    assert_int_equal(acemq__memory_broker_get(w->probe, 0, &sm), 0);
    assert_int_equal(sm.attempts, 0);
}

static void ordering_key_survives_a_failure(void **state)
{
    world *w = *state;
    add_n(w, 4, "orders", "customer-1");
    acemq__memory_broker_fault(w->probe, ACEMQ__FAULT_NACK, 1, 0);
    drain(w); /* orders-0000 fails; the rest of its key, claimed with it, is held back */
    assert_int_equal(acemq__memory_broker_count(w->probe), 0);
    acemq_relay_stats s;
    acemq_relay_stats_get(w->r, &s);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.released, 3);
    acemq_manual_clock_advance(w->f.clock, 1000);
    drain(w);
    assert_int_equal(acemq__memory_broker_count(w->probe), 4);
    for (size_t i = 0; i < 4; i++) {
        char got[256], want[32];
        stored_id(w, i, got, sizeof got);
        snprintf(want, sizeof want, "orders-%04zu", i);
        assert_string_equal(got, want);
    }
}

typedef struct runner {
    acemq_relay *r;
    volatile sig_atomic_t stop;
    int rc;
} runner;

static void *run_relay(void *arg)
{
    runner *x = arg;
    x->rc = acemq_relay_run(x->r, &x->stop);
    return NULL;
}

/* run() on a thread: as `acemq relay` runs it (acemq_relay_open, its own
 * handles: marker, claimer and gauges on threads of their own), or on the
 * world's one handle (acemq_relay_new). */
typedef struct pipe_run {
    acemq_outbox *own_gauge_ob; /* the relay's gauge handle, while the caller's is in its slot */
    acemq_relay *r;
    runner x;
    pthread_t t;
} pipe_run;

/* The relay's claims and marks, seen through their backend's methods,
 * wrapped on every handle the relay uses: how many run at once. The first
 * mark waits, up to half a second, for a claim to start beside it, which
 * one that may run then does: the main thread goes on while the marker
 * marks, and asks the claimer for the batch after next. */
static const acemq__outbox_methods *real_methods;
static acemq__outbox_methods watched_methods;
static atomic_int db_inside, db_most_inside, db_claims_started, db_first_mark_seen;

static void db_enter(void)
{
    int now = atomic_fetch_add(&db_inside, 1) + 1;
    int most = atomic_load(&db_most_inside);
    while (now > most && !atomic_compare_exchange_weak(&db_most_inside, &most, now)) {
    }
}

/* A claim, through the real method claim, counted. */
static int watched(int (*claim)(acemq_outbox *, size_t, int64_t, int64_t), acemq_outbox *h,
                   size_t max, int64_t lease_ms, int64_t now_ms)
{
    db_enter();
    atomic_fetch_add(&db_claims_started, 1);
    int rc = claim(h, max, lease_ms, now_ms);
    atomic_fetch_sub(&db_inside, 1);
    return rc;
}

static int watched_claim(acemq_outbox *h, size_t max, int64_t lease_ms, int64_t now_ms)
{
    return watched(real_methods->claim_batch, h, max, lease_ms, now_ms);
}

/* The relay claims through claim_runs (a key's due records together). */
static int watched_claim_runs(acemq_outbox *h, size_t max, int64_t lease_ms, int64_t now_ms)
{
    return watched(real_methods->claim_runs, h, max, lease_ms, now_ms);
}

static int watched_mark(acemq_outbox *h, const acemq_outbox_mark *marks, size_t n, int *status,
                        int64_t now_ms)
{
    db_enter();
    if (!atomic_exchange(&db_first_mark_seen, 1)) {
        int claims = atomic_load(&db_claims_started);
        for (int i = 0; i < 500 && atomic_load(&db_claims_started) == claims; i++)
            acemq__sleep_ms(1);
    }
    int rc = real_methods->mark_published(h, marks, n, status, now_ms);
    atomic_fetch_sub(&db_inside, 1);
    return rc;
}

static void watch_db(acemq_outbox *h)
{
    if (!real_methods) {
        real_methods = h->methods;
        watched_methods = *h->methods;
        watched_methods.claim_batch = watched_claim;
        watched_methods.claim_runs = watched_claim_runs;
        watched_methods.mark_published = watched_mark;
    }
    h->methods = &watched_methods;
}

/* How pipe_start_with runs the relay. */
typedef struct pipe_spec {
    size_t batch;
    int one_handle;         /* acemq_relay_new on the world's handle, not acemq_relay_open */
    acemq_outbox *gauge_ob; /* the caller's, put in the relay's gauge slot; or NULL */
    int watch_db;           /* every handle's claims and marks counted (watch_db) */
    int poll_ms;            /* acemq_relay_options.poll_ms; 0: 5 */
} pipe_spec;

static void pipe_start_with(world *w, pipe_run *p, const pipe_spec *spec)
{
    memset(p, 0, sizeof *p);
    acemq_relay_options o;
    acemq_relay_options_init(&o);
    o.batch = spec->batch;
    o.poll_ms = spec->poll_ms ? spec->poll_ms : 5;
    if (spec->one_handle)
        assert_int_equal(acemq_relay_new(&p->r, w->ob, w->b, &o), 0);
    else
        assert_int_equal(acemq_relay_open(&p->r, w->f.url, &w->f.opts, w->b, &o), 0);
    if (spec->gauge_ob) {
        acemq_outbox **slot = acemq__relay_outbox_slot(p->r, ACEMQ__RELAY_GAUGE);
        p->own_gauge_ob = *slot;
        *slot = spec->gauge_ob;
    }
    if (spec->watch_db) {
        const acemq__relay_handle watched_handles[] = {ACEMQ__RELAY_MAIN, ACEMQ__RELAY_MARK,
                                                       ACEMQ__RELAY_CLAIM};
        for (size_t i = 0; i < sizeof watched_handles / sizeof *watched_handles; i++) {
            acemq_outbox *h = *acemq__relay_outbox_slot(p->r, watched_handles[i]);
            if (h) watch_db(h);
        }
    }
    p->x.r = p->r;
    assert_int_equal(pthread_create(&p->t, NULL, run_relay, &p->x), 0);
}

static void pipe_start(world *w, pipe_run *p, size_t batch, int one_handle)
{
    pipe_start_with(w, p, &(pipe_spec){.batch = batch, .one_handle = one_handle});
}

/* Waits (bounded, on progress, not on time) until the counters reach
 * published and settled (published + failed + unknown). */
static void pipe_wait(pipe_run *p, uint64_t published, uint64_t settled)
{
    acemq_relay_stats s;
    for (int i = 0; i < 60000; i++) {
        acemq_relay_stats_get(p->r, &s);
        if (s.published >= published && s.published + s.failed + s.unknown >= settled) return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    fail_msg("the relay stalled at %llu published", (unsigned long long)s.published);
}

static void pipe_stop(pipe_run *p)
{
    acemq_relay_stop(p->r); /* *stop is for signal handlers; threads call this */
    pthread_join(p->t, NULL);
    assert_int_equal(p->x.rc, 0);
}

/* Frees the relay, its own handles back in their slots and unwatched. */
static void pipe_free(pipe_run *p)
{
    if (p->own_gauge_ob) *acemq__relay_outbox_slot(p->r, ACEMQ__RELAY_GAUGE) = p->own_gauge_ob;
    const acemq__relay_handle all[] = {ACEMQ__RELAY_MAIN, ACEMQ__RELAY_MARK, ACEMQ__RELAY_CLAIM,
                                       ACEMQ__RELAY_GAUGE};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        acemq_outbox *h = *acemq__relay_outbox_slot(p->r, all[i]);
        if (h && h->methods == &watched_methods) h->methods = real_methods;
    }
    acemq_relay_free(p->r);
}

/* run() pipelined (opened on the URL): marks trail the publishes by a
 * batch, claims run ahead, confirms stay in flight across batches; or run()
 * on one handle, a batch at a time. Either way every record goes once, in
 * order per key, with failures marked too. */
static void run_marks_everything(world *w, int one_handle)
{
    add_n(w, 300, "orders", NULL);
    add_n(w, 40, "keyed", "k");
    acemq__memory_broker_unroutable(w->probe, "nowhere");
    add_n(w, 2, "nowhere", NULL);
    pipe_run p;
    pipe_start(w, &p, 7, one_handle); /* many batches, so claims, sends and marks overlap often */
    pipe_wait(&p, 340, 342);
    pipe_stop(&p);
    acemq_relay_stats s;
    acemq_relay_stats_get(p.r, &s);
    assert_int_equal(s.published, 340);
    assert_int_equal(s.failed, 2);
    assert_int_equal(acemq__memory_broker_count(w->probe), 340);
    /* The keyed records arrived in their order. */
    int last = -1;
    for (size_t i = 0; i < 340; i++) {
        char got[256];
        stored_id(w, i, got, sizeof got);
        int k;
        if (sscanf(got, "keyed-%d", &k) == 1) {
            assert_true(k == last + 1);
            last = k;
        }
    }
    assert_int_equal(last, 39);
    acemq_outbox_pending q;
    assert_int_equal(acemq_outbox_pending_count(w->ob, &q), 0);
    assert_int_equal(q.claimed, 0); /* every mark was written before run returned */
    pipe_free(&p);
}

static void run_on_one_handle_marks_everything(void **state)
{
    run_marks_everything(*state, 1);
}

static void pipelined_run_marks_everything(void **state)
{
    run_marks_everything(*state, 0);
}

/* A backlog over many ordering keys: each claim takes one record per key
 * (a batch that is not full), and publishing them makes each key's next
 * record due. The relay claims again at once instead of waiting for its
 * poll, here an hour that no test outlives, so the backlog drains; each
 * key's records still arrive in their order. */
static void keyed_backlog_drains_without_waiting_for_the_poll(world *w, int one_handle)
{
    enum { KEYS = 20, PER_KEY = 15, TOTAL = KEYS * PER_KEY };
    outbox_sql(&w->f, NULL, "BEGIN");
    for (int i = 0; i < TOTAL; i++) {
        char id[32], key[32];
        snprintf(id, sizeof id, "order-%04d", i);
        snprintf(key, sizeof key, "customer-%02d", i % KEYS);
        acemq_outbox_record r = {.id = id,
                                 .destination = "orders",
                                 .routing_key = "rk",
                                 .ordering_key = key,
                                 .body = "b",
                                 .body_len = 1};
        assert_int_equal(outbox_add(&w->f, NULL, &r, NULL), 0);
    }
    outbox_sql(&w->f, NULL, "COMMIT");
    pipe_run p;
    pipe_start_with(w, &p,
                    &(pipe_spec){.batch = 100, .one_handle = one_handle, .poll_ms = 3600 * 1000});
    pipe_wait(&p, TOTAL, TOTAL);
    pipe_stop(&p);
    assert_int_equal(acemq__memory_broker_count(w->probe), TOTAL);
    int last[KEYS];
    for (int k = 0; k < KEYS; k++)
        last[k] = k - KEYS;
    for (size_t i = 0; i < TOTAL; i++) {
        char got[256];
        stored_id(w, i, got, sizeof got);
        int n;
        assert_int_equal(sscanf(got, "order-%d", &n), 1);
        assert_int_equal(n, last[n % KEYS] + KEYS); /* the next of its key */
        last[n % KEYS] = n;
    }
    pipe_free(&p);
}

static void keyed_backlog_drains_on_one_handle(void **state)
{
    keyed_backlog_drains_without_waiting_for_the_poll(*state, 1);
}

static void keyed_backlog_drains_pipelined(void **state)
{
    keyed_backlog_drains_without_waiting_for_the_poll(*state, 0);
}

/* How many times the broker holds id. */
static int times_stored(world *w, const char *id)
{
    int seen = 0;
    size_t n = acemq__memory_broker_count(w->probe);
    for (size_t k = 0; k < n; k++) {
        char got[256];
        stored_id(w, k, got, sizeof got);
        seen += strcmp(got, id) == 0;
    }
    return seen;
}

/* The connection drops while batch 2 is sent and batch 1's confirms are
 * still in flight (the broker holds them until collect): both batches are
 * UNKNOWN, nothing is marked or released, and after the leases every record
 * goes again: the 15 the broker took are duplicates, none is lost. */
static void pipelined_drop_leaves_both_batches(void **state)
{
    world *w = *state;
    add_n(w, 20, "orders", NULL);
    acemq__memory_broker_fault(w->probe, ACEMQ__FAULT_DROP, 1, 15);
    pipe_run p;
    pipe_start(w, &p, 10, 0);
    pipe_wait(&p, 0, 20);
    pipe_stop(&p);
    acemq_relay_stats s;
    acemq_relay_stats_get(p.r, &s);
    assert_int_equal(s.unknown, 20);
    assert_int_equal(s.published + s.failed + s.released, 0);
    assert_int_equal(acemq__memory_broker_count(w->probe), 15);
    acemq_outbox_pending q;
    assert_int_equal(acemq_outbox_pending_count(w->ob, &q), 0);
    assert_int_equal(q.claimed, 20); /* left to their leases */
    pipe_free(&p);
    acemq_manual_clock_advance(w->f.clock, 30000);
    drain(w);
    assert_int_equal(acemq__memory_broker_count(w->probe), 35);
    for (int i = 0; i < 20; i++) {
        char id[32];
        snprintf(id, sizeof id, "orders-%04d", i);
        assert_int_equal(times_stored(w, id), i < 15 ? 2 : 1);
    }
}

/* Nacks for three records of batch 2, decided while batch 1 is unconfirmed:
 * exactly those three fail and back off, the other 17 are published. */
static void pipelined_nack_fails_exactly_those(void **state)
{
    world *w = *state;
    add_n(w, 20, "orders", NULL);
    acemq__memory_broker_fault(w->probe, ACEMQ__FAULT_NACK, 3, 12);
    pipe_run p;
    pipe_start(w, &p, 10, 0);
    pipe_wait(&p, 17, 20);
    pipe_stop(&p);
    acemq_relay_stats s;
    acemq_relay_stats_get(p.r, &s);
    assert_int_equal(s.published, 17);
    assert_int_equal(s.nacked, 3);
    assert_int_equal(s.failed, 3);
    assert_int_equal(s.unknown, 0);
    pipe_free(&p);
    assert_int_equal(acemq__memory_broker_count(w->probe), 17);
    for (int i = 0; i < 20; i++) {
        char id[32];
        snprintf(id, sizeof id, "orders-%04d", i);
        assert_int_equal(times_stored(w, id), i >= 12 && i < 15 ? 0 : 1);
    }
    /* After their back-off the three go, attempt 1 on them. */
    acemq_manual_clock_advance(w->f.clock, 60000);
    drain(w);
    assert_int_equal(acemq__memory_broker_count(w->probe), 20);
    for (size_t k = 17; k < 20; k++) {
        acemq__stored_msg m;
        assert_int_equal(acemq__memory_broker_get(w->probe, k, &m), 0);
        assert_int_equal(m.attempts, 1);
        assert_non_null(strstr("orders-0012 orders-0013 orders-0014", m.message_id));
    }
}

/* Stopped mid-run: claiming stops, what was sent is confirmed and marked,
 * and a batch claimed ahead but never sent is released, so no record is
 * left waiting for a lease. */
static void stop_releases_what_was_claimed_ahead(void **state)
{
    world *w = *state;
    add_n(w, 1000, "orders", NULL);
    pipe_run p;
    pipe_start(w, &p, 10, 0);
    pipe_wait(&p, 100, 100);
    pipe_stop(&p);
    acemq_relay_stats s;
    acemq_relay_stats_get(p.r, &s);
    pipe_free(&p);
    assert_int_equal(s.unknown + s.failed, 0);
    assert_int_equal(acemq__memory_broker_count(w->probe), s.published);
    acemq_outbox_pending q;
    assert_int_equal(acemq_outbox_pending_count(w->ob, &q), 0);
    assert_int_equal(q.claimed, 0);
    assert_int_equal(q.unclaimed, 1000 - s.published);
    drain(w); /* the rest goes at once, with no lease to wait out */
    assert_int_equal(acemq__memory_broker_count(w->probe), 1000);
}

/* Adds n records and makes the first `dead` of them dead, as a record
 * that failed past its attempt limit is. */
static void add_with_dead(outbox_fixture *f, int n, int dead)
{
    outbox_sql(f, NULL, "BEGIN");
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%s-%04d", i < dead ? "dead" : "live", i);
        acemq_outbox_record r = {
            .id = id, .destination = "elsewhere", .routing_key = "rk", .body = "b", .body_len = 1};
        assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);
    }
    outbox_sql(f, NULL, "COMMIT");
    outbox_sql(f, NULL, "UPDATE acemq_outbox SET state = 2 WHERE id LIKE 'dead-%'");
}

/* Waits (bounded, on progress) until run() has counted pending and dead. */
static void gauges_wait(pipe_run *p, uint64_t pending, uint64_t dead)
{
    acemq_relay_stats s;
    for (int i = 0; i < 60000; i++) {
        acemq_relay_stats_get(p->r, &s);
        if (s.pending == pending && s.dead == dead) return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    fail_msg("the gauges stayed at %llu pending, %llu dead", (unsigned long long)s.pending,
             (unsigned long long)s.dead);
}

/* On one handle run() counts on it, between batches and once more before
 * it returns. The count that sees the outbox drained
 * comes a second after the first (the shortest interval), while run() still
 * runs. */
static void run_counts_its_own_outbox(void **state)
{
    world *w = *state;
    add_with_dead(&w->f, 2, 2);
    add_n(w, 30, "orders", NULL);
    pipe_run p;
    pipe_start(w, &p, 7, 1);
    pipe_wait(&p, 30, 30);
    gauges_wait(&p, 0, 2);
    pipe_stop(&p);
    acemq_relay_stats s;
    acemq_relay_stats_get(p.r, &s);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.dead, 2);
    pipe_free(&p);
}

/* Opened on a URL, the relay makes every count on its gauge handle and on
 * no other. The handle in that slot here is, unlike in use, on a second
 * outbox, whose counts (3
 * pending, 2 dead) the drained one never has: the gauges may read 0 before
 * the first count, and those counts after it, and nothing else (the main
 * loop counting would show the 300 being drained). */
static void gauges_are_counted_on_their_own_handle(void **state)
{
    world *w = *state;
    outbox_fixture other;
    outbox_fixture_init(&other, use_pg);
    add_with_dead(&other, 5, 2);
    acemq_outbox *gauge_ob = outbox_fixture_open(&other);
    add_n(w, 300, "orders", NULL);
    pipe_run p;
    pipe_start_with(w, &p, &(pipe_spec){.batch = 7, .gauge_ob = gauge_ob});
    acemq_relay_stats s;
    for (int i = 0; i < 60000; i++) {
        acemq_relay_stats_get(p.r, &s);
        assert_true((s.pending == 0 && s.dead == 0) || (s.pending == 3 && s.dead == 2));
        if (s.published >= 300) break;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    gauges_wait(&p, 3, 2); /* counted while run() runs, not only as it returns */
    pipe_stop(&p);
    acemq_relay_stats_get(p.r, &s);
    assert_int_equal(s.published, 300);
    assert_int_equal(s.pending, 3);
    assert_int_equal(s.dead, 2);
    pipe_free(&p);
    acemq_outbox_close(gauge_ob);
    outbox_fixture_free(&other);
}

/* Claims and marks never run at once: 300 records through run() with the
 * claimer and the marker, every handle of the relay watched. */
static void claims_and_marks_take_turns(void **state)
{
    world *w = *state;
    atomic_store(&db_inside, 0);
    atomic_store(&db_most_inside, 0);
    atomic_store(&db_claims_started, 0);
    atomic_store(&db_first_mark_seen, 0);
    add_n(w, 300, "orders", NULL);
    pipe_run p;
    pipe_start_with(w, &p, &(pipe_spec){.batch = 7, .watch_db = 1});
    pipe_wait(&p, 300, 300);
    pipe_stop(&p);
    assert_int_equal(acemq__memory_broker_count(w->probe), 300);
    pipe_free(&p);
    assert_true(atomic_load(&db_claims_started) > 0);
    assert_int_equal(atomic_load(&db_most_inside), 1);
}

int main(int argc, char **argv)
{
    use_pg = outbox_backend_from_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(everything_arrives_once_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(unroutable_fails_and_backs_off, setup, teardown),
        cmocka_unit_test_setup_teardown(nack_is_a_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(lost_confirms_mean_duplicates_not_losses, setup, teardown),
        cmocka_unit_test_setup_teardown(confirm_timeout_marks_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(unreachable_broker_releases, setup, teardown),
        cmocka_unit_test_setup_teardown(ordering_key_survives_a_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(run_on_one_handle_marks_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(pipelined_run_marks_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(keyed_backlog_drains_on_one_handle, setup, teardown),
        cmocka_unit_test_setup_teardown(keyed_backlog_drains_pipelined, setup, teardown),
        cmocka_unit_test_setup_teardown(pipelined_drop_leaves_both_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(pipelined_nack_fails_exactly_those, setup, teardown),
        cmocka_unit_test_setup_teardown(stop_releases_what_was_claimed_ahead, setup, teardown),
        cmocka_unit_test_setup_teardown(run_counts_its_own_outbox, setup, teardown),
        cmocka_unit_test_setup_teardown(gauges_are_counted_on_their_own_handle, setup, teardown),
        cmocka_unit_test_setup_teardown(claims_and_marks_take_turns, setup, teardown),
    };
    return cmocka_run_group_tests_name(use_pg ? "relay (postgres outbox)" : "relay (sqlite outbox)",
                                       tests, NULL, NULL);
}
