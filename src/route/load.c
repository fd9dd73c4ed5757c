/* load.c — reads a route file (model.h): libyaml's document, its top level
 * (repositories, broker, routes), each route, the error list, and freeing.
 * A file with any error gives no model, so the runtime sees only good ones. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "route/load_internal.h"

/* A route file larger than this is refused unread: routes are a page. */
#define MAX_FILE_BYTES (16u << 20)

/* --- errors ---------------------------------------------------------------- */

int acemq__route_error(acemq__route_errors *e, const char *path, acemq__where where,
                       const char *fmt, ...)
{
    char head[64];
    /* line 0: a message about the whole file, with no place in it */
    if (where.line > 0)
        (void)snprintf(head, sizeof head, ":%d:%d: ", where.line, where.column);
    else
        (void)snprintf(head, sizeof head, ": ");
    const char *name = path ? path : "";
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    size_t prefix = strlen(name) + strlen(head);
    char *line = malloc(prefix + (size_t)n + 1);
    char **lines = line ? realloc(e->lines, (e->n + 1) * sizeof *lines) : NULL;
    if (!lines) {
        free(line);
        return ACEMQ_ENOMEM;
    }
    e->lines = lines;
    memcpy(line, name, strlen(name));
    memcpy(line + strlen(name), head, strlen(head));
    line[prefix] = '\0';
    va_start(ap, fmt);
    (void)vsnprintf(line + prefix, (size_t)n + 1, fmt, ap);
    va_end(ap);
    e->lines[e->n++] = line;
    return 0;
}

void acemq__route_errors_free(acemq__route_errors *e)
{
    if (!e) return;
    for (size_t i = 0; i < e->n; i++)
        free(e->lines[i]);
    free(e->lines);
    e->lines = NULL;
    e->n = 0;
}

typedef struct placed {
    long line, column;
    size_t index;
    char *text;
} placed;

