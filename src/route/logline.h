/* logline.h — the lines routes write: "route=ID step=STEP key=value ...",
 * logfmt, one line per event, built whole and written under the stream's
 * lock so lines from several route threads never interleave. */
#ifndef ACEMQ_ROUTE_LOGLINE_H
#define ACEMQ_ROUTE_LOGLINE_H

#include <stddef.h>
#include <stdio.h>

#include "core/buf.h"

/* Appends " key=value" to line, value quoted (with \" \\ \n \r \t escapes)
 * when it is empty or holds a space, a quote, '=', a backslash or a control
 * character. value_len bytes; 0, or ACEMQ_ENOMEM. */
int acemq__logline_put(acemq__buf *line, const char *key, const char *value, size_t value_len);
/* Appends " key=value" for a C string value. */
int acemq__logline_puts(acemq__buf *line, const char *key, const char *value);
/* Writes line and a newline to f in one call, under f's lock, and flushes
 * (a route's log is read as it runs). Nothing when f is NULL. */
void acemq__logline_write(FILE *f, const acemq__buf *line);

#endif
