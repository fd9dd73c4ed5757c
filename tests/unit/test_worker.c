/* test_worker.c — the worker thread the relay's claimer, marker and gauges
 * run on (src/core/worker.h): it runs, shares its mutex and condition
 * variable with its starter, and is joined; a monotonic one's timed wait
 * ends at a deadline read on CLOCK_MONOTONIC. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <time.h>

#include <cmocka.h>

#include "relay/worker.h"

typedef struct job {
    acemq__worker w;
    int asked, done, quit, timed_out;
} job;

/* Answers each request until told to quit. */
static void *serve(void *arg)
{
    job *j = arg;
    pthread_mutex_lock(&j->w.mu);
    for (;;) {
        while (!j->asked && !j->quit)
            pthread_cond_wait(&j->w.cv, &j->w.mu);
        if (j->quit) break;
        j->asked = 0;
        j->done++;
        pthread_cond_broadcast(&j->w.cv);
    }
    pthread_mutex_unlock(&j->w.mu);
    return NULL;
}

/* A timed wait whose deadline, read on CLOCK_MONOTONIC, has passed: it
 * must end with ETIMEDOUT. (That the condition variable reads
 * CLOCK_MONOTONIC and not the wall clock no test here can tell without
 * timing: any monotonic reading is in the wall clock's past too. worker.c
 * refuses to start when the clock cannot be set.) */
static void *wait_past_deadline(void *arg)
{
    job *j = arg;
    struct timespec due;
    clock_gettime(CLOCK_MONOTONIC, &due);
    pthread_mutex_lock(&j->w.mu);
    int rc = 0;
    while (rc == 0)
        rc = pthread_cond_timedwait(&j->w.cv, &j->w.mu, &due);
    j->timed_out = rc;
    pthread_mutex_unlock(&j->w.mu);
    return NULL;
}

static void requests_are_answered_then_it_is_joined(void **state)
{
    (void)state;
    for (int monotonic = 0; monotonic < 2; monotonic++) {
        job j = {0};
        assert_int_equal(acemq__worker_start(&j.w, monotonic, serve, &j), 0);
        for (int i = 1; i <= 3; i++) {
            pthread_mutex_lock(&j.w.mu);
            j.asked = 1;
            pthread_cond_broadcast(&j.w.cv);
            while (j.done < i)
                pthread_cond_wait(&j.w.cv, &j.w.mu);
            pthread_mutex_unlock(&j.w.mu);
        }
        pthread_mutex_lock(&j.w.mu);
        j.quit = 1;
        pthread_cond_broadcast(&j.w.cv);
        pthread_mutex_unlock(&j.w.mu);
        acemq__worker_join(&j.w);
        assert_int_equal(j.done, 3);
    }
}

static void a_monotonic_worker_s_timed_wait_ends(void **state)
{
    (void)state;
    job j = {0};
    assert_int_equal(acemq__worker_start(&j.w, 1, wait_past_deadline, &j), 0);
    acemq__worker_join(&j.w);
    assert_int_equal(j.timed_out, ETIMEDOUT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(requests_are_answered_then_it_is_joined),
        cmocka_unit_test(a_monotonic_worker_s_timed_wait_ends),
    };
    return cmocka_run_group_tests_name("worker", tests, NULL, NULL);
}
