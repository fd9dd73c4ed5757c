/* populator.c — see populator.h. */
#define _GNU_SOURCE
#include "os/populator.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "os/huge_map.h"
#include "os/prefault.h"

#if defined(__linux__)
#include "os/futex.h"

static void *populate(void *arg)
{
    acemq__populator *p = arg;
    for (;;) {
        unsigned seen = atomic_load_explicit(&p->wake, memory_order_acquire);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        size_t want = atomic_load_explicit(&p->want, memory_order_acquire);
        size_t done = atomic_load_explicit(&p->done, memory_order_relaxed);
        if (done >= want) {
            acemq__futex(&p->wake, FUTEX_WAIT_PRIVATE, seen);
            continue;
        }
        /* One huge page at a time, so a writer that catches up waits for one
         * page's zeroing at most, and stop is heard between pages. */
        size_t step = want - done < ACEMQ__HUGE_PAGE ? want - done : ACEMQ__HUGE_PAGE;
        int refused = acemq__prefault(p->base + done, step) != 0;
        if (refused)
            atomic_store_explicit(&p->gave_up, 1, memory_order_release);
        else
            atomic_store_explicit(&p->done, done + step, memory_order_release);
        atomic_fetch_add_explicit(&p->moved, 1, memory_order_release);
        if (atomic_load_explicit(&p->waiters, memory_order_acquire))
            acemq__futex(&p->moved, FUTEX_WAKE_PRIVATE, 0x7fffffff);
        /* Out of memory, or a kernel that refuses the advice: the writer's
         * own touches fault the pages in, as without a populator. */
        if (refused) break;
    }
    return NULL;
}

/* A thread for this process, unless one runs already or could not be had.
 * It starts with every signal blocked, so that none meant for the
 * application (a SIGTERM that should interrupt its main thread's poll)
 * lands on it. */
static void start(acemq__populator *p)
{
    pid_t self = getpid();
    if (p->started && p->owner == self) return;
    sigset_t all, old;
    (void)sigfillset(&all); /* cannot fail on a valid set */
    int masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    p->started = masked && pthread_create(&p->thread, NULL, populate, p) == 0;
    if (masked) (void)pthread_sigmask(SIG_SETMASK, &old, NULL); /* the mask it gave back */
    /* A name for ps and top; a name the system refuses changes nothing. */
    if (p->started) (void)pthread_setname_np(p->thread, "acemq-populate");
    p->owner = self;
}

/* Tells a sleeping thread to look again (at want, or at stop). */
static void wake_thread(acemq__populator *p)
{
    atomic_fetch_add_explicit(&p->wake, 1, memory_order_release);
    acemq__futex(&p->wake, FUTEX_WAKE_PRIVATE, 1);
}

void acemq__populator_ask(acemq__populator *p, size_t upto)
{
    if (upto <= atomic_load_explicit(&p->want, memory_order_relaxed)) return;
    atomic_store_explicit(&p->want, upto, memory_order_release);
    start(p);
    if (p->started) wake_thread(p);
}

void acemq__populator_stop(acemq__populator *p)
{
    if (!p->started || p->owner != getpid()) return;
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    wake_thread(p);
    (void)pthread_join(p->thread, NULL); /* our own joinable thread: cannot fail */
    p->started = 0;
}

size_t acemq__populator_wait(acemq__populator *p, size_t upto)
{
    atomic_fetch_add_explicit(&p->waiters, 1, memory_order_acq_rel);
    for (;;) {
        unsigned seen = atomic_load_explicit(&p->moved, memory_order_acquire);
        size_t done = atomic_load_explicit(&p->done, memory_order_acquire);
        if (done >= upto || !p->started || atomic_load(&p->gave_up)) break;
        acemq__futex(&p->moved, FUTEX_WAIT_PRIVATE, seen);
    }
    atomic_fetch_sub_explicit(&p->waiters, 1, memory_order_acq_rel);
    return atomic_load_explicit(&p->done, memory_order_acquire);
}
#else
void acemq__populator_ask(acemq__populator *p, size_t upto)
{
    (void)p;
    (void)upto;
}

void acemq__populator_stop(acemq__populator *p)
{
    (void)p;
}

size_t acemq__populator_wait(acemq__populator *p, size_t upto)
{
    (void)upto;
    return atomic_load(&p->done);
}
#endif

void acemq__populator_init(acemq__populator *p, void *base)
{
    memset(p, 0, sizeof *p);
    p->base = base;
    atomic_init(&p->want, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->wake, 0);
    atomic_init(&p->moved, 0);
    atomic_init(&p->waiters, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->gave_up, 0);
}
