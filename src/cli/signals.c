/* signals.c — what the long-running commands (relay, consume) share: SIGTERM
 * and SIGINT ask them to stop, SIGPIPE does not kill them, and a broker that
 * cannot be reached yet is waited for with back-off, a stop ending the wait.
 */
#include "cli/cli.h"

#include <acemq/common.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "core/logfmt.h"
#include "os/mono_time.h"

volatile sig_atomic_t acemq__cli_stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    acemq__cli_stop_requested = 1;
}

static int signalled(void *ctx)
{
    (void)ctx;
    return acemq__cli_stop_requested != 0;
}

void acemq__cli_catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);
    /* A reader of our logs, or a child, going away must not kill us midway. */
    (void)signal(SIGPIPE, SIG_IGN);
}

int acemq__cli_wait_for_broker(int (*attempt)(void *ctx), const char *(*why)(void), void *ctx)
{
    long backoff_ms = 100;
    for (;;) {
        int rc = attempt(ctx);
        if (rc != ACEMQ_EIO) return rc;
        char retry[24];
        (void)snprintf(retry, sizeof retry, "%ld", backoff_ms);
        acemq__logfmt(stderr, "broker_unavailable", "error", why(), "retry_ms", retry);
        if (acemq__pause_ms(backoff_ms, signalled, NULL)) return rc;
        backoff_ms = backoff_ms * 2 > 10000 ? 10000 : backoff_ms * 2;
    }
}
