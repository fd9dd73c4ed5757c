/* model.h — a route file as the loader (load.c) reads it and the runtime
 * (run.c) runs it: repositories, routes, and each route's tree of steps.
 * The loader fills everything here from YAML and checks it; what the
 * runtime adds when it starts (open stores, endpoints, counters) sits in
 * the fields marked "runtime", zero after loading.
 *
 * Every node remembers where it was written (line and column, 1-based, as
 * libyaml reports them), so errors found later, at start, name the spot too.
 */
#ifndef ACEMQ_ROUTE_MODEL_H
#define ACEMQ_ROUTE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "acemq/idem.h"
#include "route/expr.h"

typedef struct acemq__where {
    int line, column;
} acemq__where;

/* An endpoint URI, "scheme:path?name=value&..." (percent-decoding applied
 * to the values): "timer:tick?period=1000", "amqp:queue:orders?prefetch=8",
 * "log:processed?showBody=true", "file:/var/spool/in?include=*.json". The
 * loader checks the scheme and each parameter's name and type for where the
 * URI is used (a source, or a `to`). */
typedef struct acemq__uri {
    char *text;   /* as written */
    char *scheme; /* "timer" */
    char *path;   /* "tick", "queue:orders", "/var/spool/in" */
    char **names; /* parameters, in order */
    char **values;
    size_t n;
    acemq__where where;
} acemq__uri;

/* NULL when the URI has no such parameter. */
const char *acemq__uri_param(const acemq__uri *u, const char *name);

typedef enum acemq__step_kind {
    ACEMQ__STEP_SET_HEADER,
    ACEMQ__STEP_SET_BODY,
    ACEMQ__STEP_LOG,
    ACEMQ__STEP_TO,
    ACEMQ__STEP_EXEC,
    ACEMQ__STEP_FILTER,
    ACEMQ__STEP_CHOICE,
    ACEMQ__STEP_IDEMPOTENT_CONSUMER
} acemq__step_kind;

typedef struct acemq__step acemq__step;

typedef struct acemq__steps {
    acemq__step *v;
    size_t n;
} acemq__steps;

/* One `when` of a choice. */
typedef struct acemq__when {
    acemq__pred *pred;
    char *text; /* the predicate as written */
    acemq__steps steps;
    acemq__where where;
} acemq__when;

/* The step's counters, read by the metrics page from another thread:
 * updated with __atomic_fetch_add, read with __atomic_load_n. */
typedef struct acemq__step_counts {
    uint64_t runs;        /* exchanges that reached the step */
    uint64_t failures;    /* ... that failed in it (its children's failures included) */
    uint64_t duplicates;  /* idempotent_consumer: keys already confirmed */
    uint64_t in_progress; /* idempotent_consumer: keys held elsewhere (the exchange failed) */
    uint64_t filtered;    /* filter: exchanges whose predicate was false */
} acemq__step_counts;

struct acemq__step {
    acemq__step_kind kind;
    char *id; /* the step's `id:`, or the kind and its ordinal in the route: "log1", "to2" */
    acemq__where where;

    char *name;        /* set_header: the header's name */
    acemq__expr *expr; /* set_header, set_body: the value; log: the message;
                          idempotent_consumer: the key expression */
    char *expr_text;   /* that expression as written */
    acemq__pred *pred; /* filter */
    char *pred_text;
    acemq__steps steps; /* filter, idempotent_consumer: the child steps; choice: otherwise */
    acemq__when *whens; /* choice */
    size_t n_whens;
    int has_otherwise;  /* choice */
    acemq__uri to;      /* to */
    char *command;      /* exec: run by /bin/sh -c */
    int64_t timeout_ms; /* exec: 0 none */

    /* idempotent_consumer, with Camel's names and defaults */
    size_t repository;     /* index into acemq__route_file.repos */
    int eager;             /* default 1: claim before the child steps run */
    int remove_on_failure; /* default 1: release the key when the exchange fails */
    int skip_duplicate;    /* default 1: a duplicate skips the child steps */
    int completion_eager;  /* default 0: confirm when the whole exchange completes */

    void *runtime;  /* runtime: the open endpoint of a `to` */
    acemq__buf key; /* runtime: idempotent_consumer's key, its buffer kept between exchanges */
    acemq__step_counts counts; /* runtime */
};

typedef struct acemq__route_counts {
    uint64_t exchanges; /* taken from the source */
    uint64_t completed; /* ran to the end */
    uint64_t failed;    /* failed in a step (and went back to the source) */
} acemq__route_counts;

typedef struct acemq__route {
    char *id;
    acemq__where where;
    acemq__uri from;
    acemq__steps steps;
    acemq__route_counts counts; /* runtime */
} acemq__route;

typedef struct acemq__repository {
    char *name;
    char *url;        /* an acemq_idem_open URL: memory:, sqlite:…, postgres://…, redis://… */
    int64_t lease_ms; /* `lease_ms:`; 0 the store's default */
    acemq__where where;
    acemq_idem *store; /* runtime */
} acemq__repository;

typedef struct acemq__route_file {
    char *path;
    char *broker; /* `broker:`, the AMQP URL amqp: sources and endpoints use; NULL: none */
    acemq__where broker_where;
    acemq__repository *repos;
    size_t n_repos;
    acemq__route *routes;
    size_t n_routes;
} acemq__route_file;

/* What the loader found wrong: one "FILE:LINE:COLUMN: message" per line. */
typedef struct acemq__route_errors {
    char **lines;
    size_t n;
} acemq__route_errors;

/* Adds one error line for where in path. */
int acemq__route_error(acemq__route_errors *e, const char *path, acemq__where where,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void acemq__route_errors_free(acemq__route_errors *e);

/* Reads and checks a route file: 0 with *out, or ACEMQ_EINVAL with every
 * error it found in *errors (ACEMQ_EIO: the file cannot be read, also said
 * in *errors; ACEMQ_ENOMEM). */
int acemq__route_load(const char *path, acemq__route_file **out, acemq__route_errors *errors);
/* The same from text in memory; name stands for the file in messages. */
int acemq__route_load_text(const char *name, const char *text, size_t len, acemq__route_file **out,
                           acemq__route_errors *errors);
/* Frees a loaded file; NULL is fine. Closes nothing: the runtime closes
 * what it opened first. */
void acemq__route_file_free(acemq__route_file *f);

#endif
