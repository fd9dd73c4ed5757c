/* mono_time.c — the stoppable sleep; see mono_time.h. */
#include "os/mono_time.h"

#include <time.h>

int acemq__pause_ms(long ms, int (*stop)(void *ctx), void *ctx)
{
    while (!stop(ctx)) {
        if (ms <= 0) return 0;
        long slice = ms < ACEMQ__PAUSE_SLICE_MS ? ms : ACEMQ__PAUSE_SLICE_MS;
        struct timespec ts = {0, slice * 1000000L};
        /* An interrupted slice ends early; the loop asks again and goes on. */
        (void)nanosleep(&ts, NULL);
        ms -= slice;
    }
    return 1;
}
