/* expr_internal.h — what the predicates (pred.c) use of the templates
 * (expr.c): compiling a span of a larger text with offsets relative to it,
 * and reading a template's text without copying it where it can. */
#ifndef ACEMQ_ROUTE_EXPR_INTERNAL_H
#define ACEMQ_ROUTE_EXPR_INTERNAL_H

#include <stddef.h>

#include "core/buf.h"
#include "route/exchange.h"
#include "route/expr.h"

/* Compiles the len bytes at text (no NUL among them, none needed after
 * them) as a template; error offsets are base plus the offset into text.
 * err is filled, never NULL. 0, ACEMQ_EINVAL or ACEMQ_ENOMEM. */
int acemq__expr_compile_span(const char *text, size_t len, size_t base, acemq__expr **out,
                             acemq__expr_error *err);

/* The template's text for x at *p (NUL-terminated, *n bytes before that
 * NUL, which may hold NULs of a body). *p points into x, into the template
 * or into scratch (emptied first), and stays valid until any of them
 * changes. 0; 1 when the template is a lone ${header.NAME} or
 * ${exchangeProperty.NAME} whose field is absent (*p is then ""); or
 * ACEMQ_ENOMEM, ACEMQ_EIO, ACEMQ_ERANGE (the clock). */
int acemq__expr_view(const acemq__expr *e, const acemq__exchange *x, acemq__buf *scratch,
                     const char **p, size_t *n);

/* The text of a constant template (NUL-terminated, *n bytes), or NULL when
 * the template has a ${...} part. */
const char *acemq__expr_constant_text(const acemq__expr *e, size_t *n);

/* Fills err with the offset and a printf-style message (truncated to fit). */
void acemq__expr_set_error(acemq__expr_error *err, size_t offset, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
