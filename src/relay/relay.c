/* relay.c — one relay: claim a batch, publish it with confirms, mark each
 * record by its outcome, wait for more.
 *
 * The rule that keeps "never lost" true: a record is marked published only on
 * a confirm, and released only when it was certainly not sent (the broker
 * could not be reached). Anything in between (a lost connection, a confirm
 * that never came) is left alone; its lease runs out and it goes again.
 * Counters are guarded by a mutex because the metrics endpoint reads them
 * from its own thread.
 *
 * With a second outbox handle (opts.mark_outbox), run() writes the marks on
 * a marker thread: batch k is marked while batch k+1 is claimed and
 * published. Two jobs alternate; the main thread refills a job only once the
 * marker is done with it, so at most one batch waits to be marked and
 * memory stays bounded. Marking late changes nothing about safety: the
 * records of a batch stay leased until they are marked, so no other claim
 * takes them meanwhile, and an ordering key's next record waits for its
 * predecessor's mark as before.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acemq/relay.h"
#include "relay/mark_job.h"

const double acemq_relay_latency_bounds_ms[ACEMQ_RELAY_LATENCY_BUCKETS - 1] = {
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000};

struct acemq_relay {
    acemq_outbox *ob;
    acemq_broker *b;
    acemq_relay_options opts;
    acemq_broker_msg *msgs;
    acemq_publish_result *results;
    acemq__mark_job jobs[2];   /* step() uses jobs[0]; run() with a marker both */
    atomic_int stop_requested; /* acemq_relay_stop, from any thread */
    pthread_mutex_t lock;
    acemq_relay_stats stats;
    char errmsg[512];
};

void acemq_relay_options_init(acemq_relay_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->batch = 100;
    o->lease_ms = 30000;
    o->poll_ms = 1000;
}

static double mono_ms(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* key=value pairs, values quoted when they hold a space, a quote or '='. */
static void log_value(FILE *f, const char *v)
{
    if (!v) v = "";
    if (!strpbrk(v, " \"=") && *v) {
        fputs(v, f);
        return;
    }
    fputc('"', f);
    for (; *v; v++) {
        if (*v == '"' || *v == '\\') fputc('\\', f);
        fputc(*v == '\n' ? ' ' : *v, f);
    }
    fputc('"', f);
}

static void log_event(acemq_relay *r, const char *event, const char *k1, const char *v1,
                      const char *k2, const char *v2)
{
    FILE *f = r->opts.log;
    if (!f) return;
    /* The marker thread logs too: one line is written under the stream's lock. */
    flockfile(f);
    time_t now = time(NULL);
    struct tm tm;
    char ts[32];
    if (gmtime_r(&now, &tm) && strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm))
        fprintf(f, "ts=%s ", ts);
    fprintf(f, "event=%s", event);
    if (k1) {
        fprintf(f, " %s=", k1);
        log_value(f, v1);
    }
    if (k2) {
        fprintf(f, " %s=", k2);
        log_value(f, v2);
    }
    fputc('\n', f);
    fflush(f);
    funlockfile(f);
}

int acemq_relay_new(acemq_relay **out, acemq_outbox *ob, acemq_broker *b,
                    const acemq_relay_options *o)
{
    if (!out || !ob || !b) return ACEMQ_EINVAL;
    *out = NULL;
    acemq_relay *r = calloc(1, sizeof *r);
    if (!r) return ACEMQ_ENOMEM;
    if (o)
        r->opts = *o;
    else
        acemq_relay_options_init(&r->opts);
    if (r->opts.batch < 1 || r->opts.batch > 100000 || r->opts.lease_ms < 1 ||
        r->opts.poll_ms < 1) {
        free(r);
        return ACEMQ_EINVAL;
    }
    r->ob = ob;
    r->b = b;
    size_t n = r->opts.batch;
    r->msgs = calloc(n, sizeof *r->msgs);
    r->results = calloc(n, sizeof *r->results);
    if (!r->msgs || !r->results || pthread_mutex_init(&r->lock, NULL) != 0) {
        free(r->msgs);
        free(r->results);
        free(r);
        return ACEMQ_ENOMEM;
    }
    *out = r;
    return 0;
}

