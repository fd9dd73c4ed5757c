/* outbox_backend.h — the contract between the generic outbox layer and a backend.
 *
 * Versioned like the idempotency store's (SQLite's VFS is the model): version
 * first, slots only appended, the core checks version before a newer slot.
 * The generic layer (outbox.c) checks every argument, computes back-off
 * delays and resolves the time: now_ms is the injected clock's reading, or
 * ACEMQ__DB_NOW when the backend should read the database's own clock (a
 * shared PostgreSQL outbox, where relays on several machines must agree).
 * Every error a slot returns has its text set on h (acemq__outbox_fail) by
 * the slot itself, ESTALE and ENOENT included.
 */
#ifndef ACEMQ_OUTBOX_BACKEND_H
#define ACEMQ_OUTBOX_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "acemq/outbox.h"
#include "core/registry.h"

/* 2: purge_batch and purge_pauses. 3: claim_runs. */
#define ACEMQ__OUTBOX_METHODS_VERSION 3
#define ACEMQ__DB_NOW INT64_MIN
#define ACEMQ__PURGE_DONE (-1)

/* Record states in the table's `state` column (docs/schema.md). */
enum { ACEMQ__OUTBOX_PENDING = 0, ACEMQ__OUTBOX_PUBLISHED = 1, ACEMQ__OUTBOX_DEAD = 2 };

/* What mark_failed hands the backend. The delay is computed in SQL from the
 * attempts the row holds, so the relay cannot get it wrong:
 * min(base << min(attempts, 40), max) * (100 - jitter_cut) / 100. */
typedef struct acemq__fail_args {
    const char *reason; /* NULL: none; already cut to ACEMQ_OUTBOX_ERROR_MAX */
    int max_attempts;
    int64_t backoff_base_ms, backoff_max_ms;
    int jitter_cut; /* percent, drawn in [0, jitter_percent] */
} acemq__fail_args;

typedef struct acemq__outbox_methods {
    int version;
    const char *name;
    void (*close)(acemq_outbox *h);
    /* Appends each claimed row with acemq__outbox_batch_add. */
    int (*claim_batch)(acemq_outbox *h, size_t max, int64_t lease_ms, int64_t now_ms);
    int (*mark_published)(acemq_outbox *h, const acemq_outbox_mark *marks, size_t n, int *status,
                          int64_t now_ms);
    int (*mark_failed)(acemq_outbox *h, const char *id, uint64_t token, const acemq__fail_args *a,
                       int64_t now_ms);
    int (*release)(acemq_outbox *h, const char *id, uint64_t token, int64_t now_ms);
    int (*pending)(acemq_outbox *h, acemq_outbox_pending *out, int64_t now_ms);
    int (*list_dead)(acemq_outbox *h, size_t max);
    int (*retry)(acemq_outbox *h, const char *id, int64_t now_ms);
    /* Version 1: deletes every published record with published_at <= now -
     * older_than_ms, in one statement. Used only when purge_batch is NULL. */
    int (*purge)(acemq_outbox *h, int64_t now_ms, int64_t older_than_ms, uint64_t *purged);
    int (*wait)(acemq_outbox *h, int timeout_ms);
    /* Version 2. Deletes the next batch of those records, at most `limit`,
     * in a transaction of its own; *purged gets how many. *cursor is the
     * backend's place in the purge: 0 before the first batch, and
     * ACEMQ__PURGE_DONE once nothing is left. */
    int (*purge_batch)(acemq_outbox *h, int64_t now_ms, int64_t older_than_ms, uint64_t limit,
                       int64_t *cursor, uint64_t *purged);
    /* 1: a batch holds the whole database's write lock (SQLite), so a purge
     * pauses between batches for the application's writers to get in. */
    int purge_pauses;
    /* Version 3. claim_batch, except that a keyed record is due when its
     * key's oldest unpublished record is due and unleased: a key's pending
     * records are claimed together, oldest first, and whoever claims them
     * publishes them one at a time (the relay's waves.h). NULL: the relay
     * claims with claim_batch. */
    int (*claim_runs)(acemq_outbox *h, size_t max, int64_t lease_ms, int64_t now_ms);
} acemq__outbox_methods;

/* Where one message's strings and body start in the batch buffer (SIZE_MAX:
 * SQL NULL), in the order id, destination, routing_key, ordering_key,
 * headers, content_type, last_error, body. */
typedef struct acemq__msg_offsets {
    size_t at[8];
} acemq__msg_offsets;

/* Claimed rows are copied into one buffer the handle owns: offsets while the
 * buffer may still move, pointers once the batch is complete. */
typedef struct acemq__outbox_batch {
    char *buf;
    size_t len, cap;
    acemq_outbox_msg *msgs;
    acemq__msg_offsets *offs;
    int64_t *seqs;
    size_t n, msgs_cap;
    /* Scratch for sorting a batch that came back out of order. */
    struct acemq__seq_index *order;
    acemq_outbox_msg *sorted;
    size_t order_cap;
} acemq__outbox_batch;

struct acemq_outbox {
    const acemq__outbox_methods *methods;
    void *self;
    acemq_outbox_options opts;
    int has_clock; /* 0: the database's clock (PostgreSQL) */
    acemq_clock clock;
    uint64_t rng; /* jitter; a handle is used by one thread at a time */
    acemq__outbox_batch batch;
    char errmsg[512];
};

/* One row's columns as the backend read them; a NULL pointer is SQL NULL. */
typedef struct acemq__outbox_row {
    int64_t seq;
    const char *id, *destination, *routing_key, *ordering_key, *headers_json, *content_type,
        *last_error;
    const void *body;
    size_t body_len;
    int64_t created_ms;
    int attempts;
    uint64_t token;
} acemq__outbox_row;

void acemq__outbox_batch_reset(acemq_outbox *h);
int acemq__outbox_batch_add(acemq_outbox *h, const acemq__outbox_row *row);

int acemq__outbox_fail(acemq_outbox *h, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* For the add functions, which have no handle: the text acemq_outbox_errmsg(NULL) reads. */
int acemq__outbox_fail_thread(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Checks a record against its limits (errors go to the thread's text) and
 * encodes its headers as a JSON object; *headers_json (free() it) is NULL
 * when it has none. id_buf gets the id to write: the caller's, or a new
 * UUIDv7. */
int acemq__outbox_prepare_record(const acemq_outbox_record *r, const acemq_outbox_add_options *o,
                                 char id_buf[ACEMQ_OUTBOX_ID_MAX + 1], char **headers_json);

/* A backend as the registry knows it: the scheme of the URLs it serves and
 * how to open one. */
typedef struct acemq__outbox_backend {
    acemq__registry_entry entry; /* scheme "sqlite", shown "sqlite:" */
    /* Fills h->methods and h->self from the whole URL text (a backend parses
     * it as its technology reads it: libpq takes a postgres:// URL as is), or
     * returns an error with its text already on h. h->has_clock is 0 when
     * the caller gave no clock: the backend then reads the database's, or
     * sets h->clock itself. */
    int (*open)(acemq_outbox *h, const char *url);
} acemq__outbox_backend;

/* The outboxes by URL scheme (core/registry.h): each entry is the
 * first member of a acemq__outbox_backend. */
extern acemq__registry acemq__outbox_registry;

#endif
