/* table.h — the memory store's table and its eviction: the records (one
 * cache line each), the open-addressed table of slots and tag bytes that
 * finds them, its growth, and the making of room in a full store. The
 * design is told at the top of idem.c.
 *
 * The functions are static and this header is included by idem.c alone: the
 * store is one translation unit, so the claim path inlines the table's steps
 * (probe, alloc_entry, make_room) exactly as when they shared one file.
 */
#ifndef ACEMQ_BACKENDS_MEMORY_TABLE_H
#define ACEMQ_BACKENDS_MEMORY_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* Inlined: ids are short, and the call into the shared library costs more
 * than hashing them. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "backends/memory/arena.h"
#include "backends/memory/records.h"
#include "backends/memory/tag_group.h"
#include "core/dlist.h"
#include "idem/idem_backend.h"
#include "os/shard_lock.h"

enum { STATE_CLAIMED = 1, STATE_CONFIRMED = 2 };

#define INITIAL_SLOTS 64
_Static_assert(INITIAL_SLOTS % ACEMQ__TAG_GROUP == 0, "a table ends on a tag group's end");
/* A table grows before it is more than 7/8 full. Probes read tag bytes, 16
 * at a time (tag_group.h), so the longer runs of a full table cost little,
 * and a fuller table is fewer bytes for a new id's claim to miss in cache.
 * A small store's table stays in cache whatever its load, so there the
 * longer runs are all the load costs: up to SPARSE_MAX_ENTRIES (a table of
 * at most 1.2 MiB at its bound) a table is kept at most half full, and a
 * full store's eviction, which walks the rest of the evicted id's run
 * (remove_slot), walks about two slots instead of about twenty. Loads are
 * in eighths. */
#define DENSE_LOAD 7
#define SPARSE_LOAD 4
#define SPARSE_MAX_ENTRIES 65536
/* A billion entries is far past what a memory store should hold, and keeps
 * every count well inside the types that hold it. */
#define MAX_ENTRIES_LIMIT (1LL << 30)
/* An entry is one cache line; ids up to ID_INLINE bytes (numeric ids, short
 * keys, "order-00000042") live in it, longer ones in a buffer of their own
 * whose address is kept, unaligned, in the same bytes. */
#define ID_INLINE 21
/* The store takes records from the region in runs that double from RUN_MIN
 * (4 KiB) up to RUN_MAX (64 KiB): few trips to the region's lock for a big
 * store, little memory taken ahead of need in a small one (never past
 * max_entries records). */
#define RUN_MIN 64
#define RUN_MAX 1024
/* Ids hashed and prefetched ahead of their claims in try_claim_many: enough
 * reads in flight to cover one DRAM latency, few enough that the first
 * prefetched slots are still in L1 when their claims come. */
#define CLAIM_GROUP 16

/* What few records have: a payload fingerprint, a stored result. Kept out
 * of the entry so that the entry fits one cache line. */
typedef struct extras {
    unsigned char *result;
    uint32_t result_len;
    uint8_t fingerprint_len; /* 0: none */
    unsigned char fingerprint[ACEMQ_IDEM_FINGERPRINT_MAX];
} extras;

typedef struct entry {
    struct entry *prev, *next; /* in `claims` or `confirmed`; next also links the free list */
    uint64_t token;
    union {
        int64_t lease_until; /* CLAIMED */
        int64_t expires;     /* CONFIRMED */
    };
    extras *more; /* NULL: no fingerprint, no result */
    uint16_t id_len;
    uint8_t state;
    /* id_len <= ID_INLINE: the id; longer: the address of its buffer. */
    unsigned char id[ID_INLINE];
} entry;

_Static_assert(sizeof(entry) == 64, "an entry is one cache line");
_Static_assert(ACEMQ_IDEM_ID_MAX <= UINT16_MAX, "id_len holds every id length");

_Static_assert(sizeof(entry) == ACEMQ__RECORD_SIZE, "an entry is one of the region's records");

typedef struct entry_list {
    entry *head, *tail;
} entry_list;