void acemq_relay_free(acemq_relay *r)
{
    if (!r) return;
    pthread_mutex_destroy(&r->lock);
    free(r->msgs);
    free(r->results);
    acemq__mark_job_free(&r->jobs[0]);
    acemq__mark_job_free(&r->jobs[1]);
    free(r);
}

const char *acemq_relay_errmsg(const acemq_relay *r)
{
    return r ? r->errmsg : "";
}

void acemq_relay_stats_get(acemq_relay *r, acemq_relay_stats *out)
{
    pthread_mutex_lock(&r->lock);
    *out = r->stats;
    pthread_mutex_unlock(&r->lock);
}

/* The marker thread fails too, so the text is written under the lock. */
static int fail(acemq_relay *r, int code, const char *what, const char *why)
{
    pthread_mutex_lock(&r->lock);
    snprintf(r->errmsg, sizeof r->errmsg, "%s: %s", what, why);
    pthread_mutex_unlock(&r->lock);
    log_event(r, "error", "where", what, "error", why);
    return code;
}

static void count_latency(acemq_relay_stats *s, double ms, uint64_t n)
{
    size_t k = 0;
    while (k < ACEMQ_RELAY_LATENCY_BUCKETS - 1 && ms > acemq_relay_latency_bounds_ms[k])
        k++;
    s->latency_count[k] += n;
    s->latency_sum_ms += ms * (double)n;
}

/* Writes a published batch's outcomes back through ob: confirmed records
 * published, nacked and returned ones failed with their reason; counts them. */
static int settle(acemq_relay *r, acemq_outbox *ob, acemq__mark_job *j)
{
    uint64_t confirmed = 0, failed = 0, returned = 0, nacked = 0, unknown = 0;
    size_t nm = 0;
    for (size_t i = 0; i < j->n; i++) {
        switch (j->outcome[i]) {
        case ACEMQ_PUBLISH_CONFIRMED:
            j->marks[nm].id = acemq__mark_job_id(j, i);
            j->marks[nm].token = j->token[i];
            nm++;
            break;
        case ACEMQ_PUBLISH_RETURNED:
            returned++;
            break;
        case ACEMQ_PUBLISH_NACKED:
            nacked++;
            break;
        default:
            unknown++;
            break;
        }
    }
    int rc = acemq_outbox_mark_published_batch(ob, j->marks, nm, j->status);
    if (rc != 0) return fail(r, rc, "mark_published", acemq_outbox_errmsg(ob));
    for (size_t i = 0; i < nm; i++)
        confirmed += j->status[i] == 0;
    for (size_t i = 0; rc == 0 && i < j->n; i++) {
        int outcome = j->outcome[i];
        if (outcome != ACEMQ_PUBLISH_NACKED && outcome != ACEMQ_PUBLISH_RETURNED) continue;
        char reason[ACEMQ_OUTBOX_ERROR_MAX + 1];
        const char *why = acemq__mark_job_reason(j, i);
        snprintf(reason, sizeof reason, "%s: %s",
                 outcome == ACEMQ_PUBLISH_NACKED ? "nacked" : "returned", why ? why : "");
        const char *id = acemq__mark_job_id(j, i);
        int x = acemq_outbox_mark_failed(ob, id, j->token[i], reason);
        if (x == ACEMQ_ESTALE || x == ACEMQ_ENOENT) continue; /* taken over meanwhile */
        if (x != 0) {
            rc = fail(r, x, "mark_failed", acemq_outbox_errmsg(ob));
            break;
        }
        log_event(r, "publish_failed", "id", id, "reason", reason);
        failed++;
    }
    if (unknown) {
        char count[32];
        snprintf(count, sizeof count, "%llu", (unsigned long long)unknown);
        log_event(r, "outcome_unknown", "records", count, "note",
                  "not marked; published again when the lease runs out");
    }
    if (r->opts.verbose) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%zu", j->n);
        snprintf(b, sizeof b, "%llu", (unsigned long long)confirmed);
        log_event(r, "batch", "claimed", a, "published", b);
    }
    pthread_mutex_lock(&r->lock);
    r->stats.published += confirmed;
    r->stats.failed += failed;
    r->stats.returned += returned;
    r->stats.nacked += nacked;
    r->stats.unknown += unknown;
    r->stats.batches++;
    if (confirmed) count_latency(&r->stats, j->latency_ms, confirmed);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* Claims a batch and publishes it; fills j with the outcomes. *claimed gets
 * the batch's size; 0 with nothing claimed is not an error. */
