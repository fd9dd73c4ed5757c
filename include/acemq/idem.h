/* acemq/idem.h — the idempotency store: claim, then work, then confirm or release.
 *
 * A redelivered message must not do its work twice. try_claim() answers one of
 * three results that must never be confused:
 *   ACEMQ_CLAIMED            you own the id now: do the work, then confirm or release;
 *   ACEMQ_ALREADY_CONFIRMED  the work is done: a duplicate, acknowledge it;
 *   ACEMQ_IN_PROGRESS        someone holds the id and has not finished: requeue the
 *                            message, never acknowledge it.
 * Claims are leased (a holder that dies stops blocking when its lease runs out)
 * and fenced (confirm, release and renew with a token that is no longer current
 * change nothing and return ACEMQ_ESTALE). Confirmed ids are remembered for the
 * retention period, then forgotten.
 *
 * Ids are byte strings with an explicit length, 1..ACEMQ_IDEM_ID_MAX bytes; any
 * bytes, NUL included, are stored verbatim.
 *
 * A handle is safe to use from several threads at once.
 */
#ifndef ACEMQ_IDEM_H
#define ACEMQ_IDEM_H

#include "acemq/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACEMQ_IDEM_ID_MAX 1024        /* bytes in an id */
#define ACEMQ_IDEM_FINGERPRINT_MAX 64 /* bytes in a payload fingerprint */
#define ACEMQ_IDEM_RESULT_MAX 65536   /* bytes in a stored result */

/* What try_claim() found: non-negative results, not errors. */
typedef enum acemq_claim_status {
    ACEMQ_CLAIMED = 0,
    ACEMQ_ALREADY_CONFIRMED = 1,
    ACEMQ_IN_PROGRESS = 2
} acemq_claim_status;

/* Flags for acemq_idem_options.flags. */
enum {
    /* On a caller-passed database connection, confirm() writes inside the
     * caller's open transaction and commits or rolls back with it (the inbox
     * pattern). With no transaction open it fails with ACEMQ_ENOTX. */
    ACEMQ_IDEM_CONFIRM_IN_CALLER_TX = 1u << 0
};

typedef struct acemq_idem_options {
    int64_t lease_ms;         /* default lease of a claim; default 30,000 */
    int64_t retention_ms;     /* how long a confirmed id is remembered; default 7 days */
    size_t max_entries;       /* memory backend: entries kept at most; default 1,048,576 */
    const acemq_clock *clock; /* NULL: acemq_clock_system() */
    int synchronous;          /* sqlite: an acemq_sync_mode; default ACEMQ_SYNC_FULL. Claims,
                                 being leases, commit without an fsync at every mode */
    int busy_timeout_ms;      /* sqlite: how long to wait on a locked database; default 5,000 */
    unsigned flags;           /* ACEMQ_IDEM_* flags */
} acemq_idem_options;

/* Fills *o with the defaults above. */
ACEMQ_EXTERN void acemq_idem_options_init(acemq_idem_options *o);

/* Per-claim inputs, all optional: pass NULL for the defaults. */
typedef struct acemq_claim_opts {
    int64_t lease_ms; /* 0: the store's default lease */
    /* A digest of the payload. The same id arriving with a different
     * fingerprint answers ACEMQ_EMISMATCH: the id was reused for another message. */
    const void *fingerprint;
    size_t fingerprint_len;
    /* Where a stored result is copied when the id is ALREADY_CONFIRMED. */
    void *result_buf;
    size_t result_cap;
} acemq_claim_opts;

/* What try_claim() tells besides its result. */
typedef struct acemq_claim {
    uint64_t token;         /* CLAIMED: the fencing token for confirm/release/renew */
    int64_t lease_until_ms; /* CLAIMED, IN_PROGRESS: when the current lease runs out */
    int takeover;           /* CLAIMED: 1 when it took over an expired lease */
    int has_result;         /* ALREADY_CONFIRMED: 1 when a result was stored at confirm */
    size_t result_len;      /* its full length; min(result_len, result_cap) bytes were copied */
} acemq_claim;

/* Counters since the handle was opened. For shared backends they count what
 * this handle did, not what all processes did. */
typedef struct acemq_idem_stats {
    uint64_t claimed;      /* try_claim answered CLAIMED (takeovers included) */
    uint64_t duplicates;   /* try_claim answered ALREADY_CONFIRMED */
    uint64_t in_progress;  /* try_claim answered IN_PROGRESS */
    uint64_t takeovers;    /* CLAIMED over an expired lease */
    uint64_t stale_tokens; /* confirm/release/renew refused with ACEMQ_ESTALE */
    uint64_t confirms;     /* successful confirms */
    uint64_t releases;     /* successful releases */
    uint64_t renewals;     /* successful renews */
    uint64_t mismatches;   /* ACEMQ_EMISMATCH answers */
    uint64_t expirations;  /* records forgotten because their retention ran out */
    uint64_t evictions;    /* entries dropped at max_entries: an expired claim or a live
                              confirmation (memory store: docs/idempotency.md, The bound) */
    uint64_t errors;       /* calls that failed with any other error */
} acemq_idem_stats;

