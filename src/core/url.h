/* url.h — splitting "scheme:rest?key=value&..." URLs that name backends.
 *
 * Only the split lives here: each backend interprets its own rest and query
 * keys. Percent-escapes in query values are decoded; the rest is kept as is.
 */
#ifndef ACEMQ_CORE_URL_H
#define ACEMQ_CORE_URL_H

#include <stddef.h>
#include <stdint.h>

#define ACEMQ__URL_MAX_PARAMS 16

typedef struct acemq__url {
    char *buf;    /* one allocation that the pointers below point into */
    char *scheme; /* "memory", "sqlite", ... (lower case as given) */
    char *rest;   /* what follows "scheme:" up to '?': "/path/to.db", "//host:port/db" */
    size_t nparams;
    struct {
        char *key, *value;
    } params[ACEMQ__URL_MAX_PARAMS];
} acemq__url;

/* Copies text's scheme (what precedes its first ':') into buf: 0, or
 * ACEMQ_EURL when it has none, a malformed one or one longer than cap - 1. */
int acemq__url_scheme(const char *text, char *buf, size_t cap);
/* 0, ACEMQ_EURL when text has no scheme or too many parameters, ACEMQ_ENOMEM. */
int acemq__url_parse(acemq__url *u, const char *text);
void acemq__url_free(acemq__url *u);
/* The value of key, or NULL. */
const char *acemq__url_param(const acemq__url *u, const char *key);
/* Parses key's value as a whole number in [min, max] into *out; 0 when absent
 * (out untouched), ACEMQ_EURL when malformed or out of range. */
int acemq__url_param_int(const acemq__url *u, const char *key, int64_t min, int64_t max,
                         int64_t *out);
/* ACEMQ_EURL naming the first parameter not in the NULL-terminated list. */
int acemq__url_check_params(const acemq__url *u, const char *const *known, const char **bad);

#endif
