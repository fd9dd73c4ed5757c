/* keeper.c — the lease keeper: a thread that renews the claims the
 * consumer holds (a batch's, from its claim until its confirm or release)
 * about every third of the lease, so that a living consumer keeps its
 * claims however long its handlers run, and a dead one loses them when
 * their lease runs out. The store's handle is safe from several threads,
 * so the keeper renews on the consumer's store.
 *
 * Invariant, under k->lock: a slot is active exactly between add and
 * drop (or clear); its key and token are those of the claim it renews,
 * renewed_ms when the claim was taken or last renewed (monotonic); lost is
 * set when the store refused a renewal of that claim as stale.
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

/* The first active slot due for renewal, or -1. */
static int due_slot(const acemq__keeper *k, int64_t every)
{
    int64_t now = acemq__consumer_now_ms();
    for (size_t i = 0; i < k->n; i++)
        if (k->slot[i].active && now - k->slot[i].renewed_ms >= every) return (int)i;
    return -1;
}

/* Renews slot i outside the lock, so that add and drop never wait on the
 * store; the key is copied first, as a drop and an add may reuse the slot. */
static void renew_slot(acemq_consumer *c, acemq__keeper *k, int i)
{
    acemq__keeper_slot *s = &k->slot[i];
    uint64_t token = s->token;
    size_t len = s->key_len;
    char key[ACEMQ_IDEM_ID_MAX];
    memcpy(key, s->key, len);
    /* Marked renewed before the call, so a failing store is tried again a
     * period later, not in a loop. */
    s->renewed_ms = acemq__consumer_now_ms();
    pthread_mutex_unlock(&k->lock);
    int renewed = acemq_idem_renew(c->store, key, len, token, c->opts.lease_ms);
    pthread_mutex_lock(&k->lock);
    s = &k->slot[i];
    if (renewed == 0) {
        acemq__consumer_count(c, &c->stats.renewals);
    } else if (s->active && s->token == token) {
        if (renewed == ACEMQ_ESTALE) {
            s->lost = 1;
            s->active = 0; /* nothing left to renew */
            s->held = 1;   /* still the caller's until it drops it */
        }
        acemq__consumer_log(c, "renew_failed", "error", acemq_err_name(renewed), "reason",
                            acemq_idem_errmsg(c->store));
    }
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
         * add and drop need not wake it: a message costs them a lock. */
        struct timespec due = deadline_after(every / 2 > 0 ? every / 2 : 1);
        int rc = 0;
        while (!k->quit && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&k->wake, &k->lock, &due);
        for (int i; !k->quit && (i = due_slot(k, every)) >= 0;)
            renew_slot(c, k, i);
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
    for (size_t i = 0; i < k->n; i++)
        free(k->slot[i].key);
    free(k->slot);
    k->started = 0;
}

int acemq__keeper_add(acemq__keeper *k, const char *key, size_t key_len, uint64_t token)
{
    pthread_mutex_lock(&k->lock);
    size_t i = 0;
    while (i < k->n && (k->slot[i].active || k->slot[i].held))
        i++;
    if (i == k->n) {
        acemq__keeper_slot *s = realloc(k->slot, (k->n + 1) * sizeof *s);
        if (!s) {
            pthread_mutex_unlock(&k->lock);
            return -1;
        }
        k->slot = s;
        memset(&k->slot[k->n++], 0, sizeof *s);
    }
    acemq__keeper_slot *s = &k->slot[i];
    if (!s->key || key_len > s->key_cap) {
        char *p = realloc(s->key, key_len ? key_len : 1);
        if (!p) {
            pthread_mutex_unlock(&k->lock);
            return -1;
        }
        s->key = p;
        s->key_cap = key_len;
    }
    memcpy(s->key, key, key_len);
    s->key_len = key_len;
    s->token = token;
    s->lost = 0;
    s->active = 1;
    s->held = 1;
    s->renewed_ms = acemq__consumer_now_ms();
    pthread_mutex_unlock(&k->lock);
    return (int)i;
}

int acemq__keeper_drop(acemq__keeper *k, int slot)
{
    if (slot < 0) return 0;
    pthread_mutex_lock(&k->lock);
    acemq__keeper_slot *s = &k->slot[slot];
    int lost = s->lost;
    s->active = 0;
    s->held = 0;
    pthread_mutex_unlock(&k->lock);
    return lost;
}
