/* exchange.h — what flows through a route: one message (id, headers, body)
 * and the exchange's own properties, as in Camel. Headers travel with the
 * message (an AMQP `to` sends them); properties stay in the route (the
 * idempotent consumer's `duplicate`). Names and values are text; a body is
 * bytes and may hold NULs. */
#ifndef ACEMQ_ROUTE_EXCHANGE_H
#define ACEMQ_ROUTE_EXCHANGE_H

#include <stddef.h>

#include "core/buf.h"

/* Named text values, in the order they were first set. */
typedef struct acemq__fields {
    char **names;
    char **values;
    size_t n, cap;
} acemq__fields;

typedef struct acemq__exchange {
    char id[64];     /* the exchange's message id: ${id}; a UUIDv7 unless the source names one */
    acemq__buf body; /* ${body} */
    acemq__fields headers;    /* ${header.NAME} */
    acemq__fields properties; /* ${exchangeProperty.NAME} */
    const char *route_id;     /* the route it runs on, for log lines; not owned */
    void *source_ctx;         /* the source's own state for this exchange (an AMQP delivery) */
} acemq__exchange;

/* An empty exchange with a new UUIDv7 id. */
void acemq__exchange_init(acemq__exchange *x, const char *route_id);
/* Frees what it holds (not source_ctx, which its source settles). */
void acemq__exchange_free(acemq__exchange *x);

/* NULL when the field is absent. */
const char *acemq__fields_get(const acemq__fields *f, const char *name);
/* Sets (or replaces) a field: 0 or ACEMQ_ENOMEM, the fields as they were. */
int acemq__fields_set(acemq__fields *f, const char *name, const char *value);
int acemq__fields_setn(acemq__fields *f, const char *name, const char *value, size_t value_len);
/* Removes a field; absent is fine. */
void acemq__fields_remove(acemq__fields *f, const char *name);
void acemq__fields_free(acemq__fields *f);

/* Replaces the body with n bytes. */
int acemq__exchange_set_body(acemq__exchange *x, const void *bytes, size_t n);

#endif
