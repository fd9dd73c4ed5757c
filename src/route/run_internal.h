/* run_internal.h — what the route runtime's files share: the state of one
 * route's thread while it runs an exchange. run.c owns the threads,
 * steps.c runs the steps, idem_step.c the idempotent consumer. */
#ifndef ACEMQ_ROUTE_RUN_INTERNAL_H
#define ACEMQ_ROUTE_RUN_INTERNAL_H

#include <stdint.h>

#include "route/io.h"
#include "route/model.h"
#include "route/route.h"

/* A claim an exchange holds until it completes or fails (an idempotent
 * consumer with completion_eager false settles it then). */
typedef struct acemq__held_claim {
    acemq__repository *repo;
    acemq__step *step;
    acemq__buf key;
    uint64_t token;
    struct acemq__held_claim *next;
} acemq__held_claim;

/* One route's thread. */
typedef struct acemq__route_run {
    acemq__route *route;
    acemq__route_file *file;
    const acemq__routes_options *o;
    acemq__source *source;
    acemq__held_claim *held;  /* the exchange's claims, newest first */
    acemq__held_claim *spare; /* settled claims, kept for the next exchange's */
    acemq__buf why;           /* why the exchange failed */
    const char *failed_step;  /* the step it failed in */
} acemq__route_run;

/* Runs steps on x in order: 0, or a failure with run->why and
 * run->failed_step set. */
int acemq__run_steps(acemq__route_run *run, acemq__steps *steps, acemq__exchange *x);
/* The idempotent consumer step. */
int acemq__run_idempotent(acemq__route_run *run, acemq__step *step, acemq__exchange *x);
/* Settles one claim: the exchange's outcome ok 1 confirms it; 0 releases
 * it when its step has remove_on_failure. 0, or the store's error (with
 * run->why) when a confirm is refused. c goes to run->spare. */
int acemq__settle_claim(acemq__route_run *run, acemq__held_claim *c, int ok);
/* Frees the spare claims when the route ends. */
void acemq__run_free(acemq__route_run *run);
/* Fails the step with a reason: sets run->why and run->failed_step. */
int acemq__step_fail(acemq__route_run *run, const acemq__step *step, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Adds to a counter that the metrics page reads from another thread. */
static inline void acemq__count(uint64_t *c)
{
    __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

#endif
