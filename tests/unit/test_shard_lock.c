/* test_shard_lock.c — the futex shard lock excludes: threads that add to a
 * shared count under it never lose an update, with the lock contended (more
 * threads than cores) so that the sleeping path runs too. Run under
 * ThreadSanitizer in CI, which also checks the lock's happens-before edges. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "os/shard_lock.h"

enum { THREADS = 8, ROUNDS = 200000 };

static acemq__shard_lock lock;
static long count; /* guarded by lock, deliberately not atomic */

static void *adder(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        acemq__shard_lock_take(&lock);
        long seen = count;
        if (i % 1024 == 0) sched_yield(); /* hold it a while now and then */
        count = seen + 1;
        acemq__shard_lock_give(&lock);
    }
    return NULL;
}

static void no_update_is_lost(void **state)
{
    (void)state;
    assert_int_equal(acemq__shard_lock_init(&lock), 0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, adder, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(count, (long)THREADS * ROUNDS);
    acemq__shard_lock_destroy(&lock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(no_update_is_lost)};
    return cmocka_run_group_tests_name("shard lock", tests, NULL, NULL);
}
