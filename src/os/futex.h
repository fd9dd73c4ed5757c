/* futex.h — the one futex call the project's own waits are built on
 * (the shard lock, the populator). Linux only. */
#ifndef ACEMQ_OS_FUTEX_H
#define ACEMQ_OS_FUTEX_H

#if defined(__linux__)
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

/* FUTEX_WAIT_PRIVATE or FUTEX_WAKE_PRIVATE on word. The result is not
 * needed: a wait that returns EAGAIN (the word changed before it slept) or
 * EINTR means "look again", which every caller's loop does, and nothing
 * else can come back for a private futex on our own aligned word. */
static inline void acemq__futex(atomic_uint *word, int op, unsigned val)
{
    (void)syscall(SYS_futex, (unsigned *)word, op, val, NULL, NULL, 0);
}
#endif

#endif
