/* test_huge_map.c — mappings that start on a huge-page boundary: aligned,
 * usable end to end, given back whole by munmap of what was asked for;
 * lengths that are not whole huge pages refused; round_up's overflow. */
#define _GNU_SOURCE /* MAP_NORESERVE, mincore */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "os/huge_map.h"

#define MIB ((size_t)1 << 20)

/* Several mappings in a row (so that some land off a boundary before the
 * trim): each starts on one, takes writes at both ends, and munmap of
 * exactly its length succeeds, after which its pages are gone. */
static void mappings_start_on_a_huge_page(void **state)
{
    (void)state;
    long page = sysconf(_SC_PAGESIZE);
    assert_true(page > 0);
    for (int i = 0; i < 8; i++) {
        size_t len = (size_t)(i % 3 + 1) * ACEMQ__HUGE_PAGE;
        unsigned char *p = acemq__map_huge_aligned(len, PROT_READ | PROT_WRITE, 0);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % ACEMQ__HUGE_PAGE, 0);
        assert_int_equal(p[0] | p[len - 1], 0);
        p[0] = 1;
        p[len - 1] = 2;
        assert_int_equal(munmap(p, len), 0);
        unsigned char in = 0;
        assert_int_equal(mincore(p, (size_t)page, &in), -1);
    }
}

/* A reservation of address space (PROT_NONE, MAP_NORESERVE), as the
 * records take: aligned too, and large ones are fine. */
static void a_reservation_is_aligned(void **state)
{
    (void)state;
    size_t len = 1024 * MIB;
    void *p = acemq__map_huge_aligned(len, PROT_NONE, MAP_NORESERVE);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % ACEMQ__HUGE_PAGE, 0);
    assert_int_equal(mprotect(p, ACEMQ__HUGE_PAGE, PROT_READ | PROT_WRITE), 0);
    memset(p, 7, 64);
    assert_int_equal(munmap(p, len), 0);
}

static void lengths_off_a_huge_page_are_refused(void **state)
{
    (void)state;
    assert_null(acemq__map_huge_aligned(0, PROT_READ | PROT_WRITE, 0));
    assert_null(acemq__map_huge_aligned(ACEMQ__HUGE_PAGE + 4096, PROT_READ | PROT_WRITE, 0));
    assert_null(acemq__map_huge_aligned(SIZE_MAX - SIZE_MAX % ACEMQ__HUGE_PAGE, PROT_NONE, 0));
}

static void round_up_rounds_and_refuses_overflow(void **state)
{
    (void)state;
    assert_int_equal(acemq__round_up(1, ACEMQ__HUGE_PAGE), ACEMQ__HUGE_PAGE);
    assert_int_equal(acemq__round_up(ACEMQ__HUGE_PAGE, ACEMQ__HUGE_PAGE), ACEMQ__HUGE_PAGE);
    assert_int_equal(acemq__round_up(65, 64), 128);
    assert_int_equal(acemq__round_up(0, 64), 0);
    assert_int_equal(acemq__round_up(SIZE_MAX - 62, 64), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mappings_start_on_a_huge_page),
        cmocka_unit_test(a_reservation_is_aligned),
        cmocka_unit_test(lengths_off_a_huge_page_are_refused),
        cmocka_unit_test(round_up_rounds_and_refuses_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
