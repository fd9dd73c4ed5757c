/* expr.h — the part of Camel's simple language that routes use.
 *
 * A template is literal text with ${...} parts substituted:
 *   ${header.NAME}  ${body}  ${id}  ${exchangeProperty.NAME}
 *   ${date:now:PATTERN}  (Java's SimpleDateFormat letters: yyyy MM dd HH mm ss SSS,
 *                         and 'quoted' literal text; UTC)
 * An absent header or property is empty text; a "$" not followed by "{"
 * is itself.
 *
 * A predicate (filter, choice's when) is comparisons joined by && and ||
 * (&& binds tighter; parentheses group):
 *   LEFT == RIGHT, LEFT != RIGHT, LEFT contains RIGHT, LEFT regex RIGHT,
 *   and the numeric LEFT < <= > >= RIGHT;
 * an operand is a ${...} part, a 'single' or "double" quoted literal, a
 * number, true, false or null (an absent header or property). A lone
 * operand is true when its text is "true". regex is POSIX extended and
 * matches the whole text. Comparisons are of text, except that two operands
 * that both read as numbers compare as numbers.
 *
 * Compiling reports the first error with its byte offset into the text, so
 * the route loader can point at the line and column of a YAML scalar.
 */
#ifndef ACEMQ_ROUTE_EXPR_H
#define ACEMQ_ROUTE_EXPR_H

#include <stddef.h>

#include "core/buf.h"
#include "route/exchange.h"

typedef struct acemq__expr acemq__expr;
typedef struct acemq__pred acemq__pred;

/* What went wrong compiling, and where. */
typedef struct acemq__expr_error {
    char message[160]; /* e.g. "unknown function ${foo}", "unterminated ${" */
    size_t offset;     /* byte offset into the text where the error is */
} acemq__expr_error;

/* 0 with *out, or ACEMQ_EINVAL with *err filled (ACEMQ_ENOMEM). */
int acemq__expr_compile(const char *text, acemq__expr **out, acemq__expr_error *err);
/* Appends the template's text for x to out: 0, or ACEMQ_ENOMEM. */
int acemq__expr_eval(const acemq__expr *e, const acemq__exchange *x, acemq__buf *out);
/* 1 when the template has no ${...} part (its text never changes). */
int acemq__expr_is_constant(const acemq__expr *e);
void acemq__expr_free(acemq__expr *e);

int acemq__pred_compile(const char *text, acemq__pred **out, acemq__expr_error *err);
/* 1 true, 0 false, ACEMQ_ENOMEM. */
int acemq__pred_eval(const acemq__pred *p, const acemq__exchange *x);
void acemq__pred_free(acemq__pred *p);

#endif
