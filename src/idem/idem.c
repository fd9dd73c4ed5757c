/* idem.c — the backend-neutral idempotency store: argument checks, the clock,
 * counters and error text. Backends (src/backends/<tech>/idem.c), found by URL
 * scheme in the registry, only store and decide.
 *
 * Every public call validates its input here first, so no backend ever sees a
 * NULL id, an empty one, an over-long one or an out-of-range lease; a bad call
 * fails with ACEMQ_EINVAL and changes nothing. Every error a call returns has
 * its own text on the handle (acemq_idem_errmsg), naming the argument that
 * was wrong, or in the backend's words when the backend failed; a call that
 * succeeds leaves the text of the last error as it was.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem/idem_backend.h"
#include "idem/idem_url.h"

#define DEFAULT_LEASE_MS 30000
#define DEFAULT_RETENTION_MS (7LL * 24 * 3600 * 1000)
#define DEFAULT_MAX_ENTRIES ((size_t)1 << 20)
#define DEFAULT_BUSY_TIMEOUT_MS 5000
/* Leases and retention above ten years are surely a unit mistake. */
#define MAX_DURATION_MS (10LL * 366 * 24 * 3600 * 1000)

#define COUNT(h, field) ACEMQ__IDEM_COUNT(h, field, 1)

static atomic_uint next_stripe;
/* stripe + 1; 0: not picked yet. initial-exec: read at a fixed offset from
 * the thread pointer, where the default model for a shared library calls
 * __tls_get_addr on every count (twice per claim and confirm). Four bytes
 * fit the static TLS that glibc keeps for libraries loaded with dlopen. */
static _Thread_local unsigned this_stripe __attribute__((tls_model("initial-exec")));

unsigned acemq__counter_stripe(void)
{
    if (this_stripe == 0)
        this_stripe = atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) %
                          ACEMQ__COUNTER_STRIPES +
                      1;
    return this_stripe - 1;
}

void acemq_idem_options_init(acemq_idem_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->lease_ms = DEFAULT_LEASE_MS;
    o->retention_ms = DEFAULT_RETENTION_MS;
    o->max_entries = DEFAULT_MAX_ENTRIES;
    o->clock = NULL;
    o->synchronous = ACEMQ_SYNC_FULL;
    o->busy_timeout_ms = DEFAULT_BUSY_TIMEOUT_MS;
}

int acemq__idem_fail(acemq_idem *h, int code, const char *fmt, ...)
{
    if (!h) return code;
    char text[sizeof h->errmsg];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&h->err_lock);
    memcpy(h->errmsg, text, sizeof text);
    pthread_mutex_unlock(&h->err_lock);
    return code;
}

/* Why the last open in this thread failed: the handle is gone by then, so
 * its text moves here, and acemq_idem_errmsg(NULL) reads it. */
static _Thread_local char open_error[sizeof((acemq_idem *)0)->errmsg];

int acemq__idem_open_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(open_error, sizeof open_error, fmt, ap);
    va_end(ap);
    return code;
}

const char *acemq_idem_errmsg(acemq_idem *h)
{
    static _Thread_local char copy[ACEMQ__IDEM_ERRMSG_MAX];
    if (!h) return open_error;
    pthread_mutex_lock(&h->err_lock);
    memcpy(copy, h->errmsg, sizeof copy);
    pthread_mutex_unlock(&h->err_lock);
    return copy;
}

static int check_duration(int64_t ms, int zero_ok)
{
    return (ms > 0 || (zero_ok && ms == 0)) && ms <= MAX_DURATION_MS;
}

int acemq__idem_new(acemq_idem **out, const acemq_idem_options *o)
{
    acemq_idem_options opts;
    if (o)
        opts = *o;
    else
        acemq_idem_options_init(&opts);
    if (!check_duration(opts.lease_ms, 0) || !check_duration(opts.retention_ms, 0) ||
        opts.max_entries == 0 || opts.synchronous < ACEMQ_SYNC_OFF ||
        opts.synchronous > ACEMQ_SYNC_FULL || opts.busy_timeout_ms < 0 ||
        (opts.flags & ~(unsigned)ACEMQ_IDEM_CONFIRM_IN_CALLER_TX) != 0) {
        return acemq__idem_open_fail(
            ACEMQ_EINVAL,
            "options: lease_ms and retention_ms must be 1..%lld, max_entries above 0, "
            "synchronous an acemq_sync_mode, busy_timeout_ms not negative, flags known",
            (long long)MAX_DURATION_MS);
    }
    /* The counter stripes are cache-line aligned, so the handle must be too. */
    size_t size = (sizeof(acemq_idem) + 63) & ~(size_t)63;
    acemq_idem *h = aligned_alloc(64, size);
    if (!h) return acemq__idem_open_fail(ACEMQ_ENOMEM, "out of memory for the handle");
    memset(h, 0, size);
    if (pthread_mutex_init(&h->err_lock, NULL) != 0) {
        free(h);
        return acemq__idem_open_fail(ACEMQ_ENOMEM, "cannot create the handle's mutex");
    }
    h->opts = opts;
    h->clock = opts.clock ? *opts.clock : *acemq_clock_system();
    h->opts.clock = &h->clock;
    *out = h;
    return 0;
}

