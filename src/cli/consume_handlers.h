/* consume_handlers.h — the handlers of `acemq consume --exec` and
 * `--pipe` (consume_handlers.c), for the consumer's options.
 */
#ifndef ACEMQ_CLI_CONSUME_HANDLERS_H
#define ACEMQ_CLI_CONSUME_HANDLERS_H

#include <acemq/consumer.h>

#include "cli/child.h"

/* The command and how long one message may take it (the lease). */
typedef struct acemq__consume_command {
    char **argv; /* NULL-terminated */
    int64_t timeout_ms;
} acemq__consume_command;

/* --exec: ctx is an acemq__consume_command. */
int acemq__consume_exec(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m);

/* The most requests in flight to a --pipe child: the consumer's batch. */
#define ACEMQ__PIPE_BATCH_MAX 64

/* --pipe: ctx is one of these, zeroed but for cmd; the child starts with
 * the first message. */
typedef struct acemq__pipe_child {
    acemq__consume_command cmd;
    acemq__child child;
    int running;
    char *buf; /* what the child wrote and was not read as a line yet */
    size_t len, cap;
    char *line; /* the last answer */
    /* The batch's failure reasons, kept until the next batch. */
    char *why[ACEMQ__PIPE_BATCH_MAX];
    size_t n_why;
} acemq__pipe_child;

/* --pipe with the batch's messages in flight together: the requests are
 * written while the answers come back, in order (a batch handler). */
void acemq__consume_pipe_batch(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m, size_t n,
                               acemq_consumer_outcome *out);
/* Stops the child (it is started again for the next message). */
void acemq__consume_pipe_end(acemq__pipe_child *p);
/* Stops the child and frees the buffers. */
void acemq__consume_pipe_free(acemq__pipe_child *p);

#endif
