/* acemq/audit.h — the message audit: an O(1), constant-memory pre-filter that
 * recognises a redelivered message by its producer and sequence number.
 *
 * Ids are "<producer>:<sequence>": the producer is everything before the last
 * ':', the sequence an unsigned 64-bit decimal after it. Per producer a sliding
 * bit window remembers which of the last `depth` sequences were seen; an LRU
 * bounds how many producers are remembered. A check answers one of:
 *   ACEMQ_AUDIT_NEW        not seen within what the audit remembers;
 *   ACEMQ_AUDIT_DUPLICATE  seen before (and not rolled back);
 *   ACEMQ_AUDIT_UNKNOWN    history was lost (see acemq_audit_cause): consult the
 *                          durable idempotency store. Only with ACEMQ_AUDIT_FAIL_CLOSED;
 *                          under ACEMQ_AUDIT_FAIL_OPEN such a check answers NEW and
 *                          is counted by its cause.
 * The audit is a pre-filter in front of the idempotency store, never a
 * replacement for it. docs/audit.md has the whole contract.
 */
#ifndef ACEMQ_AUDIT_H
#define ACEMQ_AUDIT_H

#include "acemq/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACEMQ_AUDIT_ID_MAX 1024              /* bytes in an id, producer and ':' included */
#define ACEMQ_AUDIT_PRODUCER_MAX 1022        /* bytes in a producer: room for ':' and a digit */
#define ACEMQ_AUDIT_NAME_MAX 1024            /* bytes in a destination or consumer name */
#define ACEMQ_AUDIT_DEPTH_MAX (1u << 24)     /* sequences per window: 2 MiB of bits */
#define ACEMQ_AUDIT_PRODUCERS_MAX (1u << 24) /* producers per audit */
#define ACEMQ_AUDIT_SHARDS_MAX 256           /* shards of the thread-safe flavour */
#define ACEMQ_AUDIT_AUDITS_MAX (1u << 20)    /* audits per connection audit */
#define ACEMQ_AUDIT_EVICTED_MAX (1u << 26)   /* max_evicted: 512 MiB of hashes */

/* What a check answers: non-negative results, not errors. */
typedef enum acemq_audit_result {
    ACEMQ_AUDIT_NEW = 0,
    ACEMQ_AUDIT_DUPLICATE = 1,
    ACEMQ_AUDIT_UNKNOWN = 2
} acemq_audit_result;

/* Why history was lost, for an UNKNOWN (or a NEW that was UNKNOWN under fail-open). */
typedef enum acemq_audit_cause {
    ACEMQ_AUDIT_CAUSE_NONE = 0,
    /* The producer's window was dropped by the LRU and the producer came back:
     * its first id after that, and any later id below it, may have been seen. */
    ACEMQ_AUDIT_EVICTED = 1,
    /* The sequence is `depth` or more below the highest one seen: the window
     * slid past it, so its bit is gone. */
    ACEMQ_AUDIT_BEHIND_WINDOW = 2,
    /* The sequence is below where the producer's window began (its first
     * sequence minus depth - 1) and the window never covered it, so it cannot
     * be recorded: a redelivery of it could not be recognised either. */
    ACEMQ_AUDIT_BEFORE_START = 3
} acemq_audit_cause;

/* acemq_audit_options.policy */
enum {
    ACEMQ_AUDIT_FAIL_OPEN = 0,  /* an UNKNOWN answers NEW (ActiveMQ's behaviour), counted */
    ACEMQ_AUDIT_FAIL_CLOSED = 1 /* an UNKNOWN answers UNKNOWN */
};

/* acemq_audit_options.flags */
enum {
    /* Safe for concurrent use: producers are sharded by hash over locked
     * shards (one by default); a newcomer to a full audit evicts the least
     * recently used producer of its own shard (docs/audit.md). With one
     * shard that is the whole audit's, as in ActiveMQ. Without it, no
     * locking. */
    ACEMQ_AUDIT_THREAD_SAFE = 1u << 0
};

