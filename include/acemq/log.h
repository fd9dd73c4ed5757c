/* acemq/log.h — where the library's warnings go.
 *
 * The library warns about what it cannot refuse but an operator must know:
 * a Redis server that can forget acknowledged writes after a crash, for
 * instance. By default each warning is one line on stderr,
 * "acemq: warning: <text>"; an application routes them into its own log
 * with acemq_log_set.
 */
#ifndef ACEMQ_LOG_H
#define ACEMQ_LOG_H

#include "acemq/common.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { ACEMQ_LOG_WARNING = 1 };

/* Called with one complete line of text (no newline). May be called from
 * any thread that uses the library, one call at a time. */
typedef void (*acemq_log_fn)(void *ctx, int level, const char *text);

/* Sends the library's warnings to fn(ctx, ...) from now on; fn NULL brings
 * back the default (stderr). Thread-safe. */
ACEMQ_EXTERN void acemq_log_set(acemq_log_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
