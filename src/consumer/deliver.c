/* deliver.c — one delivery, from its key to its settlement: the audit, the
 * claim, the handler and the lease keeper around it, confirm and
 * acknowledge, or release and retry, or hold, or dead-letter.
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

int acemq__consumer_failures_of(const acemq_delivery *d)
{
    if (!d->headers_json || !strstr(d->headers_json, "x-acemq-failures")) return 0;
    json_t *h = json_loads(d->headers_json, 0, NULL);
    json_t *v = json_object_get(h, "x-acemq-failures");
    long long n = 0;
    if (json_is_integer(v)) {
        n = json_integer_value(v);
    } else if (json_is_string(v)) {
        char *end;
        n = strtoll(json_string_value(v), &end, 10);
        if (*end != '\0') n = 0;
    }
    json_decref(h);
    return n < 0 ? 0 : n > 1000000 ? 1000000 : (int)n;
}

/* d's x-acemq-error header (malloc'd), or NULL without one. */
static char *error_of(const acemq_delivery *d)
{
    if (!d->headers_json || !strstr(d->headers_json, "x-acemq-error")) return NULL;
    json_t *h = json_loads(d->headers_json, 0, NULL);
    const char *v = json_string_value(json_object_get(h, "x-acemq-error"));
    char *why = v ? strdup(v) : NULL;
    json_decref(h);
    return why;
}

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

/* Holds d to be given back after in_progress_delay_ms; when the list
 * cannot grow, gives it back now. */
static int hold_or_requeue(acemq_consumer *c, acemq_delivery *d)
{
    if (acemq__consumer_hold(c, d, c->opts.in_progress_delay_ms, 0, 0, NULL) == 0) return 0;
    return acemq__consumer_requeue(c, d);
}

/* The audit in front of the store: 1 when it saw key confirmed (the
 * delivery is a duplicate), 0 otherwise, with *checked set when its bit
 * for key is now set and must be rolled back unless the store confirms. */
static int audit_says_confirmed(acemq_consumer *c, const char *key, size_t len, int *checked)
{
    *checked = 0;
    if (!c->opts.audit) return 0;
    int r = acemq_audit_check(c->opts.audit, key, len, NULL);
    if (r == ACEMQ_AUDIT_DUPLICATE) return 1;
    *checked = r == ACEMQ_AUDIT_NEW || r == ACEMQ_AUDIT_UNKNOWN;
    return 0;
}

static void audit_forget(acemq_consumer *c, const char *key, size_t len, int checked)
{
    if (checked) (void)acemq_audit_rollback(c->opts.audit, key, len);
}

/* Runs the handler on a claimed message with the keeper renewing its
 * lease, then confirms and acknowledges, or releases and retries. */
static int run_handler(acemq_consumer *c, acemq_delivery *d, acemq_consumer_msg *m, int checked)
{
    c->confirmed = 0;
    c->stale = 0;
    c->reason[0] = '\0';
    int keeping = acemq__keeper_begin(&c->keeper, m->key, m->key_len, m->token) == 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ok = c->opts.handler(c->opts.ctx, c, m) == 0;
    acemq__consumer_latency(c, elapsed_ms(&t0));
    /* An inbox handler that fails rolls its transaction back, and the
     * confirm written in it with it. */
    if (!ok && c->opts.inbox) c->confirmed = 0;
    /* A renewal refused as stale is only logged: the confirm below asks
     * the store, whose answer is the one that counts. */
    if (keeping && acemq__keeper_end(&c->keeper))
        acemq__consumer_log(c, "lease_lost", "key", m->key, NULL, NULL);
    if (ok && !c->confirmed && !c->stale) {
        int rc = acemq_idem_confirm(c->store, m->key, m->key_len, m->token);
        if (rc == ACEMQ_ESTALE) {
            c->stale = 1;
        } else if (rc != 0) {
            /* The confirm's fate is unknown: the message goes back, and the
             * claim, confirmed or held until its lease ends, decides the
             * redelivery. */
            acemq__consumer_log(c, "confirm_failed", "key", m->key, "reason",
                                acemq_idem_errmsg(c->store));
            audit_forget(c, m->key, m->key_len, checked);
            acemq__consumer_count(c, &c->stats.store_errors);
            return hold_or_requeue(c, d);
        } else {
            c->confirmed = 1;
        }
    }
    if (c->stale) {
        /* Another consumer took the message over (its own copy): it does
         * the work; ours is acknowledged, its effect the documented
         * at-least-once case unless the inbox rolled it back. */
        audit_forget(c, m->key, m->key_len, checked);
        acemq__consumer_count(c, &c->stats.stale);
        acemq__consumer_log(c, "stale", "key", m->key, NULL, NULL);
        return acemq__consumer_ack(c, d);
    }
    if (c->confirmed) {
        acemq__consumer_count(c, &c->stats.processed);
        if (c->opts.verbose) acemq__consumer_log(c, "processed", "key", m->key, NULL, NULL);
        return acemq__consumer_ack(c, d);
    }
    audit_forget(c, m->key, m->key_len, checked);
    acemq__consumer_count(c, &c->stats.failed);
    int rc = acemq_idem_release(c->store, m->key, m->key_len, m->token);
    if (rc != 0 && rc != ACEMQ_ESTALE)
        acemq__consumer_log(c, "release_failed", "key", m->key, "reason",
                            acemq_idem_errmsg(c->store));
    const char *why = c->reason[0] ? c->reason : "the handler failed";
    int failures = m->failures + 1;
    acemq__consumer_log(c, "failed", "key", m->key, "reason", why);
    if (failures >= c->opts.max_attempts) return acemq__consumer_dead_letter(c, d, why, failures);
    if (acemq__consumer_hold(c, d, backoff_ms(c, failures), 1, failures, NULL) == 0) return 0;
    return acemq__consumer_retry(c, d, failures, NULL);
}

