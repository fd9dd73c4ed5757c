/* keeper.c — the lease keeper: a thread that renews the claim of the
 * message in the handler's hands about every third of the lease, so that a
 * living handler keeps its claim however long it runs, and a dead one
 * loses it when its lease runs out. The store's handle is safe from
 * several threads, so the keeper renews on the consumer's store.
 *
 * Invariant, under k->lock: active is set exactly between begin and end;
 * key and token are those of the claim being renewed, renewed_ms when it
 * was taken or last renewed (monotonic); lost is set when the store refused
 * a renewal of that claim as stale, and is read by end.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "consumer/consumer_internal.h"

static struct timespec deadline_after(int64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static void *keeper_main(void *arg)
{
    acemq_consumer *c = arg;
    acemq__keeper *k = &c->keeper;
    int64_t every = c->opts.lease_ms / 3 > 0 ? c->opts.lease_ms / 3 : 1;
    pthread_mutex_lock(&k->lock);
    while (!k->quit) {
        /* It looks twice per renewal period, so a claim is renewed between
         * one third and one half of a lease after its last renewal, and
         * begin and end need not wake it: a message costs them a lock. */
        struct timespec due = deadline_after(every / 2 > 0 ? every / 2 : 1);
        int rc = 0;
        while (!k->quit && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&k->wake, &k->lock, &due);
        if (k->quit) break;
        if (!k->active || acemq__consumer_now_ms() - k->renewed_ms < every) continue;
        /* Renewed outside the lock, so that end never waits on the store;
         * the key is copied first, as the next begin reuses the buffer. */
        uint64_t token = k->token;
        size_t len = k->key_len;
        char key[ACEMQ_IDEM_ID_MAX];
        memcpy(key, k->key, len);
        pthread_mutex_unlock(&k->lock);
        int renewed = acemq_idem_renew(c->store, key, len, token, c->opts.lease_ms);
        pthread_mutex_lock(&k->lock);
        if (renewed == 0) {
            if (k->active && k->token == token) k->renewed_ms = acemq__consumer_now_ms();
            acemq__consumer_count(c, &c->stats.renewals);
        } else if (k->active && k->token == token) {
            if (renewed == ACEMQ_ESTALE) k->lost = 1;
            /* Another error: tried again at the next look, while the
             * lease still has half or more to run. */
            acemq__consumer_log(c, "renew_failed", "error", acemq_err_name(renewed), "reason",
                                acemq_idem_errmsg(c->store));
        }
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

int acemq__keeper_start(acemq_consumer *c)
{
    acemq__keeper *k = &c->keeper;
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) return ACEMQ_ENOMEM;
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&k->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) return ACEMQ_ENOMEM;
    if (pthread_mutex_init(&k->lock, NULL) != 0) {
        pthread_cond_destroy(&k->wake);
        return ACEMQ_ENOMEM;
    }
    if (pthread_create(&k->thread, NULL, keeper_main, c) != 0) {
        pthread_mutex_destroy(&k->lock);
        pthread_cond_destroy(&k->wake);
        return ACEMQ_ENOMEM;
    }
    k->started = 1;
    return 0;
}

void acemq__keeper_stop(acemq__keeper *k)
{
    if (!k->started) return;
    pthread_mutex_lock(&k->lock);
    k->quit = 1;
    pthread_cond_signal(&k->wake);
    pthread_mutex_unlock(&k->lock);
    pthread_join(k->thread, NULL);
    pthread_mutex_destroy(&k->lock);
    pthread_cond_destroy(&k->wake);
    free(k->key);
    k->started = 0;
}

int acemq__keeper_begin(acemq__keeper *k, const char *key, size_t key_len, uint64_t token)
{
    pthread_mutex_lock(&k->lock);
    if (key_len > k->key_cap) {
        char *p = realloc(k->key, key_len);
        if (!p) {
            pthread_mutex_unlock(&k->lock);
            return ACEMQ_ENOMEM;
        }
        k->key = p;
        k->key_cap = key_len;
    }
    memcpy(k->key, key, key_len);
    k->key_len = key_len;
    k->token = token;
    k->lost = 0;
    k->active = 1;
    k->renewed_ms = acemq__consumer_now_ms();
    pthread_mutex_unlock(&k->lock);
    return 0;
}

int acemq__keeper_end(acemq__keeper *k)
{
    pthread_mutex_lock(&k->lock);
    k->active = 0;
    int lost = k->lost;
    pthread_mutex_unlock(&k->lock);
    return lost;
}
