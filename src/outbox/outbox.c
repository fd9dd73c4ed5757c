/* outbox.c — the backend-neutral half of the outbox's draining side.
 *
 * Checks every argument before a backend sees it, resolves the time (the
 * injected clock, or the database's own), draws back-off jitter, and owns the
 * buffer that claimed records are copied into, so backends stay small.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "os/mono_time.h"
#include "core/url.h"
#include "outbox/outbox_backend.h"
#include "outbox/outbox_internal.h"

void acemq_outbox_options_init(acemq_outbox_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->max_attempts = 10;
    o->backoff_base_ms = 1000;
    o->backoff_max_ms = 300000;
    o->jitter_percent = 20;
    o->synchronous = ACEMQ_SYNC_FULL;
    o->busy_timeout_ms = 5000;
}

/* ------------------------------------------------------------------ errors */

static _Thread_local char thread_error[512];

int acemq__outbox_fail(acemq_outbox *h, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(h ? h->errmsg : thread_error, h ? sizeof h->errmsg : sizeof thread_error, fmt,
                    ap);
    va_end(ap);
    return code;
}

int acemq__outbox_fail_thread(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(thread_error, sizeof thread_error, fmt, ap);
    va_end(ap);
    return code;
}

const char *acemq_outbox_errmsg(const acemq_outbox *h)
{
    return h ? h->errmsg : thread_error;
}

/* ------------------------------------------------------------ the batch */

void acemq__outbox_batch_reset(acemq_outbox *h)
{
    h->batch.len = 0;
    h->batch.n = 0;
}

/* Appends len bytes and a NUL; *off gets where they start, or SIZE_MAX for
 * SQL NULL. */
static int put(acemq__outbox_batch *b, const void *p, size_t len, size_t *off)
{
    if (!p) {
        *off = SIZE_MAX;
        return 0;
    }
    if (b->cap - b->len < len + 1) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < len + 1) {
            if (cap > SIZE_MAX / 2) return ACEMQ_ENOMEM;
            cap *= 2;
        }
        char *nb = realloc(b->buf, cap);
        if (!nb) return ACEMQ_ENOMEM;
        b->buf = nb;
        b->cap = cap;
    }
    *off = b->len;
    if (len) memcpy(b->buf + b->len, p, len);
    b->buf[b->len + len] = '\0';
    b->len += len + 1;
    return 0;
}

static int put_str(acemq__outbox_batch *b, const char *s, size_t *off)
{
    return put(b, s, s ? strlen(s) : 0, off);
}

static const char *at(const acemq__outbox_batch *b, size_t off)
{
    return off == SIZE_MAX ? NULL : b->buf + off;
}

int acemq__outbox_batch_add(acemq_outbox *h, const acemq__outbox_row *row)
{
    acemq__outbox_batch *b = &h->batch;
    if (b->n == b->msgs_cap) {
        size_t cap = b->msgs_cap ? b->msgs_cap * 2 : 64;
        acemq_outbox_msg *m = realloc(b->msgs, cap * sizeof *m);
        if (!m) return acemq__outbox_fail(h, ACEMQ_ENOMEM, "out of memory copying a batch");
        b->msgs = m;
        int64_t *s = realloc(b->seqs, cap * sizeof *s);
        if (!s) return acemq__outbox_fail(h, ACEMQ_ENOMEM, "out of memory copying a batch");
        b->seqs = s;
        acemq__msg_offsets *o = realloc(b->offs, cap * sizeof *o);
        if (!o) return acemq__outbox_fail(h, ACEMQ_ENOMEM, "out of memory copying a batch");
        b->offs = o;
        b->msgs_cap = cap;
    }
    size_t *off = b->offs[b->n].at;
    static const char empty[] = "";
    int rc = put_str(b, row->id, &off[0]);
    if (!rc) rc = put_str(b, row->destination, &off[1]);
    if (!rc) rc = put_str(b, row->routing_key, &off[2]);
    if (!rc) rc = put_str(b, row->ordering_key, &off[3]);
    if (!rc) rc = put_str(b, row->headers_json, &off[4]);
    if (!rc) rc = put_str(b, row->content_type, &off[5]);
    if (!rc) rc = put_str(b, row->last_error, &off[6]);
    /* A NULL body column reads as empty: the schema says NOT NULL, but a
     * hand-written row must not crash a relay. */
    if (!rc) rc = put(b, row->body ? row->body : empty, row->body ? row->body_len : 0, &off[7]);
    if (rc) return acemq__outbox_fail(h, rc, "out of memory copying a batch");
    acemq_outbox_msg *m = &b->msgs[b->n];
    m->body_len = row->body ? row->body_len : 0;
    m->created_ms = row->created_ms;
    m->attempts = row->attempts;
    m->token = row->token;
    b->seqs[b->n] = row->seq;
    b->n++;
    return 0;
}