static void destroy(acemq_idem *h)
{
    pthread_mutex_destroy(&h->err_lock);
    free(h);
}

void acemq__idem_free(acemq_idem *h)
{
    if (!h) return;
    memcpy(open_error, h->errmsg, sizeof open_error);
    destroy(h);
}

acemq__registry acemq__idem_registry;

int acemq_idem_open(acemq_idem **out, const char *url, const acemq_idem_options *o)
{
    open_error[0] = '\0';
    if (!out) return acemq__idem_open_fail(ACEMQ_EINVAL, "out is NULL");
    *out = NULL;
    if (!url) return acemq__idem_open_fail(ACEMQ_EINVAL, "url is NULL");
    acemq_idem *h = NULL;
    int rc = acemq__idem_new(&h, o);
    if (rc != 0) return rc;
    acemq__url u;
    rc = acemq__url_parse(&u, url);
    if (rc != 0) {
        acemq__idem_fail(h, rc, "'%s' is not a URL of the form scheme:rest?key=value", url);
        acemq__idem_free(h);
        return rc;
    }
    const acemq__idem_backend *b =
        (const void *)acemq__registry_find(&acemq__idem_registry, u.scheme);
    if (b) {
        rc = b->open(h, &u);
    } else {
        char known[256];
        acemq__registry_names(&acemq__idem_registry, known, sizeof known);
        rc = acemq__idem_fail(h, ACEMQ_EURL, "unknown store '%s:'; known: %s", u.scheme, known);
    }
    acemq__url_free(&u);
    if (rc != 0) {
        acemq__idem_free(h);
        return rc;
    }
    *out = h;
    return 0;
}

void acemq_idem_close(acemq_idem *h)
{
    if (!h) return;
    if (h->methods && h->methods->close) h->methods->close(h);
    destroy(h);
}

const char *acemq_idem_backend(const acemq_idem *h)
{
    return h && h->methods ? h->methods->name : "";
}

const char *acemq_claim_status_name(int status)
{
    switch (status) {
    case ACEMQ_CLAIMED:
        return "CLAIMED";
    case ACEMQ_ALREADY_CONFIRMED:
        return "ALREADY_CONFIRMED";
    case ACEMQ_IN_PROGRESS:
        return "IN_PROGRESS";
    default:
        return acemq_err_name(status);
    }
}

/* No element: the argument of a single call, not of a batch. */
#define NOT_IN_BATCH SIZE_MAX

/* "" for a single call's argument, "keys[3]." for element 3 of a batch's
 * array: the prefix of the argument's name in an error's text. */
static const char *element(char *buf, size_t cap, const char *array, size_t i)
{
    if (i == NOT_IN_BATCH) return "";
    snprintf(buf, cap, "%s[%zu].", array, i);
    return buf;
}

/* Checks an id (keys[i].id in a batch) and wraps it; on failure the handle
 * says what was wrong. */
static int take_id(acemq_idem *h, size_t i, const void *id, size_t len, acemq__bytes *out)
{
    char b[32];
    if (!id || len == 0)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "%sid is %s", element(b, sizeof b, "keys", i),
                                id ? "empty" : "NULL");
    if (len > ACEMQ_IDEM_ID_MAX)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "%sid is %zu bytes; at most %d are allowed",
                                element(b, sizeof b, "keys", i), len, ACEMQ_IDEM_ID_MAX);
    out->data = id;
    out->len = len;
    return 0;
}

int acemq__idem_take_id(acemq_idem *h, const void *id, size_t len, acemq__bytes *out)
{
    return take_id(h, NOT_IN_BATCH, id, len, out);
}