/* A taken slot's other half (its tag is in the tag array): the low 32 bits
 * of the id's hash, which place it in a table of any size the store can have
 * (at most bound_slots: under 2^32 for MAX_ENTRIES_LIMIT at any load), and
 * the index of its record in the region. */
typedef struct slot {
    uint32_t hash;
    uint32_t index;
} slot;

/* The most a store's table may be filled, in eighths (see the top). */
static unsigned max_load_for(size_t max_entries)
{
    return max_entries <= SPARSE_MAX_ENTRIES ? SPARSE_LOAD : DENSE_LOAD;
}

/* Whether a table of cap slots may hold count ids at a load of eighths/8. */
static inline int within_load(size_t count, size_t cap, unsigned eighths)
{
    return count * 8 <= cap * eighths;
}

/* A taken slot's tag: 7 bits of the hash that the slot's place (the low 32
 * bits) does not use, with the top bit set, so 0
 * marks an empty slot. A lookup compares a slot's record only when its tag
 * and its 32 bits of hash match: one slot in 128 that is not the id's gets
 * past the tag. */
static inline uint8_t tag_of(uint64_t hash)
{
    return (uint8_t)(0x80u | ((hash >> 40) & 0x7Fu));
}

typedef struct table {
    /* Guards everything here but the hints. The futex lock (os/shard_lock.h),
     * not a pthread mutex: every operation takes it once, and its
     * uncontended take and give are one inline atomic each instead of two
     * calls into libc. */
    acemq__shard_lock lock;
    uint8_t *tags; /* per slot: 0 empty, else tag_of(hash) */
    slot *slots;   /* per slot: the rest, meaningful where the tag is not 0 */
    size_t cap;    /* slots: any count, at most max_load full (see home_of) */
    size_t count;  /* live entries, store-wide: at most max_entries */
    uint64_t next_token;
    entry *latest; /* the latest claim (see the invariants above) */
    entry_list claims, confirmed;
    /* The latest new id's slot, written to `slots` only by the next
     * operation that reads slots (see flush_pending): slots[pending_at] is
     * stale until then. NO_PENDING when there is none. */
    size_t pending_at;
    slot pending;
    entry *free_list;         /* linked through next */
    entry *carve, *carve_end; /* the current run of records, not yet used */
    size_t carved;            /* records in all runs, used or not: at most max_entries */
    /* Read without the lock, for prefetch only: see the invariants above. */
    _Atomic(uintptr_t) tags_hint;
    _Atomic(uintptr_t) slots_hint;
    atomic_size_t cap_hint;
} table;

typedef struct memory_store {
    acemq__arena arena;     /* every tag array and slot table */
    acemq__records records; /* every entry */
    table t;
    size_t max_entries;
    unsigned max_load; /* in eighths: max_load_for(max_entries) */
    int64_t retention_ms;
} memory_store;

static void list_append(entry_list *l, entry *e)
{
    ACEMQ__DLIST_PUSH_BACK(l->head, l->tail, e);
}

static void list_remove(entry_list *l, entry *e)
{
    ACEMQ__DLIST_REMOVE(l->head, l->tail, e);
    e->prev = e->next = NULL;
}

static entry_list *list_of(table *t, entry *e)
{
    return e->state == STATE_CONFIRMED ? &t->confirmed : &t->claims;
}

static unsigned char *long_id(const entry *e)
{
    unsigned char *p;
    memcpy(&p, e->id, sizeof p);
    return p;
}

static const unsigned char *entry_id(const entry *e)
{
    return e->id_len <= ID_INLINE ? e->id : long_id(e);
}

static uint64_t hash_id(const acemq__bytes *id)
{
    return XXH3_64bits(id->data, id->len);
}

static entry *record(const memory_store *m, uint32_t index)
{
    return acemq__record_at(&m->records, index);
}

#define NO_PENDING SIZE_MAX

/* Where a probe for hash starts in a table of cap slots: the low 32 bits of
 * the hash scaled to [0, cap) by one multiplication, so a table can have any
 * number of slots, not only a power of two. That lets a full table hold
 * max_entries at its load bound instead of at the next power of two, which
 * for a million ids would be half as full: twice the tag bytes for a claim
 * to miss in cache. The slot keeps those 32
 * bits, so a growth or a deletion places a slot without its record. */
