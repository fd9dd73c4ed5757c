/* test_populator.c — the thread that faults memory in ahead of its use:
 * what is asked for comes in without a touch and nothing past it does,
 * the bytes never change (also while a writer races it), asks only grow,
 * a range the kernel refuses ends the thread without hanging a waiter, stop
 * ends a busy thread, and the thread, named, takes no signal meant for the
 * application. Run under ThreadSanitizer as a concurrency test. */
#define _GNU_SOURCE /* mincore, MADV_POPULATE_WRITE */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "os/huge_map.h"
#include "os/populator.h"
#include "memory_pages.h"

#define MIB ((size_t)1 << 20)

/* len bytes of fresh memory on a huge page boundary, readable and
 * writable, nothing touched. */
static unsigned char *fresh(size_t len)
{
    unsigned char *p = acemq__map_huge_aligned(len, PROT_READ | PROT_WRITE, 0);
    assert_non_null(p);
    return p;
}

static void needs_the_kernel(void)
{
    if (!kernel_populates()) skip(); /* before Linux 5.14: nothing to check */
}

static void what_is_asked_for_comes_in_and_nothing_more(void **state)
{
    (void)state;
    needs_the_kernel();
    size_t len = 16 * MIB;
    unsigned char *p = fresh(len);
    memset(p, 0xA5, 100); /* bytes already there stay */
    acemq__populator pop;
    acemq__populator_init(&pop, p);
    acemq__populator_ask(&pop, 6 * MIB);
    assert_true(acemq__populator_wait(&pop, 6 * MIB) >= 6 * MIB);
    assert_int_equal(resident_pages(p, 6 * MIB), 6 * MIB / page_bytes());
    assert_int_equal(resident_pages(p + 6 * MIB, len - 6 * MIB), 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(p[i], 0xA5);
    assert_true(all_zero(p + 100, 6 * MIB - 100));
    /* A later, larger ask brings in the rest of it. */
    acemq__populator_ask(&pop, 10 * MIB);
    assert_true(acemq__populator_wait(&pop, 10 * MIB) >= 10 * MIB);
    assert_int_equal(resident_pages(p, 10 * MIB), 10 * MIB / page_bytes());
    assert_int_equal(resident_pages(p + 10 * MIB, len - 10 * MIB), 0);
    acemq__populator_stop(&pop);
    assert_int_equal(munmap(p, len), 0);
}

static void asks_only_grow(void **state)
{
    (void)state;
    needs_the_kernel();
    size_t len = 8 * MIB;
    unsigned char *p = fresh(len);
    acemq__populator pop;
    acemq__populator_init(&pop, p);
    acemq__populator_ask(&pop, 4 * MIB);
    acemq__populator_ask(&pop, 2 * MIB); /* a smaller ask does not undo it */
    assert_int_equal(atomic_load(&pop.want), 4 * MIB);
    assert_true(acemq__populator_wait(&pop, 4 * MIB) >= 4 * MIB);
    assert_int_equal(resident_pages(p, 4 * MIB), 4 * MIB / page_bytes());
    acemq__populator_stop(&pop);
    assert_int_equal(munmap(p, len), 0);
}

/* The writer fills the region in order, asking ahead as it goes, while the
 * thread faults in behind the asks: every byte is the writer's at the end,
 * whichever of the two reached a page first. */
static void a_racing_writer_keeps_every_byte(void **state)
{
    (void)state;
    size_t len = 48 * MIB, step = 256 << 10;
    unsigned char *p = fresh(len);
    acemq__populator pop;
    acemq__populator_init(&pop, p);
    for (size_t at = 0; at < len; at += step) {
        size_t ahead = at + 8 * MIB < len ? at + 8 * MIB : len;
        acemq__populator_ask(&pop, ahead);
        memset(p + at, (int)(at / step % 251) + 1, step);
    }
    acemq__populator_wait(&pop, len);
    acemq__populator_stop(&pop);
    for (size_t at = 0; at < len; at += step)
        for (size_t i = 0; i < step; i += 4093)
            assert_int_equal(p[at + i], (int)(at / step % 251) + 1);
    assert_int_equal(munmap(p, len), 0);
}

/* Where the mapping has a hole the kernel refuses: the thread ends,
 * a waiter is told how far it got instead of waiting for ever, and stop
 * still works. */
static void a_refused_range_ends_the_thread_without_hanging(void **state)
{
    (void)state;
    needs_the_kernel();
    size_t len = 8 * MIB;
    unsigned char *p = fresh(len);
    assert_int_equal(munmap(p + 4 * MIB, 2 * MIB), 0);
    acemq__populator pop;
    acemq__populator_init(&pop, p);
    acemq__populator_ask(&pop, len);
    assert_int_equal(acemq__populator_wait(&pop, len), 4 * MIB);
    assert_int_equal(atomic_load(&pop.gave_up), 1);
    acemq__populator_stop(&pop);
    assert_int_equal(munmap(p, len), 0); /* the hole too: unmapping it again is allowed */
}

/* Stop right after a large ask: the thread is heard between huge pages
 * and ends long before the range is in; the mapping can then go. */
static void stop_ends_a_busy_thread(void **state)
{
    (void)state;
    for (int round = 0; round < 8; round++) {
        size_t len = 256 * MIB;
        unsigned char *p = acemq__map_huge_aligned(len, PROT_READ | PROT_WRITE, MAP_NORESERVE);
        assert_non_null(p);
        acemq__populator pop;
        acemq__populator_init(&pop, p);
        acemq__populator_ask(&pop, len);
        acemq__populator_stop(&pop);
        assert_true(atomic_load(&pop.done) <= len);
        assert_int_equal(munmap(p, len), 0);
    }
}

/* The signals a thread of this process named `name` blocks (SigBlk in
 * /proc), or 0 when there is no such thread; fails when there are two. */
static unsigned long long blocked_by_thread_named(const char *name)
{
    DIR *tasks = opendir("/proc/self/task");
    assert_non_null(tasks);
    unsigned long long blocked = 0;
    int found = 0;
    for (struct dirent *d; (d = readdir(tasks)) != NULL;) {
        if (d->d_name[0] == '.') continue;
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", d->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* a thread that has just ended */
        int match = fgets(line, sizeof line, f) && strncmp(line, name, strlen(name)) == 0;
        fclose(f);
        if (!match) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", d->d_name);
        f = fopen(path, "r");
        assert_non_null(f);
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "SigBlk: %llx", &blocked) == 1) break;
        fclose(f);
        found++;
    }
    closedir(tasks);
    assert_true(found <= 1);
    return blocked;
}