typedef struct acemq_audit_options {
    uint32_t depth;         /* sequences remembered per producer; default 2048 */
    uint32_t max_producers; /* producers remembered; default 64 */
    int policy;             /* ACEMQ_AUDIT_FAIL_OPEN (default) or ACEMQ_AUDIT_FAIL_CLOSED */
    unsigned flags;         /* ACEMQ_AUDIT_* flags */
    uint32_t shards;        /* thread-safe flavour: locked shards, rounded up to a power
                               of two; 0: 1. More than one lock less, but the LRU is
                               then per shard: a producer ActiveMQ keeps may be evicted.
                               Ignored without ACEMQ_AUDIT_THREAD_SAFE. */
    uint32_t max_evicted;   /* evicted producers remembered (8 bytes each) so that their
                               return is UNKNOWN; 0: 8 * max_producers, at most 2^20 */
} acemq_audit_options;

/* Counters since the audit was made. */
typedef struct acemq_audit_stats {
    uint64_t checks;                /* checks answered */
    uint64_t news;                  /* answered NEW, fail-open UNKNOWNs included */
    uint64_t duplicates;            /* answered DUPLICATE */
    uint64_t unknowns;              /* history was lost, whatever was answered */
    uint64_t unknown_evicted;       /* ... by cause */
    uint64_t unknown_behind_window; /* ... */
    uint64_t unknown_before_start;  /* ... */
    uint64_t evictions;             /* producers dropped by the LRU */
    uint64_t forgotten;             /* evicted producers whose eviction was forgotten too:
                                       their return will answer NEW (see docs/audit.md) */
    uint64_t rollbacks;             /* rollbacks that cleared a set bit */
    uint64_t producers;             /* producers remembered now */
} acemq_audit_stats;

/* An id split into its parts; producer points into the id given. */
typedef struct acemq_audit_id {
    const char *producer;
    size_t producer_len;
    uint64_t sequence;
    const char *error; /* on ACEMQ_EINVAL: what is wrong, in words; NULL otherwise */
} acemq_audit_id;

/* Splits "<producer>:<sequence>" at the last ':'. 0, or ACEMQ_EINVAL with
 * out->error set: empty or NULL id, longer than ACEMQ_AUDIT_ID_MAX, no ':',
 * empty producer, empty sequence, a sequence that is not decimal digits, or
 * one above 2^64 - 1. */
ACEMQ_EXTERN int acemq_audit_parse_id(const char *id, size_t id_len, acemq_audit_id *out);

typedef struct acemq_audit acemq_audit;

/* Fills *o with the defaults above. */
ACEMQ_EXTERN void acemq_audit_options_init(acemq_audit_options *o);

/* o may be NULL for the defaults. ACEMQ_EINVAL for a depth, max_producers,
 * shards or max_evicted out of range (0 included where it is no default), an
 * unknown policy or flag. */
ACEMQ_EXTERN int acemq_audit_new(acemq_audit **out, const acemq_audit_options *o);
/* Accepts NULL. */
ACEMQ_EXTERN void acemq_audit_free(acemq_audit *a);

/* Records the id and says whether it was seen: an acemq_audit_result, or a
 * negative error (ACEMQ_EINVAL: malformed id; ACEMQ_ENOMEM). *cause (may be
 * NULL) gets an acemq_audit_cause, ACEMQ_AUDIT_CAUSE_NONE unless history was lost. */
ACEMQ_EXTERN int acemq_audit_check(acemq_audit *a, const char *id, size_t id_len, int *cause);
/* The same with the id already split; producer is 1..ACEMQ_AUDIT_PRODUCER_MAX bytes. */
ACEMQ_EXTERN int acemq_audit_check_seq(acemq_audit *a, const void *producer, size_t producer_len,
                                       uint64_t sequence, int *cause);

/* Checks n ids in order, exactly as n calls of acemq_audit_check would
 * (same answers, causes, counters and recency), and writes the i-th answer
 * (an acemq_audit_result, or a negative error for that id alone) to
 * results[i] and its cause to causes[i] (causes may be NULL). For a caller
 * that holds a batch of messages, e.g. a consumer's prefetched deliveries:
 * what a call costs on entry is paid once per batch (docs/audit.md). 0, or
 * ACEMQ_EINVAL when a is NULL, or n > 0 and ids, id_lens or results is NULL
 * (nothing then checked). */