static int by_place(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    if (x->line != y->line) return x->line < y->line ? -1 : 1;
    if (x->column != y->column) return x->column < y->column ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Orders the lines from first on by their place in the file (those with
 * none first), keeping the order of lines at the same place. The checks
 * run in their own order; a reader goes down the file. */
static void sort_errors(acemq__route_errors *e, size_t first, const char *name)
{
    size_t n = e->n - first;
    if (n < 2) return;
    placed *p = malloc(n * sizeof *p);
    if (!p) return; /* left unsorted: still every error */
    size_t skip = strlen(name) + 1;
    for (size_t i = 0; i < n; i++) {
        char *t = e->lines[first + i];
        p[i] = (placed){0, 0, i, t};
        if (strlen(t) > skip && t[skip] >= '0' && t[skip] <= '9') {
            char *end = NULL;
            p[i].line = strtol(t + skip, &end, 10);
            if (end && *end == ':') p[i].column = strtol(end + 1, NULL, 10);
        }
    }
    qsort(p, n, sizeof *p, by_place);
    for (size_t i = 0; i < n; i++)
        e->lines[first + i] = p[i].text;
    free(p);
}

/* --- freeing ----------------------------------------------------------------- */

void acemq__route_file_free(acemq__route_file *f)
{
    if (!f) return;
    for (size_t i = 0; i < f->n_repos; i++) {
        free(f->repos[i].name);
        free(f->repos[i].url);
    }
    free(f->repos);
    for (size_t i = 0; i < f->n_routes; i++) {
        free(f->routes[i].id);
        acemq__uri_free(&f->routes[i].from);
        acemq__steps_free(&f->routes[i].steps);
    }
    free(f->routes);
    free(f->broker);
    free(f->path);
    free(f);
}

/* --- the top level ----------------------------------------------------------- */

static void repositories(acemq__loader *l, acemq__route_file *f, yaml_node_t *m)
{
    if (!m || acemq__load_is_null(m)) return;
    char buf[64];
    if (m->type != YAML_MAPPING_NODE) {
        acemq__load_error(l, acemq__load_where(m),
                          "expected a mapping for 'repositories' (NAME: {url: ...}), found %s",
                          acemq__load_found(m, buf, sizeof buf));
        return;
    }
    size_t n = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
    if (n == 0) return;
    f->repos = calloc(n, sizeof *f->repos);
    if (!f->repos) {
        acemq__load_nomem(l);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *key = acemq__load_node(l, m->data.mapping.pairs.start[i].key);
        yaml_node_t *value = acemq__load_node(l, m->data.mapping.pairs.start[i].value);
        if (!key || !value) continue;
        if (key->type != YAML_SCALAR_NODE || !*acemq__load_text(key)) {
            acemq__load_error(l, acemq__load_where(key),
                              "expected a repository's name as a key, found %s",
                              acemq__load_found(key, buf, sizeof buf));
            continue;
        }
        acemq__repository *r = &f->repos[f->n_repos];
        const char *name = acemq__load_text(key);
        for (size_t j = 0; j < f->n_repos; j++) {
            if (f->repos[j].name && strcmp(f->repos[j].name, name) == 0) {
                acemq__load_error(l, acemq__load_where(key),
                                  "repository '%s' is defined twice (first at line %d)", name,
                                  f->repos[j].where.line);
                name = NULL;
                break;
            }
        }
        if (!name) continue;
        /* Named even when broken, so steps that use it are not told it is undefined. */
        if (acemq__load_string(l, key, "repository", &r->name) != 0) continue;
        r->where = acemq__load_where(key);
        f->n_repos++;
        if (value->type != YAML_MAPPING_NODE) {
            acemq__load_error(l, acemq__load_where(value),
                              "expected a mapping for repository '%s' ({url: ...}), found %s", name,
                              acemq__load_found(value, buf, sizeof buf));
            continue;
        }
        char what[128];
        (void)snprintf(what, sizeof what, "repository '%.80s'", name);
        acemq__load_opt o[] = {{"url", NULL, NULL}, {"lease_ms", NULL, NULL}};
        acemq__load_options(l, value, o, 2, what);
        if (!o[0].key)
            acemq__load_error(l, r->where, "missing 'url' in %s", what);
        else if (acemq__load_string(l, o[0].value, "url", &r->url) == 0 && !*r->url)
            acemq__load_error(l, acemq__load_where(o[0].value), "'url' of %s is empty", what);
        if (o[1].key) (void)acemq__load_int(l, o[1].value, "lease_ms", 1, INT32_MAX, &r->lease_ms);
    }
}

/* A route's `from`: a URI, or Camel's {uri: URI, steps: [...]}. */
static void from(acemq__loader *l, acemq__route *r, yaml_node_t *v, yaml_node_t **steps)
{
    r->from.where = acemq__load_where(v);
    if (v->type != YAML_MAPPING_NODE) {
        acemq__load_uri(l, v, 1, &r->from);
        return;
    }
    acemq__load_opt o[] = {{"uri", NULL, NULL}, {"steps", NULL, NULL}};
    acemq__load_options(l, v, o, 2, "from");
    if (!o[0].key)
        acemq__load_error(l, acemq__load_where(v), "missing 'uri' in from");
    else
        acemq__load_uri(l, o[0].value, 1, &r->from);
    *steps = o[1].value;
}

/* A step with its id, as the duplicate check sorts them. */
typedef struct step_ref {
    const acemq__step *s;
} step_ref;

/* Adds the steps of s that have an id, nested ones too, to all[*n]. */
static void gather(step_ref *all, size_t *n, const acemq__steps *s)
{
    for (size_t i = 0; i < s->n; i++) {
        const acemq__step *step = &s->v[i];
        if (step->id) all[(*n)++].s = step;
        for (size_t j = 0; j < step->n_whens; j++)
            gather(all, n, &step->whens[j].steps);
        gather(all, n, &step->steps);
    }
}

static size_t count(const acemq__steps *s)
{
    size_t n = s->n;
    for (size_t i = 0; i < s->n; i++) {
        for (size_t j = 0; j < s->v[i].n_whens; j++)
            n += count(&s->v[i].whens[j].steps);
        n += count(&s->v[i].steps);
    }
    return n;
}

/* By id, then by place: the first of equal ids is the one written first. */
static int by_id(const void *a, const void *b)
{
    const acemq__step *x = ((const step_ref *)a)->s, *y = ((const step_ref *)b)->s;
    int c = strcmp(x->id, y->id);
    if (c) return c;
    if (x->where.line != y->where.line) return x->where.line < y->where.line ? -1 : 1;
    return (x->where.column > y->where.column) - (x->where.column < y->where.column);
}

/* Step ids name metrics and log lines: each once in a route. */
static void unique_step_ids(acemq__loader *l, const acemq__route *r)
{
    size_t n = count(&r->steps);
    if (n < 2) return;
    step_ref *all = malloc(n * sizeof *all);
    if (!all) {
        acemq__load_nomem(l);
        return;
    }
    size_t k = 0;
    gather(all, &k, &r->steps);
    qsort(all, k, sizeof *all, by_id);
    for (size_t i = 1; i < k; i++)
        if (strcmp(all[i].s->id, all[i - 1].s->id) == 0)
            acemq__load_error(l, all[i].s->where,
                              "duplicate step id '%s' in route '%s' (first at line %d)",
                              all[i].s->id, r->id ? r->id : "?", all[i - 1].s->where.line);
    free(all);
}

static void route(acemq__loader *l, acemq__route_file *f, yaml_node_t *m, acemq__route *r)
{
    r->where = acemq__load_where(m);
    char buf[64];
    if (m->type == YAML_MAPPING_NODE &&
        m->data.mapping.pairs.top - m->data.mapping.pairs.start == 1) {
        /* Camel's "- route: {id: ..., from: ...}" */
        yaml_node_t *key = acemq__load_node(l, m->data.mapping.pairs.start[0].key);
        yaml_node_t *value = acemq__load_node(l, m->data.mapping.pairs.start[0].value);
        if (key && value && key->type == YAML_SCALAR_NODE &&
            strcmp(acemq__load_text(key), "route") == 0 && value->type == YAML_MAPPING_NODE)
            m = value;
    }
    if (m->type != YAML_MAPPING_NODE) {
        acemq__load_error(l, acemq__load_where(m),
                          "expected a route (a mapping with id, from and steps), found %s",
                          acemq__load_found(m, buf, sizeof buf));
        return;
    }
    acemq__load_opt o[] = {{"id", NULL, NULL}, {"from", NULL, NULL}, {"steps", NULL, NULL}};
    acemq__load_options(l, m, o, 3, "a route");
    if (!o[0].key) {
        acemq__load_error(l, r->where, "missing 'id' in route");
    } else if (acemq__load_string(l, o[0].value, "id", &r->id) == 0 &&
               acemq__load_id_ok(l, o[0].value, "route id", r->id) == 0) {
        for (acemq__route *other = f->routes; other < r; other++)
            if (other->id && strcmp(other->id, r->id) == 0) {
                acemq__load_error(l, acemq__load_where(o[0].value),
                                  "duplicate route id '%s' (first at line %d)", r->id,
                                  other->where.line);
                break;
            }
    }
    yaml_node_t *inner_steps = NULL;
    if (!o[1].key)
        acemq__load_error(l, r->where, "missing 'from' in route '%s'", r->id ? r->id : "?");
    else
        from(l, r, o[1].value, &inner_steps);
    if (inner_steps && o[2].key) {
        acemq__load_error(l, acemq__load_where(o[2].key),
                          "steps given both in the route and in its from");
        return;
    }
    memset(l->ordinals, 0, sizeof l->ordinals);
    l->depth = 0;
    acemq__load_steps(l, inner_steps ? inner_steps : o[2].value, &r->steps);
    unique_step_ids(l, r);
}

static void routes(acemq__loader *l, acemq__route_file *f, yaml_node_t *root, yaml_node_t *s)
{
    char buf[64];
    if (!s) {
        acemq__load_error(l, acemq__load_where(root), "missing 'routes': a file needs a route");
        return;
    }
    if (s->type != YAML_SEQUENCE_NODE) {
        acemq__load_error(l, acemq__load_where(s),
                          "expected a sequence of routes for 'routes', found %s",
                          acemq__load_found(s, buf, sizeof buf));
        return;
    }
    size_t n = (size_t)(s->data.sequence.items.top - s->data.sequence.items.start);
    if (n == 0) {
        acemq__load_error(l, acemq__load_where(s), "'routes' is empty: a file needs a route");
        return;
    }
    f->routes = calloc(n, sizeof *f->routes);
    if (!f->routes) {
        acemq__load_nomem(l);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *m = acemq__load_node(l, s->data.sequence.items.start[i]);
        if (m) route(l, f, m, &f->routes[f->n_routes++]);
    }
}

/* Route files take no YAML aliases: a node reached twice would be walked
 * twice (exponentially often when nested, forever in a cycle). Reports
 * each node referenced more than once; 1 when there is any. */
static int aliased(acemq__loader *l)
{
    yaml_document_t *d = l->doc;
    size_t n = (size_t)(d->nodes.top - d->nodes.start);
    unsigned char *seen = calloc(n + 1, 1);
    if (!seen) {
        acemq__load_nomem(l);
        return 1;
    }
    seen[1] = 1; /* the root */
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *node = &d->nodes.start[i];
        int refs[2];
        size_t k = 0, count = 0;
        if (node->type == YAML_SEQUENCE_NODE)
            count = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
        else if (node->type == YAML_MAPPING_NODE)
            count = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
        for (k = 0; k < count; k++) {
            int m = 1;
            if (node->type == YAML_SEQUENCE_NODE) {
                refs[0] = node->data.sequence.items.start[k];
            } else {
                refs[0] = node->data.mapping.pairs.start[k].key;
                refs[1] = node->data.mapping.pairs.start[k].value;
                m = 2;
            }
            for (int j = 0; j < m; j++) {
                if (refs[j] < 1 || (size_t)refs[j] > n) continue;
                if (seen[refs[j]] == 1)
                    acemq__load_error(l, acemq__load_where(&d->nodes.start[refs[j] - 1]),
                                      "this node is used again through an alias (*); route files "
                                      "take no YAML aliases");
                if (seen[refs[j]] == 1) any = 1;
                if (seen[refs[j]] < 2) seen[refs[j]]++;
            }
        }
    }
    free(seen);
    return any;
}