/* A copy the consumer published back for another attempt travels on the
 * default exchange under the queue's name; its x-acemq-exchange and
 * x-acemq-routing-key headers (settle.c) say where the message was first
 * published. view is d as published: what the key and the handler see, so
 * that every attempt of a message has the same key (a key with
 * ${routing_key} would otherwise change at the first retry, and a later
 * duplicate of the message find its key free). Returns the parsed headers
 * view points into (json_decref them after), or NULL when d is no copy. */
static json_t *as_published(const acemq_delivery *d, acemq_delivery *view)
{
    *view = *d;
    if (!d->headers_json || !strstr(d->headers_json, "x-acemq-routing-key")) return NULL;
    json_t *h = json_loads(d->headers_json, 0, NULL);
    const char *rk = json_string_value(json_object_get(h, "x-acemq-routing-key"));
    const char *ex = json_string_value(json_object_get(h, "x-acemq-exchange"));
    if (rk) view->routing_key = rk;
    if (ex) view->exchange = ex;
    return h;
}

int acemq__consumer_deliver(acemq_consumer *c, acemq_delivery *d)
{
    char *key = NULL;
    size_t len = 0;
    const char *why = NULL;
    /* A message that failed max_attempts times is done with the handler:
     * it is here again only because its dead letter was refused (settle.c)
     * and it waited in the queue to try the exchange again. */
    int failures = acemq__consumer_failures_of(d);
    if (failures >= c->opts.max_attempts) {
        char *last = error_of(d);
        char reason[100];
        snprintf(reason, sizeof reason, "failed %d times", failures);
        int rc = acemq__consumer_dead_letter(c, d, last ? last : reason, failures);
        free(last);
        return rc;
    }
    acemq_delivery view;
    json_t *origin = as_published(d, &view);
    int rc = acemq__consumer_key(c->key_expr, &view, &key, &len, &why);
    if (rc == ACEMQ_ENOMEM) {
        json_decref(origin);
        return hold_or_requeue(c, d);
    }
    if (rc != 0) {
        char reason[300];
        snprintf(reason, sizeof reason, "no key (%s): %s", c->key_expr, why);
        json_decref(origin);
        acemq__consumer_log(c, "no_key", "reason", reason, NULL, NULL);
        return acemq__consumer_dead_letter(c, d, reason, failures);
    }
    acemq_consumer_msg m = {&view, key, len, 0, failures};
    int checked;
    if (audit_says_confirmed(c, key, len, &checked)) {
        acemq__consumer_count(c, &c->stats.duplicates);
        if (c->opts.on_duplicate) c->opts.on_duplicate(c->opts.ctx, &m, NULL, 0);
        free(key);
        json_decref(origin);
        return acemq__consumer_ack(c, d);
    }
    acemq_claim claim;
    memset(&claim, 0, sizeof claim);
    acemq_claim_opts co = {0};
    co.lease_ms = c->opts.lease_ms;
    co.result_buf = c->result;
    co.result_cap = ACEMQ_IDEM_RESULT_MAX;
    rc = acemq_idem_try_claim(c->store, key, len, &co, &claim);
    switch (rc) {
    case ACEMQ_CLAIMED:
        m.token = claim.token;
        rc = run_handler(c, d, &m, checked);
        break;
    case ACEMQ_ALREADY_CONFIRMED:
        acemq__consumer_count(c, &c->stats.duplicates);
        if (c->opts.on_duplicate)
            c->opts.on_duplicate(c->opts.ctx, &m, claim.has_result ? c->result : NULL,
                                 claim.has_result ? claim.result_len : 0);
        rc = acemq__consumer_ack(c, d);
        break;
    case ACEMQ_IN_PROGRESS:
        audit_forget(c, key, len, checked);
        acemq__consumer_count(c, &c->stats.in_progress);
        rc = hold_or_requeue(c, d);
        break;
    default:
        audit_forget(c, key, len, checked);
        acemq__consumer_count(c, &c->stats.store_errors);
        acemq__consumer_log(c, "store_error", "error", acemq_err_name(rc), "reason",
                            acemq_idem_errmsg(c->store));
        rc = hold_or_requeue(c, d);
        break;
    }
    free(key);
    json_decref(origin);
    return rc;
}

int acemq_consumer_confirm(acemq_consumer *c, const acemq_consumer_msg *m, const void *result,
                           size_t result_len)
{
    if (!c || !m) return ACEMQ_EINVAL;
    if (c->confirmed) return 0;
    /* No renewal may land after the confirm: it would find the claim
     * confirmed and count the lease lost. */
    (void)acemq__keeper_end(&c->keeper);
    acemq_idem *h = c->opts.inbox ? c->opts.inbox : c->store;
    int rc = result ? acemq_idem_confirm_result(h, m->key, m->key_len, m->token, result, result_len)
                    : acemq_idem_confirm(h, m->key, m->key_len, m->token);
    if (rc == 0) c->confirmed = 1;
    if (rc == ACEMQ_ESTALE) c->stale = 1;
    return rc;
}
