/* io_internal.h — what the kinds of source and endpoint (source_*.c,
 * endpoint_*.c) share with their dispatchers (source.c, endpoint.c): the
 * ops tables the scheme selects, and the parsing of URI parameters. */
#ifndef ACEMQ_ROUTE_IO_INTERNAL_H
#define ACEMQ_ROUTE_IO_INTERNAL_H

#include <stdint.h>

#include "route/io.h"

/* One kind of source. state is the kind's own; next, done and close get
 * back what open made. */
typedef struct acemq__source_ops {
    const char *scheme;
    int (*open)(const acemq__uri *from, const acemq__route_env *env, void **state, acemq__buf *why);
    int (*next)(void *state, int timeout_ms, acemq__exchange *x, acemq__buf *why);
    int (*done)(void *state, acemq__exchange *x, int completed, acemq__buf *why);
    void (*close)(void *state);
} acemq__source_ops;

extern const acemq__source_ops acemq__source_timer_ops;
extern const acemq__source_ops acemq__source_amqp_ops;
extern const acemq__source_ops acemq__source_file_ops;

/* One kind of endpoint. */
typedef struct acemq__endpoint_ops {
    const char *scheme;
    int (*open)(const acemq__step *step, const acemq__route_env *env, void **state,
                acemq__buf *why);
    int (*send)(void *state, const acemq__exchange *x, acemq__buf *why);
    void (*close)(void *state);
} acemq__endpoint_ops;

extern const acemq__endpoint_ops acemq__endpoint_amqp_ops;
extern const acemq__endpoint_ops acemq__endpoint_file_ops;

/* Replaces why with the formatted reason and returns rc (source.c). */
int acemq__io_fail(acemq__buf *why, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parameter name of u as a whole decimal integer in [min, max], def when
 * absent: 0, or ACEMQ_EINVAL with why (source.c). */
int acemq__io_int_param(const acemq__uri *u, const char *name, int64_t def, int64_t min,
                        int64_t max, int64_t *out, acemq__buf *why);
/* Parameter name of u as "true" or "false", def when absent. */
int acemq__io_bool_param(const acemq__uri *u, const char *name, int def, int *out, acemq__buf *why);

#endif
