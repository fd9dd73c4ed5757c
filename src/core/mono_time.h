/* mono_time.h — CLOCK_MONOTONIC read in milliseconds or microseconds, and a
 * sleep that a signal does not cut short: for timeouts, pauses and
 * durations inside the library, never for what is stored (leases and
 * retentions read an acemq_clock, core/clock.c).
 */
#ifndef ACEMQ_CORE_MONO_TIME_H
#define ACEMQ_CORE_MONO_TIME_H

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

#endif
