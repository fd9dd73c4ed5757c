/* relay_open.c — a relay's life: opened on an outbox URL with handles of
 * its own for its threads, or made on the caller's one handle; freed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/relay.h"
#include "relay/relay_internal.h"

void acemq_relay_options_init(acemq_relay_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->batch = 100;
    o->lease_ms = 30000;
    o->poll_ms = 1000;
}

/* Why the last acemq_relay_new in this thread failed: there is no handle to
 * hold the text, so acemq_relay_errmsg(NULL) reads it here. */
static _Thread_local char new_error[512];

static int new_failed(int code, const char *why)
{
    snprintf(new_error, sizeof new_error, "%s", why);
    return code;
}

/* The options' checks, before any connection is opened. */
static const char *bad_options(const acemq_relay_options *o)
{
    if (o->batch < 1 || o->batch > 100000) return "batch must be within 1..100000";
    if (o->lease_ms < 1) return "lease_ms must be positive";
    if (o->poll_ms < 1) return "poll_ms must be positive";
    return NULL;
}

/* A relay on ob alone, the options checked: 0, or ACEMQ_ENOMEM. */
static int relay_alloc(acemq_relay **out, acemq_outbox *ob, acemq_broker *b,
                       const acemq_relay_options *opts)
{
    acemq_relay *r = calloc(1, sizeof *r);
    if (!r) return new_failed(ACEMQ_ENOMEM, "out of memory");
    r->opts = *opts;
    r->ob = ob;
    r->b = b;
    r->pending = -1;
    size_t n = r->opts.batch;
    r->msgs = calloc(n, sizeof *r->msgs);
    r->results = calloc(n, sizeof *r->results);
    if (!r->msgs || !r->results || pthread_mutex_init(&r->lock, NULL) != 0) {
        free(r->msgs);
        free(r->results);
        free(r);
        return new_failed(ACEMQ_ENOMEM, "out of memory for a batch");
    }
    if (pthread_mutex_init(&r->db_turn, NULL) != 0) {
        pthread_mutex_destroy(&r->lock);
        free(r->msgs);
        free(r->results);
        free(r);
        return new_failed(ACEMQ_ENOMEM, "cannot create a mutex");
    }
    *out = r;
    return 0;
}

/* The checks acemq_relay_new and acemq_relay_open share, before anything
 * is opened: outbox is the caller's handle or URL, missing says so when it
 * is NULL; *opts gets o or the defaults. */
static int check_args(acemq_relay **out, const void *outbox, const char *missing,
                      const acemq_broker *b, const acemq_relay_options *o,
                      acemq_relay_options *opts)
{
    if (!out) return new_failed(ACEMQ_EINVAL, "out must not be NULL");
    *out = NULL;
    if (!outbox) return new_failed(ACEMQ_EINVAL, missing);
    if (!b) return new_failed(ACEMQ_EINVAL, "b (the broker) must not be NULL");
    if (o)
        *opts = *o;
    else
        acemq_relay_options_init(opts);
    const char *bad = bad_options(opts);
    return bad ? new_failed(ACEMQ_EINVAL, bad) : 0;
}

int acemq_relay_new(acemq_relay **out, acemq_outbox *ob, acemq_broker *b,
                    const acemq_relay_options *o)
{
    acemq_relay_options opts;
    int rc = check_args(out, ob, "ob (the outbox) must not be NULL", b, o, &opts);
    return rc != 0 ? rc : relay_alloc(out, ob, b, &opts);
}

static void close_outboxes(acemq_outbox **obs, int n)
{
    for (int k = 0; k < n; k++)
        acemq_outbox_close(obs[k]);
}

int acemq_relay_open(acemq_relay **out, const char *outbox_url, const acemq_outbox_options *oo,
                     acemq_broker *b, const acemq_relay_options *o)
{
    acemq_relay_options opts;
    int rc = check_args(out, outbox_url, "outbox_url must not be NULL", b, o, &opts);
    if (rc != 0) return rc;
    /* The main thread's, the marker's, the claimer's and the gauges'. */
    acemq_outbox *obs[4] = {NULL, NULL, NULL, NULL};
    for (int k = 0; k < 4; k++) {
        rc = acemq_outbox_open(&obs[k], outbox_url, oo);
        if (rc != 0) {
            snprintf(new_error, sizeof new_error, "outbox %s: %s", outbox_url,
                     acemq_outbox_errmsg(NULL));
            close_outboxes(obs, k);
            return rc;
        }
    }
    rc = relay_alloc(out, obs[0], b, &opts);
    if (rc != 0) {
        close_outboxes(obs, 4);
        return rc;
    }
    (*out)->mark_ob = obs[1];
    (*out)->claim_ob = obs[2];
    (*out)->gauge_ob = obs[3];
    (*out)->owns_outboxes = 1;
    return 0;
}

acemq_outbox **acemq__relay_outbox_slot(acemq_relay *r, acemq__relay_handle which)
{
    switch (which) {
    case ACEMQ__RELAY_MAIN:
        return &r->ob;
    case ACEMQ__RELAY_MARK:
        return &r->mark_ob;
    case ACEMQ__RELAY_CLAIM:
        return &r->claim_ob;
    case ACEMQ__RELAY_GAUGE:
        return &r->gauge_ob;
    }
    return NULL;
}

void acemq_relay_free(acemq_relay *r)
{
    if (!r) return;
    pthread_mutex_destroy(&r->db_turn);
    pthread_mutex_destroy(&r->lock);
    free(r->msgs);
    free(r->results);
    acemq__mark_job_free(&r->jobs[0]);
    acemq__mark_job_free(&r->jobs[1]);
    acemq__mark_job_free(&r->jobs[2]);
    acemq__flight_free(&r->flights[0]);
    acemq__flight_free(&r->flights[1]);
    acemq__flight_free(&r->flights[2]);
    acemq__waves_free(&r->waves);
    if (r->owns_outboxes) {
        acemq_outbox *obs[4] = {r->ob, r->mark_ob, r->claim_ob, r->gauge_ob};
        close_outboxes(obs, 4);
    }
    free(r);
}

const char *acemq_relay_errmsg(const acemq_relay *r)
{
    return r ? r->errmsg : new_error;
}
