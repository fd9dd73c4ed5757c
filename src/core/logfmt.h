/* logfmt.h — the runtimes' log lines: `ts=... event=NAME key=value ...`, one
 * line per event, values quoted when they hold a space, a quote or '='.
 * Shared by the relay, the consumer and their commands, which log before
 * there is a runtime to log through.
 */
#ifndef ACEMQ_CORE_LOGFMT_H
#define ACEMQ_CORE_LOGFMT_H

#include <stdio.h>

/* Writes one line to f (nothing when f is NULL), under f's lock, so lines
 * from several threads never interleave; k1 and k2 may be NULL. */
void acemq__logfmt(FILE *f, const char *event, const char *k1, const char *v1, const char *k2,
                   const char *v2);

#endif