static int64_t now_ms(acemq_idem *h)
{
    return h->clock.now_ms(h->clock.ctx);
}

/* Saturating: a far-future lease must not wrap around into the past. */
static int64_t add_ms(int64_t t, int64_t d)
{
    return t > INT64_MAX - d ? INT64_MAX : t + d;
}

/* Counts an error from a backend; results and ESTALE are counted by callers. */
static int count_error(acemq_idem *h, int rc)
{
    if (rc == ACEMQ_ESTALE)
        COUNT(h, stale_tokens);
    else if (rc == ACEMQ_EMISMATCH)
        COUNT(h, mismatches);
    else if (rc < 0)
        COUNT(h, errors);
    return rc;
}

/* Checks per-claim options (opts[i] in a batch) into *a, all but the times;
 * *lease gets the lease to apply. */
static int claim_args(acemq_idem *h, size_t i, const acemq_claim_opts *opts, acemq__claim_args *a,
                      int64_t *lease)
{
    char b[32];
    memset(a, 0, sizeof *a);
    *lease = h->opts.lease_ms;
    if (!opts) return 0;
    if (opts->lease_ms != 0) *lease = opts->lease_ms;
    if (!check_duration(*lease, 0))
        return acemq__idem_fail(h, ACEMQ_EINVAL, "%slease_ms %lld is out of range (1..%lld)",
                                element(b, sizeof b, "opts", i), (long long)opts->lease_ms,
                                (long long)MAX_DURATION_MS);
    if (opts->fingerprint_len > ACEMQ_IDEM_FINGERPRINT_MAX)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "%sfingerprint_len %zu is over %d",
                                element(b, sizeof b, "opts", i), opts->fingerprint_len,
                                ACEMQ_IDEM_FINGERPRINT_MAX);
    if (opts->fingerprint_len > 0 && !opts->fingerprint)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "%sfingerprint is NULL but fingerprint_len is %zu",
                                element(b, sizeof b, "opts", i), opts->fingerprint_len);
    if (opts->result_cap > 0 && !opts->result_buf)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "%sresult_buf is NULL but result_cap is %zu",
                                element(b, sizeof b, "opts", i), opts->result_cap);
    a->fingerprint.data = opts->fingerprint;
    a->fingerprint.len = opts->fingerprint_len;
    a->result_buf = opts->result_buf;
    a->result_cap = opts->result_cap;
    return 0;
}

int acemq_idem_try_claim(acemq_idem *h, const void *id, size_t id_len, const acemq_claim_opts *opts,
                         acemq_claim *out)
{
    if (!h) return ACEMQ_EINVAL;
    if (!out) return acemq__idem_fail(h, ACEMQ_EINVAL, "out is NULL");
    memset(out, 0, sizeof *out);
    acemq__bytes key;
    int rc = take_id(h, NOT_IN_BATCH, id, id_len, &key);
    if (rc != 0) return rc;
    /* First, so that the read it starts overlaps the rest of this call. */
    int hinted = h->methods->version >= 3 && h->methods->prefetch;
    uint64_t hint = hinted ? h->methods->prefetch(h, &key) : 0;
    acemq__claim_args a;
    int64_t lease;
    rc = claim_args(h, NOT_IN_BATCH, opts, &a, &lease);
    if (rc != 0) return rc;
    a.hint = hint;
    a.has_hint = hinted;
    a.now_ms = now_ms(h);
    a.lease_until_ms = add_ms(a.now_ms, lease);
    rc = h->methods->try_claim(h, &key, &a, out);
    switch (rc) {
    case ACEMQ_CLAIMED:
        COUNT(h, claimed);
        if (out->takeover) COUNT(h, takeovers);
        break;
    case ACEMQ_ALREADY_CONFIRMED:
        COUNT(h, duplicates);
        break;
    case ACEMQ_IN_PROGRESS:
        COUNT(h, in_progress);
        break;
    default:
        count_error(h, rc);
    }
    return rc;
}

/* What a batch answered, added to the counters once per batch rather than
 * with an atomic add per element; the sums are the per-call ones. */
typedef struct claim_tally {
    uint64_t claimed, takeovers, duplicates, in_progress, mismatches, errors;
} claim_tally;

