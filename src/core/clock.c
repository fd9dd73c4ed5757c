/* clock.c — the system clock and a manual clock for tests.
 *
 * Every lease and retention decision reads time through an acemq_clock, so a
 * test moves a manual clock instead of sleeping, and stays deterministic. */
/* CLOCK_REALTIME_COARSE is Linux's, outside POSIX. */
#define _DEFAULT_SOURCE
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "acemq/common.h"

static int64_t system_now_ms(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    /* Wall-clock time, not MONOTONIC: leases are stored in files that outlive
     * the process and are compared across processes. The coarse clock reads
     * the kernel's last tick (1-4 ms old) at a third of the cost, which shows
     * in a memory store that reads it twice per message; leases and
     * retentions are seconds to days, so a tick's error does not matter. */
#ifdef CLOCK_REALTIME_COARSE
    if (clock_gettime(CLOCK_REALTIME_COARSE, &ts) == 0)
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
#endif
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return 0;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const acemq_clock system_clock = {system_now_ms, NULL};

const acemq_clock *acemq_clock_system(void)
{
    return &system_clock;
}

struct acemq_manual_clock {
    acemq_clock clock;
    _Atomic int64_t now_ms;
};

static int64_t manual_now_ms(void *ctx)
{
    acemq_manual_clock *c = ctx;
    return atomic_load_explicit(&c->now_ms, memory_order_acquire);
}

int acemq_manual_clock_new(acemq_manual_clock **out, int64_t start_ms)
{
    if (!out) return ACEMQ_EINVAL;
    *out = NULL;
    acemq_manual_clock *c = calloc(1, sizeof *c);
    if (!c) return ACEMQ_ENOMEM;
    c->clock.now_ms = manual_now_ms;
    c->clock.ctx = c;
    atomic_init(&c->now_ms, start_ms);
    *out = c;
    return 0;
}

void acemq_manual_clock_free(acemq_manual_clock *c)
{
    free(c);
}

const acemq_clock *acemq_manual_clock_get(acemq_manual_clock *c)
{
    return c ? &c->clock : NULL;
}

void acemq_manual_clock_set(acemq_manual_clock *c, int64_t now_ms)
{
    if (c) atomic_store_explicit(&c->now_ms, now_ms, memory_order_release);
}

void acemq_manual_clock_advance(acemq_manual_clock *c, int64_t delta_ms)
{
    if (c) atomic_fetch_add_explicit(&c->now_ms, delta_ms, memory_order_acq_rel);
}
