/* deliver.c — a batch of deliveries (those in hand at once, up to
 * ACEMQ__BATCH_MAX), from their keys to their settlement: the audit, one
 * claim call for the batch, the handlers in delivery order with the lease
 * keeper renewing every claim, one confirm call for the batch, then
 * acknowledge, the whole batch's acks in one write at the end; or release
 * and retry, hold, dead-letter. A batch costs the store two round trips
 * (two commits), not two per message.
 *
 * Nothing is acknowledged before the store has the message confirmed (or
 * confirmed already), and nothing unconfirmed is acknowledged except when
 * it moves on as a confirmed copy (a retry or a dead letter). The audit's
 * bit for a key stays set only once the store confirmed the key: a check
 * sets it, and every path that does not end in a confirmation rolls it
 * back, so an audit hit means "confirmed".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "consumer/consumer_internal.h"

/* What became of an item so far. */
enum { SETTLED, TO_CLAIM, TO_CONFIRM, SAME_KEY };

/* One delivery of a batch. */
typedef struct item {
    acemq_delivery *d;
    acemq_delivery view; /* d as first published (message.c) */
    json_t *origin;      /* the headers view points into, or NULL */
    acemq_consumer_msg m;
    char *key;
    int checked; /* the audit's bit for key is set: roll it back unless confirmed */
    int state;
    int status;      /* try_claim's answer */
    int slot;        /* the keeper's, while claimed */
    size_t same_key; /* SAME_KEY: the earlier item that claimed this key */
    int confirmed;   /* the store confirmed this item's claim: it ended processed */
    acemq_claim claim;
} item;

