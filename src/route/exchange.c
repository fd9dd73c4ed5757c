/* exchange.c — an exchange's message and properties (exchange.h). Fields
 * are a short array searched in order: a message carries a handful of
 * headers, and a linear scan of them costs less than a hash table's upkeep. */
#include "route/exchange.h"

#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "core/uuid.h"

void acemq__exchange_init(acemq__exchange *x, const char *route_id)
{
    memset(x, 0, sizeof *x);
    if (acemq_uuid7(x->id) != 0) x->id[0] = '\0';
    x->route_id = route_id;
}

void acemq__exchange_free(acemq__exchange *x)
{
    acemq__buf_free(&x->body);
    acemq__fields_free(&x->headers);
    acemq__fields_free(&x->properties);
}

static long find(const acemq__fields *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->names[i], name) == 0) return (long)i;
    return -1;
}

const char *acemq__fields_get(const acemq__fields *f, const char *name)
{
    long i = find(f, name);
    return i < 0 ? NULL : f->values[i];
}

static char *copy_text(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

int acemq__fields_setn(acemq__fields *f, const char *name, const char *value, size_t value_len)
{
    char *v = copy_text(value, value_len);
    if (!v) return ACEMQ_ENOMEM;
    long i = find(f, name);
    if (i >= 0) {
        free(f->values[i]);
        f->values[i] = v;
        return 0;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        char **names = realloc(f->names, cap * sizeof *names);
        if (names) f->names = names;
        char **values = names ? realloc(f->values, cap * sizeof *values) : NULL;
        if (!values) {
            free(v);
            return ACEMQ_ENOMEM;
        }
        f->values = values;
        f->cap = cap;
    }
    char *k = copy_text(name, strlen(name));
    if (!k) {
        free(v);
        return ACEMQ_ENOMEM;
    }
    f->names[f->n] = k;
    f->values[f->n] = v;
    f->n++;
    return 0;
}

int acemq__fields_set(acemq__fields *f, const char *name, const char *value)
{
    return acemq__fields_setn(f, name, value, strlen(value));
}

void acemq__fields_remove(acemq__fields *f, const char *name)
{
    long i = find(f, name);
    if (i < 0) return;
    free(f->names[i]);
    free(f->values[i]);
    memmove(&f->names[i], &f->names[i + 1], (f->n - (size_t)i - 1) * sizeof *f->names);
    memmove(&f->values[i], &f->values[i + 1], (f->n - (size_t)i - 1) * sizeof *f->values);
    f->n--;
}

void acemq__fields_free(acemq__fields *f)
{
    for (size_t i = 0; i < f->n; i++) {
        free(f->names[i]);
        free(f->values[i]);
    }
    free(f->names);
    free(f->values);
    memset(f, 0, sizeof *f);
}

int acemq__exchange_set_body(acemq__exchange *x, const void *bytes, size_t n)
{
    acemq__buf next = {0};
    int rc = acemq__buf_put(&next, bytes, n);
    if (rc != 0) return rc;
    acemq__buf_free(&x->body);
    x->body = next;
    return 0;
}