static void tally(claim_tally *t, int rc, const acemq_claim *c)
{
    switch (rc) {
    case ACEMQ_CLAIMED:
        t->claimed++;
        t->takeovers += c->takeover != 0;
        break;
    case ACEMQ_ALREADY_CONFIRMED:
        t->duplicates++;
        break;
    case ACEMQ_IN_PROGRESS:
        t->in_progress++;
        break;
    case ACEMQ_EMISMATCH:
        t->mismatches++;
        break;
    default:
        t->errors++; /* try_claim's backend answers no ESTALE */
    }
}

static void add_tally(acemq_idem *h, const claim_tally *t)
{
#define ADD(f)                                                                                     \
    if (t->f) ACEMQ__IDEM_COUNT(h, f, t->f)
    ADD(claimed);
    ADD(takeovers);
    ADD(duplicates);
    ADD(in_progress);
    ADD(mismatches);
    ADD(errors);
#undef ADD
}

/* Elements checked and handed to the backend at a time: the arrays live on
 * the stack. */
#define MANY_CHUNK 64

/* Checks element j of a batch as try_claim checks its arguments. */
static int check_element(acemq_idem *h, const acemq_idem_key *keys, const acemq_claim_opts *opts,
                         size_t j, acemq__bytes *id, acemq__claim_args *a, int64_t *lease)
{
    int rc = take_id(h, j, keys[j].id, keys[j].id_len, id);
    return rc != 0 ? rc : claim_args(h, j, opts ? &opts[j] : NULL, a, lease);
}

/* 1 when the store refused an element of the chunk after element i. */
static int store_failed_after(const acemq__bytes *ids, const int *status, size_t i, size_t k)
{
    for (size_t x = i + 1; x < k; x++)
        if (ids[x].len && status[x] < 0) return 1;
    return 0;
}

int acemq_idem_try_claim_many(acemq_idem *h, size_t n, const acemq_idem_key *keys,
                              const acemq_claim_opts *opts, acemq_claim *out, int *status)
{
    if (!h) return ACEMQ_EINVAL;
    if (n == 0) return 0;
    if (!keys) return acemq__idem_fail(h, ACEMQ_EINVAL, "keys is NULL with n %zu", n);
    if (!out) return acemq__idem_fail(h, ACEMQ_EINVAL, "out is NULL with n %zu", n);
    if (!status) return acemq__idem_fail(h, ACEMQ_EINVAL, "status is NULL with n %zu", n);
    if (n > INT_MAX)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "%zu ids in one batch; at most %d", n, INT_MAX);
    const acemq__idem_methods *mt = h->methods;
    int many = mt->version >= 2 && mt->try_claim_many;
    /* One instant for the whole batch: the ids arrived together. */
    int64_t now = now_ms(h);
    acemq__bytes ids[MANY_CHUNK];
    acemq__claim_args args[MANY_CHUNK];
    claim_tally t = {0};
    for (size_t lo = 0; lo < n; lo += MANY_CHUNK) {
        size_t k = n - lo < MANY_CHUNK ? n - lo : MANY_CHUNK;
        size_t todo = 0;
        size_t last_bad = NOT_IN_BATCH; /* the chunk's last element answered here */
        for (size_t i = 0; i < k; i++) {
            size_t j = lo + i;
            memset(&out[j], 0, sizeof out[j]);
            memset(&ids[i], 0, sizeof ids[i]);
            int64_t lease = 0;
            int rc = check_element(h, keys, opts, j, &ids[i], &args[i], &lease);
            if (rc != 0) {
                /* Answered here, as try_claim answers it: not counted. */
                status[j] = rc;
                ids[i].len = 0;
                last_bad = i;
                continue;
            }
            args[i].now_ms = now;
            args[i].lease_until_ms = add_ms(now, lease);
            todo++;
        }
        if (todo == 0) continue;
        if (many) {
            mt->try_claim_many(h, k, ids, args, &out[lo], &status[lo]);
        } else {
            for (size_t i = 0; i < k; i++)
                if (ids[i].len) status[lo + i] = mt->try_claim(h, &ids[i], &args[i], &out[lo + i]);
        }
        for (size_t i = 0; i < k; i++)
            if (ids[i].len) tally(&t, status[lo + i], &out[lo + i]);
        /* The text tells the batch's last error in element order. The store
         * wrote the texts of its refusals after the loop above wrote those
         * of the elements it answered, so when the store refused none after
         * the last such element, that element's text is written again. */
        if (last_bad != NOT_IN_BATCH && !store_failed_after(ids, status + lo, last_bad, k)) {
            acemq__bytes id;
            acemq__claim_args a;
            int64_t lease;
            (void)check_element(h, keys, opts, lo + last_bad, &id, &a, &lease);
        }
    }
    add_tally(h, &t);
    return (int)t.claimed;
}

