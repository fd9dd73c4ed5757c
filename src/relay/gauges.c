/* gauges.c — see gauges.h. */
#include "relay/gauges.h"

#include <errno.h>
#include <time.h>

#include "os/mono_time.h"

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
    pthread_mutex_lock(&g->w.mu);
    while (!g->quit) {
        pthread_mutex_unlock(&g->w.mu);
        double took = acemq__gauges_refresh(g->ob, g->stats_lock, g->stats);
        struct timespec due = at_ms(acemq__gauges_now_ms() + acemq__gauges_interval_ms(took));
        pthread_mutex_lock(&g->w.mu);
        while (!g->quit && pthread_cond_timedwait(&g->w.cv, &g->w.mu, &due) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&g->w.mu);
    return NULL;
}

int acemq__gauges_start(acemq__gauges *g, acemq_outbox *ob, pthread_mutex_t *stats_lock,
                        acemq_relay_stats *stats)
{
    *g = (acemq__gauges){.ob = ob, .stats_lock = stats_lock, .stats = stats};
    return acemq__worker_start(&g->w, 1, gauges_main, g) == 0 ? 0 : ACEMQ_ENOMEM;
}

void acemq__gauges_stop(acemq__gauges *g)
{
    pthread_mutex_lock(&g->w.mu);
    g->quit = 1;
    pthread_cond_broadcast(&g->w.cv);
    pthread_mutex_unlock(&g->w.mu);
    acemq__worker_join(&g->w);
}