struct acemq__seq_index {
    int64_t seq;
    size_t at;
};

static int by_seq(const void *a, const void *b)
{
    int64_t x = ((const struct acemq__seq_index *)a)->seq;
    int64_t y = ((const struct acemq__seq_index *)b)->seq;
    return (x > y) - (x < y);
}

/* Turns offsets into pointers and puts the batch in seq order: 0 or
 * ACEMQ_ENOMEM. */
static int batch_finish(acemq__outbox_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        acemq_outbox_msg *m = &b->msgs[i];
        const size_t *off = b->offs[i].at;
        m->id = at(b, off[0]);
        m->destination = at(b, off[1]);
        m->routing_key = at(b, off[2]);
        m->ordering_key = at(b, off[3]);
        m->headers_json = at(b, off[4]);
        m->content_type = at(b, off[5]);
        m->last_error = at(b, off[6]);
        m->body = at(b, off[7]);
    }
    /* Oldest first: UPDATE ... RETURNING hands rows back in no set order
     * (PostgreSQL's in hash order once the plan hashes the picked rows), so
     * anything but an already sorted batch is sorted in O(n log n). */
    int sorted = 1;
    for (size_t i = 1; sorted && i < b->n; i++)
        sorted = b->seqs[i - 1] <= b->seqs[i];
    if (sorted) return 0;
    if (b->order_cap < b->n) {
        struct acemq__seq_index *o = realloc(b->order, b->n * sizeof *o);
        if (!o) return ACEMQ_ENOMEM;
        b->order = o;
        acemq_outbox_msg *m = realloc(b->sorted, b->n * sizeof *m);
        if (!m) return ACEMQ_ENOMEM;
        b->sorted = m;
        b->order_cap = b->n;
    }
    for (size_t i = 0; i < b->n; i++) {
        b->order[i].seq = b->seqs[i];
        b->order[i].at = i;
    }
    qsort(b->order, b->n, sizeof *b->order, by_seq);
    for (size_t i = 0; i < b->n; i++) {
        b->sorted[i] = b->msgs[b->order[i].at];
        b->seqs[i] = b->order[i].seq;
    }
    memcpy(b->msgs, b->sorted, b->n * sizeof *b->msgs);
    return 0;
}

/* ------------------------------------------------------------ handles */

static int check_options(const acemq_outbox_options *o, char *why, size_t cap)
{
    if (o->max_attempts < 1) return snprintf(why, cap, "max_attempts must be at least 1"), 1;
    if (o->backoff_base_ms < 0 || o->backoff_max_ms < o->backoff_base_ms)
        return snprintf(why, cap, "backoff_base_ms must be >= 0 and <= backoff_max_ms"), 1;
    if (o->jitter_percent < 0 || o->jitter_percent > 100)
        return snprintf(why, cap, "jitter_percent must be within 0..100"), 1;
    if (o->synchronous < 0 || o->synchronous > 2)
        return snprintf(why, cap, "synchronous must be an acemq_sync_mode"), 1;
    if (o->busy_timeout_ms < 0) return snprintf(why, cap, "busy_timeout_ms must be >= 0"), 1;
    return 0;
}

acemq__registry acemq__outbox_registry;

