/* uri.c — route files' URIs, "scheme:path?name=value&..." (values
 * percent-decoded), acemq__uri_param, and each scheme's path and parameter
 * checks for a source or a `to`, reported at their place in the scalar. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "route/load_internal.h"

const char *acemq__uri_param(const acemq__uri *u, const char *name)
{
    if (!u || !name) return NULL;
    for (size_t i = 0; i < u->n; i++)
        if (u->names[i] && strcmp(u->names[i], name) == 0) return u->values[i];
    return NULL;
}

void acemq__uri_free(acemq__uri *u)
{
    if (!u) return;
    for (size_t i = 0; i < u->n; i++) {
        free(u->names[i]);
        free(u->values[i]);
    }
    free(u->names);
    free(u->values);
    free(u->text);
    free(u->scheme);
    free(u->path);
    memset(u, 0, sizeof *u);
}

/* --- what each scheme takes ------------------------------------------------ */

typedef enum param_type {
    P_MS,       /* milliseconds: 0 .. INT32_MAX */
    P_COUNT,    /* 0 .. INT64_MAX */
    P_PREFETCH, /* 1 .. 65535 */
    P_BOOL,     /* true | false */
    P_TEXT,     /* any text but empty */
    P_EXPR      /* a template */
} param_type;

typedef struct param {
    const char *name;
    param_type type;
} param;

typedef struct scheme_kind {
    const char *scheme;
    int source; /* 1: a `from`, 0: a `to` */
    const param *params;
    size_t n;
} scheme_kind;

static const param timer_params[] = {{"period", P_MS}, {"delay", P_MS}, {"repeatCount", P_COUNT}};
static const param amqp_source_params[] = {{"prefetch", P_PREFETCH}, {"retryDelay", P_MS}};
static const param file_source_params[] = {{"include", P_TEXT}, {"delay", P_MS}};
static const param log_params[] = {{"showBody", P_BOOL}, {"showHeaders", P_BOOL}};
static const param amqp_endpoint_params[] = {{"routingKey", P_EXPR}};
static const param file_endpoint_params[] = {{"fileName", P_EXPR}};

#define KIND(scheme, source, params)                                                               \
    {                                                                                              \
        scheme, source, params, sizeof params / sizeof params[0]                                   \
    }
static const scheme_kind kinds[] = {
    KIND("timer", 1, timer_params),        KIND("amqp", 1, amqp_source_params),
    KIND("file", 1, file_source_params),   KIND("log", 0, log_params),
    KIND("amqp", 0, amqp_endpoint_params), KIND("file", 0, file_endpoint_params),
};

static const scheme_kind *find_kind(const char *scheme, int source)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].source == source && strcmp(kinds[i].scheme, scheme) == 0) return &kinds[i];
    return NULL;
}

/* --- parsing --------------------------------------------------------------- */

typedef struct uri_walk {
    acemq__loader *l;
    const yaml_node_t *n; /* the URI's scalar */
    acemq__uri *u;
    const scheme_kind *kind;
} uri_walk;

static acemq__where at(const uri_walk *w, size_t offset)
{
    return acemq__load_where_in(w->n, offset);
}

static int hex(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes the n bytes at s (offset off in the URI) into a new string:
 * 0, or -1 with the error reported. */
static int decode(uri_walk *w, const char *s, size_t n, size_t off, const char *name, char **out)
{
    *out = NULL;
    char *d = malloc(n + 1);
    if (!d) {
        acemq__load_nomem(w->l);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            d[k++] = s[i];
            continue;
        }
        int hi = i + 1 < n ? hex((unsigned char)s[i + 1]) : -1;
        int lo = i + 2 < n ? hex((unsigned char)s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            acemq__load_error(w->l, at(w, off + i),
                              "bad percent escape in parameter '%s' (write %%XX, XX two hex "
                              "digits other than 00)",
                              name);
            free(d);
            return -1;
        }
        d[k++] = (char)(hi * 16 + lo);
        i += 2;
    }
    d[k] = '\0';
    *out = d;
    return 0;
}

/* Checks one parameter's value (written at offset off) for its type. */
static void check_value(uri_walk *w, const param *p, const char *v, size_t off)
{
    static const struct {
        long long min, max;
    } ranges[] = {[P_MS] = {0, INT32_MAX}, [P_COUNT] = {0, INT64_MAX}, [P_PREFETCH] = {1, 65535}};
    const char *scheme = w->kind->scheme;
    switch (p->type) {
    case P_MS:
    case P_COUNT:
    case P_PREFETCH: {
        char *end = NULL;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        int digits = *v && strspn(v, "0123456789") == strlen(v);
        if (!digits || errno == ERANGE || x < ranges[p->type].min || x > ranges[p->type].max)
            acemq__load_error(w->l, at(w, off),
                              "parameter '%s' of %s: must be a whole number from %lld to %lld, "
                              "not '%s'",
                              p->name, scheme, ranges[p->type].min, ranges[p->type].max, v);
        return;
    }
    case P_BOOL:
        if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0)
            acemq__load_error(w->l, at(w, off),
                              "parameter '%s' of %s: expected true or false, not '%s'", p->name,
                              scheme, v);
        return;
    case P_TEXT:
        if (!*v)
            acemq__load_error(w->l, at(w, off), "parameter '%s' of %s: is empty", p->name, scheme);
        return;
    case P_EXPR: {
        acemq__expr *e = NULL;
        acemq__expr_error err;
        memset(&err, 0, sizeof err);
        int rc = acemq__expr_compile(v, &e, &err);
        acemq__expr_free(e);
        if (rc == ACEMQ_ENOMEM)
            acemq__load_nomem(w->l);
        else if (rc != 0)
            acemq__load_error(w->l, at(w, off + err.offset),
                              "%s in parameter '%s' of %s:", err.message, p->name, scheme);
        return;
    }
    }
}

