/* audit_shard.h — the message audit's insides, shared by its files: a
 * producer (entry), the producer table of a shard, the shard, the audit.
 * audit.c checks and rolls back, table.c keeps the producer table and the
 * recency order, audit_new.c makes, frees and counts. Internal.
 */
#ifndef ACEMQ_AUDIT_SHARD_H
#define ACEMQ_AUDIT_SHARD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "audit/audit_internal.h"
#include "os/shard_lock.h"

/* A producer: ring, recency, window header and key in one 64-byte aligned
 * allocation. The ring comes first, padded so that the header starts a cache
 * line; the header holds what a check reads and writes (hash, recency, top,
 * start), then the key. The ring ends where the header begins and runs
 * backwards from there (acemq__ring_word), so the check finds its word from
 * the producer's address and the sequence alone.
 *
 * Recency, two ways, one order. A small audit (max_producers up to
 * STAMP_MAX) stamps each use with the shard's clock, and eviction takes the
 * smallest stamp, found by scanning the shard's producers (dense[]): a use
 * costs one store, into a line the check writes anyway. A large one keeps a
 * doubly linked list, most recent at the head, whose relink on each use
 * writes two or three other producers' lines, but whose eviction is O(1).
 * Both move a producer to "most recent" on the same events (admission, a
 * check, a rollback) and evict the least recent, so they evict the same
 * producer: stamps are distinct and rise with every use, so the smallest is
 * the one whose last use is oldest, which is the list's tail. */
typedef struct entry {
    uint64_t hash; /* key_hash: slot and shard */
    union {
        struct {
            struct entry *prev, *next; /* list: the shard's head is the most recent */
        };
        struct {
            uint64_t stamp; /* stamps: the shard's clock at the last use */
            size_t index;   /* stamps: place in the shard's dense[] */
        };
    };
    acemq__window w;
    uint32_t key_len, key_cap; /* key_cap: a multiple of 16, at least MIN_KEY_CAP */
    unsigned char key[];
} entry;

/* The producer table: open addressing, linear probing, a slot a pointer to
 * a producer (NULL: empty). The producer's full 64-bit hash sits in its
 * first line, beside the window fields the check reads anyway, and is
 * compared before the key. The table is kept at most 1/32 full while small
 * (1/4, then 1/2, as it grows large), so a producer nearly always sits in
 * its home slot, where the fast check (check_fast) looks; one displaced
 * goes to the general check. It starts small and doubles as producers
 * arrive, so an audit that sees few producers (a connection audit holds
 * many such) stays small. Removal shifts the run back (no tombstones). */
typedef struct slot {
    struct entry *p; /* NULL: empty */
} slot;

#define MIN_KEY_CAP 64 /* room for an ActiveMQ producer id and then some */
/* Audits of up to this many producers keep recency by stamps (above): an
 * eviction then scans at most STAMP_MAX + shards - 1 producers of a shard. */
#define STAMP_MAX 256

typedef struct shard {
    /* The futex lock (os/shard_lock.h), not a pthread mutex: it keeps the
     * thread-safe text check of a broker stream about a tenth faster. */
    acemq__shard_lock lock;
    slot *slots;
    size_t mask; /* slots - 1 */
    size_t count;
    entry *head, *tail; /* list recency */
    uint64_t clock;     /* stamp recency: the last stamp given */
    /* stamp recency: the stamps given other than by a fast answer
     * (admissions, rollbacks, the general check), so that clock minus this
     * counts the fast answers (see answered). */
    uint64_t other_stamps;
    slot *dense; /* stamp recency: the count producers, in no order */
    size_t dense_cap;
    acemq__ghosts ghosts;
    acemq_audit_stats stats; /* `checks` is derived in stats_add, see there */
    /* The fast path's answers: all of them, and of those the duplicates
     * (the rest are NEW); added to news and duplicates in stats_add.
     *
     * Under stamp recency a fast answer adds to neither counter: it stamps
     * its producer with the next tick of the clock, which stats_add counts
     * instead (clock - other_stamps), and the duplicates are counted only
     * where the window found a sequence inside it, off the common case's
     * path: a counter bumped per check is a load and a store on the same
     * address, check after check. `answered` counts the general check's
     * fast answers, and those of list recency. */
    uint64_t answered;
    uint64_t answered_duplicates;
    /* Keeps neighbouring shards' locks off one cache line. */
    char pad[64];
} shard;

/* The window's fast case answers with the sequence's bit as it is (0 NEW,
 * 1 DUPLICATE), and adds that bit to answered_duplicates. */
_Static_assert(ACEMQ_AUDIT_NEW == 0 && ACEMQ_AUDIT_DUPLICATE == 1,
               "the window's fast case answers with the sequence's bit");

struct acemq_audit {
    acemq__window_shape shape;
    uint32_t max_producers;
    int policy;
    int locked;
    int lost_history; /* every unseen producer may have been seen: see acemq__audit_new_lost */
    int stamped;      /* recency by stamps, not by list (see entry) */
    size_t ring_pad;  /* bytes from a producer's allocation to its header: the ring, padded */
    unsigned shard_bits;
    unsigned nshards;
    unsigned mutexes;        /* shard locks initialised, for destroy() */
    atomic_size_t producers; /* across shards; only read when nshards > 1 */
    shard *shards;           /* &one when there is one shard */
    /* The only shard of a one-shard audit (every single-thread one), inside
     * the audit, so that the check path reaches its table with one load
     * fewer: every check is a chain of dependent loads (audit, table, slot,
     * producer, ring word), and each link costs its latency. */
    shard one;
};

static inline void lock(acemq_audit *a, shard *s)
{
    if (a->locked) acemq__shard_lock_take(&s->lock);
}

static inline void unlock(acemq_audit *a, shard *s)
{
    if (a->locked) acemq__shard_lock_give(&s->lock);
}

/* ---- the producer table (table.c) ---- */

/* An empty table of 16 slots: 0 or ACEMQ_ENOMEM. */
int acemq__audit_table_init(shard *s);
/* Frees a producer's one allocation, which begins ring_pad bytes before it. */
void acemq__audit_entry_free(size_t ring_pad, entry *p);
/* Frees every producer of s and its table. */
void acemq__audit_table_destroy(shard *s, int stamped, size_t ring_pad);
/* Puts p in the first free slot from its home slot on. */
void acemq__audit_table_put(slot *slots, size_t mask, entry *p);
/* Room for one more producer (none when it replaces an evicted one, adding
 * 0): doubles the slots when the table would pass its fill limit, and the
 * room in dense[] for stamp recency. ACEMQ_ENOMEM leaves the table as it
 * was. */
int acemq__audit_table_reserve(shard *s, int stamped, size_t adding);
/* Takes p's slot out, shifting the rest of its run back so that every
 * producer stays reachable from its home slot without tombstones. */
void acemq__audit_table_remove(shard *s, const entry *p);
/* Adds p, just admitted, as the most recent producer. The room in dense[]
 * was made by acemq__audit_table_reserve. */
void acemq__audit_recency_add(int stamped, shard *s, entry *p);
/* Takes the least recently used producer out of the recency order. */
entry *acemq__audit_recency_pop_oldest(int stamped, shard *s);

#endif