int acemq_outbox_open(acemq_outbox **out, const char *url, const acemq_outbox_options *o)
{
    if (!out) return acemq__outbox_fail_thread(ACEMQ_EINVAL, "out must not be NULL");
    *out = NULL;
    if (!url) return acemq__outbox_fail_thread(ACEMQ_EINVAL, "url must not be NULL");
    acemq_outbox *h = calloc(1, sizeof *h);
    if (!h) return acemq__outbox_fail_thread(ACEMQ_ENOMEM, "out of memory");
    if (o)
        h->opts = *o;
    else
        acemq_outbox_options_init(&h->opts);
    char why[256];
    if (check_options(&h->opts, why, sizeof why)) {
        free(h);
        return acemq__outbox_fail_thread(ACEMQ_EINVAL, "options: %s", why);
    }
    h->has_clock = h->opts.clock != NULL;
    if (h->opts.clock) h->clock = *h->opts.clock;
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    h->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)h;
    if (!h->rng) h->rng = 0x9E3779B97F4A7C15ULL;

    int rc;
    char scheme[32];
    const acemq__outbox_backend *b = NULL;
    if (acemq__url_scheme(url, scheme, sizeof scheme) != 0) {
        rc = acemq__outbox_fail(h, ACEMQ_EURL, "'%s' is not a URL of the form scheme:rest", url);
    } else if ((b = (const void *)acemq__registry_find(&acemq__outbox_registry, scheme)) != NULL) {
        rc = b->open(h, url);
    } else {
        char known[256];
        acemq__registry_names(&acemq__outbox_registry, known, sizeof known);
        rc = acemq__outbox_fail(h, ACEMQ_EURL, "unknown outbox '%s:'; known: %s", scheme, known);
    }
    if (rc != 0) {
        (void)acemq__outbox_fail_thread(rc, "%s", h->errmsg);
        free(h);
        return rc;
    }
    *out = h;
    return 0;
}

void acemq_outbox_close(acemq_outbox *h)
{
    if (!h) return;
    if (h->methods) h->methods->close(h);
    free(h->batch.buf);
    free(h->batch.msgs);
    free(h->batch.seqs);
    free(h->batch.offs);
    free(h->batch.order);
    free(h->batch.sorted);
    free(h);
}

const char *acemq_outbox_backend(const acemq_outbox *h)
{
    return h && h->methods ? h->methods->name : NULL;
}

static int64_t now_of(acemq_outbox *h)
{
    return h->has_clock ? h->clock.now_ms(h->clock.ctx) : ACEMQ__DB_NOW;
}

/* Checks an id: the id argument, or with mark not SIZE_MAX marks[mark].id,
 * which the text then names. */
static int check_id_of(acemq_outbox *h, const char *id, size_t mark)
{
    int empty = !id || !*id;
    if (!empty && strlen(id) <= ACEMQ_OUTBOX_ID_MAX) return 0;
    char what[48] = "id";
    if (mark != SIZE_MAX) snprintf(what, sizeof what, "marks[%zu].id", mark);
    if (empty)
        return acemq__outbox_fail(h, ACEMQ_EINVAL, "%s must be a non-empty string, not %s", what,
                                  id ? "\"\"" : "NULL");
    return acemq__outbox_fail(h, ACEMQ_EINVAL, "%s is longer than %d bytes", what,
                              ACEMQ_OUTBOX_ID_MAX);
}

static int check_id(acemq_outbox *h, const char *id)
{
    return check_id_of(h, id, SIZE_MAX);
}

/* Names the argument that is NULL, the first of two. */
static int null_arg(acemq_outbox *h, const void *a, const char *a_name, const char *b_name)
{
    return acemq__outbox_fail(h, ACEMQ_EINVAL, "%s must not be NULL", !a ? a_name : b_name);
}

#define CHECK_HANDLE(h)                                                                            \
    do {                                                                                           \
        if (!(h)) return ACEMQ_EINVAL;                                                             \
    } while (0)

/* After a backend filled the batch (rc its answer): pointers and seq order,
 * then *msgs and *n; on any failure the batch is emptied. */
static int hand_out(acemq_outbox *h, int rc, const acemq_outbox_msg **msgs, size_t *n)
{
    if (rc == 0) {
        rc = batch_finish(&h->batch);
        if (rc != 0) rc = acemq__outbox_fail(h, rc, "out of memory sorting a batch");
    }
    if (rc != 0) {
        acemq__outbox_batch_reset(h);
        return rc;
    }
    *msgs = h->batch.msgs;
    *n = h->batch.n;
    return 0;
}

