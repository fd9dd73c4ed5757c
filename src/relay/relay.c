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
 * Opened on a URL (acemq_relay_open), the relay has four outbox handles:
 * its own, the marker's, the claimer's and the gauges'. run() then
 * pipelines full batches: batch k+1 is claimed on the claimer thread while
 * batch k is sent, then sent (acemq_broker_send) while batch k's last
 * confirms come in, so the broker's window never drains between batches;
 * batch k is collected once k+1 is out, and marked on the marker thread.
 * Each claimed batch is copied into one of three flights (claimed ahead,
 * being sent, at the broker), because the outbox handle's buffer is reused
 * by the next claim; a flight is refilled only after it was collected, and
 * a mark job only once the marker is done with it, so at most two batches
 * are at the broker, one is claimed ahead and two wait for or are in the
 * marker: memory stays bounded. A batch that is not full is collected and
 * marked at once on the main thread, as step() does: nothing is due to
 * overlap with, its confirms must not wait out a poll, and a thread hop
 * would only add to its latency. Given one handle (acemq_relay_new), run()
 * steps on it and counts the gauges between batches.
 *
 * Claims and marks take turns: whichever thread runs one holds db_turn, so
 * a claim never runs beside a mark. Overlapped, a claim and a mark of a
 * few hundred records each can take both CPUs of a small machine at once,
 * and a broker sharing it loses its CPU just then; both are short beside a
 * batch's time at the broker, so taking turns costs no throughput. The
 * gauges' count stays outside the turns: on a large backlog it takes a
 * sizeable part of a second. Releases, rare, do not wait for a turn either.
 *
 * The gauges' handle counts on a thread of its own (gauges.h); without one
 * they are counted between batches. Either way a count waits twenty times
 * its own duration before the next, since it reads every pending record.
 *
 * A claim takes an ordering key's due records together (claim_runs); a
 * batch that holds several of one key goes out in waves (waves.h), one
 * record per key unconfirmed at a time, sent and marked on the main thread
 * with nothing else at the broker meanwhile.
 *
 * Pipelining changes nothing about safety: the records of a batch stay
 * leased until they are marked, so no other claim takes them meanwhile, and
 * an ordering key's next record is not claimed while its predecessor is in
 * flight or unmarked. A lost connection answers both batches at the broker
 * at once: what was unconfirmed in either is UNKNOWN and left to its lease.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acemq/relay.h"
#include "broker/broker_internal.h"
#include "os/mono_time.h"
#include "relay/worker.h"
#include "relay/claimer.h"
#include "relay/flight.h"
#include "relay/gauges.h"
#include "core/logfmt.h"
#include "relay/mark_job.h"
#include "relay/relay_internal.h"
#include "relay/waves.h"
#include "outbox/outbox_internal.h"

const double acemq_relay_latency_bounds_ms[ACEMQ_RELAY_LATENCY_BUCKETS - 1] = {
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000};

