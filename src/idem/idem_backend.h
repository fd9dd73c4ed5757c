/* idem_backend.h — the contract between the generic idempotency layer and a backend.
 *
 * A backend is a versioned table of function pointers (SQLite's VFS is the
 * model): `version` first, slots only ever appended, a newer slot may be NULL
 * and the core checks `version` before calling it. The generic layer (idem.c)
 * validates every argument, reads the clock once per call, counts outcomes and
 * keeps the error text, so a backend sees only checked input and the time.
 * Every error a slot returns has its text set on h (acemq__idem_fail) by the
 * slot itself: the core does not know what failed inside it.
 */
#ifndef ACEMQ_IDEM_BACKEND_H
#define ACEMQ_IDEM_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include "acemq/idem.h"
#include "core/registry.h"
#include "core/url.h"

/* 1: the first table. 2: try_claim_many appended (optional). 3: prefetch
 * appended (optional). 4: confirm_many appended (optional). */
#define ACEMQ__IDEM_METHODS_VERSION 4

/* A checked, non-empty byte string no longer than its limit. */
typedef struct acemq__bytes {
    const unsigned char *data;
    size_t len;
} acemq__bytes;

/* What try_claim hands the backend: all times already resolved. */
typedef struct acemq__claim_args {
    int64_t now_ms;
    int64_t lease_until_ms;   /* now + lease */
    acemq__bytes fingerprint; /* len 0: none given */
    void *result_buf;
    size_t result_cap;
    /* What the backend's prefetch returned for this id, when has_hint. */
    uint64_t hint;
    int has_hint;
} acemq__claim_args;

typedef struct acemq__idem_methods {
    int version; /* ACEMQ__IDEM_METHODS_VERSION the table was written against */
    const char *name;
    /* Frees the backend state in h->self. */
    void (*close)(acemq_idem *h);
    /* Returns an acemq_claim_status or a negative error; fills *out and sets
     * out->takeover when a lease that had run out was taken over. */
    int (*try_claim)(acemq_idem *h, const acemq__bytes *id, const acemq__claim_args *a,
                     acemq_claim *out);
    /* result.len 0: no result. expires_ms: when the confirmed record may go. */
    int (*confirm)(acemq_idem *h, const acemq__bytes *id, uint64_t token,
                   const acemq__bytes *result, int64_t now_ms, int64_t expires_ms);
    int (*release)(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms);
    int (*renew)(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms,
                 int64_t lease_until_ms);
    /* 1 confirmed (and not past retention), 0 not, negative error. */
    int (*is_confirmed)(acemq_idem *h, const acemq__bytes *id, int64_t now_ms);
    /* Removes confirmed records with expires <= now, and released or
     * abandoned claims idle since before now - retention. */
    int (*purge)(acemq_idem *h, int64_t now_ms, uint64_t *purged);

    /* Version 2, optional (NULL: the core calls try_claim once per id).
     * Claims ids[0..n) in order, each with a[i], as n try_claim calls in a row
     * would, so a repeated id finds its earlier claim; status[i] gets what
     * try_claim would have returned and out[i] what it would have filled. An
     * element with ids[i].len == 0 was already answered by the core: leave
     * its status and out alone. Returns 0; per-id errors go in status[]. */
    int (*try_claim_many)(acemq_idem *h, size_t n, const acemq__bytes *ids,
                          const acemq__claim_args *a, acemq_claim *out, int *status);

    /* For operators; each optional (NULL: ACEMQ_ENOTSUP). States are
     * decided at now_ms (acemq_idem_state). counts gets *out zeroed. inspect
     * returns 0 or ACEMQ_ENOENT. forget returns 1 or 0, and no later
     * claim may get the forgotten record's token again. */
    int (*counts)(acemq_idem *h, int64_t now_ms, acemq_idem_counts *out);
    int (*inspect)(acemq_idem *h, const acemq__bytes *id, int64_t now_ms, acemq_idem_record *out);
    int (*forget)(acemq_idem *h, const acemq__bytes *id, int64_t now_ms);

    /* Version 3, optional (NULL: not called). Called by try_claim on the
     * checked id before the core's own work (options, clock, counters), so
     * that a backend can start the memory read the claim will wait for and
     * let that work overlap it. It must not block, lock or fail. Its return
     * value comes back to try_claim in a->hint, with a->has_hint set. */
    uint64_t (*prefetch)(acemq_idem *h, const acemq__bytes *id);

    /* Version 4, optional (NULL: the core calls confirm once per id).
     * Confirms ids[0..n) with tokens[i] and results[i] (len 0: none) in
     * order, as n confirm calls would; status[i] gets what confirm would
     * have returned. An element with ids[i].len == 0 was already answered by
     * the core: leave its status alone. Returns 0; per-id errors go in
     * status[]. */
    int (*confirm_many)(acemq_idem *h, size_t n, const acemq__bytes *ids, const uint64_t *tokens,
                        const acemq__bytes *results, int64_t now_ms, int64_t expires_ms,
                        int *status);
} acemq__idem_methods;