static int claim_and_publish(acemq_relay *r, acemq__mark_job *j, size_t *claimed)
{
    *claimed = 0;
    j->n = 0;
    const acemq_outbox_msg *m;
    size_t n;
    int rc = acemq_outbox_claim_batch(r->ob, r->opts.batch, r->opts.lease_ms, &m, &n);
    if (rc != 0) return fail(r, rc, "claim_batch", acemq_outbox_errmsg(r->ob));
    *claimed = n;
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        acemq_broker_msg *bm = &r->msgs[i];
        bm->exchange = m[i].destination;
        bm->routing_key = m[i].routing_key;
        bm->message_id = m[i].id;
        bm->content_type = m[i].content_type;
        bm->headers_json = m[i].headers_json;
        bm->attempts = m[i].attempts;
        bm->body = m[i].body;
        bm->body_len = m[i].body_len;
    }
    double t0 = mono_ms();
    int prc = acemq_broker_publish(r->b, r->msgs, n, r->results);
    double latency = mono_ms() - t0;
    if (prc != 0) {
        /* Nothing was sent: give the records back so they go as soon as the
         * broker is back, not a lease later. */
        const char *why = acemq_broker_errmsg(r->b);
        log_event(r, "broker_unavailable", "error", why, NULL, NULL);
        uint64_t released = 0;
        for (size_t i = 0; i < n; i++)
            released += acemq_outbox_release(r->ob, m[i].id, m[i].token) == 0;
        pthread_mutex_lock(&r->lock);
        snprintf(r->errmsg, sizeof r->errmsg, "publish: %s", why);
        r->stats.released += released;
        r->stats.batches++;
        pthread_mutex_unlock(&r->lock);
        return prc;
    }
    rc = acemq__mark_job_fill(j, m, r->results, n, latency);
    /* Out of memory copying the outcomes: nothing is marked, the leases hand
     * the records out again. */
    if (rc != 0) return fail(r, rc, "mark job", "out of memory");
    return 0;
}

int acemq_relay_step(acemq_relay *r, size_t *claimed)
{
    if (!r) return ACEMQ_EINVAL;
    size_t n = 0;
    int rc = claim_and_publish(r, &r->jobs[0], &n);
    if (claimed) *claimed = n;
    if (rc != 0 || n == 0) return rc;
    return settle(r, r->ob, &r->jobs[0]);
}

/* ------------------------------------------------------------ the marker */

typedef struct marker {
    acemq_relay *r;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting; /* index of the job handed over and not yet taken; -1 none */
    int busy[2]; /* job i is handed over or being marked */
    int quit;
} marker;

static void *marker_main(void *arg)
{
    marker *k = arg;
    for (;;) {
        pthread_mutex_lock(&k->mu);
        while (k->waiting < 0 && !k->quit)
            pthread_cond_wait(&k->cv, &k->mu);
        if (k->waiting < 0) { /* quit, and nothing left */
            pthread_mutex_unlock(&k->mu);
            return NULL;
        }
        int i = k->waiting;
        k->waiting = -1;
        pthread_cond_broadcast(&k->cv); /* the slot is free again */
        pthread_mutex_unlock(&k->mu);
        /* An error is logged and counted by settle; the batch's records stay
         * leased and go again, so the marker carries on. */
        (void)settle(k->r, k->r->opts.mark_outbox, &k->r->jobs[i]);
        pthread_mutex_lock(&k->mu);
        k->busy[i] = 0;
        pthread_cond_broadcast(&k->cv);
        pthread_mutex_unlock(&k->mu);
    }
}

/* Waits until job i is free to refill. */
static void marker_wait_free(marker *k, int i)
{
    pthread_mutex_lock(&k->mu);
    while (k->busy[i])
        pthread_cond_wait(&k->cv, &k->mu);
    pthread_mutex_unlock(&k->mu);
}

