/* shard_lock.c — the slow paths of the futex shard lock (see shard_lock.h). */
#define _GNU_SOURCE /* syscall() */
#include "os/shard_lock.h"

#if defined(__linux__)
#include "os/futex.h"

void acemq__shard_lock_wait(acemq__shard_lock *l)
{
    for (int spin = 0; spin < 64; spin++) {
        unsigned c = atomic_load_explicit(&l->word, memory_order_relaxed);
        if (c == 0 && atomic_compare_exchange_weak_explicit(&l->word, &c, 1, memory_order_acquire,
                                                            memory_order_relaxed))
            return;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    /* From here the lock is marked waited for (2) whenever we take it, so
     * that whoever gives it back wakes the next sleeper. */
    while (atomic_exchange_explicit(&l->word, 2, memory_order_acquire) != 0)
        acemq__futex(&l->word, FUTEX_WAIT_PRIVATE, 2);
}

void acemq__shard_lock_wake(acemq__shard_lock *l)
{
    acemq__futex(&l->word, FUTEX_WAKE_PRIVATE, 1);
}
#else
typedef int acemq__shard_lock_unused; /* ISO C wants a translation unit to declare something */
#endif