static void top_level(acemq__loader *l, acemq__route_file *f)
{
    yaml_node_t *root = yaml_document_get_root_node(l->doc);
    char buf[64];
    if (!root || acemq__load_is_null(root)) {
        acemq__where start = {1, 1};
        acemq__load_error(l, start,
                          "the file is empty: expected 'repositories', 'broker' and "
                          "'routes'");
        return;
    }
    if (aliased(l)) return;
    if (root->type != YAML_MAPPING_NODE) {
        acemq__load_error(l, acemq__load_where(root),
                          "expected a mapping with 'repositories', 'broker' and 'routes' at the "
                          "top, found %s",
                          acemq__load_found(root, buf, sizeof buf));
        return;
    }
    acemq__load_opt o[] = {
        {"repositories", NULL, NULL}, {"broker", NULL, NULL}, {"routes", NULL, NULL}};
    acemq__load_options(l, root, o, 3, "the file's top level");
    repositories(l, f, o[0].value); /* before the routes, whose steps name them */
    if (o[1].key && acemq__load_string(l, o[1].value, "broker", &f->broker) == 0) {
        f->broker_where = acemq__load_where(o[1].value);
        if (!*f->broker)
            acemq__load_error(l, f->broker_where, "'broker' is empty (leave it out for none)");
    }
    routes(l, f, root, o[2].value);
}

