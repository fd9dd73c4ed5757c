/* test_prefault.c — prefault brings fresh pages in, bytes unchanged; an
 * unmapped range is an error. */
#define _GNU_SOURCE /* mincore, MADV_POPULATE_WRITE (memory_pages.h) */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "os/prefault.h"
#include "memory_pages.h"

/* A fresh mapping has no page in; prefault of a range inside it (not on
 * page boundaries) brings in every page the range touches and no other, and
 * what was written before stays. A kernel without MADV_POPULATE_WRITE
 * (before 5.14) cannot: there prefault does nothing and says 0, and the
 * test is skipped, not passed. */
static void prefault_brings_the_pages_in(void **state)
{
    (void)state;
    size_t page = page_bytes(), len = 64 * page;
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    /* No transparent huge page: it would bring in 2 MiB on the first touch. */
    (void)madvise(p, len, MADV_NOHUGEPAGE);
    assert_int_equal(resident_pages(p, len), 0);
    if (!kernel_populates()) {
        assert_int_equal(acemq__prefault(p, len), 0);
        assert_int_equal(resident_pages(p, len), 0);
        assert_int_equal(munmap(p, len), 0);
        skip();
    }
    p[10 * page + 7] = 42;
    assert_int_equal(resident_pages(p, len), 1);
    /* From inside page 10 to inside page 39: pages 10..39. */
    assert_int_equal(acemq__prefault(p + 10 * page + 100, 29 * page), 0);
    assert_int_equal(resident_pages(p, len), 30);
    assert_int_equal(resident_pages(p + 10 * page, 30 * page), 30);
    assert_int_equal(p[10 * page + 7], 42);
    assert_true(all_zero(p + 11 * page, 29 * page));
    assert_int_equal(acemq__prefault(p, 0), 0);
    assert_int_equal(resident_pages(p, len), 30);
    assert_int_equal(munmap(p, len), 0);
}

/* A range the process has no mapping for is an error with errno (ENOMEM,
 * as the kernel says for a range it cannot fault in), not a silent
 * success: the populator relies on that to stop instead of reporting
 * pages it never brought in. */
static void prefault_of_no_mapping_fails(void **state)
{
    (void)state;
    if (!kernel_populates()) skip();
    size_t page = page_bytes();
    unsigned char *p =
        mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(munmap(p, 2 * page), 0);
    errno = 0;
    assert_int_equal(acemq__prefault(p, page), -1);
    assert_int_equal(errno, ENOMEM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prefault_brings_the_pages_in),
        cmocka_unit_test(prefault_of_no_mapping_fails),
    };
    return cmocka_run_group_tests_name("prefault", tests, NULL, NULL);
}
