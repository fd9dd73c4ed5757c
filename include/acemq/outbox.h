/* acemq/outbox.h — the transactional outbox: messages published if, and only if,
 * the work that produced them committed.
 *
 * The writing side is one call, made inside the caller's own open transaction
 * on the caller's own connection: acemq_outbox_add_sqlite() (acemq/sqlite.h) or
 * acemq_outbox_add_pg() (acemq/postgres.h). It never opens a connection or
 * commits; with no transaction open it fails with ACEMQ_ENOTX and writes
 * nothing.
 *
 * The draining side is a handle, acemq_outbox_open(), that relays use:
 * claim_batch() takes up to N records, oldest first, by lease rather than by
 * lock (a relay that dies holding a batch strands nothing: when the lease runs
 * out another relay takes the records) and hands each one a fencing token;
 * mark_published() or mark_failed() with a token whose claim was taken over
 * changes nothing and returns ACEMQ_ESTALE. A failure counts an attempt,
 * keeps the reason and schedules the next attempt with exponential back-off
 * and jitter; after max_attempts failures the record is dead: never claimed
 * again, kept with its last error for a person (list_dead, retry).
 *
 * Ordering keys: records that share one are claimed one at a time, in the
 * order they were added; a record that waits, fails or is dead holds back its
 * own key and no other. (acemq_relay claims a key's records together and
 * publishes them one unconfirmed at a time: docs/outbox.md.)
 *
 * The tables are documented in docs/schema.md, so a program in any language
 * can insert rows that acemq relays publish.
 *
 * A handle is not safe to use from several threads at once: give each relay
 * thread its own (they share the work through the database).
 */
#ifndef ACEMQ_OUTBOX_H
#define ACEMQ_OUTBOX_H

#include "acemq/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACEMQ_OUTBOX_ID_MAX 255      /* bytes in a record id */
#define ACEMQ_OUTBOX_NAME_MAX 255    /* destination, routing key, ordering key, content type */
#define ACEMQ_OUTBOX_HEADERS_MAX 64  /* headers on one record */
#define ACEMQ_OUTBOX_HEADER_MAX 4096 /* bytes in one header's name or value */
#define ACEMQ_OUTBOX_ERROR_MAX 1024  /* bytes of a failure reason kept; longer ones are cut */
#define ACEMQ_OUTBOX_UUID_LEN 36     /* characters in a generated id, without the NUL */

typedef struct acemq_outbox_header {
    const char *name;
    const char *value;
} acemq_outbox_header;

/* One message to publish. Strings are NUL-terminated UTF-8. */
typedef struct acemq_outbox_record {
    const char *id;           /* NULL: a UUIDv7 is generated */
    const char *destination;  /* the exchange; "" is AMQP's default exchange */
    const char *routing_key;  /* may be "" */
    const char *ordering_key; /* NULL: no ordering */
    const acemq_outbox_header *headers;
    size_t n_headers;
    const char *content_type; /* NULL: none */
    const void *body;         /* may be NULL when body_len is 0 */
    size_t body_len;
} acemq_outbox_record;

/* For the add functions; NULL means every default. */
typedef struct acemq_outbox_add_options {
    size_t max_body;          /* bytes; default 1 MiB (ACEMQ_OUTBOX_DEFAULT_MAX_BODY) */
    const acemq_clock *clock; /* created time; NULL: the database's clock (PostgreSQL), the
                                 system clock (SQLite) */
} acemq_outbox_add_options;

#define ACEMQ_OUTBOX_DEFAULT_MAX_BODY ((size_t)1 << 20)

typedef struct acemq_outbox_options {
    int max_attempts;         /* failures before a record is dead; default 10 */
    int64_t backoff_base_ms;  /* delay after the first failure; default 1,000 */
    int64_t backoff_max_ms;   /* the delay never grows past this; default 300,000 */
    int jitter_percent;       /* each delay is cut by up to this share, at random; default 20 */
    int delete_on_publish;    /* 1: a published record is deleted, not kept; default 0 */
    const acemq_clock *clock; /* NULL: the database's clock (PostgreSQL), the system clock
                                 (SQLite) */
    /* An acemq_sync_mode for this handle's own commits (claims, marks,
     * releases, retries, purges; not acemq_outbox_add_*, which commit in the
     * caller's transaction): SQLite's PRAGMA synchronous; on PostgreSQL
     * FULL keeps the server's synchronous_commit and NORMAL or OFF set it
     * off for the session. Below FULL a database crash may forget the last
     * of those commits, whose records then go out again (duplicates, never
     * a loss). At FULL, SQLite claims still commit without an fsync: a
     * claim is a lease, and the next mark's fsync takes it to disk.
     * Default FULL (acemq relay: --synchronous). */
    int synchronous;
    int busy_timeout_ms; /* sqlite: how long to wait on a locked database; default 5,000 */
} acemq_outbox_options;

ACEMQ_EXTERN void acemq_outbox_options_init(acemq_outbox_options *o);

/* A claimed record. Strings and body belong to the handle and stay valid until
 * the next claim_batch or list_dead on it, or its close. */
