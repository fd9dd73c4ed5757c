/* load_node.c — the route loader's reading of single YAML nodes: places,
 * errors that name them, option mappings matched by normalised key, and
 * typed values (strings, whole numbers, booleans, expressions). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "route/load_internal.h"

acemq__where acemq__load_where(const yaml_node_t *n)
{
    acemq__where w = {1, 1};
    if (!n) return w;
    /* libyaml counts from 0; a file past INT_MAX lines is not a route file */
    w.line = n->start_mark.line < (size_t)INT32_MAX ? (int)n->start_mark.line + 1 : INT32_MAX;
    w.column = n->start_mark.column < (size_t)INT32_MAX ? (int)n->start_mark.column + 1 : INT32_MAX;
    return w;
}

acemq__where acemq__load_where_in(const yaml_node_t *n, size_t offset)
{
    acemq__where w = acemq__load_where(n);
    if (!n || n->type != YAML_SCALAR_NODE || n->start_mark.line != n->end_mark.line) return w;
    const unsigned char *v = n->data.scalar.value;
    size_t len = n->data.scalar.length;
    if (offset > len) offset = len;
    long shift = 0;
    switch (n->data.scalar.style) {
    case YAML_PLAIN_SCALAR_STYLE:
        break;
    case YAML_SINGLE_QUOTED_SCALAR_STYLE:
        shift = 1; /* the opening quote; each quote inside is written twice */
        for (size_t i = 0; i < offset; i++)
            shift += v[i] == '\'';
        break;
    case YAML_DOUBLE_QUOTED_SCALAR_STYLE:
        shift = 1; /* escapes before offset shift it: approximate then */
        break;
    default:
        return w;
    }
    /* libyaml's columns count characters: count UTF-8 lead bytes */
    for (size_t i = 0; i < offset; i++)
        shift += (v[i] & 0xC0) != 0x80;
    if (shift < INT32_MAX - w.column) w.column += (int)shift;
    return w;
}

yaml_node_t *acemq__load_node(acemq__loader *l, int index)
{
    return yaml_document_get_node(l->doc, index);
}

void acemq__load_nomem(acemq__loader *l)
{
    l->rc = ACEMQ_ENOMEM;
}

void acemq__load_error(acemq__loader *l, acemq__where where, const char *fmt, ...)
{
    l->found++;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!msg) {
        acemq__load_nomem(l);
        return;
    }
    va_start(ap, fmt);
    (void)vsnprintf(msg, (size_t)n + 1, fmt, ap);
    va_end(ap);
    if (acemq__route_error(l->errors, l->name, where, "%s", msg) != 0) acemq__load_nomem(l);
    free(msg);
}

