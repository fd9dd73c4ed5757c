/* test_memory_arena.c — the memory store's arena: zeroed, aligned, disjoint
 * memory; tables given back come back, cleared, for the same size only. */
#define _GNU_SOURCE /* mincore, MADV_POPULATE_WRITE (memory_pages.h) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "memory_pages.h"
#include "backends/memory/arena.h"

/* Allocations of many sizes, across several blocks (the first is 256 KiB,
 * then they double): each zeroed, on a cache line, and not overlapping any
 * other (each is filled with its own byte and checked after all are made). */
static void allocations_are_zeroed_aligned_and_disjoint(void **state)
{
    (void)state;
    acemq__arena a;
    assert_int_equal(acemq__arena_init(&a), 0);
    enum { N = 200 };
    static unsigned char *p[N];
    static size_t len[N];
    for (int i = 0; i < N; i++) {
        len[i] = (size_t)(i % 13 + 1) * 4099 + (i == 150 ? ((size_t)5 << 20) : 0);
        p[i] = acemq__arena_alloc(&a, len[i]);
        assert_non_null(p[i]);
        assert_int_equal((uintptr_t)p[i] % 64, 0);
        assert_true(all_zero(p[i], len[i]));
        memset(p[i], i + 1, len[i]);
    }
    for (int i = 0; i < N; i++)
        for (size_t j = 0; j < len[i]; j += 509)
            assert_int_equal(p[i][j], (unsigned char)(i + 1));
    acemq__arena_destroy(&a);
}

/* A table given back is handed out again for its size, cleared; a size that
 * is not a power of two is never reused. */
static void freed_tables_come_back_cleared(void **state)
{
    (void)state;
    acemq__arena a;
    assert_int_equal(acemq__arena_init(&a), 0);
    unsigned char *t = acemq__arena_alloc(&a, 4096);
    assert_non_null(t);
    memset(t, 0xab, 4096);
    acemq__arena_free(&a, t, 4096);
    unsigned char *other_size = acemq__arena_alloc(&a, 8192);
    assert_ptr_not_equal(other_size, t);
    unsigned char *again = acemq__arena_alloc(&a, 4096);
    assert_ptr_equal(again, t);
    assert_true(all_zero(again, 4096));

    unsigned char *odd = acemq__arena_alloc(&a, (size_t)3 << 10);
    assert_non_null(odd);
    acemq__arena_free(&a, odd, (size_t)3 << 10);
    unsigned char *odd2 = acemq__arena_alloc(&a, (size_t)3 << 10);
    assert_ptr_not_equal(odd2, odd);
    acemq__arena_free(&a, NULL, 4096); /* nothing to give back: no effect */
    acemq__arena_destroy(&a);
}

/* A request bigger than the next block gets a block of its own, and the
 * arena goes on carving after it. */
static void oversized_request(void **state)
{
    (void)state;
    acemq__arena a;
    assert_int_equal(acemq__arena_init(&a), 0);
    size_t big = ((size_t)9 << 20) + 64;
    unsigned char *p = acemq__arena_alloc(&a, big);
    assert_non_null(p);
    assert_true(all_zero(p, big));
    memset(p, 1, big);
    unsigned char *q = acemq__arena_alloc(&a, 1000);
    assert_non_null(q);
    assert_true(q + 1000 <= p || q >= p + big);
    assert_true(all_zero(q, 1000));
    assert_null(acemq__arena_alloc(&a, 0));
    assert_null(acemq__arena_alloc(&a, SIZE_MAX - 10));
    acemq__arena_destroy(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(allocations_are_zeroed_aligned_and_disjoint),
        cmocka_unit_test(freed_tables_come_back_cleared),
        cmocka_unit_test(oversized_request),
    };
    return cmocka_run_group_tests_name("memory arena", tests, NULL, NULL);
}