static inline size_t home_of(uint64_t hash, size_t cap)
{
    return (size_t)(((uint64_t)(uint32_t)hash * cap) >> 32);
}

/* The slot after i, wrapping at the table's end. */
static inline size_t next_of(size_t i, size_t cap)
{
    return i + 1 == cap ? 0 : i + 1;
}

/* The first slot of the tag group after i's (tag_group.h), wrapping at the
 * table's end, which is a group's: every table has a multiple of 64 slots
 * (INITIAL_SLOTS, doublings of it, and bound_slots). */
static inline size_t next_group(size_t i, size_t cap)
{
    size_t next = acemq__tag_group_next(i);
    return next == cap ? 0 : next;
}

/* Writes the latest new id's slot where it belongs. A new id's claim does
 * not write its slot itself: that line, in a table far larger than the
 * caches, is still on its way from DRAM when the claim ends, and a store
 * waiting for it would hold up the lock's release (a locked instruction
 * waits for every earlier store). It is written here instead, by the
 * next operation that reads slots (the next new id's claim at the soonest,
 * after its hash and its tag's read), when the line has had that long to
 * come: the claim prefetched it. Every reader of `slots` calls this first,
 * under the lock. */
static inline void flush_pending(table *t)
{
    if (t->pending_at == NO_PENDING) return;
    t->slots[t->pending_at] = t->pending;
    t->pending_at = NO_PENDING;
}

/* The slot holding id, with *found set to its entry, or the empty slot that
 * ends its probe run, with *found NULL. Tags are read sixteen at a time
 * (tag_group.h) and a slot is opened only where a tag before the run's end
 * matches: a new id's lookup touches nothing but the tag array, and one or
 * two groups of it even near the load bound. Inline: it is most of a
 * lookup, and a call would save and restore six registers around a loop
 * that usually runs once. */
static inline __attribute__((always_inline)) size_t
probe(const memory_store *m, table *t, uint64_t hash, const acemq__bytes *id, entry **found)
{
    flush_pending(t);
    const uint8_t *tags = t->tags;
    const slot *slots = t->slots;
    size_t cap = t->cap;
    size_t home = home_of(hash, cap);
    /* A new id whose home slot is empty, the commonest lookup until the
     * table nears its bound, is answered by that one byte. */
    if (tags[home] == 0) {
        *found = NULL;
        return home;
    }
    uint8_t tag = tag_of(hash);
    for (size_t i = home;; i = next_group(i, cap)) {
        acemq__tag_masks g = acemq__tag_group(tags, i, tag);
        /* Only tags before the run's first empty slot belong to it. */
        unsigned run = g.empty ? (g.empty & (0u - g.empty)) - 1u : ~0u;
        for (unsigned match = g.match & run; match; match &= match - 1u) {
            size_t k = i + (size_t)__builtin_ctz(match);
            if (slots[k].hash != (uint32_t)hash) continue;
            entry *e = record(m, slots[k].index);
            if (e->id_len == id->len && memcmp(entry_id(e), id->data, id->len) == 0) {
                *found = e;
                return k;
            }
        }
        if (g.empty) {
            *found = NULL;
            return i + (size_t)__builtin_ctz(g.empty);
        }
    }
}

static inline __attribute__((always_inline)) entry *find(const memory_store *m, table *t,
                                                         uint64_t hash, const acemq__bytes *id)
{
    entry *e;
    (void)probe(m, t, hash, id, &e);
    return e;
}

/* Frees what an entry owns beyond its record. */
static void clear_extras(entry *e)
{
    if (e->more) free(e->more->result);
    free(e->more);
    e->more = NULL;
}

static void clear_entry(entry *e)
{
    clear_extras(e);
    if (e->id_len > ID_INLINE) free(long_id(e));
    e->id_len = 0;
}

static void free_entry(table *t, entry *e)
{
    clear_entry(e);
    e->next = t->free_list;
    t->free_list = e;
}

/* Starts the write of the record the next claim will take, which for a
 * record from the free list is anywhere in the region: the line is on its
 * way while this claim finishes. */
