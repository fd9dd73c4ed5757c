/* records.h — where the memory store's records live: one reservation
 * of address space for every record the store may ever hold, so that a
 * record is named by a 32-bit index as well as by its address.
 *
 * Why an index: the store's slot table keeps, per slot, a tag byte in one
 * array and the hash and record in another (backends/memory/idem.c). A new id's claim
 * reads only the tag array, 1 byte a slot, which stays in a cache too small
 * for 16-byte slots; the slot it then writes is half as large with a 4-byte
 * index in place of an 8-byte pointer. Index and address convert with one
 * addition or subtraction, since records are contiguous from `base`.
 *
 * The reservation is PROT_NONE (no memory is committed, so it counts against
 * no overcommit limit) and is made readable and writable in growing steps as
 * records are taken: a small store commits 256 KiB, a big one commits in
 * blocks that double up to 64 MiB, and asks for transparent huge pages on
 * what lies past the first 2 MiB, as the arena does for its tables
 * (backends/memory/arena.h). Memory comes back zeroed and is never given back before
 * the region is destroyed.
 *
 * Records are taken in order, so what the next claims will write is known:
 * once a store has taken its first 2 MiB, the region keeps the next 8 MiB
 * past the records taken (AHEAD_BYTES) committed and asks its populator
 * (os/populator.h) to fault them in on a thread of its own, so that a
 * claim seldom stops for the kernel to zero a page. A region made with
 * ahead = 0 (unit tests) starts no thread; its pages come
 * on first touch.
 *
 * Safe for concurrent use: shards take records under the region's mutex,
 * which only a new run of records takes (not every claim).
 */
#ifndef ACEMQ_BACKENDS_MEMORY_RECORDS_H
#define ACEMQ_BACKENDS_MEMORY_RECORDS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "os/populator.h"

/* Every record is one cache line. */
#define ACEMQ__RECORD_SIZE 64

typedef struct acemq__records {
    pthread_mutex_t lock;
    unsigned char *base; /* the reservation, aligned to 2 MiB */
    size_t capacity;     /* records it has room for */
    size_t taken;        /* records handed out, from base on */
    size_t committed;    /* bytes from base that are readable and writable */
    size_t reserved;     /* bytes reserved from base, all of the mapping */
    int ahead;           /* fault in ahead of the records taken */
    size_t asked;        /* bytes from base the populator was asked for */
    acemq__populator populator;
} acemq__records;

/* Reserves room for capacity records (1..2^32), faulted in ahead of use
 * when ahead is not 0 (see above). 0, or ACEMQ_ENOMEM when the address
 * space or the mutex could not be had. */
int acemq__records_init(acemq__records *r, size_t capacity, int ahead);
/* count contiguous records, zeroed, each ACEMQ__RECORD_SIZE bytes on a cache
 * line; NULL when fewer than count are left or memory cannot be committed. */
void *acemq__records_take(acemq__records *r, size_t count);
/* Waits until the populator has faulted in what it was asked for, or gave
 * up; returns the bytes from base it has faulted in. For tests. */
size_t acemq__records_wait_ahead(acemq__records *r);
/* Stops the populator and unmaps everything; every record is then invalid. */
void acemq__records_destroy(acemq__records *r);

/* The record at index i, and the index of record p (taken from r). */
static inline void *acemq__record_at(const acemq__records *r, uint32_t i)
{
    return r->base + (size_t)i * ACEMQ__RECORD_SIZE;
}

static inline uint32_t acemq__record_index(const acemq__records *r, const void *p)
{
    return (uint32_t)((size_t)((const unsigned char *)p - r->base) / ACEMQ__RECORD_SIZE);
}

#endif
