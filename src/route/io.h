/* io.h — where routes meet the outside: sources (a route's `from`) and
 * endpoints (a `to`), and the exec step's child process.
 *
 * Sources:
 *   timer:NAME?period=MS&repeatCount=N&delay=MS
 *       Camel's timer: the first exchange after delay (default 1000), then
 *       one every period (default 1000; 0: back to back); repeatCount 0 or
 *       absent: forever, else the source ends after N. Each exchange has the
 *       header firedTime (RFC 3339 UTC, milliseconds) and the properties
 *       CamelTimerName, CamelTimerCounter (1, 2, ...) and CamelTimerPeriod.
 *   amqp:queue:NAME?prefetch=N&retryDelay=MS
 *       Consumes NAME on the route file's broker (prefetch default 16). The
 *       exchange's id is the message's message_id (a new UUIDv7 when it has
 *       none), its headers the AMQP headers (strings as they are, numbers
 *       and booleans as text; others skipped), its body the message's body;
 *       properties amqp.exchange, amqp.routing_key, amqp.redelivered
 *       ("true"/"false"). Completed: acknowledged. Failed: given back to the
 *       queue (basic.nack, requeue) after retryDelay ms (default 1000), so a
 *       message that fails at once does not spin.
 *   file:DIR?include=GLOB&delay=MS
 *       Each regular file in DIR whose name matches GLOB (fnmatch; default
 *       every name not starting with "."), oldest first, once: body its
 *       contents, header fileName its name. Completed: moved to DIR/.done
 *       (made when missing). Failed: left where it is and tried again after
 *       delay ms (default 500), the poll interval too.
 *
 * Endpoints (`to`):
 *   log:NAME?showBody=true|false&showHeaders=true|false
 *       One line on the route's log: route=ID step=STEP_ID log=NAME
 *       exchange=ID, then body="..." and headers="k=v, ..." when asked
 *       (showBody default true, showHeaders default false).
 *   amqp:exchange:NAME?routingKey=KEY
 *       Publishes the body with the headers (as AMQP string headers) and the
 *       exchange id as message_id, persistent, and waits for the broker's
 *       confirm: a nack, a return (unroutable: mandatory) or no confirm fails
 *       the step. NAME "" (amqp:exchange:?routingKey=q) is the default
 *       exchange. routingKey may hold ${...} parts (evaluated per exchange).
 *   file:DIR?fileName=EXPR
 *       Writes the body to DIR/NAME, NAME the header fileName, else the
 *       exchange id; written to a temporary name, fsync'd, then renamed, so
 *       a reader never sees half a file.
 *
 * Errors come back as negative acemq codes with the reason in `why`. */
#ifndef ACEMQ_ROUTE_IO_H
#define ACEMQ_ROUTE_IO_H

#include <stdint.h>
#include <stdio.h>

#include "core/buf.h"
#include "route/exchange.h"
#include "route/model.h"

/* What sources and endpoints share: the broker and where lines go. */
typedef struct acemq__route_env {
    const char *broker_url; /* NULL: amqp: sources and endpoints cannot open */
    FILE *log;              /* the log step's and log: endpoint's lines; NULL: none */
} acemq__route_env;

typedef struct acemq__source acemq__source;

/* Opens the source a route's `from` names: 0, or an error with why (no such
 * directory, the broker refused the queue, ...). --check opens and closes
 * each source to report one it cannot open. */
int acemq__source_open(const acemq__uri *from, const acemq__route_env *env, acemq__source **out,
                       acemq__buf *why);
/* Waits up to timeout_ms for the next exchange. 0: *x is filled (x was
 * initialised by the caller with acemq__exchange_init; the source may
 * replace its id); ACEMQ_ENOENT: nothing came in time; 1: the source has
 * ended and gives nothing more (a timer past repeatCount); another negative
 * code: an error, with why (a source that reconnects by itself, as amqp:
 * does, returns ACEMQ_ENOENT instead). */
int acemq__source_next(acemq__source *s, int timeout_ms, acemq__exchange *x, acemq__buf *why);
/* Settles an exchange the source gave: completed 1 acknowledges it (amqp:
 * basic.ack; file: moved to .done), 0 gives it back to be tried again. 0,
 * or an error with why. Every exchange from next is settled exactly once,
 * before acemq__exchange_free. */
int acemq__source_done(acemq__source *s, acemq__exchange *x, int completed, acemq__buf *why);
/* Closes; exchanges not settled go back (amqp: the broker redelivers them). */
void acemq__source_close(acemq__source *s);

typedef struct acemq__endpoint acemq__endpoint;

/* Opens the endpoint of a `to`: 0, or an error with why. step is the `to`
 * step (for its id in log lines). */
int acemq__endpoint_open(const acemq__step *step, const acemq__route_env *env,
                         acemq__endpoint **out, acemq__buf *why);
/* Sends x: 0, or an error with why, which fails the step. */
int acemq__endpoint_send(acemq__endpoint *e, const acemq__exchange *x, acemq__buf *why);
void acemq__endpoint_close(acemq__endpoint *e);

/* The exec step: runs `/bin/sh -c command` with the body on its standard
 * input and, in its environment, ACEMQ_ROUTE_ID, ACEMQ_EXCHANGE_ID and each
 * header as ACEMQ_HEADER_<NAME> (letters, digits and _ kept, others as _).
 * Exit status 0: its standard output becomes the body; else, a signal, or
 * no exit within timeout_ms (0: no limit; the child is then killed): an
 * error (ACEMQ_EBACKEND) with the status and the last line of its standard
 * error in why. Its standard error also goes on to ours. */
int acemq__exec_run(const char *command, int64_t timeout_ms, acemq__exchange *x, acemq__buf *why);

#endif
