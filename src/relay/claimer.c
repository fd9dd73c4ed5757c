/* claimer.c — the relay's claim thread; see claimer.h. */
#include "relay/claimer.h"

#include <pthread.h>

static void *claimer_main(void *arg)
{
    acemq__claimer *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->w.mu);
        while (c->asked < 0 && !c->quit)
            pthread_cond_wait(&c->w.cv, &c->w.mu);
        if (c->asked < 0) {
            pthread_mutex_unlock(&c->w.mu);
            return NULL;
        }
        int i = c->asked;
        pthread_mutex_unlock(&c->w.mu);
        size_t n = 0;
        int rc = c->claim(c->ctx, i, &n);
        pthread_mutex_lock(&c->w.mu);
        c->asked = -1;
        c->answered = 1;
        c->rc = rc;
        c->n = n;
        pthread_cond_broadcast(&c->w.cv);
        pthread_mutex_unlock(&c->w.mu);
    }
}

void acemq__claimer_ask(acemq__claimer *c, int i)
{
    pthread_mutex_lock(&c->w.mu);
    c->asked = i;
    c->asked_flight = i;
    c->answered = 0;
    pthread_cond_broadcast(&c->w.cv);
    pthread_mutex_unlock(&c->w.mu);
}

int acemq__claimer_take(acemq__claimer *c, int *i, size_t *n)
{
    pthread_mutex_lock(&c->w.mu);
    while (!c->answered)
        pthread_cond_wait(&c->w.cv, &c->w.mu);
    c->answered = 0;
    *i = c->asked_flight;
    *n = c->n;
    int rc = c->rc;
    c->asked_flight = -1;
    pthread_mutex_unlock(&c->w.mu);
    return rc;
}

int acemq__claimer_start(acemq__claimer *c, int (*claim)(void *ctx, int i, size_t *n),
                         void (*release)(void *ctx, int i), void *ctx)
{
    *c = (acemq__claimer){
        .claim = claim, .release = release, .ctx = ctx, .asked = -1, .asked_flight = -1};
    return acemq__worker_start(&c->w, 0, claimer_main, c) != 0 ? -1 : 0;
}

void acemq__claimer_stop(acemq__claimer *c)
{
    if (c->asked_flight >= 0) {
        int i;
        size_t n;
        if (acemq__claimer_take(c, &i, &n) == 0 && n > 0) c->release(c->ctx, i);
    }
    pthread_mutex_lock(&c->w.mu);
    c->quit = 1;
    pthread_cond_broadcast(&c->w.cv);
    pthread_mutex_unlock(&c->w.mu);
    acemq__worker_join(&c->w);
}
