/* source.c — a route's `from` (io.h): the scheme picks one of the kinds
 * (timer:, amqp:, file:) from a table, and the calls go through its ops.
 * Also the URI parameter parsing that sources and endpoints share. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "route/io_internal.h"

struct acemq__source {
    const acemq__source_ops *ops;
    void *state;
};

static const acemq__source_ops *const kinds[] = {
    &acemq__source_timer_ops,
    &acemq__source_amqp_ops,
    &acemq__source_file_ops,
};

int acemq__io_fail(acemq__buf *why, int rc, const char *fmt, ...)
{
    acemq__buf_clear(why);
    va_list ap;
    va_start(ap, fmt);
    char small[512];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return rc;
    if ((size_t)n < sizeof small) {
        (void)acemq__buf_put(why, small, (size_t)n);
        return rc;
    }
    /* Longer than the stack buffer: formatted again into the right size. */
    char *big = malloc((size_t)n + 1);
    if (!big) {
        (void)acemq__buf_put(why, small, sizeof small - 1);
        return rc;
    }
    va_start(ap, fmt);
    (void)vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    (void)acemq__buf_put(why, big, (size_t)n);
    free(big);
    return rc;
}

int acemq__io_int_param(const acemq__uri *u, const char *name, int64_t def, int64_t min,
                        int64_t max, int64_t *out, acemq__buf *why)
{
    const char *v = acemq__uri_param(u, name);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE || n < min || n > max)
        return acemq__io_fail(why, ACEMQ_EINVAL, "%s=%s: not a whole number from %lld to %lld",
                              name, v, (long long)min, (long long)max);
    *out = (int64_t)n;
    return 0;
}

int acemq__io_bool_param(const acemq__uri *u, const char *name, int def, int *out, acemq__buf *why)
{
    const char *v = acemq__uri_param(u, name);
    if (!v)
        *out = def;
    else if (strcmp(v, "true") == 0)
        *out = 1;
    else if (strcmp(v, "false") == 0)
        *out = 0;
    else
        return acemq__io_fail(why, ACEMQ_EINVAL, "%s=%s: not true or false", name, v);
    return 0;
}

int acemq__source_open(const acemq__uri *from, const acemq__route_env *env, acemq__source **out,
                       acemq__buf *why)
{
    *out = NULL;
    const acemq__source_ops *ops = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !ops; i++)
        if (from->scheme && strcmp(from->scheme, kinds[i]->scheme) == 0) ops = kinds[i];
    if (!ops)
        return acemq__io_fail(why, ACEMQ_EINVAL, "'%s:' is not a source (timer:, amqp:, file:)",
                              from->scheme ? from->scheme : "");
    acemq__source *s = calloc(1, sizeof *s);
    if (!s) return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    s->ops = ops;
    int rc = ops->open(from, env, &s->state, why);
    if (rc != 0) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int acemq__source_next(acemq__source *s, int timeout_ms, acemq__exchange *x, acemq__buf *why)
{
    return s->ops->next(s->state, timeout_ms < 0 ? 0 : timeout_ms, x, why);
}

int acemq__source_done(acemq__source *s, acemq__exchange *x, int completed, acemq__buf *why)
{
    return s->ops->done(s->state, x, completed, why);
}

void acemq__source_close(acemq__source *s)
{
    if (!s) return;
    s->ops->close(s->state);
    free(s);
}
