/* prefault.c — see prefault.h. */
#define _GNU_SOURCE /* MADV_POPULATE_WRITE */
#include "os/prefault.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static uintptr_t page_size(void)
{
    long n = sysconf(_SC_PAGESIZE);
    return n > 0 ? (uintptr_t)n : 4096;
}

int acemq__prefault(void *p, size_t size)
{
#ifdef MADV_POPULATE_WRITE
    if (size == 0) return 0;
    uintptr_t page = page_size();
    uintptr_t from = (uintptr_t)p & ~(page - 1);
    uintptr_t to = ((uintptr_t)p + size + page - 1) & ~(page - 1);
    /* NOLINTNEXTLINE(performance-no-int-to-ptr): p's own pages, rounded out */
    if (madvise((void *)from, to - from, MADV_POPULATE_WRITE) == 0) return 0;
    /* EINVAL: a kernel that does not know the advice. */
    return errno == EINVAL ? 0 : -1;
#else
    (void)p;
    (void)size;
    return 0;
#endif
}