/* --- libyaml's own errors ------------------------------------------------------ */

/* Reports the parser's error: ACEMQ_EINVAL, or ACEMQ_ENOMEM. */
static int yaml_failed(acemq__loader *l, const yaml_parser_t *p, const char *text, size_t len)
{
    if (p->error == YAML_MEMORY_ERROR) return ACEMQ_ENOMEM;
    acemq__where w = {(int)p->problem_mark.line + 1, (int)p->problem_mark.column + 1};
    if (p->error == YAML_READER_ERROR) {
        /* The reader gives a byte offset, no mark: count lines up to it. */
        w.line = w.column = 1;
        for (size_t i = 0; i < p->problem_offset && i < len; i++) {
            if (text[i] == '\n') {
                w.line++;
                w.column = 1;
            } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
                w.column++;
            }
        }
        acemq__load_error(l, w, "invalid text: %s", p->problem ? p->problem : "unreadable");
    } else if (p->context) {
        acemq__load_error(l, w, "invalid YAML: %s (%s at line %d column %d)",
                          p->problem ? p->problem : "syntax error", p->context,
                          (int)p->context_mark.line + 1, (int)p->context_mark.column + 1);
    } else {
        acemq__load_error(l, w, "invalid YAML: %s", p->problem ? p->problem : "syntax error");
    }
    return l->rc ? l->rc : ACEMQ_EINVAL;
}