int acemq__load_is_null(const yaml_node_t *n)
{
    if (!n || n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *s = (const char *)n->data.scalar.value;
    return strcmp(s, "") == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

const char *acemq__load_text(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

const char *acemq__load_found(const yaml_node_t *n, char *buf, size_t size)
{
    if (!n || acemq__load_is_null(n)) return "nothing";
    if (n->type == YAML_MAPPING_NODE) return "a mapping";
    if (n->type == YAML_SEQUENCE_NODE) return "a sequence";
    const char *s = acemq__load_text(n);
    size_t len = strlen(s);
    if (len > 40)
        (void)snprintf(buf, size, "'%.37s...'", s);
    else
        (void)snprintf(buf, size, "'%s'", s);
    return buf;
}

void acemq__load_normalise(const char *key, char *out, size_t size)
{
    size_t w = 0;
    for (const char *p = key; *p; p++) {
        if (*p == '_' || *p == '-') continue;
        if (w + 1 >= size) {
            out[0] = '\0'; /* too long to be any name we know */
            return;
        }
        out[w++] = (char)tolower((unsigned char)*p);
    }
    out[w] = '\0';
}

/* "a, b, c" of the options' names, for an unknown option's message. */
static void option_names(const acemq__load_opt *opts, size_t n, char *out, size_t size)
{
    size_t w = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && w < size; i++) {
        int k = snprintf(out + w, size - w, "%s%s", i ? ", " : "", opts[i].name);
        if (k < 0) break;
        w += (size_t)k;
    }
}

void acemq__load_options(acemq__loader *l, const yaml_node_t *map, acemq__load_opt *opts, size_t n,
                         const char *what)
{
    for (size_t i = 0; i < n; i++)
        opts[i].key = opts[i].value = NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *key = acemq__load_node(l, p->key);
        yaml_node_t *value = acemq__load_node(l, p->value);
        if (!key || !value) continue;
        if (key->type != YAML_SCALAR_NODE) {
            char buf[64];
            acemq__load_error(l, acemq__load_where(key), "expected a name as a key in %s, found %s",
                              what, acemq__load_found(key, buf, sizeof buf));
            continue;
        }
        char norm[64], want[64];
        acemq__load_normalise(acemq__load_text(key), norm, sizeof norm);
        size_t i = 0;
        for (; i < n; i++) {
            acemq__load_normalise(opts[i].name, want, sizeof want);
            if (norm[0] && strcmp(norm, want) == 0) break;
        }
        if (i == n) {
            char known[512];
            option_names(opts, n, known, sizeof known);
            acemq__load_error(l, acemq__load_where(key), "unknown option '%s' in %s (known: %s)",
                              acemq__load_text(key), what, known);
        } else if (opts[i].key) {
            acemq__load_error(l, acemq__load_where(key),
                              "'%s' is given twice in %s (first at line %d)", opts[i].name, what,
                              acemq__load_where(opts[i].key).line);
        } else {
            opts[i].key = key;
            opts[i].value = value;
        }
    }
}

int acemq__load_string(acemq__loader *l, const yaml_node_t *n, const char *what, char **out)
{
    *out = NULL;
    if (!n || n->type != YAML_SCALAR_NODE || acemq__load_is_null(n)) {
        char buf[64];
        acemq__load_error(l, acemq__load_where(n), "expected a string for '%s', found %s", what,
                          acemq__load_found(n, buf, sizeof buf));
        return -1;
    }
    if (memchr(n->data.scalar.value, '\0', n->data.scalar.length)) {
        acemq__load_error(l, acemq__load_where(n), "'%s' holds a NUL character", what);
        return -1;
    }
    *out = strdup(acemq__load_text(n));
    if (!*out) {
        acemq__load_nomem(l);
        return -1;
    }
    return 0;
}

int acemq__load_int(acemq__loader *l, const yaml_node_t *n, const char *what, int64_t min,
                    int64_t max, int64_t *out)
{
    char buf[64];
    if (!n || n->type != YAML_SCALAR_NODE || acemq__load_is_null(n)) {
        acemq__load_error(l, acemq__load_where(n), "expected a whole number for '%s', found %s",
                          what, acemq__load_found(n, buf, sizeof buf));
        return -1;
    }
    const char *s = acemq__load_text(n);
    const char *digits = s + (*s == '-' || *s == '+');
    int ok = *digits != '\0' && strspn(digits, "0123456789") == strlen(digits);
    long long v = 0;
    if (ok) {
        errno = 0;
        char *end = NULL;
        v = strtoll(s, &end, 10);
        ok = errno == 0 && end && *end == '\0';
    }
    if (!ok) {
        acemq__load_error(l, acemq__load_where(n), "expected a whole number for '%s', found %s",
                          what, acemq__load_found(n, buf, sizeof buf));
        return -1;
    }
    if (v < min || v > max) {
        acemq__load_error(l, acemq__load_where(n), "'%s' must be from %lld to %lld, not %lld", what,
                          (long long)min, (long long)max, v);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

int acemq__load_bool(acemq__loader *l, const yaml_node_t *n, const char *what, int *out)
{
    if (n && n->type == YAML_SCALAR_NODE) {
        const char *s = acemq__load_text(n);
        if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0) {
            *out = 1;
            return 0;
        }
        if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0) {
            *out = 0;
            return 0;
        }
    }
    char buf[64];
    acemq__load_error(l, acemq__load_where(n), "expected true or false for '%s', found %s", what,
                      acemq__load_found(n, buf, sizeof buf));
    return -1;
}

/* A template whose text is t exactly: each "${" of t is written as a date
 * part that yields a quoted '$', followed by a literal '{', since the
 * language has no escape for "${". NULL when out of memory. */
static char *literal_template(const char *t)
{
    static const char dollar[] = "${date:now:'$'}";
    size_t n = 0;
    for (const char *p = t; *p; p++)
        n += (p[0] == '$' && p[1] == '{') ? sizeof dollar - 1 : 1;
    char *out = malloc(n + 1);
    if (!out) return NULL;
    size_t w = 0;
    for (const char *p = t; *p; p++) {
        if (p[0] == '$' && p[1] == '{') {
            memcpy(out + w, dollar, sizeof dollar - 1);
            w += sizeof dollar - 1;
        } else {
            out[w++] = *p;
        }
    }
    out[w] = '\0';
    return out;
}

/* Reports a compile error at its place inside n. */
static void compile_error(acemq__loader *l, const yaml_node_t *n, int rc,
                          const acemq__expr_error *err, const char *in)
{
    if (rc == ACEMQ_ENOMEM) {
        acemq__load_nomem(l);
        return;
    }
    acemq__load_error(l, acemq__load_where_in(n, err->offset), "%s in %s", err->message, in);
}

int acemq__load_expr(acemq__loader *l, const yaml_node_t *n, const char *what, int constant,
                     acemq__expr **out, char **text)
{
    *out = NULL;
    *text = NULL;
    if (acemq__load_string(l, n, what, text) != 0) return -1;
    char *literal = NULL;
    if (constant && strstr(*text, "${")) {
        literal = literal_template(*text);
        if (!literal) {
            acemq__load_nomem(l);
            return -1;
        }
    }
    acemq__expr_error err;
    memset(&err, 0, sizeof err);
    int rc = acemq__expr_compile(literal ? literal : *text, out, &err);
    free(literal);
    if (rc != 0) {
        *out = NULL;
        compile_error(l, n, rc, &err, "expression");
        return -1;
    }
    return 0;
}

int acemq__load_pred(acemq__loader *l, const yaml_node_t *n, const char *what, acemq__pred **out,
                     char **text)
{
    *out = NULL;
    *text = NULL;
    if (acemq__load_string(l, n, what, text) != 0) return -1;
    acemq__expr_error err;
    memset(&err, 0, sizeof err);
    int rc = acemq__pred_compile(*text, out, &err);
    if (rc != 0) {
        *out = NULL;
        compile_error(l, n, rc, &err, "predicate");
        return -1;
    }
    return 0;
}

int acemq__load_id_ok(acemq__loader *l, const yaml_node_t *n, const char *what, const char *id)
{
    static const char allowed[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                  "0123456789_.-";
    size_t len = strlen(id);
    size_t ok = strspn(id, allowed);
    if (len > 0 && ok == len) return 0;
    acemq__load_error(l, acemq__load_where_in(n, ok), "%s '%s' %s", what, id,
                      len == 0 ? "is empty" : "may hold only A-Z a-z 0-9 _ . -");
    return -1;
}