/* claim_batch, or with runs the backend's claim_runs where it has one. */
static int claim(acemq_outbox *h, size_t max, int64_t lease_ms, const acemq_outbox_msg **msgs,
                 size_t *n, int runs)
{
    CHECK_HANDLE(h);
    if (!msgs || !n) return null_arg(h, msgs, "msgs", "n");
    *msgs = NULL;
    *n = 0;
    if (max == 0 || max > 100000)
        return acemq__outbox_fail(h, ACEMQ_EINVAL, "batch size must be within 1..100000");
    if (lease_ms <= 0 || lease_ms > 7LL * 24 * 3600 * 1000)
        return acemq__outbox_fail(h, ACEMQ_EINVAL, "lease must be within 1 ms..7 days");
    acemq__outbox_batch_reset(h);
    int (*fn)(acemq_outbox *, size_t, int64_t, int64_t) = h->methods->claim_batch;
    if (runs && h->methods->version >= 3 && h->methods->claim_runs) fn = h->methods->claim_runs;
    return hand_out(h, fn(h, max, lease_ms, now_of(h)), msgs, n);
}

int acemq_outbox_claim_batch(acemq_outbox *h, size_t max, int64_t lease_ms,
                             const acemq_outbox_msg **msgs, size_t *n)
{
    return claim(h, max, lease_ms, msgs, n, 0);
}

int acemq__outbox_claim_runs(acemq_outbox *h, size_t max, int64_t lease_ms,
                             const acemq_outbox_msg **msgs, size_t *n)
{
    return claim(h, max, lease_ms, msgs, n, 1);
}

int acemq_outbox_mark_published_batch(acemq_outbox *h, const acemq_outbox_mark *marks, size_t n,
                                      int *status)
{
    CHECK_HANDLE(h);
    if (n == 0) return 0;
    if (!marks || !status) return null_arg(h, marks, "marks", "status");
    for (size_t i = 0; i < n; i++) {
        int rc = check_id_of(h, marks[i].id, i);
        if (rc != 0) return rc;
    }
    return h->methods->mark_published(h, marks, n, status, now_of(h));
}

int acemq_outbox_mark_published(acemq_outbox *h, const char *id, uint64_t token)
{
    CHECK_HANDLE(h);
    int rc = check_id(h, id);
    if (rc != 0) return rc;
    acemq_outbox_mark m = {id, token};
    int status = 0;
    rc = acemq_outbox_mark_published_batch(h, &m, 1, &status);
    return rc != 0 ? rc : status;
}