typedef struct acemq_idem acemq_idem;

/* Opens a store by URL:
 *   memory:                          in-process (query: ?max_entries=N;
 *                                    see docs/idempotency.md)
 *   sqlite:/path/to.db, sqlite:rel.db  an SQLite file in WAL mode
 *                                    (query: ?synchronous=off|normal|full&busy_timeout_ms=N)
 * o may be NULL for the defaults; URL query values override o. On failure *out
 * is NULL and the return value says why. */
ACEMQ_EXTERN int acemq_idem_open(acemq_idem **out, const char *url, const acemq_idem_options *o);
/* Closes the store; accepts NULL. Claims still held stay in a durable store
 * and run out with their lease. */
ACEMQ_EXTERN void acemq_idem_close(acemq_idem *h);

/* The backend's name: "memory", "sqlite". */
ACEMQ_EXTERN const char *acemq_idem_backend(const acemq_idem *h);

/* Takes ownership of an id, or says why not. Returns ACEMQ_CLAIMED,
 * ACEMQ_ALREADY_CONFIRMED, ACEMQ_IN_PROGRESS, or a negative error. opts may be
 * NULL; out must not be. */
ACEMQ_EXTERN int acemq_idem_try_claim(acemq_idem *h, const void *id, size_t id_len,
                                      const acemq_claim_opts *opts, acemq_claim *out);

/* One id of a batch: id_len bytes at id, as try_claim() takes them. */
typedef struct acemq_idem_key {
    const void *id;
    size_t id_len;
} acemq_idem_key;

/* Claims n ids in one call: for a consumer that already holds several
 * deliveries (an AMQP prefetch window). Element i is claimed exactly as
 *   status[i] = acemq_idem_try_claim(h, keys[i].id, keys[i].id_len,
 *                                    opts ? &opts[i] : NULL, &out[i]);
 * would, in order i = 0, 1, ..., n-1, so a repeated id within the batch finds
 * its earlier claim (IN_PROGRESS), and counters count each element as that
 * call would. One difference: the clock is read once for the whole batch.
 * A bad element (NULL, empty or over-long id, bad opts[i]) or one the store
 * refuses (ACEMQ_EFULL, ACEMQ_EMISMATCH, ...) gets its error in status[i]
 * and does not stop the others; acemq_idem_errmsg() then tells the last such
 * error in element order, naming the element ("keys[3].id is empty"). The memory store hashes the
 * ids and prefetches their slots before it claims any of them, so the cache misses of a batch
 * overlap; other stores claim one id after the other.
 *
 * opts: NULL, or n per-claim options, opts[i] for keys[i]. keys, out and
 * status: n elements each (may be NULL only when n is 0).
 * Returns how many elements were answered ACEMQ_CLAIMED (0..n), or a negative
 * error, with nothing claimed, when the call itself is invalid (h NULL, an
 * array NULL, n above INT_MAX). */
ACEMQ_EXTERN int acemq_idem_try_claim_many(acemq_idem *h, size_t n, const acemq_idem_key *keys,
                                           const acemq_claim_opts *opts, acemq_claim *out,
                                           int *status);

/* The two-state form: 1 when the caller now owns the id (*token set), 0 when
 * it is confirmed or held elsewhere, negative on error. Prefer try_claim(). */
ACEMQ_EXTERN int acemq_idem_claim(acemq_idem *h, const void *id, size_t id_len, uint64_t *token);

/* Records that the work completed. ACEMQ_ESTALE when token is not the id's
 * current claim. Confirming twice with the same token is not an error. */
ACEMQ_EXTERN int acemq_idem_confirm(acemq_idem *h, const void *id, size_t id_len, uint64_t token);
/* confirm() that also stores result bytes (at most ACEMQ_IDEM_RESULT_MAX), handed
 * back to a later try_claim() that finds the id confirmed. */
ACEMQ_EXTERN int acemq_idem_confirm_result(acemq_idem *h, const void *id, size_t id_len,
                                           uint64_t token, const void *result, size_t result_len);

/* One claim to confirm in a batch: the id, its token, and a result to store
 * (result NULL and result_len 0: none). */
typedef struct acemq_idem_confirmation {
    const void *id;
    size_t id_len;
    uint64_t token;
    const void *result;
    size_t result_len;
} acemq_idem_confirmation;

/* Confirms n claims in one call: for a consumer that handled several
 * deliveries. Element i is confirmed as
 *   status[i] = acemq_idem_confirm_result(h, c[i].id, c[i].id_len, c[i].token,
 *                                         c[i].result, c[i].result_len);
 * would, in order, with the clock read once for the batch. The SQLite store
 * writes them in one transaction, PostgreSQL in one statement, Redis in one
 * script run per 64 ids: a batch costs one round trip, not one per id. A bad element
 * gets ACEMQ_EINVAL in status[i] and does not stop the others; a stale token
 * gets ACEMQ_ESTALE. A store failure that breaks the transaction answers
 * every element of it with that error, none of them confirmed.
 * Returns how many were confirmed (0..n), or a negative error, with nothing
 * confirmed, when the call itself is invalid (h NULL, an array NULL, n above
 * INT_MAX). */