/* Hands job i over once the marker has taken the previous one: one slot. */
static void marker_hand_over(marker *k, int i)
{
    pthread_mutex_lock(&k->mu);
    while (k->waiting >= 0)
        pthread_cond_wait(&k->cv, &k->mu);
    k->busy[i] = 1;
    k->waiting = i;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

/* One round with the marker: publish into the free job, hand it over. */
static int pipelined_step(acemq_relay *r, marker *k, int *next, size_t *claimed)
{
    int i = *next;
    marker_wait_free(k, i);
    int rc = claim_and_publish(r, &r->jobs[i], claimed);
    if (rc == 0 && *claimed > 0) {
        marker_hand_over(k, i);
        *next = i ^ 1;
    }
    return rc;
}

static void refresh_gauges(acemq_relay *r)
{
    acemq_outbox_pending p;
    if (acemq_outbox_pending_count(r->ob, &p) != 0) return;
    pthread_mutex_lock(&r->lock);
    r->stats.pending = p.unclaimed + p.claimed;
    r->stats.dead = p.dead;
    r->stats.oldest_age_ms = p.oldest_age_ms;
    pthread_mutex_unlock(&r->lock);
}

void acemq_relay_stop(acemq_relay *r)
{
    if (r) atomic_store(&r->stop_requested, 1);
}

/* A signal handler's flag, or another thread's acemq_relay_stop. */
static int stopping(acemq_relay *r, volatile sig_atomic_t *stop)
{
    return *stop || atomic_load(&r->stop_requested);
}

static void pause_ms(acemq_relay *r, int ms, volatile sig_atomic_t *stop)
{
    /* In short slices, so a stop request is seen within 50 ms. */
    while (ms > 0 && !stopping(r, stop)) {
        int slice = ms < 50 ? ms : 50;
        struct timespec ts = {0, (long)slice * 1000000L};
        (void)nanosleep(&ts, NULL);
        ms -= slice;
    }
}

int acemq_relay_run(acemq_relay *r, volatile sig_atomic_t *stop)
{
    if (!r || !stop) return ACEMQ_EINVAL;
    log_event(r, "start", "backend", acemq_outbox_backend(r->ob), NULL, NULL);
    marker k = {.r = r, .waiting = -1};
    int pipelined = r->opts.mark_outbox != NULL;
    if (pipelined) {
        if (pthread_mutex_init(&k.mu, NULL) != 0) return ACEMQ_ENOMEM;
        if (pthread_cond_init(&k.cv, NULL) != 0) {
            pthread_mutex_destroy(&k.mu);
            return ACEMQ_ENOMEM;
        }
        if (pthread_create(&k.thread, NULL, marker_main, &k) != 0) {
            pthread_cond_destroy(&k.cv);
            pthread_mutex_destroy(&k.mu);
            return fail(r, ACEMQ_ENOMEM, "run", "cannot start the marker thread");
        }
    }
    int next_job = 0;
    double last_gauges = 0;
    int broker_backoff = 0;
    while (!stopping(r, stop)) {
        size_t n = 0;
        int rc = pipelined ? pipelined_step(r, &k, &next_job, &n) : acemq_relay_step(r, &n);
        double now = mono_ms();
        if (now - last_gauges >= 1000) {
            refresh_gauges(r);
            last_gauges = now;
        }
        if (rc != 0) {
            /* The broker backs off inside its reconnects; the outbox gets a
             * pause here so a database that is down is not hammered. */
            broker_backoff = broker_backoff ? broker_backoff * 2 : 100;
            if (broker_backoff > r->opts.poll_ms) broker_backoff = r->opts.poll_ms;
            pause_ms(r, broker_backoff, stop);
            continue;
        }
        broker_backoff = 0;
        if (n == r->opts.batch) continue; /* more is likely waiting */
        /* Waits in slices so a stop request is not kept waiting a whole poll. */
        int waited = 0;
        while (!stopping(r, stop) && waited < r->opts.poll_ms) {
            int slice = r->opts.poll_ms - waited < 100 ? r->opts.poll_ms - waited : 100;
            int w = acemq_outbox_wait(r->ob, slice);
            if (w != 0) break; /* something committed, or an error the next step reports */
            waited += slice;
        }
    }
    if (pipelined) {
        /* The batch in flight is marked before run returns. */
        pthread_mutex_lock(&k.mu);
        k.quit = 1;
        pthread_cond_broadcast(&k.cv);
        pthread_mutex_unlock(&k.mu);
        pthread_join(k.thread, NULL);
        pthread_cond_destroy(&k.cv);
        pthread_mutex_destroy(&k.mu);
    }
    refresh_gauges(r);
    log_event(r, "stop", "reason", "signal", NULL, NULL);
    return 0;
}
