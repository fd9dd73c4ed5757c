/* test_idem_stampede.c — 16 threads race over the same 10,000 ids; for every
 * id exactly one of them must be told CLAIMED, whether they claim one id per
 * call or a batch per call (try_claim_many).
 * `test_idem_stampede memory|sqlite|postgres|redis`.
 *
 * Memory: all threads share one handle. The others: each thread opens its
 * own handle, so each has its own connection and the race is decided by
 * the database's locking, as between processes. Run under ThreadSanitizer in CI. */
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
#include "conformance/backends.h"

enum { THREADS = 16, IDS = 10000 };

static const char *backend;
static char url[512];
static acemq_manual_clock *clock_;
static acemq_idem *shared;
static atomic_int claims[IDS];
static atomic_int confirmed_dups;
static atomic_int failures;

typedef struct worker {
    int index;
    int batched;
    acemq_idem *store;
} worker;

enum { BATCH = 12 };

static acemq_idem *open_store(void)
{
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(clock_);
    o.synchronous = ACEMQ_SYNC_NORMAL; /* durability is not what this test is about */
    o.busy_timeout_ms = 60000;
    acemq_idem *h = NULL;
    int rc = acemq_idem_open(&h, url, &o);
    if (rc != 0) fail_msg("open %s: %s", url, acemq_strerror(rc));
    return h;
}

/* Counts one answer; confirms what was claimed. */
static void tally(worker *w, int i, const char *id, size_t len, int rc, const acemq_claim *c)
{
    if (rc == ACEMQ_CLAIMED) {
        atomic_fetch_add(&claims[i], 1);
        if (acemq_idem_confirm(w->store, id, len, c->token) != 0) atomic_fetch_add(&failures, 1);
    } else if (rc == ACEMQ_ALREADY_CONFIRMED) {
        atomic_fetch_add(&confirmed_dups, 1);
    } else if (rc != ACEMQ_IN_PROGRESS) {
        fprintf(stderr, "try_claim %.*s: %s (%s)\n", (int)len, id, acemq_strerror(rc),
                acemq_idem_errmsg(w->store));
        atomic_fetch_add(&failures, 1);
    }
}

/* The same walk as race(), BATCH ids per try_claim_many; every batch also
 * repeats its first id at its end, which must answer as a second call would
 * (never a second CLAIMED). */
static void *race_batched(void *arg)
{
    worker *w = arg;
    int stride = 2 * w->index + 1;
    while (stride % 5 == 0)
        stride += 2;
    char ids[BATCH + 1][32];
    int which[BATCH + 1];
    acemq_idem_key keys[BATCH + 1];
    acemq_claim out[BATCH + 1];
    int st[BATCH + 1];
    for (int n = 0; n < IDS; n += BATCH) {
        int k = IDS - n < BATCH ? IDS - n : BATCH;
        for (int j = 0; j < k; j++) {
            which[j] = (int)(((long)w->index * 613 + (long)(n + j) * stride) % IDS);
            int len = snprintf(ids[j], sizeof ids[j], "stampede-%05d", which[j]);
            keys[j].id = ids[j];
            keys[j].id_len = (size_t)len;
        }
        which[k] = which[0];
        keys[k] = keys[0];
        int rc = acemq_idem_try_claim_many(w->store, (size_t)k + 1, keys, NULL, out, st);
        if (rc < 0) {
            fprintf(stderr, "try_claim_many: %s\n", acemq_strerror(rc));
            atomic_fetch_add(&failures, 1);
            return NULL;
        }
        if (st[k] == ACEMQ_CLAIMED) atomic_fetch_add(&failures, 1); /* the repeat */
        for (int j = 0; j < k; j++)
            tally(w, which[j], keys[j].id, keys[j].id_len, st[j], &out[j]);
    }
    return NULL;
}