ACEMQ_EXTERN int acemq_idem_confirm_many(acemq_idem *h, size_t n, const acemq_idem_confirmation *c,
                                         int *status);

/* Gives up a claim without completing it, so the message can be tried again. */
ACEMQ_EXTERN int acemq_idem_release(acemq_idem *h, const void *id, size_t id_len, uint64_t token);

/* Extends a held claim to now + lease_ms (0: the default lease). */
ACEMQ_EXTERN int acemq_idem_renew(acemq_idem *h, const void *id, size_t id_len, uint64_t token,
                                  int64_t lease_ms);

/* 1 when the work for id is known to have completed, 0 when not, negative on error. */
ACEMQ_EXTERN int acemq_idem_is_confirmed(acemq_idem *h, const void *id, size_t id_len);

/* Removes what has expired: confirmed ids past their retention, and released
 * or abandoned claims idle for longer than the retention. *purged (may be
 * NULL) gets how many records went. */
ACEMQ_EXTERN int acemq_idem_purge(acemq_idem *h, uint64_t *purged);

/* Copies the counters. */
ACEMQ_EXTERN int acemq_idem_stats_get(acemq_idem *h, acemq_idem_stats *out);

/* ---- For operators (`acemq idem`): what the store holds, id by id ---- */

/* The state of one id's record, as of the store's clock. */
typedef enum acemq_idem_state {
    ACEMQ_IDEM_HELD = 1,      /* claimed, the lease still running: a holder works on it */
    ACEMQ_IDEM_ABANDONED = 2, /* claimed and the lease ran out, or released: the next
                                 try_claim takes it over */
    ACEMQ_IDEM_CONFIRMED = 3, /* done; duplicates are answered ALREADY_CONFIRMED */
    ACEMQ_IDEM_EXPIRED = 4    /* confirmed, retention over: forgotten, and purge removes it */
} acemq_idem_state;

/* One id's record (acemq_idem_inspect). */
typedef struct acemq_idem_record {
    int state;              /* an acemq_idem_state */
    uint64_t token;         /* the current or last claim's fencing token */
    int64_t lease_until_ms; /* HELD, ABANDONED: when the lease ends or ended */
    int64_t expires_ms;     /* CONFIRMED, EXPIRED: when retention ends or ended */
    int has_result;         /* a result was stored at confirm */
    size_t result_len;
    size_t fingerprint_len; /* 0: none */
} acemq_idem_record;

/* The store as a whole (acemq_idem_counts_get). */
typedef struct acemq_idem_counts {
    uint64_t held, abandoned, confirmed, expired; /* records in each acemq_idem_state */
    /* The held claim whose lease ends first: the next one a stalled holder
     * would lose. has_next_lease 0: nothing is held. The id is cut at
     * sizeof next_id bytes; next_id_len is its full length. */
    int has_next_lease;
    unsigned char next_id[256];
    size_t next_id_len;
    uint64_t next_token;
    int64_t next_lease_until_ms;
} acemq_idem_counts;

/* Counts the records by state. Reads the whole store: for an operator, not
 * for every message. ACEMQ_ENOTSUP when the backend cannot. */
ACEMQ_EXTERN int acemq_idem_counts_get(acemq_idem *h, acemq_idem_counts *out);

/* The record of one id: 0 with *out filled, ACEMQ_ENOENT when the store
 * holds nothing for it. */
ACEMQ_EXTERN int acemq_idem_inspect(acemq_idem *h, const void *id, size_t id_len,
                                    acemq_idem_record *out);

/* Forgets one id on purpose, whatever its state, so that its message is
 * processed again when it comes back. A holder's token goes stale: its
 * confirm, release or renew answers ACEMQ_ESTALE, and no later claim gets
 * its token again (as after a purge). 1 when a record went, 0 when there
 * was none. */
ACEMQ_EXTERN int acemq_idem_forget(acemq_idem *h, const void *id, size_t id_len);

/* The name of an acemq_idem_state: "held", "abandoned", "confirmed", "expired". */
ACEMQ_EXTERN const char *acemq_idem_state_name(int state);

/* The last error this handle met, in the backend's own words where it had some
 * (what SQLite said, for instance), else naming the argument that was wrong.
 * "" when none; a call that succeeds leaves it as it was. With h NULL: why the
 * last open in this thread failed. The text is copied per thread: it stays
 * valid in the calling thread until its next errmsg call. */
ACEMQ_EXTERN const char *acemq_idem_errmsg(acemq_idem *h);

/* The name of a try_claim result: "CLAIMED", "ALREADY_CONFIRMED", "IN_PROGRESS". */
ACEMQ_EXTERN const char *acemq_claim_status_name(int status);

#ifdef __cplusplus
}
#endif
#endif