/* Reads the parameter written at s[0, n), offset off in the URI. */
static void parameter(uri_walk *w, const char *s, size_t n, size_t off)
{
    const char *eq = memchr(s, '=', n);
    size_t name_len = eq ? (size_t)(eq - s) : n;
    char *name = malloc(name_len + 1);
    if (!name) {
        acemq__load_nomem(w->l);
        return;
    }
    memcpy(name, s, name_len);
    name[name_len] = '\0';
    if (name_len == 0 || !eq) {
        acemq__load_error(w->l, at(w, off), "parameter '%s' has %s (write name=value)", name,
                          name_len == 0 ? "no name" : "no value");
        free(name);
        return;
    }
    const param *p = NULL;
    for (size_t i = 0; i < w->kind->n && !p; i++)
        if (strcmp(w->kind->params[i].name, name) == 0) p = &w->kind->params[i];
    if (!p) {
        char known[256] = "";
        size_t k = 0;
        for (size_t i = 0; i < w->kind->n && k < sizeof known; i++) {
            int m = snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "",
                             w->kind->params[i].name);
            if (m < 0) break;
            k += (size_t)m;
        }
        acemq__load_error(w->l, at(w, off), "unknown parameter '%s' for %s: (known: %s)", name,
                          w->kind->scheme, known);
        free(name);
        return;
    }
    if (acemq__uri_param(w->u, name)) {
        acemq__load_error(w->l, at(w, off), "parameter '%s' is given twice", name);
        free(name);
        return;
    }
    char *value = NULL;
    size_t voff = off + name_len + 1;
    if (decode(w, eq + 1, n - name_len - 1, voff, name, &value) != 0) {
        free(name);
        return;
    }
    w->u->names[w->u->n] = name;
    w->u->values[w->u->n] = value;
    w->u->n++;
    check_value(w, p, value, voff);
}

/* Checks the path (at offset off) for the scheme and place. */
static void check_path(uri_walk *w, size_t off)
{
    const char *path = w->u->path;
    const char *scheme = w->kind->scheme;
    if (strcmp(scheme, "amqp") == 0 && w->kind->source) {
        if (strncmp(path, "queue:", 6) != 0 || path[6] == '\0')
            acemq__load_error(w->l, at(w, off), "an amqp: source is amqp:queue:NAME, not amqp:%s",
                              path);
    } else if (strcmp(scheme, "amqp") == 0) {
        if (strncmp(path, "exchange:", 9) != 0)
            acemq__load_error(w->l, at(w, off),
                              "an amqp: endpoint is amqp:exchange:NAME (amqp:exchange:?routingKey="
                              "QUEUE for the default exchange), not amqp:%s",
                              path);
    } else if (!*path) {
        acemq__load_error(w->l, at(w, off), "%s: needs a %s after the colon", scheme,
                          strcmp(scheme, "file") == 0 ? "directory" : "name");
    }
}

/* Copies text[from, to) into *out: 0, or -1 out of memory. */
static int span(acemq__loader *l, const char *from, const char *to, char **out)
{
    size_t n = (size_t)(to - from);
    *out = malloc(n + 1);
    if (!*out) {
        acemq__load_nomem(l);
        return -1;
    }
    memcpy(*out, from, n);
    (*out)[n] = '\0';
    return 0;
}

void acemq__load_uri(acemq__loader *l, const yaml_node_t *n, int source, acemq__uri *u)
{
    memset(u, 0, sizeof *u);
    u->where = acemq__load_where(n);
    if (acemq__load_string(l, n, source ? "from" : "to", &u->text) != 0) return;
    const char *t = u->text;
    uri_walk w = {l, n, u, NULL};
    const char *colon = strchr(t, ':');
    size_t scheme_len = colon ? (size_t)(colon - t) : 0;
    if (scheme_len == 0) {
        acemq__load_error(l, at(&w, 0), "'%s' is not a URI: expected scheme:path", t);
        return;
    }
    if (span(l, t, colon, &u->scheme) != 0) return;
    w.kind = find_kind(u->scheme, source);
    if (!w.kind) {
        acemq__load_error(l, at(&w, 0), "unknown %s scheme '%s:' (known: %s)",
                          source ? "source" : "endpoint", u->scheme,
                          source ? "timer:, amqp:, file:" : "log:, amqp:, file:");
        return;
    }
    const char *path = colon + 1;
    const char *q = strchr(path, '?');
    const char *path_end = q ? q : path + strlen(path);
    if (span(l, path, path_end, &u->path) != 0) return;
    check_path(&w, (size_t)(path - t));
    if (!q) return;

    size_t cap = 1;
    for (const char *p = q + 1; *p; p++)
        cap += *p == '&';
    u->names = calloc(cap, sizeof *u->names);
    u->values = calloc(cap, sizeof *u->values);
    if (!u->names || !u->values) {
        acemq__load_nomem(l);
        return;
    }
    const char *s = q + 1;
    while (*s) {
        const char *amp = strchr(s, '&');
        size_t len = amp ? (size_t)(amp - s) : strlen(s);
        if (len > 0) parameter(&w, s, len, (size_t)(s - t)); /* "a=1&&b=2": nothing between */
        if (!amp) break;
        s = amp + 1;
    }
}
