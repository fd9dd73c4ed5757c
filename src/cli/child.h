/* child.h — a command `acemq consume` runs for messages (child.c): started
 * in its own process group with a pipe to its standard input (and one from
 * its standard output when asked), written to and waited for under a
 * deadline, killed whole when it overstays.
 */
#ifndef ACEMQ_CLI_CHILD_H
#define ACEMQ_CLI_CHILD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <acemq/consumer.h>

typedef struct acemq__child {
    pid_t pid; /* -1: none */
    int to;    /* its standard input; -1 once closed */
    int from;  /* its standard output, when asked for; else -1 */
} acemq__child;

int64_t acemq__child_now_ms(void);

/* The environment for m's command: this process's, less any ACEMQ_*
 * variable, plus ACEMQ_MESSAGE_ID, ACEMQ_KEY, ACEMQ_ROUTING_KEY,
 * ACEMQ_EXCHANGE, ACEMQ_CONTENT_TYPE, ACEMQ_FAILURES and ACEMQ_HEADER_<NAME>
 * for each header. NULL on ENOMEM. */
char **acemq__child_env(const acemq_consumer_msg *m);
void acemq__child_env_free(char **env);

/* Starts argv (found on PATH) with env (NULL: this process's): 0, or -1 (errno). */
int acemq__child_start(acemq__child *ch, char *const *argv, char *const *env, int want_output);
/* Writes all n bytes to its standard input: 0; -1 it stopped reading (or
 * exited); -2 the deadline (monotonic ms) passed first. */
int acemq__child_write(acemq__child *ch, const void *bytes, size_t n, int64_t deadline_ms);
void acemq__child_close_input(acemq__child *ch);
/* Waits for it to exit: 0 with *status; -2 the deadline passed; -1 error. */
int acemq__child_wait(acemq__child *ch, int64_t deadline_ms, int *status);
/* Kills its process group, reaps it and closes the pipes. */
void acemq__child_kill(acemq__child *ch);

#endif
