/* busy.c — the SQLite store's busy handler: how its own connections
 * wait for a write lock another connection holds, and for how long. The
 * store (backends/sqlite/idem.c) and the outbox (backends/sqlite/outbox.c) install it and keep
 * one acemq__sqlite_busy a handle; acemq_sqlite_busy_wait() puts it on an
 * application's own connection.
 */
#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "acemq/sqlite.h"
#include "backends/sqlite/busy.h"

void acemq__sqlite_busy_init(acemq__sqlite_busy *b, int timeout_ms)
{
    b->timeout_ms = timeout_ms;
    b->start_kept = 0;
    struct timespec ts = {0, 0};
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    b->rng = ((uint64_t)(uintptr_t)b ^ ((uint64_t)ts.tv_nsec << 17) ^ (uint64_t)ts.tv_sec) *
                 0x9E3779B97F4A7C15u +
             (uint64_t)getpid();
    if (b->rng == 0) b->rng = 1;
}

static int64_t elapsed_us(const struct timespec *from)
{
    struct timespec now;
    if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) return INT64_MAX;
    return (int64_t)(now.tv_sec - from->tv_sec) * 1000000 + (now.tv_nsec - from->tv_nsec) / 1000;
}

static uint64_t next_random(acemq__sqlite_busy *b)
{
    /* xorshift64: the jitter only has to keep contending connections from
     * waking in lock step. */
    uint64_t x = b->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b->rng = x;
    return x;
}

/* The stock busy_timeout sleeps in steps of a millisecond and more; with many
 * connections taking turns on a write lock that is held for microseconds, most
 * of that time is wasted. Short randomised sleeps that grow with the number
 * of retries keep the lock busy without a thundering herd. The limit is real
 * time, not the injected clock: it bounds how long a caller waits. */
int acemq__sqlite_busy_handler(void *arg, int count)
{
    acemq__sqlite_busy *b = arg;
    /* The budget is for the whole wait for the write lock: when the writer
     * queue already made this operation wait, SQLite's wait continues it. */
    if (count == 0 && b->start_kept)
        b->start_kept = 0;
    else if (count == 0 && clock_gettime(CLOCK_MONOTONIC, &b->start) != 0)
        return 0;
    int64_t waited = elapsed_us(&b->start);
    int64_t limit = (int64_t)b->timeout_ms * 1000;
    if (waited >= limit) return 0;
    int shift = count / 8 < 3 ? count / 8 : 3;
    int64_t hi = (int64_t)40 << shift; /* 40, 80, 160, 320 us */
    int64_t us = hi / 2 + (int64_t)(next_random(b) % (uint64_t)(hi / 2 + 1));
    if (us > limit - waited) us = limit - waited;
    struct timespec ts = {0, (long)(us * 1000)};
    (void)nanosleep(&ts, NULL);
    return 1;
}

/* Never called for its result: the function exists so that SQLite frees
 * the handler's state (its xDestroy) when the connection closes or the
 * function is defined again, SQLite 3.40 having no other hook on close. */
static void busy_state_holder(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    sqlite3_result_null(ctx);
}

int acemq_sqlite_busy_wait(sqlite3 *db, int timeout_ms)
{
    if (!db || timeout_ms < 0) return ACEMQ_EINVAL;
    acemq__sqlite_busy *b = malloc(sizeof *b);
    if (!b) return ACEMQ_ENOMEM;
    acemq__sqlite_busy_init(b, timeout_ms);
    /* On failure SQLite has already called free(b). Replacing an earlier
     * definition frees the earlier state, which the handler set next
     * replaces before SQLite can call it again. */
    int rc = sqlite3_create_function_v2(db, "acemq_busy_wait_state", 0, SQLITE_UTF8, b,
                                        busy_state_holder, NULL, NULL, free);
    if (rc == SQLITE_NOMEM) return ACEMQ_ENOMEM;
    if (rc == SQLITE_BUSY) return ACEMQ_EBUSY; /* a statement of db is running */
    if (rc != SQLITE_OK) return ACEMQ_EBACKEND;
    /* Fails only for what is not a connection (SQLITE_MISUSE), which the
     * create above would already have refused. */
    rc = sqlite3_busy_handler(db, acemq__sqlite_busy_handler, b);
    return rc == SQLITE_OK ? 0 : ACEMQ_EBACKEND;
}