typedef struct acemq_outbox_msg {
    const char *id;
    const char *destination;
    const char *routing_key;
    const char *ordering_key; /* NULL: none */
    const char *headers_json; /* a JSON object of strings, or NULL */
    const char *content_type; /* NULL: none */
    const void *body;
    size_t body_len;
    int64_t created_ms;
    int attempts;           /* failures so far */
    uint64_t token;         /* hand back to mark_*; grows with every claim of the record */
    const char *last_error; /* NULL unless it failed before */
} acemq_outbox_msg;

/* What waits: unclaimed (due or backing off), claimed under a live lease, and
 * dead; the age of the oldest record not yet published nor dead. */
typedef struct acemq_outbox_pending {
    uint64_t unclaimed, claimed, dead;
    int64_t oldest_age_ms; /* 0 when nothing waits */
} acemq_outbox_pending;

/* For mark_published_batch. */
typedef struct acemq_outbox_mark {
    const char *id;
    uint64_t token;
} acemq_outbox_mark;

typedef struct acemq_outbox acemq_outbox;

/* Opens the draining side: "sqlite:/path.db" or "postgres://user@host:port/db"
 * (any libpq connection URI). Creates or migrates the schema; ACEMQ_ESCHEMA
 * when the database's schema is newer than this library. */
ACEMQ_EXTERN int acemq_outbox_open(acemq_outbox **out, const char *url,
                                   const acemq_outbox_options *o);
ACEMQ_EXTERN void acemq_outbox_close(acemq_outbox *h);
ACEMQ_EXTERN const char *acemq_outbox_backend(const acemq_outbox *h);

/* Claims up to max records that are due, oldest first, for lease_ms; *msgs
 * points at *n of them (0 when nothing is due). */
ACEMQ_EXTERN int acemq_outbox_claim_batch(acemq_outbox *h, size_t max, int64_t lease_ms,
                                          const acemq_outbox_msg **msgs, size_t *n);
/* 0, ACEMQ_ESTALE (the claim was taken over or the record is no longer
 * claimed by this token), ACEMQ_ENOENT (no such record). */
ACEMQ_EXTERN int acemq_outbox_mark_published(acemq_outbox *h, const char *id, uint64_t token);
/* Marks n records published in one transaction; status[i] gets what
 * mark_published would have answered for marks[i]. Returns 0 when the
 * transaction committed (whatever the statuses), or an error and nothing is
 * marked. */
ACEMQ_EXTERN int acemq_outbox_mark_published_batch(acemq_outbox *h, const acemq_outbox_mark *marks,
                                                   size_t n, int *status);
/* Counts a failed attempt with its reason (NULL: none given), releases the
 * claim and schedules the next attempt, or makes the record dead past
 * max_attempts. Answers like mark_published. */
ACEMQ_EXTERN int acemq_outbox_mark_failed(acemq_outbox *h, const char *id, uint64_t token,
                                          const char *reason);
/* Gives back a claim without counting an attempt (a relay shutting down):
 * the record is due again at once. Answers like mark_published. */
ACEMQ_EXTERN int acemq_outbox_release(acemq_outbox *h, const char *id, uint64_t token);

ACEMQ_EXTERN int acemq_outbox_pending_count(acemq_outbox *h, acemq_outbox_pending *out);
/* Up to max dead records, oldest first, with their last errors. */
ACEMQ_EXTERN int acemq_outbox_list_dead(acemq_outbox *h, size_t max, const acemq_outbox_msg **msgs,
                                        size_t *n);
/* Makes a dead record due again with its attempts reset: ACEMQ_ENOENT when no
 * dead record has this id. */
ACEMQ_EXTERN int acemq_outbox_retry(acemq_outbox *h, const char *id);
/* Deletes published records published at or before now - older_than_ms;
 * *purged (may be NULL) gets how many. It deletes in batches of 5,000, each
 * its own transaction, and on SQLite pauses between them as long as a batch
 * took, so that other writers get the database's write lock meanwhile. On
 * an error, what earlier batches deleted stays deleted and is counted in
 * *purged. */
ACEMQ_EXTERN int acemq_outbox_purge(acemq_outbox *h, int64_t older_than_ms, uint64_t *purged);

/* Waits up to timeout_ms for new records: on PostgreSQL for the NOTIFY that
 * every insert into the outbox sends, on SQLite for PRAGMA data_version to
 * move (on Linux asleep until the database file or its -wal is written, and
 * looking every 100 ms regardless; elsewhere polling every 5 ms;
 * docs/outbox.md). 1 when something was committed since the last call, 0 on
 * timeout, or an error. On PostgreSQL a handle starts listening at its first
 * wait, which answers 1 at once: look again, a commit from before it could
 * not be heard. */
ACEMQ_EXTERN int acemq_outbox_wait(acemq_outbox *h, int timeout_ms);

/* The backend's own words for the last error on h, or the argument that was
 * wrong; a call that succeeds leaves it as it was. With h NULL, why the last
 * acemq_outbox_open or add in this thread failed. */
ACEMQ_EXTERN const char *acemq_outbox_errmsg(const acemq_outbox *h);

/* Writes a new UUIDv7 (RFC 9562), ACEMQ_OUTBOX_UUID_LEN characters and a NUL,
 * into buf. Ids from one process sort in the order they were made. */
ACEMQ_EXTERN int acemq_uuid7(char buf[ACEMQ_OUTBOX_UUID_LEN + 1]);

#ifdef __cplusplus
}
#endif
#endif
