/* log.c — where warnings go: the function set with acemq_log_set, else one
 * line on stderr. Calls are made one at a time under a lock, so an
 * application's function need not be reentrant and lines never interleave. */
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "acemq/log.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static acemq_log_fn log_fn;
static void *log_ctx;

void acemq_log_set(acemq_log_fn fn, void *ctx)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_ctx = ctx;
    pthread_mutex_unlock(&log_lock);
}

void acemq__log_warning(const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_lock);
    if (log_fn)
        log_fn(log_ctx, ACEMQ_LOG_WARNING, text);
    else
        (void)fprintf(stderr, "acemq: warning: %s\n", text);
    pthread_mutex_unlock(&log_lock);
}
