/* claimer.h — the relay's claim thread, used when the relay has an outbox
 * handle for claims alone (the relay's claimer handle): batch k+1 is
 * claimed while batch k is being sent, so a slow claim (SQLite's writer
 * lock, a busy database) does not stop the sending. The main thread asks
 * for one batch at a time, naming the free flight to claim into, and takes
 * it before asking again: at most one batch is claimed ahead.
 */
#ifndef ACEMQ_RELAY_CLAIMER_H
#define ACEMQ_RELAY_CLAIMER_H

#include <stddef.h>

#include "relay/worker.h"

typedef struct acemq__claimer {
    acemq__worker w;
    /* Claims into flight i on the claimer's thread: 0 and *n records, or an
     * error. */
    int (*claim)(void *ctx, int i, size_t *n);
    /* Releases, unsent, the n > 0 records claimed into flight i. */
    void (*release)(void *ctx, int i);
    void *ctx;
    int asked;    /* flight to claim into; -1 none */
    int answered; /* the asked flight is filled (or failed) */
    int asked_flight, rc;
    size_t n;
    int quit;
} acemq__claimer;

/* Starts the thread: 0, or -1 with nothing to stop. */
int acemq__claimer_start(acemq__claimer *c, int (*claim)(void *ctx, int i, size_t *n),
                         void (*release)(void *ctx, int i), void *ctx);
/* Asks for a batch claimed into flight i. */
void acemq__claimer_ask(acemq__claimer *c, int i);
/* Waits for the batch asked for; returns the claim's result, with its
 * flight in *i and its size in *n. */
int acemq__claimer_take(acemq__claimer *c, int *i, size_t *n);
/* Stops claiming: a batch still asked for is taken and released unsent. */
void acemq__claimer_stop(acemq__claimer *c);

#endif
