/* pause.h — a sleep that a stop request cuts short.
 *
 * The relay (between retries of a database that is down) and `acemq relay`
 * (while the broker cannot be reached yet) both wait up to seconds and must
 * still stop within moments of SIGTERM or acemq_relay_stop. A signal does
 * not reliably interrupt nanosleep in the thread that sleeps (it may be
 * delivered to another), so the wait is cut into slices and the stop
 * condition is tested between them.
 */
#ifndef ACEMQ_CORE_PAUSE_H
#define ACEMQ_CORE_PAUSE_H

/* The longest a stop request waits to be seen. */
#define ACEMQ__PAUSE_SLICE_MS 50L

/* Sleeps ms milliseconds in slices of at most ACEMQ__PAUSE_SLICE_MS,
 * asking stop(ctx) before each slice and once after the last, and returns
 * at the first yes: 1 then, 0 when the whole time passed without one (a
 * stop asked for in the last slice is still seen). */
int acemq__pause_ms(long ms, int (*stop)(void *ctx), void *ctx);

#endif