static double elapsed_ms(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The wait before attempt failures + 1: retry_delay_ms doubled for each
 * failure after the first, at most retry_delay_max_ms. */
static int backoff_ms(const acemq_consumer *c, int failures)
{
    int64_t d = c->opts.retry_delay_ms;
    for (int i = 1; i < failures && d < c->opts.retry_delay_max_ms; i++)
        d *= 2;
    return (int)(d < c->opts.retry_delay_max_ms ? d : c->opts.retry_delay_max_ms);
}

/* Keeps the first broken connection's error of a batch. */
static void keep(int *rc, int r)
{
    if (*rc == 0 && r != 0) *rc = r;
}

/* Holds d to be given back after in_progress_delay_ms; when the list
 * cannot grow, gives it back now. */
static int hold_or_requeue(acemq_consumer *c, acemq_delivery *d)
{
    if (acemq__consumer_hold(c, d, c->opts.in_progress_delay_ms, 0, 0, NULL) == 0) return 0;
    return acemq__consumer_requeue(c, d);
}

static void audit_forget(acemq_consumer *c, item *it)
{
    if (it->checked) (void)acemq_audit_rollback(c->opts.audit, it->key, it->m.key_len);
    it->checked = 0;
}

/* Settles it one way: the item is done. */
static int ack(acemq_consumer *c, item *it)
{
    it->state = SETTLED;
    return acemq__consumer_ack(c, it->d);
}

static int hold(acemq_consumer *c, item *it)
{
    audit_forget(c, it);
    it->state = SETTLED;
    return hold_or_requeue(c, it->d);
}

static int duplicate(acemq_consumer *c, item *it, const void *result, size_t len)
{
    acemq__consumer_count(c, &c->stats.duplicates);
    if (c->opts.on_duplicate) c->opts.on_duplicate(c->opts.ctx, &it->m, result, len);
    return ack(c, it);
}

static int store_error(acemq_consumer *c, item *it, int rc, const char *event)
{
    acemq__consumer_count(c, &c->stats.store_errors);
    acemq__consumer_log(c, event, "error", acemq_err_name(rc), "reason",
                        acemq_idem_errmsg(c->store));
    return hold(c, it);
}

/* 1 when an earlier item of the batch set the audit's bit for item i's key. */
static int checked_before(const item *all, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (all[j].checked && all[j].m.key_len == all[i].m.key_len &&
            memcmp(all[j].key, all[i].key, all[i].m.key_len) == 0)
            return 1;
    return 0;
}

/* Before the store: a message that failed max_attempts times is done with
 * the handler (it is here again only because its dead letter was refused
 * and it waited in the queue to try again); a message without a key goes
 * to the dead-letter exchange; the audit answers a confirmed duplicate.
 * Anything else is left TO_CLAIM. */
static int prepare(acemq_consumer *c, item *all, size_t i)
{
    item *it = &all[i];
    acemq_delivery *d = it->d;
    int failures = acemq__consumer_failures_of(d);
    if (failures >= c->opts.max_attempts) {
        char *last = acemq__consumer_error_of(d);
        char reason[100];
        snprintf(reason, sizeof reason, "failed %d times", failures);
        it->state = SETTLED;
        int rc = acemq__consumer_dead_letter(c, d, last ? last : reason, failures);
        free(last);
        return rc;
    }
    it->origin = acemq__consumer_as_published(d, &it->view);
    size_t len = 0;
    const char *why = NULL;
    int rc = acemq__consumer_key(c->key_expr, &it->view, &it->key, &len, &why);
    if (rc == ACEMQ_ENOMEM) return hold(c, it);
    if (rc != 0) {
        char reason[300];
        snprintf(reason, sizeof reason, "no key (%s): %s", c->key_expr, why);
        acemq__consumer_log(c, "no_key", "reason", reason, NULL, NULL);
        it->state = SETTLED;
        return acemq__consumer_dead_letter(c, d, reason, failures);
    }
    it->m = (acemq_consumer_msg){&it->view, it->key, len, 0, failures};
    if (c->opts.audit) {
        int r = acemq_audit_check(c->opts.audit, it->key, len, NULL);
        /* A hit on a bit an earlier delivery of this batch set is no
         * confirmation yet: that one is still to be claimed and handled. */
        if (r == ACEMQ_AUDIT_DUPLICATE && !checked_before(all, i)) return duplicate(c, it, NULL, 0);
        it->checked = r == ACEMQ_AUDIT_NEW || r == ACEMQ_AUDIT_UNKNOWN;
    }
    it->state = TO_CLAIM;
    return 0;
}

/* A handler that failed: release, then retry after the back-off, or
 * dead-letter past max_attempts. */
static int failed(acemq_consumer *c, item *it)
{
    audit_forget(c, it);
    acemq__consumer_count(c, &c->stats.failed);
    int rc = acemq_idem_release(c->store, it->key, it->m.key_len, it->m.token);
    if (rc != 0 && rc != ACEMQ_ESTALE)
        acemq__consumer_log(c, "release_failed", "key", it->key, "reason",
                            acemq_idem_errmsg(c->store));
    const char *why = c->reason[0] ? c->reason : "the handler failed";
    int failures = it->m.failures + 1;
    acemq__consumer_log(c, "failed", "key", it->key, "reason", why);
    it->state = SETTLED;
    if (failures >= c->opts.max_attempts)
        return acemq__consumer_dead_letter(c, it->d, why, failures);
    if (acemq__consumer_hold(c, it->d, backoff_ms(c, failures), 1, failures, NULL) == 0) return 0;
    return acemq__consumer_retry(c, it->d, failures, NULL);
}

/* Another consumer took the claim over (with its own copy of the
 * message): it does the work; ours is acknowledged, its effect the
 * documented at-least-once case unless the inbox rolled it back. */
static int stale(acemq_consumer *c, item *it)
{
    audit_forget(c, it);
    acemq__consumer_count(c, &c->stats.stale);
    acemq__consumer_log(c, "stale", "key", it->key, NULL, NULL);
    return ack(c, it);
}

static int processed(acemq_consumer *c, item *it)
{
    it->confirmed = 1;
    acemq__consumer_count(c, &c->stats.processed);
    if (c->opts.verbose) acemq__consumer_log(c, "processed", "key", it->key, NULL, NULL);
    return ack(c, it);
}

/* Runs the handler on a claimed item: TO_CONFIRM on success, unless the
 * handler confirmed it itself (then settled here), or settled as failed. */
static int run_handler(acemq_consumer *c, item *it)
{
    c->confirmed = 0;
    c->stale = 0;
    c->reason[0] = '\0';
    c->current_slot = it->slot;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ok = c->opts.handler(c->opts.ctx, c, &it->m) == 0;
    acemq__consumer_latency(c, elapsed_ms(&t0));
    c->current_slot = -1;
    /* An inbox handler that fails rolls its transaction back, and the
     * confirm written in it with it. */
    if (!ok && c->opts.inbox) c->confirmed = 0;
    if (c->stale) {
        it->slot = -1; /* dropped by acemq_consumer_confirm */
        return stale(c, it);
    }
    if (c->confirmed) {
        it->slot = -1;
        return processed(c, it);
    }
    if (!ok) {
        if (acemq__keeper_drop(&c->keeper, it->slot))
            acemq__consumer_log(c, "lease_lost", "key", it->key, NULL, NULL);
        it->slot = -1;
        return failed(c, it);
    }
    it->state = TO_CONFIRM;
    return 0;
}

/* The batch handler on every claimed item at once: TO_CONFIRM for each
 * success, failed() for each failure. */
static int run_batch_handler(acemq_consumer *c, item *it, size_t n)
{
    acemq_consumer_msg m[ACEMQ__BATCH_MAX];
    acemq_consumer_outcome out[ACEMQ__BATCH_MAX];
    size_t at[ACEMQ__BATCH_MAX], k = 0;
    for (size_t i = 0; i < n; i++)
        if (it[i].state == TO_CLAIM && it[i].status == ACEMQ_CLAIMED) {
            m[k] = it[i].m;
            out[k] = (acemq_consumer_outcome){1, "the batch handler left it unanswered"};
            at[k++] = i;
        }
    if (k == 0) return 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    c->opts.batch_handler(c->opts.ctx, c, m, k, out);
    double ms = elapsed_ms(&t0);
    int rc = 0;
    for (size_t j = 0; j < k; j++) {
        item *x = &it[at[j]];
        acemq__consumer_latency(c, ms);
        if (!out[j].failed) {
            x->state = TO_CONFIRM;
            continue;
        }
        if (acemq__keeper_drop(&c->keeper, x->slot))
            acemq__consumer_log(c, "lease_lost", "key", x->key, NULL, NULL);
        x->slot = -1;
        if (out[j].failed == 2) { /* never handled: back to the queue, uncounted */
            (void)acemq_idem_release(c->store, x->key, x->m.key_len, x->m.token);
            audit_forget(c, x);
            x->state = SETTLED;
            keep(&rc, acemq__consumer_requeue(c, x->d));
            continue;
        }
        snprintf(c->reason, sizeof c->reason, "%s", out[j].why ? out[j].why : "");
        keep(&rc, failed(c, x));
    }
    return rc;
}

/* The claims of the batch's TO_CLAIM items in one call; each claimed one
 * handed to the keeper at once, so that none runs out while earlier
 * handlers run. */
static void claim_all(acemq_consumer *c, item *it, size_t n)
{
    acemq_idem_key keys[ACEMQ__BATCH_MAX];
    acemq_claim_opts opts[ACEMQ__BATCH_MAX];
    acemq_claim out[ACEMQ__BATCH_MAX];
    int status[ACEMQ__BATCH_MAX];
    size_t at[ACEMQ__BATCH_MAX], k = 0;
    for (size_t i = 0; i < n; i++) {
        if (it[i].state != TO_CLAIM) continue;
        keys[k] = (acemq_idem_key){it[i].key, it[i].m.key_len};
        memset(&opts[k], 0, sizeof opts[k]);
        opts[k].lease_ms = c->opts.lease_ms;
        /* One result buffer: only the batch's last duplicate with a result
         * could use it, so results are fetched for one id at a time. */
        at[k++] = i;
    }
    int rc = k ? acemq_idem_try_claim_many(c->store, k, keys, opts, out, status) : 0;
    for (size_t j = 0; j < k; j++) {
        item *x = &it[at[j]];
        x->status = rc < 0 ? rc : status[j];
        x->claim = out[j];
        x->slot = -1;
        if (x->status == ACEMQ_CLAIMED) {
            x->m.token = out[j].token;
            x->slot = acemq__keeper_add(&c->keeper, x->key, x->m.key_len, x->m.token);
        }
    }
}

/* A duplicate the store holds a result for: fetched alone, into the
 * consumer's one result buffer, for on_duplicate. */
static int duplicate_with_result(acemq_consumer *c, item *it)
{
    if (!c->opts.on_duplicate || !it->claim.has_result) return duplicate(c, it, NULL, 0);
    acemq_claim_opts o = {0};
    o.result_buf = c->result;
    o.result_cap = ACEMQ_IDEM_RESULT_MAX;
    acemq_claim again;
    int rc = acemq_idem_try_claim(c->store, it->key, it->m.key_len, &o, &again);
    if (rc == ACEMQ_ALREADY_CONFIRMED && again.has_result)
        return duplicate(c, it, c->result, again.result_len);
    /* Its retention ran out in between: the claim just taken is given back
     * (the message was confirmed when this delivery asked). */
    if (rc == ACEMQ_CLAIMED)
        (void)acemq_idem_release(c->store, it->key, it->m.key_len, again.token);
    return duplicate(c, it, NULL, 0);
}

/* The earlier item in the batch that claimed the same key, or n. */
static size_t claimed_before(const item *it, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (it[j].status == ACEMQ_CLAIMED && it[j].m.key_len == it[i].m.key_len &&
            memcmp(it[j].key, it[i].key, it[i].m.key_len) == 0)
            return j;
    return i;
}

/* The TO_CONFIRM items' confirms in one call; each settled by its answer. */
static void confirm_all(acemq_consumer *c, item *it, size_t n, int *rc)
{
    acemq_idem_confirmation conf[ACEMQ__BATCH_MAX];
    int status[ACEMQ__BATCH_MAX];
    size_t at[ACEMQ__BATCH_MAX], k = 0;
    for (size_t i = 0; i < n; i++) {
        if (it[i].state != TO_CONFIRM) continue;
        /* No renewal may land after the confirm: it would find the claim
         * confirmed and count the lease lost. */
        if (acemq__keeper_drop(&c->keeper, it[i].slot))
            acemq__consumer_log(c, "lease_lost", "key", it[i].key, NULL, NULL);
        it[i].slot = -1;
        conf[k] = (acemq_idem_confirmation){it[i].key, it[i].m.key_len, it[i].m.token, NULL, 0};
        at[k++] = i;
    }
    int r = k ? acemq_idem_confirm_many(c->store, k, conf, status) : 0;
    for (size_t j = 0; j < k; j++) {
        item *x = &it[at[j]];
        int s = r < 0 ? r : status[j];
        if (s == 0)
            keep(rc, processed(c, x));
        else if (s == ACEMQ_ESTALE)
            keep(rc, stale(c, x));
        else
            /* The confirm's fate is unknown: the message goes back, and the
             * claim, confirmed or held until its lease ends, decides the
             * redelivery. */
            keep(rc, store_error(c, x, s, "confirm_failed"));
    }
}

int acemq__consumer_deliver(acemq_consumer *c, acemq_delivery **ds, size_t n)
{
    item it[ACEMQ__BATCH_MAX];
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        memset(&it[i], 0, sizeof it[i]);
        it[i].d = ds[i];
        it[i].slot = -1;
        keep(&rc, prepare(c, it, i));
    }
    claim_all(c, it, n);
    if (c->opts.batch_handler) keep(&rc, run_batch_handler(c, it, n));
    for (size_t i = 0; i < n; i++) {
        item *x = &it[i];
        if (x->state != TO_CLAIM) continue;
        switch (x->status) {
        case ACEMQ_CLAIMED:
            keep(&rc, run_handler(c, x));
            break;
        case ACEMQ_ALREADY_CONFIRMED:
            keep(&rc, duplicate_with_result(c, x));
            break;
        case ACEMQ_IN_PROGRESS:
            /* Claimed by an earlier delivery of this batch: a duplicate once
             * that one is confirmed, decided after the confirms. */
            x->same_key = claimed_before(it, i);
            if (x->same_key < i) {
                x->state = SAME_KEY;
                break;
            }
            acemq__consumer_count(c, &c->stats.in_progress);
            keep(&rc, hold(c, x));
            break;
        default:
            keep(&rc, store_error(c, x, x->status, "store_error"));
            break;
        }
    }
    confirm_all(c, it, n, &rc);
    for (size_t i = 0; i < n; i++) {
        item *x = &it[i];
        if (x->state != SAME_KEY) continue;
        /* The key is confirmed exactly when the earlier item ended
         * processed: its confirm succeeded moments ago, in this batch. A
         * store that can forget (a bounded memory store) might answer
         * otherwise now, and hold a message whose effect has happened. */
        audit_forget(c, x); /* the earlier item's bit stands for the key */
        if (it[x->same_key].confirmed) {
            keep(&rc, duplicate(c, x, NULL, 0));
        } else {
            acemq__consumer_count(c, &c->stats.in_progress);
            keep(&rc, hold(c, x));
        }
    }
    for (size_t i = 0; i < n; i++) {
        free(it[i].key);
        json_decref(it[i].origin);
    }
    keep(&rc, acemq__consumer_flush_acks(c));
    return rc;
}

int acemq_consumer_confirm(acemq_consumer *c, const acemq_consumer_msg *m, const void *result,
                           size_t result_len)
{
    if (!c || !m) return ACEMQ_EINVAL;
    if (c->confirmed) return 0;
    /* No renewal may land after the confirm: it would find the claim
     * confirmed and count the lease lost. */
    (void)acemq__keeper_drop(&c->keeper, c->current_slot);
    c->current_slot = -1;
    acemq_idem *h = c->opts.inbox ? c->opts.inbox : c->store;
    int rc = result ? acemq_idem_confirm_result(h, m->key, m->key_len, m->token, result, result_len)
                    : acemq_idem_confirm(h, m->key, m->key_len, m->token);
    if (rc == 0) c->confirmed = 1;
    if (rc == ACEMQ_ESTALE) c->stale = 1;
    return rc;
}
