/* consumer.c — a consumer's life (open, close), its options, counters and
 * log lines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/consumer_internal.h"
#include "core/logfmt.h"

const double acemq_consumer_latency_bounds_ms[ACEMQ_CONSUMER_LATENCY_BUCKETS - 1] = {
    1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 5000};

void acemq_consumer_options_init(acemq_consumer_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->prefetch = 32;
    o->lease_ms = 30000;
    o->max_attempts = 5;
    o->retry_delay_ms = 1000;
    o->retry_delay_max_ms = 60000;
    o->in_progress_delay_ms = 1000;
}

/* Why the last acemq_consumer_open in this thread failed. */
static _Thread_local char open_error[512];

static int open_failed(int code, const char *what, const char *why)
{
    snprintf(open_error, sizeof open_error, "%s%s%s", what, why ? ": " : "", why ? why : "");
    return code;
}

static const char *bad_options(const acemq_consumer_options *o)
{
    if (!o->handler == !o->batch_handler) return "give one of handler and batch_handler";
    if (o->prefetch < 1 || o->prefetch > 65535) return "prefetch must be within 1..65535";
    if (o->lease_ms < 3 || o->lease_ms > 86400000) return "lease_ms must be within 3..86400000";
    if (o->max_attempts < 1) return "max_attempts must be at least 1";
    if (o->retry_delay_ms < 0 || o->retry_delay_max_ms < o->retry_delay_ms)
        return "retry_delay_ms must be within 0..retry_delay_max_ms";
    if (o->in_progress_delay_ms < 0) return "in_progress_delay_ms must not be negative";
    if (o->dead_letter_exchange && strlen(o->dead_letter_exchange) > 255)
        return "dead_letter_exchange is longer than 255 bytes";
    return NULL;
}

void acemq_consumer_close(acemq_consumer *c)
{
    if (!c) return;
    acemq__keeper_stop(&c->keeper);
    for (size_t i = 0; i < c->n_held; i++) {
        acemq_delivery_free(c->held[i].d); /* the broker has them back when in closes */
        free(c->held[i].why);
    }
    free(c->held);
    for (size_t i = 0; i < c->n_acks; i++)
        acemq_delivery_free(c->acks[i]); /* run flushes them; a close without one ends here */
    acemq_broker_close(c->in);
    acemq_broker_close(c->out);
    pthread_mutex_destroy(&c->stats_lock);
    free(c->broker_url);
    free(c->queue);
    free(c->key_expr);
    free(c->dlx);
    free(c->result);
    free(c);
}

static char *dup_or_null(const char *s, int *failed)
{
    if (!s) return NULL;
    char *p = strdup(s);
    if (!p) *failed = 1;
    return p;
}

int acemq_consumer_open(acemq_consumer **out, const char *broker_url, const char *queue,
                        acemq_idem *store, const acemq_consumer_options *o)
{
    if (!out) return open_failed(ACEMQ_EINVAL, "out must not be NULL", NULL);
    *out = NULL;
    if (!broker_url || !queue || !*queue || strlen(queue) > 255 || !store || !o)
        return open_failed(
            ACEMQ_EINVAL, "broker_url, queue (1..255 bytes), store and options are required", NULL);
    const char *why = bad_options(o);
    if (why) return open_failed(ACEMQ_EINVAL, why, NULL);
    const char *expr = o->key ? o->key : "${message_id}";
    if (acemq__consumer_key_check(expr, &why) != 0) return open_failed(ACEMQ_EINVAL, "key", why);
    acemq_consumer *c = calloc(1, sizeof *c);
    if (!c) return open_failed(ACEMQ_ENOMEM, "out of memory", NULL);
    c->opts = *o;
    if (o->broker)
        c->broker_opts = *o->broker;
    else
        acemq_broker_options_init(&c->broker_opts);
    c->opts.broker = &c->broker_opts;
    int failed = pthread_mutex_init(&c->stats_lock, NULL) != 0;
    c->broker_url = dup_or_null(broker_url, &failed);
    c->queue = dup_or_null(queue, &failed);
    c->key_expr = dup_or_null(expr, &failed);
    c->dlx = dup_or_null(o->dead_letter_exchange, &failed);
    c->opts.key = c->key_expr;
    c->opts.dead_letter_exchange = c->dlx;
    c->store = store;
    c->current_slot = -1;
    c->result = malloc(ACEMQ_IDEM_RESULT_MAX);
    if (!c->result) failed = 1;
    if (failed) {
        acemq_consumer_close(c);
        return open_failed(ACEMQ_ENOMEM, "out of memory", NULL);
    }
    int rc = acemq_broker_open(&c->in, broker_url, &c->broker_opts);
    if (rc != 0) {
        open_failed(rc, "connecting to the broker", acemq_broker_errmsg(NULL));
        acemq_consumer_close(c);
        return rc;
    }
    rc = acemq__keeper_start(c);
    if (rc != 0) {
        acemq_consumer_close(c);
        return open_failed(rc, "starting the lease keeper", NULL);
    }
    *out = c;
    return 0;
}

void acemq_consumer_stop(acemq_consumer *c)
{
    if (c) atomic_store(&c->stop_requested, 1);
}

void acemq__consumer_count(acemq_consumer *c, uint64_t *counter)
{
    pthread_mutex_lock(&c->stats_lock);
    (*counter)++;
    pthread_mutex_unlock(&c->stats_lock);
}

void acemq__consumer_latency(acemq_consumer *c, double ms)
{
    size_t i = 0;
    while (i < ACEMQ_CONSUMER_LATENCY_BUCKETS - 1 && ms > acemq_consumer_latency_bounds_ms[i])
        i++;
    pthread_mutex_lock(&c->stats_lock);
    c->stats.latency_count[i]++;
    c->stats.latency_sum_ms += ms;
    pthread_mutex_unlock(&c->stats_lock);
}

void acemq_consumer_stats_get(acemq_consumer *c, acemq_consumer_stats *out)
{
    if (!c || !out) return;
    pthread_mutex_lock(&c->stats_lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->stats_lock);
}

const char *acemq_consumer_errmsg(const acemq_consumer *c)
{
    return c ? c->errmsg : open_error;
}

void acemq__consumer_log(acemq_consumer *c, const char *event, const char *k1, const char *v1,
                         const char *k2, const char *v2)
{
    acemq__logfmt(c->opts.log, event, k1, v1, k2, v2);
}

void acemq_consumer_fail(acemq_consumer *c, const char *why)
{
    if (!c) return;
    snprintf(c->reason, sizeof c->reason, "%s", why ? why : "");
}
