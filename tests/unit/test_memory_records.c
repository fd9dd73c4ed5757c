/* test_memory_records.c — the memory store's record region: records come
 * zeroed, on cache lines, one after another from index 0, index and address
 * convert both ways, memory is committed as runs are taken (far past the
 * first step), the region refuses to go past its capacity, and prefault
 * brings all of it in at once. */
#define _GNU_SOURCE /* mincore, MADV_POPULATE_WRITE */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/common.h"
#include "memory_pages.h"
#include "store/memory_records.h"

/* Runs of many lengths, 5 MiB of records in all (past the 256 KiB first
 * commit, the 2 MiB mark where huge pages are asked for, and several
 * doublings): each zeroed, writable whole, and named by the indexes that
 * follow the previous run's. */
static void runs_are_zeroed_contiguous_and_indexed(void **state)
{
    (void)state;
    enum { CAPACITY = 100000 };
    acemq__records r;
    assert_int_equal(acemq__records_init(&r, CAPACITY), 0);
    size_t taken = 0;
    for (size_t len = 1; taken + len <= 81920; len = len * 3 % 1021 + 1) {
        unsigned char *p = acemq__records_take(&r, len);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        assert_true(all_zero(p, len * ACEMQ__RECORD_SIZE));
        assert_int_equal(acemq__record_index(&r, p), taken);
        assert_ptr_equal(acemq__record_at(&r, (uint32_t)taken), p);
        assert_ptr_equal(acemq__record_at(&r, (uint32_t)(taken + len - 1)),
                         p + (len - 1) * ACEMQ__RECORD_SIZE);
        memset(p, (int)(len & 0xFF) | 1, len * ACEMQ__RECORD_SIZE);
        taken += len;
    }
    /* Nothing written over: the first record still holds its run's byte. */
    assert_int_equal(*(unsigned char *)acemq__record_at(&r, 0), 1);
    acemq__records_destroy(&r);
}

static void the_capacity_is_a_hard_limit(void **state)
{
    (void)state;
    acemq__records r;
    assert_int_equal(acemq__records_init(&r, 1000), 0);
    assert_non_null(acemq__records_take(&r, 600));
    assert_null(acemq__records_take(&r, 401)); /* one too many: nothing taken */
    unsigned char *rest = acemq__records_take(&r, 400);
    assert_non_null(rest);
    assert_int_equal(acemq__record_index(&r, rest), 600);
    assert_null(acemq__records_take(&r, 1));
    acemq__records_destroy(&r);
}

static void impossible_capacities_are_refused(void **state)
{
    (void)state;
    acemq__records r;
    assert_int_equal(acemq__records_init(&r, 0), ACEMQ_ENOMEM);
    acemq__records_destroy(&r); /* a refused region is safe to destroy */
    assert_int_equal(acemq__records_init(&r, ((size_t)1 << 32) + 1), ACEMQ_ENOMEM);
    acemq__records_destroy(&r);
}

/* Prefault commits room for every record at once and brings it in: each
 * page of the capacity is resident before any take, and takes still hand
 * out zeroed records up to the capacity, and no further. Where the kernel
 * cannot populate (before Linux 5.14) the pages are not checked, the rest
 * is. */
static void prefault_brings_every_record_in(void **state)
{
    (void)state;
    enum { CAPACITY = 40000 }; /* 2.4 MiB: past the first huge page */
    acemq__records r;
    assert_int_equal(acemq__records_init(&r, CAPACITY), 0);
    assert_int_equal(acemq__records_prefault(&r), 0);
    size_t len = (size_t)CAPACITY * ACEMQ__RECORD_SIZE;
    assert_true(r.committed >= len);
    size_t pages = (len + page_bytes() - 1) / page_bytes();
    if (kernel_populates()) assert_int_equal(resident_pages(r.base, len), pages);
    unsigned char *p = acemq__records_take(&r, CAPACITY);
    assert_non_null(p);
    assert_true(all_zero(p, len));
    assert_null(acemq__records_take(&r, 1));
    acemq__records_destroy(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(runs_are_zeroed_contiguous_and_indexed),
        cmocka_unit_test(the_capacity_is_a_hard_limit),
        cmocka_unit_test(impossible_capacities_are_refused),
        cmocka_unit_test(prefault_brings_every_record_in),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
