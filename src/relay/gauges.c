/* gauges.c — see gauges.h. */
#include "relay/gauges.h"

#include <errno.h>
#include <time.h>

#include "core/mono_time.h"

double acemq__gauges_now_ms(void)
{
    return (double)acemq__mono_us() / 1e3;
}

double acemq__gauges_interval_ms(double took_ms)
{
    double scaled = took_ms * ACEMQ__GAUGES_COST_FACTOR;
    return scaled > ACEMQ__GAUGES_MIN_INTERVAL_MS ? scaled : ACEMQ__GAUGES_MIN_INTERVAL_MS;
}

double acemq__gauges_refresh(acemq_outbox *ob, pthread_mutex_t *lock, acemq_relay_stats *stats)
{
    double t0 = acemq__gauges_now_ms();
    acemq_outbox_pending p;
    int rc = acemq_outbox_pending_count(ob, &p);
    double took = acemq__gauges_now_ms() - t0;
    if (rc != 0) return took;
    pthread_mutex_lock(lock);
    stats->pending = p.unclaimed + p.claimed;
    stats->dead = p.dead;
    stats->oldest_age_ms = p.oldest_age_ms;
    pthread_mutex_unlock(lock);
    return took;
}

static struct timespec at_ms(double ms)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(ms / 1e3);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    if (ts.tv_nsec < 0) ts.tv_nsec = 0;
    return ts;
}

static void *gauges_main(void *arg)
{
    acemq__gauges *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->quit) {
        pthread_mutex_unlock(&g->mu);
        double took = acemq__gauges_refresh(g->ob, g->stats_lock, g->stats);
        struct timespec due = at_ms(acemq__gauges_now_ms() + acemq__gauges_interval_ms(took));
        pthread_mutex_lock(&g->mu);
        while (!g->quit && pthread_cond_timedwait(&g->cv, &g->mu, &due) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int acemq__gauges_start(acemq__gauges *g, acemq_outbox *ob, pthread_mutex_t *stats_lock,
                        acemq_relay_stats *stats)
{
    *g = (acemq__gauges){.ob = ob, .stats_lock = stats_lock, .stats = stats};
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return ACEMQ_ENOMEM;
    int bad =
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 || pthread_cond_init(&g->cv, &ca) != 0;
    (void)pthread_condattr_destroy(&ca);
    if (bad) return ACEMQ_ENOMEM;
    if (pthread_mutex_init(&g->mu, NULL) != 0) {
        pthread_cond_destroy(&g->cv);
        return ACEMQ_ENOMEM;
    }
    if (pthread_create(&g->thread, NULL, gauges_main, g) != 0) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        return ACEMQ_ENOMEM;
    }
    return 0;
}

void acemq__gauges_stop(acemq__gauges *g)
{
    pthread_mutex_lock(&g->mu);
    g->quit = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}