static void log_event(acemq_relay *r, const char *event, const char *k1, const char *v1,
                      const char *k2, const char *v2)
{
    acemq__logfmt(r->opts.log, event, k1, v1, k2, v2);
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

/* A claim or a mark waits for the database to be the relay's alone. */
static void db_turn_take(acemq_relay *r)
{
    pthread_mutex_lock(&r->db_turn);
}

static void db_turn_give(acemq_relay *r)
{
    pthread_mutex_unlock(&r->db_turn);
}

/* Claims on ob, in the relay's database turn: a key's due records together
 * (claim_runs), which the relay then publishes in waves (waves.h). */
static int claim_batch(acemq_relay *r, acemq_outbox *ob, const acemq_outbox_msg **m, size_t *n)
{
    db_turn_take(r);
    int rc = acemq__outbox_claim_runs(ob, r->opts.batch, r->opts.lease_ms, m, n);
    db_turn_give(r);
    return rc;
}

/* One record's confirm latency into the histogram: the broker's own
 * measure, from the message's publish to its ack. */
static void count_latency(acemq_relay_stats *s, uint32_t us)
{
    double ms = (double)us / 1000.0;
    size_t k = 0;
    while (k < ACEMQ_RELAY_LATENCY_BUCKETS - 1 && ms > acemq_relay_latency_bounds_ms[k])
        k++;
    s->latency_count[k]++;
    s->latency_sum_ms += ms;
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
        case ACEMQ__PUBLISH_HELD:
            break;
        default:
            unknown++;
            break;
        }
    }
    db_turn_take(r);
    int rc = acemq_outbox_mark_published_batch(ob, j->marks, nm, j->status);
    if (rc != 0) {
        db_turn_give(r);
        return fail(r, rc, "mark_published", acemq_outbox_errmsg(ob));
    }
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
    /* Held back behind a record of their key that was not confirmed: given
     * back unsent, so the key goes on once that record does. */
    uint64_t released = 0;
    for (size_t i = 0; rc == 0 && i < j->n; i++)
        if (j->outcome[i] == ACEMQ__PUBLISH_HELD)
            released += acemq_outbox_release(ob, acemq__mark_job_id(j, i), j->token[i]) == 0;
    db_turn_give(r);
    if (unknown) {
        /* Not marked: they go again when their leases run out. The first
         * one's reason says why (timeout, lost connection, stopped waiting
         * on a blocked connection); the rest of a batch nearly always share it. */
        char count[32];
        snprintf(count, sizeof count, "%llu", (unsigned long long)unknown);
        size_t first = 0;
        while (first < j->n && j->outcome[first] != ACEMQ_PUBLISH_UNKNOWN)
            first++;
        const char *why = acemq__mark_job_reason(j, first);
        log_event(r, "outcome_unknown", "records", count, "reason", why ? why : "unknown");
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
    r->stats.released += released;
    r->stats.batches++;
    for (size_t i = 0, m = 0; i < j->n; i++) { /* marks[m] is record i's when confirmed */
        if (j->outcome[i] != ACEMQ_PUBLISH_CONFIRMED) continue;
        if (j->status[m++] == 0) count_latency(&r->stats, j->confirm_us[i]);
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* The broker refused the whole batch before sending any of it: give the
 * records back so they go as soon as the broker is back, not a lease later.
 * Returns prc. */
static int release_unsent(acemq_relay *r, const acemq_outbox_msg *m, size_t n, int prc)
{
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

/* A batch with several records of one ordering key: published in waves
 * (waves.h) and marked at once on the relay's own handle through j, the
 * records held back released. Nothing else may be at the broker. Returns
 * settle's answer, or the broker's error when a wave could not be sent. */
static int publish_waves(acemq_relay *r, const acemq_outbox_msg *recs, const acemq_broker_msg *msgs,
                         acemq_publish_result *results, size_t n, acemq__mark_job *j)
{
    int prc = acemq__waves_publish(&r->waves, r->b, msgs, n, results);
    /* Out of memory: nothing is marked, the leases hand the records out again. */
    if (acemq__mark_job_fill(j, recs, results, n) != 0)
        return fail(r, ACEMQ_ENOMEM, "mark job", "out of memory");
    int rc = settle(r, r->ob, j);
    if (prc != 0) {
        log_event(r, "broker_unavailable", "error", acemq_broker_errmsg(r->b), NULL, NULL);
        rc = fail(r, prc, "publish", acemq_broker_errmsg(r->b));
    }
    return rc;
}

/* Claims a batch and publishes it; fills j with the outcomes, or marks them
 * itself (*settled) when the batch went out in waves. *claimed gets the
 * batch's size; 0 with nothing claimed is not an error. */
static int claim_and_publish(acemq_relay *r, acemq__mark_job *j, size_t *claimed, int *settled)
{
    *claimed = 0;
    *settled = 0;
    j->n = 0;
    const acemq_outbox_msg *m;
    size_t n;
    int rc = claim_batch(r, r->ob, &m, &n);
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
    int waved = acemq__waves_plan(&r->waves, m, n);
    if (waved < 0) return fail(r, waved, "waves", "out of memory");
    if (waved) {
        *settled = 1;
        return publish_waves(r, m, r->msgs, r->results, n, j);
    }
    int prc = acemq_broker_publish(r->b, r->msgs, n, r->results);
    if (prc != 0) return release_unsent(r, m, n, prc);
    rc = acemq__mark_job_fill(j, m, r->results, n);
    /* Out of memory copying the outcomes: nothing is marked, the leases hand
     * the records out again. */
    if (rc != 0) return fail(r, rc, "mark job", "out of memory");
    return 0;
}

int acemq_relay_step(acemq_relay *r, size_t *claimed)
{
    if (!r) return ACEMQ_EINVAL;
    size_t n = 0;
    int settled = 0;
    int rc = claim_and_publish(r, &r->jobs[0], &n, &settled);
    if (claimed) *claimed = n;
    if (rc != 0 || n == 0 || settled) return rc;
    return settle(r, r->ob, &r->jobs[0]);
}

/* ------------------------------------------------------------ the marker */

typedef struct marker {
    acemq_relay *r;
    acemq__worker w;
    int waiting; /* index of the job handed over and not yet taken; -1 none */
    int busy[2]; /* job i is handed over or being marked */
    int quit;
    int next_job; /* the job the main thread fills next */
} marker;

static void *marker_main(void *arg)
{
    marker *k = arg;
    for (;;) {
        pthread_mutex_lock(&k->w.mu);
        while (k->waiting < 0 && !k->quit)
            pthread_cond_wait(&k->w.cv, &k->w.mu);
        if (k->waiting < 0) { /* quit, and nothing left */
            pthread_mutex_unlock(&k->w.mu);
            return NULL;
        }
        int i = k->waiting;
        k->waiting = -1;
        pthread_cond_broadcast(&k->w.cv); /* the slot is free again */
        pthread_mutex_unlock(&k->w.mu);
        /* An error is logged and counted by settle; the batch's records stay
         * leased and go again, so the marker carries on. */
        (void)settle(k->r, k->r->mark_ob, &k->r->jobs[i]);
        pthread_mutex_lock(&k->w.mu);
        k->busy[i] = 0;
        pthread_cond_broadcast(&k->w.cv);
        pthread_mutex_unlock(&k->w.mu);
    }
}

/* Waits until job i is free to refill. */
static void marker_wait_free(marker *k, int i)
{
    pthread_mutex_lock(&k->w.mu);
    while (k->busy[i])
        pthread_cond_wait(&k->w.cv, &k->w.mu);
    pthread_mutex_unlock(&k->w.mu);
}

/* Hands job i over once the marker has taken the previous one: one slot. */
static void marker_hand_over(marker *k, int i)
{
    pthread_mutex_lock(&k->w.mu);
    while (k->waiting >= 0)
        pthread_cond_wait(&k->w.cv, &k->w.mu);
    k->busy[i] = 1;
    k->waiting = i;
    pthread_cond_broadcast(&k->w.cv);
    pthread_mutex_unlock(&k->w.mu);
}

/* Copies a collected flight's outcomes into the next free job and hands it
 * to the marker. */
static void hand_over_flight(acemq_relay *r, marker *k, acemq__flight *f)
{
    int i = k->next_job;
    marker_wait_free(k, i);
    /* Out of memory: nothing is marked, the leases hand the records out again. */
    if (acemq__mark_job_fill(&r->jobs[i], f->recs, f->results, f->n) != 0) {
        (void)fail(r, ACEMQ_ENOMEM, "mark job", "out of memory");
        return;
    }
    marker_hand_over(k, i);
    k->next_job = i ^ 1;
}

/* Waits for the pending flight's last confirms and hands it to the marker. */
static void collect_pending(acemq_relay *r, marker *k)
{
    if (r->pending < 0) return;
    acemq__flight *f = &r->flights[r->pending];
    r->pending = -1;
    int rc = acemq_broker_collect(r->b);
    if (rc != 0) { /* a send the broker does not know: leave it to the leases */
        (void)fail(r, rc, "collect", acemq_broker_errmsg(r->b));
        return;
    }
    hand_over_flight(r, k, f);
}

/* Claims on ob into flight i. Runs on the claimer thread when there is one,
 * so it touches only ob, the flight and what fail() guards. */
static int claim_into(acemq_relay *r, acemq_outbox *ob, int i, size_t *claimed)
{
    *claimed = 0;
    const acemq_outbox_msg *m;
    size_t n;
    int rc = claim_batch(r, ob, &m, &n);
    if (rc != 0) return fail(r, rc, "claim_batch", acemq_outbox_errmsg(ob));
    /* Out of memory: nothing was sent, but the records stay leased rather
     * than released into a relay that cannot hold them. */
    if (acemq__flight_fill(&r->flights[i], m, n) != 0)
        return fail(r, ACEMQ_ENOMEM, "flight", "out of memory");
    *claimed = n;
    return 0;
}

/* Gives back the records of a flight that will never be sent. */
static void release_flight(acemq_relay *r, acemq__flight *f)
{
    uint64_t released = 0;
    for (size_t i = 0; i < f->n; i++)
        released += acemq_outbox_release(r->ob, f->recs[i].id, f->recs[i].token) == 0;
    pthread_mutex_lock(&r->lock);
    r->stats.released += released;
    pthread_mutex_unlock(&r->lock);
}

/* ------------------------------------------------------------ the claimer */

/* The claimer thread's claim and release (claimer.h), on the claim handle. */
static int claim_ahead(void *ctx, int i, size_t *n)
{
    acemq_relay *r = ctx;
    return claim_into(r, r->claim_ob, i, n);
}

static void release_ahead(void *ctx, int i)
{
    acemq_relay *r = ctx;
    release_flight(r, &r->flights[i]);
}

/* ------------------------------------------------------------ pipelining */

/* The flight that is neither a (about to be sent) nor the pending one. */
static int free_flight(const acemq_relay *r, int a)
{
    for (int i = 0; i < 3; i++)
        if (i != a && i != r->pending) return i;
    return -1; /* not reached: three flights, two taken at most */
}

/* Sends flight i; 1 when it is now at the broker. */
static int send_flight(acemq_relay *r, int i, int *rc)
{
    acemq__flight *f = &r->flights[i];
    *rc = acemq_broker_send(r->b, f->msgs, f->n, f->results);
    if (*rc == 0) return 1;
    *rc = release_unsent(r, f->recs, f->n, *rc);
    return 0;
}

/* A batch that is not full, the only one at the broker: collected and
 * marked here on the relay's own handle, as step() does. Nothing more is
 * due to overlap with, and handing it to the marker would only add a
 * thread's wake-up to its latency. */
static int settle_now(acemq_relay *r, int i)
{
    acemq__flight *f = &r->flights[i];
    int rc = acemq_broker_collect(r->b);
    if (rc != 0) return fail(r, rc, "collect", acemq_broker_errmsg(r->b));
    acemq__mark_job *j = &r->jobs[2];
    /* Out of memory: nothing is marked, the leases hand the records out again. */
    if (acemq__mark_job_fill(j, f->recs, f->results, f->n) != 0)
        return fail(r, ACEMQ_ENOMEM, "mark job", "out of memory");
    return settle(r, r->ob, j);
}

/* One round with the marker: take batch k+1 (claimed ahead by the claimer
 * while batch k was sent, or claimed here when nothing was asked for), send
 * it while batch k's last confirms come in, then collect k and hand it to
 * the marker. A full batch asks the claimer for the next one before it is
 * sent; a batch that is not full is settled at once (settle_now), and the
 * next round claims here: at a low rate the relay runs like step(), with
 * no thread hop on the way from commit to confirm. */
static int pipelined_step(acemq_relay *r, marker *k, acemq__claimer *c, size_t *claimed)
{
    int i = -1, rc;
    size_t n = 0;
    int ahead = c && c->asked_flight >= 0;
    if (ahead) {
        rc = acemq__claimer_take(c, &i, &n);
    } else {
        i = free_flight(r, -1);
        rc = claim_into(r, r->ob, i, &n);
    }
    if (rc == 0 && n == 0 && (ahead || r->pending >= 0)) {
        /* Claimed while earlier batches were unmarked: the next records of
         * their ordering keys become due only once those are marked, and no
         * wait would hear it (the marks are the relay's own). Look again
         * after the marker is done. */
        collect_pending(r, k);
        marker_wait_free(k, 0);
        marker_wait_free(k, 1);
        i = free_flight(r, -1);
        rc = claim_into(r, r->ob, i, &n);
    }
    *claimed = n;
    int full = rc == 0 && n == r->opts.batch;
    if (c && full) acemq__claimer_ask(c, free_flight(r, i));
    int waved = rc == 0 && n > 0 ? acemq__waves_plan(&r->waves, r->flights[i].recs, n) : 0;
    if (waved < 0) return fail(r, waved, "waves", "out of memory");
    if (waved) { /* one send at a time from here: nothing may be outstanding */
        collect_pending(r, k);
        acemq__flight *f = &r->flights[i];
        return publish_waves(r, f->recs, f->msgs, f->results, n, &r->jobs[2]);
    }
    int sent = rc == 0 && n > 0 && send_flight(r, i, &rc);
    collect_pending(r, k);
    if (sent && full) r->pending = i;
    if (sent && !full) rc = settle_now(r, i);
    return rc;
}

/* Counts on the relay's own handle: run() without a gauge handle, between
 * batches. */
static double refresh_gauges(acemq_relay *r)
{
    return acemq__gauges_refresh(r->ob, &r->lock, &r->stats);
}

void acemq_relay_stop(acemq_relay *r)
{
    if (!r) return;
    atomic_store(&r->stop_requested, 1);
    acemq_broker_stop_waiting(r->b);
}

/* A signal handler's flag, or another thread's acemq_relay_stop. */
static int stopping(acemq_relay *r, volatile sig_atomic_t *stop)
{
    return *stop || atomic_load(&r->stop_requested);
}

/* What stopping() needs, for acemq__pause_ms. */
typedef struct stop_watch {
    acemq_relay *r;
    volatile sig_atomic_t *stop;
} stop_watch;

static int stop_watched(void *ctx)
{
    const stop_watch *w = ctx;
    return stopping(w->r, w->stop);
}

static void pause_ms(acemq_relay *r, int ms, volatile sig_atomic_t *stop)
{
    stop_watch w = {r, stop};
    (void)acemq__pause_ms(ms, stop_watched, &w);
}

/* The broker blocked the relay's connection (a resource alarm), or the
 * block ended: nothing is published meanwhile, which an operator should
 * see without --verbose. */
static void log_blocked(void *ctx, int blocked, const char *reason)
{
    log_event(ctx, blocked ? "broker_blocked" : "broker_unblocked", "reason", reason, NULL, NULL);
}

int acemq_relay_run(acemq_relay *r, volatile sig_atomic_t *stop)
{
    if (!r) return ACEMQ_EINVAL;
    if (!stop) return fail(r, ACEMQ_EINVAL, "run", "stop must not be NULL");
    log_event(r, "start", "backend", acemq_outbox_backend(r->ob), NULL, NULL);
    marker k = {.r = r, .waiting = -1};
    acemq__claimer c, *cp = NULL;
    int pipelined = r->mark_ob != NULL;
    if (pipelined) {
        if (acemq__worker_start(&k.w, 0, marker_main, &k) != 0)
            return fail(r, ACEMQ_ENOMEM, "run", "cannot start the marker thread");
        if (r->claim_ob && acemq__claimer_start(&c, claim_ahead, release_ahead, r) != 0) {
            (void)fail(r, ACEMQ_ENOMEM, "run", "cannot start the claimer thread");
            log_event(r, "error", "where", "run", "error", "no claimer thread: claiming inline");
        } else if (r->claim_ob) {
            cp = &c;
        }
    }
    acemq__gauges g, *gp = NULL;
    if (r->gauge_ob && acemq__gauges_start(&g, r->gauge_ob, &r->lock, &r->stats) != 0)
        log_event(r, "error", "where", "run", "error", "no gauge thread: counting inline");
    else if (r->gauge_ob)
        gp = &g;
    double gauges_due = 0; /* without a gauge thread: when to count next */
    int broker_backoff = 0;
    /* A send or collect waiting on a connection the broker has blocked
     * returns only when the alarm clears; this lets *stop end it too, and
     * the operator reads when the wait began and ended. */
    acemq__broker_watch_stop(r->b, stop);
    acemq__broker_watch_blocked(r->b, log_blocked, r);
    while (!stopping(r, stop)) {
        size_t n = 0;
        int rc = pipelined ? pipelined_step(r, &k, cp, &n) : acemq_relay_step(r, &n);
        if (!gp && acemq__gauges_now_ms() >= gauges_due) {
            double took = refresh_gauges(r);
            gauges_due = acemq__gauges_now_ms() + acemq__gauges_interval_ms(took);
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
        /* A claim that found anything is followed by another at once, not by
         * a wait: its marks may have made records due (the next record of
         * each ordering key it published), and a wait hears only other
         * connections' commits. Only an empty claim waits for the poll. */
        if (n > 0) continue;
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
        /* Claiming stops (a batch claimed ahead goes back unsent); the
         * batch in flight is collected and marked before run returns. */
        if (cp) acemq__claimer_stop(cp);
        collect_pending(r, &k);
        pthread_mutex_lock(&k.w.mu);
        k.quit = 1;
        pthread_cond_broadcast(&k.w.cv);
        pthread_mutex_unlock(&k.w.mu);
        acemq__worker_join(&k.w);
    }
    if (gp) {
        acemq__gauges_stop(gp);
        (void)acemq__gauges_refresh(r->gauge_ob, &r->lock, &r->stats);
    } else {
        (void)refresh_gauges(r);
    }
    acemq__broker_watch_stop(r->b, NULL);
    acemq__broker_watch_blocked(r->b, NULL, NULL);
    log_event(r, "stop", "reason", "signal", NULL, NULL);
    return 0;
}
