/* memory_pages.h — what the memory tests ask of fresh memory: whether it is
 * zero, how much of it the kernel has in, and whether this kernel can
 * fault memory in ahead (MADV_POPULATE_WRITE, Linux 5.14). Shared by the
 * arena, records, prefault and store tests. Include after <cmocka.h>. */
#ifndef ACEMQ_TESTS_MEMORY_PAGES_H
#define ACEMQ_TESTS_MEMORY_PAGES_H

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static inline int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static inline size_t page_bytes(void)
{
    long n = sysconf(_SC_PAGESIZE);
    assert_true(n > 0);
    return (size_t)n;
}

/* Pages of [p, p + len) the kernel has in memory; p on a page. */
static inline size_t resident_pages(unsigned char *p, size_t len)
{
    size_t pages = (len + page_bytes() - 1) / page_bytes();
    unsigned char *in = malloc(pages);
    assert_non_null(in);
    assert_int_equal(mincore(p, pages * page_bytes(), in), 0);
    size_t n = 0;
    for (size_t i = 0; i < pages; i++)
        n += in[i] & 1;
    free(in);
    return n;
}

/* Whether this kernel knows MADV_POPULATE_WRITE: asked of a page of its own. */
static inline int kernel_populates(void)
{
    size_t page = page_bytes();
    void *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    errno = 0;
    int yes = madvise(p, page, MADV_POPULATE_WRITE) == 0 || errno != EINVAL;
    assert_int_equal(munmap(p, page), 0);
    return yes;
}

#endif