static void *race(void *arg)
{
    worker *w = arg;
    /* Each thread walks the ids from its own starting point and stride, so
     * the threads meet on every id in different orders. */
    /* 10,000 = 2^4 * 5^4: an odd stride that 5 does not divide visits every id once. */
    int stride = 2 * w->index + 1;
    while (stride % 5 == 0)
        stride += 2;
    for (int n = 0; n < IDS; n++) {
        int i = (int)(((long)w->index * 613 + (long)n * stride) % IDS);
        char id[32];
        int len = snprintf(id, sizeof id, "stampede-%05d", i);
        acemq_claim c;
        int rc = acemq_idem_try_claim(w->store, id, (size_t)len, NULL, &c);
        tally(w, i, id, (size_t)len, rc, &c);
    }
    return NULL;
}

/* batched: 0 every thread calls try_claim, 1 every thread try_claim_many,
 * 2 half and half. */
static void stampede(int batched)
{
    for (int i = 0; i < IDS; i++)
        atomic_store(&claims[i], 0);
    atomic_store(&confirmed_dups, 0);
    atomic_store(&failures, 0);
    shared = NULL;
    assert_int_equal(acemq_manual_clock_new(&clock_, 1700000000000LL), 0);
    assert_int_equal(test_backend_fresh_url(backend, url, sizeof url), 0);
    int per_thread_handles = strcmp(backend, "memory") != 0;
    if (!per_thread_handles) shared = open_store();

    pthread_t threads[THREADS];
    worker workers[THREADS];
    for (int t = 0; t < THREADS; t++) {
        workers[t].index = t;
        workers[t].batched = batched == 1 || (batched == 2 && t % 2 == 1);
        workers[t].store = per_thread_handles ? open_store() : shared;
    }
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, workers[t].batched ? race_batched : race,
                                        &workers[t]),
                         0);
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_join(threads[t], NULL), 0);

    assert_int_equal(atomic_load(&failures), 0);
    int missing = 0, doubled = 0;
    for (int i = 0; i < IDS; i++) {
        int n = atomic_load(&claims[i]);
        missing += n == 0;
        doubled += n > 1;
    }
    assert_int_equal(missing, 0);
    assert_int_equal(doubled, 0);

    /* The stores agree: every id is confirmed, and the handles' counters add up. */
    acemq_idem *check = per_thread_handles ? workers[0].store : shared;
    uint64_t claimed = 0;
    for (int t = 0; t < (per_thread_handles ? THREADS : 1); t++) {
        acemq_idem_stats s;
        assert_int_equal(acemq_idem_stats_get(workers[t].store, &s), 0);
        claimed += s.claimed;
        assert_int_equal(s.takeovers, 0);
    }
    assert_int_equal(claimed, IDS);
    for (int i = 0; i < IDS; i++) {
        char id[32];
        int len = snprintf(id, sizeof id, "stampede-%05d", i);
        assert_int_equal(acemq_idem_is_confirmed(check, id, (size_t)len), 1);
    }
    printf("# %s%s: %d ids, %d threads, %d duplicates answered ALREADY_CONFIRMED\n", backend,
           batched == 1   ? ", batches"
           : batched == 2 ? ", calls and batches"
                          : "",
           IDS, THREADS, atomic_load(&confirmed_dups));

    for (int t = 0; per_thread_handles && t < THREADS; t++)
        acemq_idem_close(workers[t].store);
    acemq_idem_close(shared);
    acemq_manual_clock_free(clock_);
}

static void exactly_one_claimer_per_id(void **state)
{
    (void)state;
    stampede(0);
}

static void exactly_one_claimer_per_id_batched(void **state)
{
    (void)state;
    stampede(1);
}

static void exactly_one_claimer_per_id_mixed(void **state)
{
    (void)state;
    stampede(2);
}

int main(int argc, char **argv)
{
    backend = test_backend_from_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exactly_one_claimer_per_id),
        cmocka_unit_test(exactly_one_claimer_per_id_batched),
        cmocka_unit_test(exactly_one_claimer_per_id_mixed),
    };
    char name[64];
    snprintf(name, sizeof name, "idem stampede (%s)", backend);
    return cmocka_run_group_tests_name(name, tests, NULL, NULL);
}
