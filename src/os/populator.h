/* populator.h — a helper thread that faults memory in ahead of its use.
 *
 * A growing region (the memory store's records) is written in order, and
 * every fresh page of it stops the writer the first time: the kernel finds a
 * page and zeroes it. With transparent huge pages that is 2 MiB at once, a
 * stop as long as thousands of claims take, and more on a virtual machine
 * whose host faults too.
 *
 * The populator takes that off the writer's path. Its owner says how far the
 * region should be faulted in (ask); a thread of its own, started at the
 * first ask, faults the pages in behind the last ask with
 * MADV_POPULATE_WRITE (os/prefault.h), one huge page at a time, and
 * sleeps when it has caught up. The writer never waits for it: a page the
 * thread has not reached yet is faulted in by the writer's touch as before,
 * and the thread then finds it present. The work is the same; it is done on
 * another CPU, ahead of time. The bytes never change.
 *
 * No lock is shared with the writer: ask stores a bound and wakes the thread
 * through a futex word. A child process forked while the thread ran has no
 * such thread; its first ask starts one of its own, and stop joins only a
 * thread its process started. Linux only (futex, MADV_POPULATE_WRITE);
 * elsewhere ask does nothing and pages come on first touch.
 */
#ifndef ACEMQ_OS_POPULATOR_H
#define ACEMQ_OS_POPULATOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct acemq__populator {
    unsigned char *base;
    atomic_size_t want;  /* bytes from base to fault in: only ask() writes it */
    atomic_size_t done;  /* bytes from base faulted in: only the thread writes it */
    atomic_uint wake;    /* futex word the thread sleeps on: bumped by ask and stop */
    atomic_uint moved;   /* futex word waiters sleep on: bumped as done grows */
    atomic_uint waiters; /* how many sleep on `moved` (the thread wakes them only then) */
    atomic_int stop;
    atomic_int gave_up; /* the kernel refused a range: the thread has ended */
    int started;        /* a thread runs for `owner` */
    pid_t owner;
    pthread_t thread;
} acemq__populator;

/* Nothing is started before the first ask. */
void acemq__populator_init(acemq__populator *p, void *base);
/* Asks for [base, base + upto) to be faulted in; upto only grows, and the
 * caller keeps that range readable and writable until stop. Calls are
 * serialised by the caller. Never fails: when no thread can be started the
 * pages come on first touch, as without a populator. */
void acemq__populator_ask(acemq__populator *p, size_t upto);
/* Ends the thread and waits for it; before the range is unmapped. */
void acemq__populator_stop(acemq__populator *p);
/* Waits until [base, base + upto) is faulted in, or the thread gave up or
 * never started; returns how far it got. For tests. */
size_t acemq__populator_wait(acemq__populator *p, size_t upto);

#endif
