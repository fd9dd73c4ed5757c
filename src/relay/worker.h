/* worker.h — a thread and the mutex and condition variable it shares with
 * whoever started it (the relay's claimer, marker and gauges): started with
 * every step undone on failure, joined and destroyed in one call.
 */
#ifndef ACEMQ_RELAY_WORKER_H
#define ACEMQ_RELAY_WORKER_H

#include <pthread.h>

typedef struct acemq__worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} acemq__worker;

/* Initialises mu and cv, then runs main(arg) on a new thread, which may
 * take mu at once. With monotonic, timed waits on cv run on
 * CLOCK_MONOTONIC, which a step of the wall clock does not stretch or cut.
 * 0, or -1 with nothing left to destroy. */
int acemq__worker_start(acemq__worker *w, int monotonic, void *(*main)(void *), void *arg);

/* Joins the thread, which the caller has told to return, and destroys mu
 * and cv. */
void acemq__worker_join(acemq__worker *w);

#endif