ACEMQ_EXTERN int acemq_audit_check_many(acemq_audit *a, const char *const *ids,
                                        const size_t *id_lens, size_t n, int *results, int *causes);
/* The same with the ids already split, as acemq_audit_check_seq. */
ACEMQ_EXTERN int acemq_audit_check_seq_many(acemq_audit *a, const void *const *producers,
                                            const size_t *producer_lens, const uint64_t *sequences,
                                            size_t n, int *results, int *causes);

/* Forgets that the id was seen, so a delivery that failed can pass again: 1
 * when its bit was set and is now clear, 0 when the audit had no record of it
 * (not seen, producer not remembered, or outside the window), negative on error. */
ACEMQ_EXTERN int acemq_audit_rollback(acemq_audit *a, const char *id, size_t id_len);
ACEMQ_EXTERN int acemq_audit_rollback_seq(acemq_audit *a, const void *producer, size_t producer_len,
                                          uint64_t sequence);

/* Copies the counters. Thread-safe flavour: a sum over shards taken one at a
 * time, so not one instant's snapshot while checks run. */
ACEMQ_EXTERN int acemq_audit_stats_get(acemq_audit *a, acemq_audit_stats *out);

/* "NEW", "DUPLICATE", "UNKNOWN"; an error's name otherwise. */
ACEMQ_EXTERN const char *acemq_audit_result_name(int result);
/* "NONE", "EVICTED", "BEHIND_WINDOW", "BEFORE_START"; "?" otherwise. */
ACEMQ_EXTERN const char *acemq_audit_cause_name(int cause);

/* The connection audit: one audit per queue (shared by its consumers, so a
 * message is handled once per queue) and one per topic consumer (each
 * subscriber gets every message once), kept in an LRU of audits. */
enum { ACEMQ_AUDIT_QUEUE = 0, ACEMQ_AUDIT_TOPIC = 1 };

typedef struct acemq_conn_audit_options {
    acemq_audit_options audit; /* for each audit made; its flags decide locking here too */
    uint32_t max_audits;       /* audits remembered; default 1000 */
    int check_for_duplicates;  /* 0: everything is NEW; default 1 */
} acemq_conn_audit_options;

typedef struct acemq_conn_audit acemq_conn_audit;

ACEMQ_EXTERN void acemq_conn_audit_options_init(acemq_conn_audit_options *o);
ACEMQ_EXTERN int acemq_conn_audit_new(acemq_conn_audit **out, const acemq_conn_audit_options *o);
/* Accepts NULL. */
ACEMQ_EXTERN void acemq_conn_audit_free(acemq_conn_audit *c);

/* Checks id in the audit of a queue (kind ACEMQ_AUDIT_QUEUE: destination
 * names it, consumer is ignored) or of a topic consumer (ACEMQ_AUDIT_TOPIC:
 * consumer names it, destination is ignored). Names are NUL-terminated,
 * 1..ACEMQ_AUDIT_NAME_MAX bytes. Answers as acemq_audit_check(). With
 * check_for_duplicates off: ACEMQ_AUDIT_NEW, nothing recorded or counted. */
ACEMQ_EXTERN int acemq_conn_audit_check(acemq_conn_audit *c, int kind, const char *destination,
                                        const char *consumer, const char *id, size_t id_len,
                                        int *cause);
ACEMQ_EXTERN int acemq_conn_audit_rollback(acemq_conn_audit *c, int kind, const char *destination,
                                           const char *consumer, const char *id, size_t id_len);
/* Turns checking on (1) or off (0) at any time. */
ACEMQ_EXTERN void acemq_conn_audit_set_check_for_duplicates(acemq_conn_audit *c, int on);
/* The counters of every audit this connection audit made, evicted ones
 * included; `producers` counts producers remembered now; `evictions` counts
 * producers dropped, whether alone or with their whole audit. *audits (may be
 * NULL) gets how many audits are remembered now. */
ACEMQ_EXTERN int acemq_conn_audit_stats_get(acemq_conn_audit *c, acemq_audit_stats *out,
                                            uint64_t *audits);

#ifdef __cplusplus
}
#endif
#endif
