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
#include "audit/producer_memo.h"
#include "os/shard_lock.h"

/* A producer: ring, recency, window header and key in one 64-byte aligned
 * allocation. The ring comes first, padded so that the header starts a cache
 * line; the header's first line holds what a check reads and writes
 * (recency, top, start) and the lengths; the second the guess at the next
 * id (check_tail) and the key (up to 32 bytes of it). A check reads
 * those two lines and one ring word, and writes the first line, the word
 * and, for a text id of the plain flavour, the guess. The ring ends where
 * the header begins and runs backwards from there (acemq__ring_word), so
 * the check finds its word from the producer's address and the sequence
 * alone: with the ring after a key of varying room, it had first to load
 * w.ring_end (still set, for window.c), one more dependent load on every
 * check.
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
    /* The second line from here: the guess, then the key.
     *
     * The plain flavour's guess at this producer's next text id (see
     * check_tail): the last eight bytes of the id of sequence top + 1, and
     * that id's length; tail_len 0: no guess. Whatever moves the window's
     * top other than the guess itself either makes the next guess or drops
     * this one (guess_drop), so a guess is always for the present top. */
    uint64_t next_tail;
    uint64_t tail_len;
    unsigned char key[];
} entry;
_Static_assert(offsetof(entry, next_tail) == 64, "the guess and the key start the second line");

/* The producer table: open addressing, linear probing, a slot a pointer to
 * a producer (NULL: empty). The producer's full 64-bit hash sits in its
 * first line, beside the window fields the check reads anyway, and is
 * compared before the key. The table is kept at most 1/32 full while small
 * (1/4, then 1/2, as it grows large), so a producer nearly always sits in
 * its home slot: the lookup is one slot read and a branch the predictor
 * gets right, where a chained bucket walk's length is a guess per id. A
 * producer one slot away is still found on the fast path (fast_slot), but
 * the branch that sends the check there is lost on nearly every one of its
 * ids, since which producer comes next is anyone's guess: of 64 producers,
 * about 2 are displaced at 1/16 full and 1 at 1/32 (n^2 / 2m). Going from
 * 1/16 to 1/32 made the check 1-2 % faster on the benchmark stream (one
 * producer of its 64 was displaced, none now), for 128 more bytes of table
 * per producer (docs/performance.md). It starts small and doubles as
 * producers arrive, so an audit that sees few producers (a connection audit
 * holds many such) stays small. Removal shifts the run back (no
 * tombstones). */
typedef struct slot {
    struct entry *p; /* NULL: empty */
} slot;

#define MIN_KEY_CAP 64 /* room for an ActiveMQ producer id and then some */
/* same_key reads the 17-32 byte class as words or 16-byte vectors ending at
 * the key's end, inside the key's room for any such key. */
_Static_assert(MIN_KEY_CAP >= 32, "a 17-32 byte key must fit the room its compare reads");
/* Audits of up to this many producers keep recency by stamps (above): an
 * eviction then scans at most STAMP_MAX + shards - 1 producers of a shard. */
#define STAMP_MAX 256

typedef struct shard {
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
     * where the window found a sequence inside it (the next sequence is
     * always NEW), off the common case's path. Each counter bumped per
     * check is a load and a store on the same address, check after check;
     * with both gone (one read-modify-write where there were three) the
     * single check got about 0.15 ns faster, and neither change alone did
     * (docs/performance.md, "The clock counts the answers"). `answered`
     * then counts only the general check's fast answers, and those of list
     * recency.
     *
     * Before that, the counters were already at fixed addresses, not
     * answered[rc]++, whose store's address is known only once the ring
     * word's load (rc) is in, which made the next checks' loads wait to be
     * told apart from it: about 1 ns ("Counters at fixed addresses"). */
    uint64_t answered;
    uint64_t answered_duplicates;
    /* The plain flavour's cache of producers by a word of their key
     * (producer_memo.h); empty in every other flavour. */
    acemq__producer_memo memo;
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
    /* Neither locked nor by list: the flavour whose fast check is inline in
     * the entry points, told apart by one test instead of two. */
    int plain;
    size_t ring_pad; /* bytes from a producer's allocation to its header: the ring, padded */
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
