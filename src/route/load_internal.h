/* load_internal.h — what the route file loader's parts share: the walk's
 * state, reading typed values out of libyaml nodes with errors that name
 * the spot (load_node.c), the steps (load_steps.c) and URIs (uri.c). */
#ifndef ACEMQ_ROUTE_LOAD_INTERNAL_H
#define ACEMQ_ROUTE_LOAD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#include "route/model.h"

/* Steps nest (filter, choice, idempotent_consumer) no deeper than this, so
 * the walk's recursion and the runtime's stay bounded whatever the file. */
#define ACEMQ__LOAD_MAX_DEPTH 32

/* The walk over one YAML document. Every error found is added to errors
 * and counted in found, even when adding it ran out of memory; rc holds
 * ACEMQ_ENOMEM once any allocation failed, and the result is then thrown
 * away. */
typedef struct acemq__loader {
    const char *name; /* the file, as messages name it */
    yaml_document_t *doc;
    acemq__route_errors *errors;
    size_t found; /* errors found so far */
    int rc;       /* 0, or ACEMQ_ENOMEM */
    const acemq__route_file *file;
    unsigned ordinals[8]; /* per step kind: how many the current route has so far */
    int depth;            /* steps lists entered */
} acemq__loader;

/* One option of a mapping: its name in snake_case (as messages show it;
 * keys match it with '_' and '-' dropped and case ignored), and the key
 * and value found for it, NULL when absent. */
typedef struct acemq__load_opt {
    const char *name;
    yaml_node_t *key, *value;
} acemq__load_opt;

/* --- load_node.c ---------------------------------------------------------- */

/* The 1-based place of a node. */
acemq__where acemq__load_where(const yaml_node_t *n);
/* The place of byte offset within a scalar's value: exact for a scalar on
 * one line without escapes; the scalar's start for one over several lines. */
acemq__where acemq__load_where_in(const yaml_node_t *n, size_t offset);
/* The node at index in the document; NULL for a bad index. */
yaml_node_t *acemq__load_node(acemq__loader *l, int index);

/* Adds "FILE:LINE:COLUMN: message" for where; an allocation failure sets rc. */
void acemq__load_error(acemq__loader *l, acemq__where where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Notes an allocation failure. */
void acemq__load_nomem(acemq__loader *l);

/* Describes a node for "found ...": "a mapping", "a sequence", "nothing" or
 * the scalar in quotes (shortened). */
const char *acemq__load_found(const yaml_node_t *n, char *buf, size_t size);
/* 1 for an absent value: a plain scalar "", "~" or "null". */
int acemq__load_is_null(const yaml_node_t *n);
/* The scalar's value as a C string (libyaml ends every scalar with a NUL). */
const char *acemq__load_text(const yaml_node_t *n);
/* key with '_' and '-' dropped and lowercased into out; "" when too long. */
void acemq__load_normalise(const char *key, char *out, size_t size);

/* Matches the keys of mapping map against opts, reporting keys that are
 * not scalars, unknown ("unknown option 'k' in WHAT") or given twice. */
void acemq__load_options(acemq__loader *l, const yaml_node_t *map, acemq__load_opt *opts, size_t n,
                         const char *what);

/* Each reads one value node; what names it in messages. 0 with *out, or -1
 * with the error reported (or rc set). */
int acemq__load_string(acemq__loader *l, const yaml_node_t *n, const char *what, char **out);
int acemq__load_int(acemq__loader *l, const yaml_node_t *n, const char *what, int64_t min,
                    int64_t max, int64_t *out);
int acemq__load_bool(acemq__loader *l, const yaml_node_t *n, const char *what, int *out);
/* A template (constant: literal text instead) or a predicate from a
 * scalar; a compile error is reported at its place inside the scalar. */
int acemq__load_expr(acemq__loader *l, const yaml_node_t *n, const char *what, int constant,
                     acemq__expr **out, char **text);
int acemq__load_pred(acemq__loader *l, const yaml_node_t *n, const char *what, acemq__pred **out,
                     char **text);
/* Checks an id against [A-Za-z0-9_.-]+; what is "route id" or "step id". */
int acemq__load_id_ok(acemq__loader *l, const yaml_node_t *n, const char *what, const char *id);

/* --- load_steps.c --------------------------------------------------------- */

/* Reads a sequence of steps (a null value: none) into out. */
void acemq__load_steps(acemq__loader *l, yaml_node_t *seq, acemq__steps *out);
void acemq__steps_free(acemq__steps *s);

/* --- uri.c ---------------------------------------------------------------- */

/* Reads the URI scalar n into u and checks it as a route's source (source
 * 1) or a `to` endpoint (source 0): scheme, path and each parameter. On an
 * error u holds what was read so far; free it either way. */
void acemq__load_uri(acemq__loader *l, const yaml_node_t *n, int source, acemq__uri *u);
void acemq__uri_free(acemq__uri *u);

#endif
