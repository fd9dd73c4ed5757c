/* arena.h — where the memory store's slabs and slot tables live.
 *
 * A store of a million ids touches some 100 MiB for its records and tables.
 * From malloc, in 4 KiB pages, that is some 25,000 page faults (3–5 µs each on
 * a virtual machine, as long as the claims themselves) and a TLB miss on
 * nearly every probe of a big table. The arena maps memory in blocks that
 * double in size, and asks for transparent huge pages on the blocks of 2 MiB
 * and more, so a big store faults in 2 MiB at a time and its tables sit in
 * few TLB entries; a small store stays in small blocks and small pages.
 *
 * Memory comes back zeroed. Slabs are never given back before the arena is
 * destroyed; a table given back waits on a free list for the next table of
 * its size when that size is a power of two (the tables that grow by
 * doubling).
 *
 * Safe for concurrent use: shards allocate under the arena's own mutex,
 * which only a new slab chunk or a table doubling takes.
 */
#ifndef ACEMQ_BACKENDS_MEMORY_ARENA_H
#define ACEMQ_BACKENDS_MEMORY_ARENA_H

#include <pthread.h>
#include <stddef.h>

#define ACEMQ__ARENA_CLASSES 48

typedef struct acemq__arena_block acemq__arena_block;

typedef struct acemq__arena {
    pthread_mutex_t lock;
    acemq__arena_block *blocks;              /* every mapping, newest first */
    char *next, *end;                        /* the newest block's unused room */
    size_t next_block;                       /* size of the next block to map */
    void *free_tables[ACEMQ__ARENA_CLASSES]; /* by log2 of the size */
} acemq__arena;

/* 0, or ACEMQ_ENOMEM when the mutex could not be set up. */
int acemq__arena_init(acemq__arena *a);
/* size bytes, zeroed, aligned to 64; NULL when out of memory. */
void *acemq__arena_alloc(acemq__arena *a, size_t size);
/* Gives back p, of size bytes, for a later alloc of the same size. */
void acemq__arena_free(acemq__arena *a, void *p, size_t size);
/* Unmaps everything; every pointer it handed out is then invalid. */
void acemq__arena_destroy(acemq__arena *a);

#endif