/* Counters are striped: each thread adds to its own stripe, picked once per
 * thread, so threads sharing a handle do not bounce one cache line between
 * cores twice per message. acemq_idem_stats_get() adds the stripes up. */
#define ACEMQ__COUNTER_STRIPES 8

typedef struct acemq__idem_counters {
    _Alignas(64) atomic_uint_fast64_t claimed;
    atomic_uint_fast64_t duplicates, in_progress, takeovers, stale_tokens, confirms, releases,
        renewals, mismatches, expirations, evictions, errors;
} acemq__idem_counters;

/* This thread's stripe. */
unsigned acemq__counter_stripe(void);

/* Adds n to a counter; backends use it for what only they can see. */
#define ACEMQ__IDEM_COUNT(h, field, n)                                                             \
    atomic_fetch_add_explicit(&(h)->counters[acemq__counter_stripe()].field, (n),                  \
                              memory_order_relaxed)

/* Bytes of a handle's last error text, its terminating NUL included. */
#define ACEMQ__IDEM_ERRMSG_MAX 512

struct acemq_idem {
    const acemq__idem_methods *methods;
    void *self; /* the backend's state */
    acemq_idem_options opts;
    acemq_clock clock;
    acemq__idem_counters counters[ACEMQ__COUNTER_STRIPES];
    pthread_mutex_t err_lock; /* guards errmsg: handles are shared across threads */
    char errmsg[ACEMQ__IDEM_ERRMSG_MAX];
};

/* Records an error's text on the handle and returns code, so a backend can
 * write `return acemq__idem_fail(h, ACEMQ_EIO, "sqlite: %s", sqlite3_errmsg(db));`. */
int acemq__idem_fail(acemq_idem *h, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks a single call's id and wraps it in *out; on failure the handle
 * says what was wrong (src/idem/idem_admin.c shares idem.c's checks). */
int acemq__idem_take_id(acemq_idem *h, const void *id, size_t len, acemq__bytes *out);

/* Adds n records in state (an acemq_idem_state) to the right count of out;
 * any other state counts as abandoned. */
void acemq__idem_counts_add(acemq_idem_counts *out, int state, uint64_t n);

/* Sets why an open failed before it had a handle, the text that
 * acemq_idem_errmsg(NULL) reads in this thread, and returns code. */
int acemq__idem_open_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Makes a handle with validated options (o may be NULL) and no backend yet;
 * on failure the text is set as acemq__idem_open_fail sets it. */
int acemq__idem_new(acemq_idem **out, const acemq_idem_options *o);
/* Frees a handle whose backend failed to open; its error text stays readable
 * in this thread through acemq_idem_errmsg(NULL). */
void acemq__idem_free(acemq_idem *h);

/* A backend as the registry knows it: the scheme of the URLs it serves and
 * how to open one. */
typedef struct acemq__idem_backend {
    acemq__registry_entry entry; /* scheme "memory", shown "memory:" */
    /* Fills h->methods and h->self from the parsed URL, or returns an error
     * with its text already on h. */
    int (*open)(acemq_idem *h, const acemq__url *url);
} acemq__idem_backend;

/* The idempotency stores by URL scheme (core/registry.h): each entry is the
 * first member of a acemq__idem_backend. */
extern acemq__registry acemq__idem_registry;

#endif
