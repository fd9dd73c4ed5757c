/* huge_map.c — see huge_map.h. */
#define _GNU_SOURCE /* MAP_ANONYMOUS under -std=c11 */
#include "os/huge_map.h"

#include <sys/mman.h>

void *acemq__map_huge_aligned(size_t len, int prot, int flags)
{
    if (len == 0 || len % ACEMQ__HUGE_PAGE != 0 || len > SIZE_MAX - ACEMQ__HUGE_PAGE) return NULL;
    size_t span = len + ACEMQ__HUGE_PAGE;
    char *p = mmap(NULL, span, prot, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    if (p == MAP_FAILED) return NULL;
    char *aligned = p + (acemq__round_up((uintptr_t)p, ACEMQ__HUGE_PAGE) - (uintptr_t)p);
    size_t head = (size_t)(aligned - p), tail = span - head - len;
    /* Trimming page-aligned ends of our own mapping cannot fail. */
    if (head) (void)munmap(p, head);
    if (tail) (void)munmap(aligned + len, tail);
    return aligned;
}
