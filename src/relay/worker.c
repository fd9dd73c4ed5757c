/* worker.c — see worker.h. */
#include "relay/worker.h"

#include <time.h>

static int cond_init(pthread_cond_t *cv, int monotonic)
{
    if (!monotonic) return pthread_cond_init(cv, NULL) == 0 ? 0 : -1;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    int bad =
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 || pthread_cond_init(cv, &ca) != 0;
    (void)pthread_condattr_destroy(&ca);
    return bad ? -1 : 0;
}

int acemq__worker_start(acemq__worker *w, int monotonic, void *(*main)(void *), void *arg)
{
    if (pthread_mutex_init(&w->mu, NULL) != 0) return -1;
    if (cond_init(&w->cv, monotonic) != 0) {
        pthread_mutex_destroy(&w->mu);
        return -1;
    }
    if (pthread_create(&w->thread, NULL, main, arg) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        return -1;
    }
    return 0;
}

void acemq__worker_join(acemq__worker *w)
{
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}
