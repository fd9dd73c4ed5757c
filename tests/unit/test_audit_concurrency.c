/* test_audit_concurrency.c — threads check interleaved streams on the
 * thread-safe audit, and on a shared queue of the connection audit; every
 * (producer, sequence) must be answered NEW exactly once. Run under
 * ThreadSanitizer in CI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "acemq/acemq.h"

enum { THREADS = 8, PRODUCERS = 32, SEQS = 3000, TOTAL = PRODUCERS * SEQS };

static acemq_audit *audit;
static acemq_conn_audit *conn;
static atomic_int news[TOTAL];
static atomic_int duplicates, others;
/* 1: the threads hand their ids to acemq_audit_check_many in batches. */
static int batched;
enum { BATCH = 50 }; /* divides TOTAL */

typedef struct worker {
    int index;
    pthread_t thread;
} worker;

/* Each thread walks every (producer, sequence) from its own starting point
 * with its own stride, so threads meet on each pair in different orders;
 * within one producer the sequences stay inside the window (depth > SEQS). */
static void *race(void *arg)
{
    const worker *w = arg;
    /* TOTAL = 96,000 = 2^8 * 3 * 5^3: a stride prime to 2, 3 and 5 visits every pair once. */
    long stride = 2L * w->index + 1;
    while (stride % 3 == 0 || stride % 5 == 0)
        stride += 2;
    char text[BATCH][64];
    const char *ids[BATCH];
    size_t lens[BATCH];
    int pair[BATCH], results[BATCH], causes[BATCH];
    for (long n = 0; n < TOTAL; n += BATCH) {
        for (int b = 0; b < BATCH; b++) {
            int i = (int)(((long)w->index * 7919 + (n + b) * stride) % TOTAL);
            int len = snprintf(text[b], sizeof text[b], "ID:host-%d-1700000000000-1:1:1:1:%d",
                               i % PRODUCERS, i / PRODUCERS + 1);
            ids[b] = text[b];
            lens[b] = (size_t)len;
            pair[b] = i;
            causes[b] = ACEMQ_AUDIT_CAUSE_NONE;
        }
        if (batched) {
            if (acemq_audit_check_many(audit, ids, lens, BATCH, results, causes) != 0)
                atomic_fetch_add(&others, BATCH);
        } else {
            for (int b = 0; b < BATCH; b++)
                results[b] = conn ? acemq_conn_audit_check(conn, ACEMQ_AUDIT_QUEUE, "orders",
                                                           "consumer", ids[b], lens[b], &causes[b])
                                  : acemq_audit_check(audit, ids[b], lens[b], &causes[b]);
        }
        for (int b = 0; b < BATCH; b++) {
            if (results[b] == ACEMQ_AUDIT_NEW && causes[b] == ACEMQ_AUDIT_CAUSE_NONE)
                atomic_fetch_add(&news[pair[b]], 1);
            else if (results[b] == ACEMQ_AUDIT_DUPLICATE)
                atomic_fetch_add(&duplicates, 1);
            else
                atomic_fetch_add(&others, 1);
        }
    }
    return NULL;
}

static void run_threads(void)
{
    for (int i = 0; i < TOTAL; i++)
        atomic_store(&news[i], 0);
    atomic_store(&duplicates, 0);
    atomic_store(&others, 0);
    worker w[THREADS];
    for (int t = 0; t < THREADS; t++) {
        w[t].index = t;
        assert_int_equal(pthread_create(&w[t].thread, NULL, race, &w[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_join(w[t].thread, NULL), 0);
    for (int i = 0; i < TOTAL; i++)
        if (atomic_load(&news[i]) != 1)
            fail_msg("pair %d answered NEW %d times", i, atomic_load(&news[i]));
    assert_int_equal(atomic_load(&others), 0);
    assert_int_equal(atomic_load(&duplicates), (THREADS - 1) * TOTAL);
}

static void exactly_once_new(uint32_t shards)
{
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.depth = 4096;
    o.policy = ACEMQ_AUDIT_FAIL_CLOSED;
    o.flags = ACEMQ_AUDIT_THREAD_SAFE;
    o.shards = shards;
    assert_int_equal(acemq_audit_new(&audit, &o), 0);
    run_threads();
    acemq_audit_stats s;
    assert_int_equal(acemq_audit_stats_get(audit, &s), 0);
    assert_true(s.checks == (uint64_t)THREADS * TOTAL);
    assert_true(s.news == TOTAL);
    assert_true(s.unknowns == 0);
    assert_true(s.evictions == 0);
    assert_true(s.producers == PRODUCERS);
    acemq_audit_free(audit);
    audit = NULL;
}

static void exactly_once_new_per_id(void **state)
{
    (void)state;
    exactly_once_new(8);
}

/* The same through the batch entry point: each thread's batches hold ids
 * of many producers, checked under each shard's lock in turn. */
static void exactly_once_new_batched(void **state)
{
    (void)state;
    batched = 1;
    exactly_once_new(8);
    batched = 0;
}

/* One shard: every check of every thread takes the same lock, so threads
 * wait for it and are woken (the futex lock's slow path on Linux). */
static void exactly_once_new_one_lock(void **state)
{
    (void)state;
    exactly_once_new(1);
}

/* The consumers of one queue share its audit across threads. */
static void exactly_once_new_per_queue(void **state)
{
    (void)state;
    acemq_conn_audit_options o;
    acemq_conn_audit_options_init(&o);
    o.audit.depth = 4096;
    o.audit.policy = ACEMQ_AUDIT_FAIL_CLOSED;
    o.audit.flags = ACEMQ_AUDIT_THREAD_SAFE;
    assert_int_equal(acemq_conn_audit_new(&conn, &o), 0);
    run_threads();
    acemq_audit_stats s;
    uint64_t audits = 0;
    assert_int_equal(acemq_conn_audit_stats_get(conn, &s, &audits), 0);
    assert_true(audits == 1);
    assert_true(s.news == TOTAL);
    acemq_conn_audit_free(conn);
    conn = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exactly_once_new_per_id),
        cmocka_unit_test(exactly_once_new_one_lock),
        cmocka_unit_test(exactly_once_new_batched),
        cmocka_unit_test(exactly_once_new_per_queue),
    };
    return cmocka_run_group_tests_name("audit concurrency", tests, NULL, NULL);
}