int acemq_idem_claim(acemq_idem *h, const void *id, size_t id_len, uint64_t *token)
{
    acemq_claim c;
    int rc = acemq_idem_try_claim(h, id, id_len, NULL, &c);
    if (rc < 0) return rc;
    if (rc != ACEMQ_CLAIMED) return 0;
    if (token) *token = c.token;
    return 1;
}

int acemq_idem_confirm_result(acemq_idem *h, const void *id, size_t id_len, uint64_t token,
                              const void *result, size_t result_len)
{
    if (!h) return ACEMQ_EINVAL;
    acemq__bytes key, res = {result, result_len};
    int rc = take_id(h, NOT_IN_BATCH, id, id_len, &key);
    if (rc != 0) return rc;
    if (result_len > ACEMQ_IDEM_RESULT_MAX)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "result_len %zu is over %d", result_len,
                                ACEMQ_IDEM_RESULT_MAX);
    if (result_len > 0 && !result)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "result is NULL but result_len is %zu",
                                result_len);
    int64_t now = now_ms(h);
    rc = h->methods->confirm(h, &key, token, &res, now, add_ms(now, h->opts.retention_ms));
    if (rc == 0) COUNT(h, confirms);
    return count_error(h, rc);
}

/* Checks confirmation i of a batch and wraps its id and result; on failure
 * the handle says what was wrong. */
static int check_confirmation(acemq_idem *h, const acemq_idem_confirmation *c, size_t i,
                              acemq__bytes *id, acemq__bytes *result)
{
    if (!c->id || c->id_len == 0)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "confirmations[%zu].id is %s", i,
                                c->id ? "empty" : "NULL");
    if (c->id_len > ACEMQ_IDEM_ID_MAX)
        return acemq__idem_fail(h, ACEMQ_EINVAL,
                                "confirmations[%zu].id is %zu bytes; at most %d are allowed", i,
                                c->id_len, ACEMQ_IDEM_ID_MAX);
    if (c->result_len > ACEMQ_IDEM_RESULT_MAX || (c->result_len > 0 && !c->result))
        return acemq__idem_fail(h, ACEMQ_EINVAL,
                                "confirmations[%zu].result: %zu bytes%s; at most %d", i,
                                c->result_len, c->result ? "" : " at NULL", ACEMQ_IDEM_RESULT_MAX);
    *id = (acemq__bytes){c->id, c->id_len};
    *result = (acemq__bytes){c->result, c->result_len};
    return 0;
}

int acemq_idem_confirm_many(acemq_idem *h, size_t n, const acemq_idem_confirmation *c, int *status)
{
    if (!h) return ACEMQ_EINVAL;
    if (n == 0) return 0;
    if (!c) return acemq__idem_fail(h, ACEMQ_EINVAL, "confirmations is NULL with n %zu", n);
    if (!status) return acemq__idem_fail(h, ACEMQ_EINVAL, "status is NULL with n %zu", n);
    if (n > INT_MAX)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "%zu confirmations in one batch; at most %d", n,
                                INT_MAX);
    const acemq__idem_methods *mt = h->methods;
    int many = mt->version >= 4 && mt->confirm_many;
    int64_t now = now_ms(h), expires = add_ms(now, h->opts.retention_ms);
    acemq__bytes ids[MANY_CHUNK] = {{0}}, results[MANY_CHUNK];
    uint64_t tokens[MANY_CHUNK];
    int confirmed = 0;
    for (size_t lo = 0; lo < n; lo += MANY_CHUNK) {
        size_t k = n - lo < MANY_CHUNK ? n - lo : MANY_CHUNK, todo = 0;
        for (size_t i = 0; i < k; i++) {
            tokens[i] = c[lo + i].token;
            int rc = check_confirmation(h, &c[lo + i], lo + i, &ids[i], &results[i]);
            /* A backend answers every element it is given; one it left
             * unanswered would read as a store failure, never as done. */
            status[lo + i] = rc != 0 ? rc : ACEMQ_EBACKEND;
            if (rc != 0) {
                ids[i].len = 0;
                continue;
            }
            todo++;
        }
        if (todo == 0) continue;
        if (many)
            mt->confirm_many(h, k, ids, tokens, results, now, expires, &status[lo]);
        else
            for (size_t i = 0; i < k; i++)
                if (ids[i].len)
                    status[lo + i] = mt->confirm(h, &ids[i], tokens[i], &results[i], now, expires);
        for (size_t i = 0; i < k; i++) {
            if (!ids[i].len) continue;
            if (status[lo + i] == 0) {
                COUNT(h, confirms);
                confirmed++;
            } else {
                (void)count_error(h, status[lo + i]);
            }
        }
    }
    return confirmed;
}

