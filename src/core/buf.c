/* buf.c — the growing byte buffer (buf.h). */
#include "core/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"

static int reserve(acemq__buf *b, size_t more)
{
    if (more > (size_t)-1 / 2 - b->len) return ACEMQ_ENOMEM;
    size_t need = b->len + more + 1;
    if (b->p && need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return ACEMQ_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

int acemq__buf_put(acemq__buf *b, const void *bytes, size_t n)
{
    int rc = reserve(b, n);
    if (rc != 0) return rc;
    if (n) memcpy(b->p + b->len, bytes, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int acemq__buf_puts(acemq__buf *b, const char *s)
{
    return acemq__buf_put(b, s, strlen(s));
}

int acemq__buf_printf(acemq__buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return ACEMQ_EINVAL;
    int rc = reserve(b, (size_t)n);
    if (rc != 0) return rc;
    va_start(ap, fmt);
    (void)vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void acemq__buf_clear(acemq__buf *b)
{
    b->len = 0;
    if (b->p) b->p[0] = '\0';
}

const char *acemq__buf_str(const acemq__buf *b)
{
    return b->p ? b->p : "";
}

void acemq__buf_free(acemq__buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = 0;
    b->cap = 0;
}