/* xorshift64*: jitter needs spread, not secrecy. */
static uint64_t next_random(acemq_outbox *h)
{
    uint64_t x = h->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    h->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

int acemq_outbox_mark_failed(acemq_outbox *h, const char *id, uint64_t token, const char *reason)
{
    CHECK_HANDLE(h);
    int rc = check_id(h, id);
    if (rc != 0) return rc;
    char cut[ACEMQ_OUTBOX_ERROR_MAX + 1];
    if (reason && strlen(reason) > ACEMQ_OUTBOX_ERROR_MAX) {
        /* Cut on a character boundary so the text stays valid UTF-8. */
        size_t len = ACEMQ_OUTBOX_ERROR_MAX;
        while (len > 0 && ((unsigned char)reason[len] & 0xC0) == 0x80)
            len--;
        memcpy(cut, reason, len);
        cut[len] = '\0';
        reason = cut;
    }
    acemq__fail_args a = {
        .reason = reason,
        .max_attempts = h->opts.max_attempts,
        .backoff_base_ms = h->opts.backoff_base_ms,
        .backoff_max_ms = h->opts.backoff_max_ms,
        .jitter_cut = h->opts.jitter_percent
                          ? (int)(next_random(h) % (uint64_t)(h->opts.jitter_percent + 1))
                          : 0,
    };
    return h->methods->mark_failed(h, id, token, &a, now_of(h));
}

int acemq_outbox_release(acemq_outbox *h, const char *id, uint64_t token)
{
    CHECK_HANDLE(h);
    int rc = check_id(h, id);
    if (rc != 0) return rc;
    return h->methods->release(h, id, token, now_of(h));
}

int acemq_outbox_pending_count(acemq_outbox *h, acemq_outbox_pending *out)
{
    CHECK_HANDLE(h);
    if (!out) return acemq__outbox_fail(h, ACEMQ_EINVAL, "out must not be NULL");
    memset(out, 0, sizeof *out);
    return h->methods->pending(h, out, now_of(h));
}

int acemq_outbox_list_dead(acemq_outbox *h, size_t max, const acemq_outbox_msg **msgs, size_t *n)
{
    CHECK_HANDLE(h);
    if (!msgs || !n) return null_arg(h, msgs, "msgs", "n");
    *msgs = NULL;
    *n = 0;
    if (max == 0 || max > 100000)
        return acemq__outbox_fail(h, ACEMQ_EINVAL, "max must be within 1..100000");
    acemq__outbox_batch_reset(h);
    return hand_out(h, h->methods->list_dead(h, max), msgs, n);
}

int acemq_outbox_retry(acemq_outbox *h, const char *id)
{
    CHECK_HANDLE(h);
    int rc = check_id(h, id);
    if (rc != 0) return rc;
    return h->methods->retry(h, id, now_of(h));
}

/* A purge deletes in batches, each its own transaction: one DELETE of a
 * year's published records held SQLite's write lock, the whole database's,
 * for as long as it ran (4 s for 1,000,000 records), and the application's
 * own writes waited or failed meanwhile; on PostgreSQL it was one long
 * transaction, which holds back vacuum everywhere. A batch of PURGE_BATCH
 * takes 10-20 ms on SQLite, which then pauses as long as the batch took
 * (PURGE_PAUSE_MAX_US at most) so that a writer sleeping in its busy
 * handler finds the lock free. */
#define PURGE_BATCH 5000
#define PURGE_PAUSE_MAX_US INT64_C(100000)

static void purge_pause_us(int64_t us)
{
    if (us > PURGE_PAUSE_MAX_US) us = PURGE_PAUSE_MAX_US;
    struct timespec ts = {0, (long)us * 1000L};
    (void)nanosleep(&ts, NULL);
}

int acemq__outbox_purge_batched(acemq_outbox *h, int64_t older_than_ms, uint64_t batch,
                                uint64_t *purged)
{
    const acemq__outbox_methods *m = h->methods;
    if (batch == 0) return acemq__outbox_fail(h, ACEMQ_EINVAL, "purge: a batch must be > 0");
    if (m->version < 2 || !m->purge_batch) {
        if (!m->purge) return acemq__outbox_fail(h, ACEMQ_ENOTSUP, "purge: not supported");
        return m->purge(h, now_of(h), older_than_ms, purged);
    }
    int64_t cursor = 0;
    for (;;) {
        uint64_t n = 0;
        int64_t t0 = acemq__mono_us();
        int rc = m->purge_batch(h, now_of(h), older_than_ms, batch, &cursor, &n);
        *purged += n;
        if (rc != 0 || cursor == ACEMQ__PURGE_DONE) return rc;
        if (m->purge_pauses) purge_pause_us(acemq__mono_us() - t0);
    }
}

int acemq_outbox_purge(acemq_outbox *h, int64_t older_than_ms, uint64_t *purged)
{
    CHECK_HANDLE(h);
    uint64_t ignored;
    if (!purged) purged = &ignored;
    *purged = 0;
    if (older_than_ms < 0) return acemq__outbox_fail(h, ACEMQ_EINVAL, "older_than_ms must be >= 0");
    return acemq__outbox_purge_batched(h, older_than_ms, PURGE_BATCH, purged);
}

int acemq_outbox_wait(acemq_outbox *h, int timeout_ms)
{
    CHECK_HANDLE(h);
    if (timeout_ms < 0) return acemq__outbox_fail(h, ACEMQ_EINVAL, "timeout_ms must be >= 0");
    return h->methods->wait(h, timeout_ms);
}
