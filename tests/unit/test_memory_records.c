/* test_memory_records.c — the memory store's record region: records come
 * zeroed, on cache lines, one after another from index 0, index and address
 * convert both ways, memory is committed as runs are taken (far past the
 * first step), the region refuses to go past its capacity, prefault
 * brings all of it in at once, and a region made with ahead faults in the
 * records past the taken ones on its populator's thread (also in a forked
 * child). */
#define _GNU_SOURCE /* mincore, MADV_POPULATE_WRITE */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "acemq/common.h"
#include "memory_pages.h"
#include "os/huge_map.h"
#include "backends/memory/records.h"

/* Runs of many lengths, 5 MiB of records in all (past the 256 KiB first
 * commit, the 2 MiB mark where huge pages are asked for, and several
 * doublings): each zeroed, writable whole, and named by the indexes that
 * follow the previous run's. */
static void runs_are_zeroed_contiguous_and_indexed(void **state)
{
    (void)state;
    enum { CAPACITY = 100000 };
    acemq__records r;
    assert_int_equal(acemq__records_init(&r, CAPACITY, 0), 0);
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
    assert_int_equal(acemq__records_init(&r, 1000, 0), 0);
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
    assert_int_equal(acemq__records_init(&r, 0, 0), ACEMQ_ENOMEM);
    acemq__records_destroy(&r); /* a refused region is safe to destroy */
    assert_int_equal(acemq__records_init(&r, ((size_t)1 << 32) + 1, 0), ACEMQ_ENOMEM);
    acemq__records_destroy(&r);
}

#define MIB ((size_t)1 << 20)

/* ThreadSanitizer ends a child that starts a thread after a fork of a
 * process with threads: the fork test runs in the other builds. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

/* Takes runs of 1,000 records until count are taken. */
static void take_runs(acemq__records *r, size_t count)
{
    for (size_t taken = 0; taken < count; taken += 1000)
        assert_non_null(acemq__records_take(r, 1000));
}

/* Past the first 2 MiB of records taken, the populator faults in the next
 * 8 MiB before any claim touches them; without ahead, nothing past the
 * records taken comes in. */
static void the_records_ahead_of_the_taken_come_in(void **state)
{
    (void)state;
    if (!kernel_populates()) skip();
    enum { CAPACITY = 1000000, TAKEN = 60000 }; /* 3.7 MiB taken of 61 MiB */
    for (int ahead = 0; ahead <= 1; ahead++) {
        acemq__records r;
        assert_int_equal(acemq__records_init(&r, CAPACITY, ahead), 0);
        take_runs(&r, TAKEN);
        size_t used = (size_t)TAKEN * ACEMQ__RECORD_SIZE;
        size_t touched =
            acemq__round_up(used, ACEMQ__HUGE_PAGE); /* a touch may bring a huge page */
        size_t in = acemq__records_wait_ahead(&r);
        if (ahead) {
            assert_true(in >= used + 6 * MIB); /* asked in steps of 4 MiB, 8 MiB ahead */
            assert_int_equal(resident_pages(r.base + touched, in - touched),
                             (in - touched + page_bytes() - 1) / page_bytes());
        } else {
            assert_int_equal(in, 0);
            assert_int_equal(resident_pages(r.base + touched, 8 * MIB), 0);
        }
        /* The records handed out are still zero, and those faulted in too. */
        assert_true(all_zero(r.base, in > used ? in : used));
        acemq__records_destroy(&r);
    }
}

/* A child forked while the parent's populator ran has no such thread: its
 * own takes start one for it, and its destroy joins that one only (a join
 * of the parent's thread would hang the child). */
static void a_forked_child_faults_in_on_a_thread_of_its_own(void **state)
{
    (void)state;
    if (!kernel_populates() || UNDER_TSAN) skip();
    acemq__records r;
    assert_int_equal(acemq__records_init(&r, 1000000, 1), 0);
    take_runs(&r, 60000);
    /* Forked once the parent's thread has started and caught up: a fork
     * while a thread is starting can leave AddressSanitizer's allocator
     * locked in the child (glibc's own malloc is reset in a child). */
    assert_true(acemq__records_wait_ahead(&r) > 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        take_runs(&r, 120000); /* 7.3 MiB further on */
        size_t used = (size_t)180000 * ACEMQ__RECORD_SIZE;
        int ok = acemq__records_wait_ahead(&r) >= used + 6 * MIB;
        acemq__records_destroy(&r);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    take_runs(&r, 60000); /* the parent's own populator goes on */
    assert_true(acemq__records_wait_ahead(&r) >= (size_t)120000 * ACEMQ__RECORD_SIZE + 6 * MIB);
    acemq__records_destroy(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(runs_are_zeroed_contiguous_and_indexed),
        cmocka_unit_test(the_capacity_is_a_hard_limit),
        cmocka_unit_test(impossible_capacities_are_refused),
        cmocka_unit_test(the_records_ahead_of_the_taken_come_in),
        cmocka_unit_test(a_forked_child_faults_in_on_a_thread_of_its_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