int acemq_idem_confirm(acemq_idem *h, const void *id, size_t id_len, uint64_t token)
{
    return acemq_idem_confirm_result(h, id, id_len, token, NULL, 0);
}

int acemq_idem_release(acemq_idem *h, const void *id, size_t id_len, uint64_t token)
{
    if (!h) return ACEMQ_EINVAL;
    acemq__bytes key;
    int rc = take_id(h, NOT_IN_BATCH, id, id_len, &key);
    if (rc != 0) return rc;
    rc = h->methods->release(h, &key, token, now_ms(h));
    if (rc == 0) COUNT(h, releases);
    return count_error(h, rc);
}

int acemq_idem_renew(acemq_idem *h, const void *id, size_t id_len, uint64_t token, int64_t lease_ms)
{
    if (!h) return ACEMQ_EINVAL;
    acemq__bytes key;
    int rc = take_id(h, NOT_IN_BATCH, id, id_len, &key);
    if (rc != 0) return rc;
    if (lease_ms == 0) lease_ms = h->opts.lease_ms;
    if (!check_duration(lease_ms, 0))
        return acemq__idem_fail(h, ACEMQ_EINVAL, "lease_ms %lld is out of range (1..%lld)",
                                (long long)lease_ms, (long long)MAX_DURATION_MS);
    int64_t now = now_ms(h);
    rc = h->methods->renew(h, &key, token, now, add_ms(now, lease_ms));
    if (rc == 0) COUNT(h, renewals);
    return count_error(h, rc);
}

int acemq_idem_is_confirmed(acemq_idem *h, const void *id, size_t id_len)
{
    if (!h) return ACEMQ_EINVAL;
    acemq__bytes key;
    int rc = take_id(h, NOT_IN_BATCH, id, id_len, &key);
    if (rc != 0) return rc;
    return count_error(h, h->methods->is_confirmed(h, &key, now_ms(h)));
}

int acemq_idem_purge(acemq_idem *h, uint64_t *purged)
{
    if (!h) return ACEMQ_EINVAL;
    uint64_t n = 0;
    int rc = h->methods->purge(h, now_ms(h), &n);
    if (rc == 0) ACEMQ__IDEM_COUNT(h, expirations, n);
    if (purged) *purged = rc == 0 ? n : 0;
    return count_error(h, rc);
}

int acemq_idem_stats_get(acemq_idem *h, acemq_idem_stats *out)
{
    if (!h) return ACEMQ_EINVAL;
    if (!out) return acemq__idem_fail(h, ACEMQ_EINVAL, "out is NULL");
    memset(out, 0, sizeof *out);
#define LOAD(f) out->f += atomic_load_explicit(&h->counters[i].f, memory_order_relaxed)
    for (int i = 0; i < ACEMQ__COUNTER_STRIPES; i++) {
        LOAD(claimed);
        LOAD(duplicates);
        LOAD(in_progress);
        LOAD(takeovers);
        LOAD(stale_tokens);
        LOAD(confirms);
        LOAD(releases);
        LOAD(renewals);
        LOAD(mismatches);
        LOAD(expirations);
        LOAD(evictions);
        LOAD(errors);
    }
#undef LOAD
    return 0;
}

int acemq__idem_url_check(const char *url, char *why, size_t cap)
{
    char scheme[32];
    if (acemq__url_scheme(url, scheme, sizeof scheme) != 0) {
        (void)snprintf(why, cap, "'%s' is not a URL of the form scheme:rest?key=value", url);
        return ACEMQ_EURL;
    }
    if (acemq__registry_find(&acemq__idem_registry, scheme)) return 0;
    char known[256];
    acemq__registry_names(&acemq__idem_registry, known, sizeof known);
    (void)snprintf(why, cap, "unknown store '%s:'; known: %s", scheme, known);
    return ACEMQ_EURL;
}
