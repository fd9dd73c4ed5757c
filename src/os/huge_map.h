/* huge_map.h — mappings laid out so that transparent huge pages can back
 * them.
 *
 * A huge page backs only a 2 MiB range that starts on a 2 MiB boundary, and
 * mmap promises no such start. The memory store maps its tables
 * (backends/memory/arena.c) and its records (backends/memory/records.c) through here: one
 * huge page more than asked for, then both ends trimmed so that what is
 * left starts on a boundary. Whether to ask for huge pages, and over which
 * part, stays with the caller (MADV_HUGEPAGE is only advice, and a small
 * store is better off in small pages).
 */
#ifndef ACEMQ_OS_HUGE_MAP_H
#define ACEMQ_OS_HUGE_MAP_H

#include <stddef.h>
#include <stdint.h>

#define ACEMQ__HUGE_PAGE ((size_t)2 << 20)

/* n rounded up to a multiple of to (a power of two); 0 on overflow. */
static inline size_t acemq__round_up(size_t n, size_t to)
{
    return n > SIZE_MAX - (to - 1) ? 0 : (n + to - 1) & ~(to - 1);
}

/* len bytes of a fresh private anonymous mapping (len a multiple of
 * ACEMQ__HUGE_PAGE) with the given protection and extra mmap flags
 * (MAP_NORESERVE, say), starting on a huge-page boundary: its address, or
 * NULL when the kernel refused. munmap(p, len) gives it back. */
void *acemq__map_huge_aligned(size_t len, int prot, int flags);

#endif
