/* busy.h — the busy handler the SQLite store installs on its own
 * connections: short randomised sleeps within a budget of real time. The
 * budget can continue a wait that began elsewhere (in the writer queue).
 */
#ifndef ACEMQ_BACKENDS_SQLITE_BUSY_H
#define ACEMQ_BACKENDS_SQLITE_BUSY_H

#include <stdint.h>
#include <time.h>

/* One per connection, guarded by whatever serialises that connection's use
 * (the store's s->lock): the handler keeps the wait's start here. */
typedef struct acemq__sqlite_busy {
    int timeout_ms; /* the budget for one whole wait for the write lock */
    struct timespec start;
    /* Set when start already holds the moment this operation began to wait
     * (in the writer queue): the handler then continues that budget instead
     * of starting a new one. */
    int start_kept;
    uint64_t rng;
} acemq__sqlite_busy;

/* Sets the budget and seeds the jitter. */
void acemq__sqlite_busy_init(acemq__sqlite_busy *b, int timeout_ms);

/* A sqlite3_busy_handler callback; arg is an acemq__sqlite_busy. Sleeps and
 * answers 1 (try again) until timeout_ms has passed since the wait began,
 * then 0. */
int acemq__sqlite_busy_handler(void *arg, int count);

#endif
