/* source_timer.c — Camel's timer: as a source (io.h): an exchange after
 * `delay`, then one every `period` until `repeatCount`, each with its
 * firedTime header and the CamelTimer* properties. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acemq/common.h"
#include "os/mono_time.h"
#include "route/io_internal.h"

typedef struct timer_source {
    char *name;
    int64_t period_ms, repeat;
    int64_t counter; /* exchanges given so far */
    int64_t due_ms;  /* monotonic time of the next exchange */
} timer_source;

static int timer_open(const acemq__uri *from, const acemq__route_env *env, void **state,
                      acemq__buf *why)
{
    (void)env;
    int64_t period, delay, repeat;
    int rc = acemq__io_int_param(from, "period", 1000, 0, INT32_MAX, &period, why);
    if (rc == 0) rc = acemq__io_int_param(from, "delay", 1000, 0, INT32_MAX, &delay, why);
    if (rc == 0) rc = acemq__io_int_param(from, "repeatCount", 0, 0, INT64_MAX, &repeat, why);
    if (rc != 0) return rc;
    timer_source *t = calloc(1, sizeof *t);
    if (t) t->name = strdup(from->path ? from->path : "");
    if (!t || !t->name) {
        free(t);
        return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    }
    t->period_ms = period;
    t->repeat = repeat;
    t->due_ms = acemq__mono_ms() + delay;
    *state = t;
    return 0;
}

/* Wall-clock now as RFC 3339 UTC with milliseconds: YYYY-MM-DDTHH:MM:SS.mmmZ. */
static int fired_time(char out[32])
{
    struct timespec ts;
    struct tm tm;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0 || !gmtime_r(&ts.tv_sec, &tm)) return -1;
    char date[24];
    if (strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm) == 0) return -1;
    int n = snprintf(out, 32, "%s.%03ldZ", date, ts.tv_nsec / 1000000);
    return n > 0 && n < 32 ? 0 : -1;
}

static int timer_fill(const timer_source *t, acemq__exchange *x, acemq__buf *why)
{
    char when[32], counter[24], period[24];
    if (fired_time(when) != 0) return acemq__io_fail(why, ACEMQ_EIO, "cannot read the wall clock");
    (void)snprintf(counter, sizeof counter, "%lld", (long long)t->counter);
    (void)snprintf(period, sizeof period, "%lld", (long long)t->period_ms);
    int rc = acemq__fields_set(&x->headers, "firedTime", when);
    if (rc == 0) rc = acemq__fields_set(&x->properties, "CamelTimerName", t->name);
    if (rc == 0) rc = acemq__fields_set(&x->properties, "CamelTimerCounter", counter);
    if (rc == 0) rc = acemq__fields_set(&x->properties, "CamelTimerPeriod", period);
    return rc == 0 ? 0 : acemq__io_fail(why, rc, "out of memory");
}

static int timer_next(void *state, int timeout_ms, acemq__exchange *x, acemq__buf *why)
{
    timer_source *t = state;
    if (t->repeat > 0 && t->counter >= t->repeat) return 1;
    int64_t now = acemq__mono_ms();
    if (now < t->due_ms) {
        int64_t wait = t->due_ms - now;
        if (wait > timeout_ms) {
            acemq__sleep_ms(timeout_ms);
            return ACEMQ_ENOENT;
        }
        /* The monotonic clock has passed due_ms once the whole wait is slept. */
        acemq__sleep_ms(wait);
        now = acemq__mono_ms();
    }
    t->counter++;
    /* Fixed delay, as Camel's default: the next period counts from this
     * exchange, so a slow route is not handed a burst to catch up. */
    t->due_ms = now + t->period_ms;
    return timer_fill(t, x, why);
}

static int timer_done(void *state, acemq__exchange *x, int completed, acemq__buf *why)
{
    (void)state, (void)x, (void)completed, (void)why;
    return 0;
}

static void timer_close(void *state)
{
    timer_source *t = state;
    if (!t) return;
    free(t->name);
    free(t);
}

const acemq__source_ops acemq__source_timer_ops = {"timer", timer_open, timer_next, timer_done,
                                                   timer_close};
