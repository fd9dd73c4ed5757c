/* arena.c — blocks of mapped memory for the memory store (see the
 * header for why). */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "backends/memory/arena.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "acemq/common.h"
#include "os/huge_map.h"

#define ALIGN 64
#define FIRST_BLOCK ((size_t)256 << 10)
/* Past this, blocks stop doubling: a store that keeps growing maps 64 MiB at
 * a time, little against what it holds. */
#define MAX_BLOCK ((size_t)64 << 20)

struct acemq__arena_block {
    acemq__arena_block *next;
    void *base;
    size_t len;
};

/* len bytes of fresh (zero) memory. From a huge page (2 MiB) up, len is a
 * multiple of one and the block starts on a boundary, with huge pages asked
 * for: the advice is only advice, and without transparent huge pages the
 * block works the same in small pages. */
static void *map_block(size_t len)
{
    if (len < ACEMQ__HUGE_PAGE) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    char *aligned = acemq__map_huge_aligned(len, PROT_READ | PROT_WRITE, 0);
    if (!aligned) return NULL;
    (void)madvise(aligned, len, MADV_HUGEPAGE);
    return aligned;
}

int acemq__arena_init(acemq__arena *a)
{
    memset(a, 0, sizeof *a);
    a->next_block = FIRST_BLOCK;
    return pthread_mutex_init(&a->lock, NULL) == 0 ? 0 : ACEMQ_ENOMEM;
}

/* Maps a block with room for size bytes and makes it the one carved from;
 * what was left in the previous block stays unused. */
static int add_block(acemq__arena *a, size_t size)
{
    size_t len = a->next_block;
    if (len < size) len = acemq__round_up(size, size < ACEMQ__HUGE_PAGE ? ALIGN : ACEMQ__HUGE_PAGE);
    if (len == 0) return -1;
    acemq__arena_block *b = malloc(sizeof *b);
    if (!b) return -1;
    b->base = map_block(len);
    if (!b->base) {
        free(b);
        return -1;
    }
    b->len = len;
    b->next = a->blocks;
    a->blocks = b;
    a->next = b->base;
    a->end = a->next + len;
    if (a->next_block < MAX_BLOCK) a->next_block *= 2;
    return 0;
}

/* The free-list class of a table of size bytes, or -1 for a size that is not
 * a power of two (such memory is not reused). */
static int class_of(size_t size)
{
    if (size & (size - 1)) return -1;
    int c = __builtin_ctzll((unsigned long long)size);
    return c < ACEMQ__ARENA_CLASSES ? c : -1;
}

void *acemq__arena_alloc(acemq__arena *a, size_t size)
{
    size = acemq__round_up(size, ALIGN);
    if (size == 0) return NULL;
    int c = class_of(size);
    void *p = NULL;
    pthread_mutex_lock(&a->lock);
    if (c >= 0 && a->free_tables[c]) {
        p = a->free_tables[c];
        memcpy(&a->free_tables[c], p, sizeof(void *)); /* its first bytes link the list */
    }
    int reused = p != NULL;
    /* No block yet: next and end are NULL, and not to be subtracted. */
    int room = a->next && (size_t)(a->end - a->next) >= size;
    if (!p && (room || add_block(a, size) == 0)) {
        p = a->next;
        a->next += size;
    }
    pthread_mutex_unlock(&a->lock);
    /* Fresh blocks are zero already; a reused table is cleared outside the
     * lock. */
    if (reused) memset(p, 0, size);
    return p;
}

void acemq__arena_free(acemq__arena *a, void *p, size_t size)
{
    int c = p ? class_of(acemq__round_up(size, ALIGN)) : -1;
    if (c < 0) return;
    pthread_mutex_lock(&a->lock);
    memcpy(p, &a->free_tables[c], sizeof(void *));
    a->free_tables[c] = p;
    pthread_mutex_unlock(&a->lock);
}

void acemq__arena_destroy(acemq__arena *a)
{
    for (acemq__arena_block *b = a->blocks, *next; b; b = next) {
        next = b->next;
        /* Unmapping a whole mapping of our own cannot fail. */
        (void)munmap(b->base, b->len);
        free(b);
    }
    a->blocks = NULL;
    pthread_mutex_destroy(&a->lock);
}
