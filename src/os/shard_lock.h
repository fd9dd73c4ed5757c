/* shard_lock.h — the lock that guards one shard of a sharded structure.
 *
 * On Linux, a three-state futex lock (Drepper, "Futexes are tricky", mutex
 * 3): 0 free, 1 held, 2 held and maybe waited for. Taking a free lock is one
 * compare-and-swap and giving it back one exchange, both inline on the hot
 * path, where pthread_mutex_lock and _unlock are two calls into libc doing
 * the same two atomic operations behind a test of the mutex's type. A
 * waiter spins briefly, then sleeps in the kernel on the word (in
 * shard_lock.c). Acquire and release orders on the word carry the
 * happens-before edges, which ThreadSanitizer sees as such. Elsewhere, a
 * pthread mutex.
 */
#ifndef ACEMQ_OS_SHARD_LOCK_H
#define ACEMQ_OS_SHARD_LOCK_H

#include <pthread.h>
#include <stdatomic.h>

#if defined(__linux__)
typedef struct acemq__shard_lock {
    atomic_uint word;
} acemq__shard_lock;

/* The contended path: spins, then sleeps until the lock is handed over. */
void acemq__shard_lock_wait(acemq__shard_lock *l);
/* Wakes one sleeper; called only when the word said someone may wait. */
void acemq__shard_lock_wake(acemq__shard_lock *l);

static inline int acemq__shard_lock_init(acemq__shard_lock *l)
{
    atomic_init(&l->word, 0);
    return 0;
}

static inline void acemq__shard_lock_destroy(acemq__shard_lock *l)
{
    (void)l;
}

static inline void acemq__shard_lock_take(acemq__shard_lock *l)
{
    unsigned c = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->word, &c, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        acemq__shard_lock_wait(l);
}

static inline void acemq__shard_lock_give(acemq__shard_lock *l)
{
    if (atomic_exchange_explicit(&l->word, 0, memory_order_release) == 2) acemq__shard_lock_wake(l);
}
#else
typedef struct acemq__shard_lock {
    pthread_mutex_t m;
} acemq__shard_lock;

/* 0, or non-zero when the mutex could not be set up. */
static inline int acemq__shard_lock_init(acemq__shard_lock *l)
{
    return pthread_mutex_init(&l->m, NULL);
}

static inline void acemq__shard_lock_destroy(acemq__shard_lock *l)
{
    pthread_mutex_destroy(&l->m);
}

static inline void acemq__shard_lock_take(acemq__shard_lock *l)
{
    pthread_mutex_lock(&l->m);
}

static inline void acemq__shard_lock_give(acemq__shard_lock *l)
{
    pthread_mutex_unlock(&l->m);
}
#endif

#endif