static void prefetch_entry(const entry *e)
{
    __builtin_prefetch(e, 1, 3);
}

/* A record from the free list or the current run, or a new run as long as
 * all before it (within max_entries). Its fields are not set. */
static entry *alloc_entry(memory_store *m, table *t)
{
    entry *e = t->free_list;
    if (e) {
        t->free_list = e->next;
        if (t->free_list) prefetch_entry(t->free_list);
        return e;
    }
    if (t->carve == t->carve_end) {
        size_t run = t->carved < RUN_MIN ? RUN_MIN : t->carved;
        if (run > RUN_MAX) run = RUN_MAX;
        /* Claims come here only below the bound, with the free list empty,
         * i.e. when carved == count < max_entries: room is at least 1. */
        if (run > m->max_entries - t->carved) run = m->max_entries - t->carved;
        if (run == 0) return NULL;
        entry *fresh = acemq__records_take(&m->records, run);
        if (!fresh) return NULL;
        t->carve = fresh;
        t->carve_end = fresh + run;
        t->carved += run;
    }
    e = t->carve++;
    if (t->carve < t->carve_end) prefetch_entry(t->carve);
    return e;
}

static void set_hints(table *t)
{
    atomic_store_explicit(&t->tags_hint, (uintptr_t)t->tags, memory_order_relaxed);
    atomic_store_explicit(&t->slots_hint, (uintptr_t)t->slots, memory_order_relaxed);
    atomic_store_explicit(&t->cap_hint, t->cap, memory_order_relaxed);
}

/* Starts the read of the tag where a probe for hash begins, which the probe
 * waits for, without the lock: integer arithmetic on the hints, so a stale
 * one aims at the wrong line and costs a wasted prefetch, nothing more. */
static size_t prefetch_tag(table *t, uint64_t hash)
{
    uintptr_t tags = atomic_load_explicit(&t->tags_hint, memory_order_relaxed);
    size_t i = home_of(hash, atomic_load_explicit(&t->cap_hint, memory_order_relaxed));
    /* An integer, not a pointer: the array it named may have been freed. */
    /* NOLINTNEXTLINE(performance-no-int-to-ptr) */
    __builtin_prefetch((const void *)(tags + i), 0, 3);
    return i;
}

/* prefetch_tag, and the slot beside it, for a batch: the slot is read by an
 * existing id's lookup and written, late, for a new id's claim. A single
 * call does not start the slot's read this early: a new id's claim (the
 * common case) would have its tag's read share the way from DRAM with a
 * line it does not wait for; the claim starts it once it knows the slot
 * (claim_new). */
static void prefetch_tag_and_slot(table *t, uint64_t hash)
{
    size_t i = prefetch_tag(t, hash);
    uintptr_t slots = atomic_load_explicit(&t->slots_hint, memory_order_relaxed);
    /* NOLINTNEXTLINE(performance-no-int-to-ptr) */
    __builtin_prefetch((const void *)(slots + i * sizeof(slot)), 1, 3);
}

/* Empties slot i and shifts later members of its probe run back (backward
 * shift deletion), so runs stay unbroken without tombstones. A member at j
 * may move back to i unless its home lies in (i, j], i.e. unless it is
 * fewer slots from its home than from i. Without branches on that test,
 * which near the load bound goes either way at random: a member that stays
 * is written onto itself. */
static void remove_slot(table *t, size_t i)
{
    uint8_t *tags = t->tags;
    slot *slots = t->slots;
    size_t cap = t->cap;
    for (size_t j = next_of(i, cap); tags[j]; j = next_of(j, cap)) {
        size_t home = home_of(slots[j].hash, cap);
        size_t from_home = j >= home ? j - home : j + cap - home;
        size_t from_hole = j >= i ? j - i : j + cap - i;
        size_t moves = (size_t)0 - (size_t)(from_home >= from_hole); /* all ones: it moves */
        size_t to = (i & moves) | (j & ~moves);
        tags[to] = tags[j];
        slots[to] = slots[j];
        i = (j & moves) | (i & ~moves);
    }
    tags[i] = 0;
}

