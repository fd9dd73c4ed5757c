/* mono_time.h — CLOCK_MONOTONIC read in milliseconds or microseconds, a
 * sleep that a signal does not cut short, and a sleep that a stop request
 * cuts short: for timeouts, pauses and durations inside the library, never
 * for what is stored (leases and retentions read an acemq_clock,
 * core/clock.c).
 */
#ifndef ACEMQ_OS_MONO_TIME_H
#define ACEMQ_OS_MONO_TIME_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC cannot fail on the systems we build for; 0 if it did. */
static inline int64_t acemq__mono_us(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t acemq__mono_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps the whole of ms (>= 0), resuming after a signal. */
static inline void acemq__sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The relay (between retries of a database that is down) and `acemq relay`
 * (while the broker cannot be reached yet) both wait up to seconds and must
 * still stop within moments of SIGTERM or acemq_relay_stop. A signal does
 * not reliably interrupt nanosleep in the thread that sleeps (it may be
 * delivered to another), so the wait is cut into slices and the stop
 * condition is tested between them: a stop request waits at most one slice
 * to be seen. */
#define ACEMQ__PAUSE_SLICE_MS 50L

/* Sleeps ms milliseconds in slices of at most ACEMQ__PAUSE_SLICE_MS,
 * asking stop(ctx) before each slice and once after the last, and returns
 * at the first yes: 1 then, 0 when the whole time passed without one (a
 * stop asked for in the last slice is still seen). */
int acemq__pause_ms(long ms, int (*stop)(void *ctx), void *ctx);

#endif