int acemq__route_load_text(const char *name, const char *text, size_t len, acemq__route_file **out,
                           acemq__route_errors *errors)
{
    if (out) *out = NULL;
    if (!name || (!text && len) || !out || !errors) return ACEMQ_EINVAL;
    size_t first = errors->n;
    acemq__loader l = {name, NULL, errors, 0, 0, NULL, {0}, 0};
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return ACEMQ_ENOMEM;
    yaml_parser_set_input_string(&p, (const unsigned char *)(text ? text : ""), len);
    yaml_document_t doc;
    if (!yaml_parser_load(&p, &doc)) { /* libyaml freed the document */
        int rc = yaml_failed(&l, &p, text, len);
        yaml_parser_delete(&p);
        return rc;
    }
    l.doc = &doc;
    acemq__route_file *f = calloc(1, sizeof *f);
    if (f) f->path = strdup(name);
    if (!f || !f->path) {
        acemq__load_nomem(&l);
    } else {
        l.file = f;
        top_level(&l, f);
    }
    yaml_document_t more;
    if (!yaml_parser_load(&p, &more)) {
        int rc = yaml_failed(&l, &p, text, len);
        if (rc == ACEMQ_ENOMEM) acemq__load_nomem(&l);
    } else {
        yaml_node_t *root = yaml_document_get_root_node(&more);
        if (root)
            acemq__load_error(&l, acemq__load_where(root),
                              "a second YAML document: a route file holds one");
        yaml_document_delete(&more);
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    sort_errors(errors, first, name);
    if (l.rc != 0 || l.found > 0) {
        acemq__route_file_free(f);
        return l.rc != 0 ? l.rc : ACEMQ_EINVAL;
    }
    *out = f;
    return 0;
}

int acemq__route_load(const char *path, acemq__route_file **out, acemq__route_errors *errors)
{
    if (out) *out = NULL;
    if (!path || !out || !errors) return ACEMQ_EINVAL;
    acemq__where none = {0, 0};
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        int e = errno;
        return acemq__route_error(errors, path, none, "cannot read: %s", strerror(e)) != 0
                   ? ACEMQ_ENOMEM
                   : ACEMQ_EIO;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc = 0, e = 0;
    for (;;) {
        if (len == cap) {
            char *t = cap < MAX_FILE_BYTES ? realloc(text, cap ? cap * 2 : 8192) : NULL;
            if (!t) {
                rc = cap < MAX_FILE_BYTES ? ACEMQ_ENOMEM : ACEMQ_EIO;
                e = EFBIG;
                break;
            }
            text = t;
            cap = cap ? cap * 2 : 8192;
        }
        size_t got = fread(text + len, 1, cap - len, fp);
        len += got;
        if (got == 0) {
            if (ferror(fp)) {
                rc = ACEMQ_EIO;
                e = errno;
            }
            break;
        }
    }
    (void)fclose(fp);
    if (rc == ACEMQ_EIO) {
        free(text);
        return acemq__route_error(errors, path, none, "cannot read: %s", strerror(e)) != 0
                   ? ACEMQ_ENOMEM
                   : ACEMQ_EIO;
    }
    if (rc == 0) rc = acemq__route_load_text(path, text, len, out, errors);
    free(text);
    return rc;
}
