/* route.h — the route runtime: runs a loaded route file (model.h), one
 * thread per route, each taking exchanges from its source one at a time
 * through its steps. What `acemq route` drives.
 *
 * An exchange completes when every step ran without error: its idempotency
 * claims are confirmed, then its source acknowledges it. It fails when a
 * step fails: the claims of idempotent consumers with remove_on_failure are
 * released (the others stay held until their lease runs out), then the
 * source takes it back (an AMQP delivery returns to its queue). A claim is
 * always settled before the source hears, so an acknowledged message never
 * has an unconfirmed key.
 */
#ifndef ACEMQ_ROUTE_ROUTE_H
#define ACEMQ_ROUTE_ROUTE_H

#include <signal.h>
#include <stdio.h>

#include "core/buf.h"
#include "route/model.h"

typedef struct acemq__routes_options {
    const char *broker_url;   /* overrides the file's `broker:`; NULL: the file's */
    FILE *log;                /* log steps and log: endpoints; NULL: stdout */
    FILE *errlog;             /* failed exchanges and warnings; NULL: stderr */
    int verbose;              /* 1: a line per exchange too */
    const acemq_clock *clock; /* the stores' clock; NULL: the system clock */
} acemq__routes_options;

typedef struct acemq__routes acemq__routes;

/* Opens the repositories, the `to` endpoints and the sources, then starts a
 * thread per route. 0, or an error with why ("FILE:LINE:COLUMN: ..." naming
 * what could not open); nothing is left running or open on error. f stays
 * the caller's and must outlive the runtime. */
int acemq__routes_start(acemq__route_file *f, const acemq__routes_options *o, acemq__routes **out,
                        acemq__buf *why);
/* Waits until every route has ended (its source gave its last exchange) or
 * *stop becomes nonzero (checked every 100 ms; stop may be NULL); then asks
 * the routes to stop, lets each finish the exchange in flight, and joins
 * them. */
void acemq__routes_wait(acemq__routes *r, const volatile sig_atomic_t *stop);
/* Closes what start opened; call after wait. NULL is fine. */
void acemq__routes_close(acemq__routes *r);

/* Opens and closes each source and endpoint, and checks each repository's
 * URL names a store this build has, without opening stores: --check's
 * second half. Adds an error per failure to errors; 0 when none. */
int acemq__routes_check(acemq__route_file *f, const acemq__routes_options *o,
                        acemq__route_errors *errors);

#endif