/* The thread starts with the application's signals blocked, whatever the
 * asking thread blocks, so a SIGTERM or SIGINT meant to interrupt the
 * application's own threads is never delivered to it; ps shows its name. */
static void the_thread_takes_no_signal_and_has_a_name(void **state)
{
    (void)state;
    size_t len = 4 * MIB;
    unsigned char *p = fresh(len);
    acemq__populator pop;
    acemq__populator_init(&pop, p);
    acemq__populator_ask(&pop, len);
    acemq__populator_wait(&pop, len);
    unsigned long long blocked = blocked_by_thread_named("acemq-populate");
    assert_true(blocked & (1ull << (SIGTERM - 1)));
    assert_true(blocked & (1ull << (SIGINT - 1)));
    assert_true(blocked & (1ull << (SIGHUP - 1)));
    assert_true(blocked & (1ull << (SIGUSR1 - 1)));
    /* The asking thread's own mask is as it was. */
    sigset_t now;
    assert_int_equal(pthread_sigmask(SIG_SETMASK, NULL, &now), 0);
    assert_int_equal(sigismember(&now, SIGTERM), 0);
    acemq__populator_stop(&pop);
    assert_int_equal(blocked_by_thread_named("acemq-populate"), 0); /* joined */
    assert_int_equal(munmap(p, len), 0);
}

/* Nothing asked, nothing started: stop and wait return at once. */
static void an_idle_populator_starts_nothing(void **state)
{
    (void)state;
    acemq__populator pop;
    unsigned char byte = 0;
    acemq__populator_init(&pop, &byte);
    assert_int_equal(acemq__populator_wait(&pop, 1), 0);
    assert_int_equal(pop.started, 0);
    acemq__populator_stop(&pop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(what_is_asked_for_comes_in_and_nothing_more),
        cmocka_unit_test(asks_only_grow),
        cmocka_unit_test(a_racing_writer_keeps_every_byte),
        cmocka_unit_test(a_refused_range_ends_the_thread_without_hanging),
        cmocka_unit_test(stop_ends_a_busy_thread),
        cmocka_unit_test(an_idle_populator_starts_nothing),
        cmocka_unit_test(the_thread_takes_no_signal_and_has_a_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