/* The fewest slots that hold max_entries within max_load, rounded up to
 * whole cache lines of tags: the most the table needs, since the store
 * never holds more than max_entries. */
static size_t slots_for(size_t max_entries, unsigned max_load)
{
    size_t want = max_entries * 8 / max_load + 1;
    return (want + 63) & ~(size_t)63;
}

static size_t bound_slots(const memory_store *m)
{
    return slots_for(m->max_entries, m->max_load);
}

/* Doubles the table before it passes max_load, or grows it to bound_slots
 * when the doubling after this one would pass that (see the top). On
 * allocation failure it grows denser instead, slower but correct while a
 * slot stays empty. 1 when the table moved (a slot found before is no
 * longer in it), 0 when it did not, ACEMQ_ENOMEM when it is full and could
 * not grow. */
static int maybe_grow(memory_store *m, table *t)
{
    size_t cap = t->cap;
    if (within_load(t->count + 1, cap, m->max_load)) return 0;
    /* The probe before every call has flushed already; the copy below must
     * never read a stale slot, so this stays cheap insurance. */
    flush_pending(t);
    /* within_load(max_entries, bound_slots) holds, and a claim grows the
     * table only below max_entries: bound_slots is more than cap here. */
    size_t n = cap * 2, most = bound_slots(m);
    if (n > most / 2) n = most; /* n * 2 > most, without overflow */
    uint8_t *tags = acemq__arena_alloc(&m->arena, n);
    slot *slots = tags ? acemq__arena_alloc(&m->arena, n * sizeof(slot)) : NULL;
    if (!slots) {
        if (tags) acemq__arena_free(&m->arena, tags, n);
        return t->count + 1 < cap ? 0 : ACEMQ_ENOMEM;
    }
    for (size_t i = 0; i < cap; i++) {
        if (!t->tags[i]) continue;
        size_t j = home_of(t->slots[i].hash, n);
        while (tags[j])
            j = next_of(j, n);
        tags[j] = t->tags[i];
        slots[j] = t->slots[i];
    }
    acemq__arena_free(&m->arena, t->tags, cap);
    acemq__arena_free(&m->arena, t->slots, cap * sizeof(slot));
    t->tags = tags;
    t->slots = slots;
    t->cap = n;
    set_hints(t);
    return 1;
}

/* Unlinks e from its table and list without freeing it. */
static void unlink_entry(const memory_store *m, table *t, entry *e)
{
    /* The hash is not kept in the entry (it would not fit the line); this
     * path is rare (release, eviction, purge) and ids are short. An id is
     * in the table once, so the lookup by id finds e's own slot. */
    acemq__bytes id = {entry_id(e), e->id_len};
    entry *found;
    remove_slot(t, probe(m, t, hash_id(&id), &id, &found));
    list_remove(list_of(t, e), e);
    t->count--;
}

static void drop(const memory_store *m, table *t, entry *e)
{
    unlink_entry(m, t, e);
    free_entry(t, e);
}

/* Drops one entry of a full store, in the order the top of the file gives
 * (an expired confirmation, else a claim past its lease, else the oldest
 * confirmation), and hands its record back in *spare so a full store
 * reuses the memory instead of a free and a malloc per claim. 0 when room
 * was made, ACEMQ_EFULL when there is no confirmation and the claim whose
 * lease was set longest ago still holds it. */
static int make_room(acemq_idem *h, const memory_store *m, table *t, int64_t now, entry **spare)
{
    entry *confirmed = t->confirmed.head, *claim = t->claims.head, *e;
    if (confirmed && confirmed->expires <= now) {
        e = confirmed;
        ACEMQ__IDEM_COUNT(h, expirations, 1);
    } else if (claim && claim->lease_until <= now) {
        e = claim;
        ACEMQ__IDEM_COUNT(h, evictions, 1);
    } else if (confirmed) {
        e = confirmed;
        ACEMQ__IDEM_COUNT(h, evictions, 1);
    } else {
        return ACEMQ_EFULL;
    }
    unlink_entry(m, t, e);
    *spare = e;
    return 0;
}

#endif
