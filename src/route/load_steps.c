/* load_steps.c — a route's steps as the loader reads them: a one-key mapping
 * per step, its key the kind (any of Camel's spellings), its value a short
 * form or options; ids given or made ("log1"); nesting bounded in depth. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "route/load_internal.h"

/* By acemq__step_kind, which is their index here. */
static const char *const kind_names[] = {
    "set_header", "set_body", "log", "to", "exec", "filter", "choice", "idempotent_consumer",
};
#define N_KINDS (sizeof kind_names / sizeof kind_names[0])

#define N_OPTS(a) (sizeof(a) / sizeof(a)[0])

/* The one option of alts[0, n) that is given: its index, or -1 with the
 * error reported when none is (required) or more than one is. */
static int pick(acemq__loader *l, acemq__where at, const acemq__load_opt *alts, size_t n,
                int required, const char *in)
{
    int chosen = -1;
    for (size_t i = 0; i < n; i++) {
        if (!alts[i].key) continue;
        if (chosen >= 0) {
            acemq__load_error(l, acemq__load_where(alts[i].key), "%s takes '%s' or '%s', not both",
                              in, alts[chosen].name, alts[i].name);
            return -1;
        }
        chosen = (int)i;
    }
    if (chosen < 0 && required) {
        char names[128] = "";
        size_t w = 0;
        for (size_t i = 0; i < n && w < sizeof names; i++) {
            int k = snprintf(names + w, sizeof names - w, "%s'%s'", i ? " or " : "", alts[i].name);
            if (k < 0) break;
            w += (size_t)k;
        }
        acemq__load_error(l, at, "missing %s in %s", names, in);
    }
    return chosen;
}

/* Camel's `expression:` value: a string, or {simple: X} ({constant: X}
 * too when constant_ok). *text_node is the scalar to compile and
 * *constant whether it is literal text. 0, or -1 reported. */
static int expression_value(acemq__loader *l, const yaml_node_t *v, int constant_ok, const char *in,
                            const yaml_node_t **text_node, int *constant)
{
    *text_node = v;
    *constant = 0;
    if (v->type != YAML_MAPPING_NODE) return 0;
    acemq__load_opt o[] = {{"simple", NULL, NULL}, {"constant", NULL, NULL}};
    acemq__load_options(l, v, o, 2, "expression");
    if (!constant_ok && o[1].key) {
        acemq__load_error(l, acemq__load_where(o[1].key),
                          "a predicate is written with 'simple', not 'constant'");
        return -1;
    }
    int k = pick(l, acemq__load_where(v), o, 2, 1, in);
    if (k < 0) return -1;
    *text_node = o[k].value;
    *constant = k == 1;
    return 0;
}

/* A template from one of value/simple/constant/expression (alts, in that
 * order), into s->expr and s->expr_text. */
static void template_of(acemq__loader *l, acemq__step *s, const acemq__load_opt *alts,
                        const char *in)
{
    int k = pick(l, s->where, alts, 4, 1, in);
    if (k < 0) return;
    const yaml_node_t *text = alts[k].value;
    int constant = k == 2;
    if (k == 3 && expression_value(l, alts[k].value, 1, in, &text, &constant) != 0) return;
    (void)acemq__load_expr(l, text, alts[k].name, constant, &s->expr, &s->expr_text);
}

/* A predicate from simple/expression (alts[0], alts[1]) into *pred, *text. */
static void predicate_of(acemq__loader *l, acemq__where at, const acemq__load_opt *alts,
                         const char *in, acemq__pred **pred, char **text)
{
    int k = pick(l, at, alts, 2, 1, in);
    if (k < 0) return;
    const yaml_node_t *node = alts[k].value;
    int constant = 0;
    if (k == 1 && expression_value(l, alts[k].value, 0, in, &node, &constant) != 0) return;
    (void)acemq__load_pred(l, node, alts[k].name, pred, text);
}

/* The step's value as a mapping of options, or -1 reported. */
static int need_mapping(acemq__loader *l, const yaml_node_t *v, const char *kind, const char *form)
{
    if (v->type == YAML_MAPPING_NODE) return 0;
    char buf[64];
    acemq__load_error(l, acemq__load_where(v), "expected a mapping for %s (%s), found %s", kind,
                      form, acemq__load_found(v, buf, sizeof buf));
    return -1;
}

/* Each kind reads its value v into s; *id is set to the `id:` option's
 * value node when the mapping form has one. */

static void set_header(acemq__loader *l, acemq__step *s, yaml_node_t *v, yaml_node_t **id)
{
    if (need_mapping(l, v, "set_header", "{name: N, value: EXPR}") != 0) return;
    acemq__load_opt o[] = {{"id", NULL, NULL},       {"name", NULL, NULL},
                           {"value", NULL, NULL},    {"simple", NULL, NULL},
                           {"constant", NULL, NULL}, {"expression", NULL, NULL}};
    acemq__load_options(l, v, o, N_OPTS(o), "set_header");
    *id = o[0].value;
    if (!o[1].key)
        acemq__load_error(l, s->where, "missing 'name' in set_header");
    else if (acemq__load_string(l, o[1].value, "name", &s->name) == 0 && !*s->name)
        acemq__load_error(l, acemq__load_where(o[1].value), "'name' of set_header is empty");
    template_of(l, s, o + 2, "set_header");
}

static void set_body(acemq__loader *l, acemq__step *s, yaml_node_t *v, yaml_node_t **id)
{
    if (v->type != YAML_MAPPING_NODE) {
        (void)acemq__load_expr(l, v, "set_body", 0, &s->expr, &s->expr_text);
        return;
    }
    acemq__load_opt o[] = {{"id", NULL, NULL},
                           {"value", NULL, NULL},
                           {"simple", NULL, NULL},
                           {"constant", NULL, NULL},
                           {"expression", NULL, NULL}};
    acemq__load_options(l, v, o, N_OPTS(o), "set_body");
    *id = o[0].value;
    template_of(l, s, o + 1, "set_body");
}

static void log_step(acemq__loader *l, acemq__step *s, yaml_node_t *v, yaml_node_t **id)
{
    if (v->type != YAML_MAPPING_NODE) {
        (void)acemq__load_expr(l, v, "log", 0, &s->expr, &s->expr_text);
        return;
    }
    acemq__load_opt o[] = {{"id", NULL, NULL}, {"message", NULL, NULL}};
    acemq__load_options(l, v, o, N_OPTS(o), "log");
    *id = o[0].value;
    if (!o[1].key)
        acemq__load_error(l, s->where, "missing 'message' in log");
    else
        (void)acemq__load_expr(l, o[1].value, "message", 0, &s->expr, &s->expr_text);
}

static void to_step(acemq__loader *l, acemq__step *s, yaml_node_t *v, yaml_node_t **id)
{
    if (v->type != YAML_MAPPING_NODE) {
        acemq__load_uri(l, v, 0, &s->to);
        return;
    }
    acemq__load_opt o[] = {{"id", NULL, NULL}, {"uri", NULL, NULL}};
    acemq__load_options(l, v, o, N_OPTS(o), "to");
    *id = o[0].value;
    if (!o[1].key)
        acemq__load_error(l, s->where, "missing 'uri' in to");
    else
        acemq__load_uri(l, o[1].value, 0, &s->to);
}

static void exec_step(acemq__loader *l, acemq__step *s, yaml_node_t *v, yaml_node_t **id)
{
    const yaml_node_t *command = v;
    if (v->type == YAML_MAPPING_NODE) {
        acemq__load_opt o[] = {
            {"id", NULL, NULL}, {"command", NULL, NULL}, {"timeout_ms", NULL, NULL}};
        acemq__load_options(l, v, o, N_OPTS(o), "exec");
        *id = o[0].value;
        if (o[2].key)
            (void)acemq__load_int(l, o[2].value, "timeout_ms", 0, INT32_MAX, &s->timeout_ms);
        command = o[1].value;
        if (!command) {
            acemq__load_error(l, s->where, "missing 'command' in exec");
            return;
        }
    }
    if (acemq__load_string(l, command, "command", &s->command) == 0 && !*s->command)
        acemq__load_error(l, acemq__load_where(command), "the command of exec is empty");
}

static void filter(acemq__loader *l, acemq__step *s, yaml_node_t *v, yaml_node_t **id)
{
    if (need_mapping(l, v, "filter", "{simple: PREDICATE, steps: [...]}") != 0) return;
    acemq__load_opt o[] = {{"id", NULL, NULL},
                           {"simple", NULL, NULL},
                           {"expression", NULL, NULL},
                           {"steps", NULL, NULL}};
    acemq__load_options(l, v, o, N_OPTS(o), "filter");
    *id = o[0].value;
    predicate_of(l, s->where, o + 1, "filter", &s->pred, &s->pred_text);
    acemq__load_steps(l, o[3].value, &s->steps);
}

static void when(acemq__loader *l, yaml_node_t *v, acemq__when *w)
{
    w->where = acemq__load_where(v);
    if (need_mapping(l, v, "a when", "{simple: PREDICATE, steps: [...]}") != 0) return;
    acemq__load_opt o[] = {
        {"simple", NULL, NULL}, {"expression", NULL, NULL}, {"steps", NULL, NULL}};
    acemq__load_options(l, v, o, N_OPTS(o), "when");
    predicate_of(l, w->where, o, "when", &w->pred, &w->text);
    acemq__load_steps(l, o[2].value, &w->steps);
}

static void otherwise(acemq__loader *l, acemq__step *s, yaml_node_t *v)
{
    s->has_otherwise = 1;
    if (v->type == YAML_MAPPING_NODE) {
        acemq__load_opt o[] = {{"steps", NULL, NULL}};
        acemq__load_options(l, v, o, N_OPTS(o), "otherwise");
        acemq__load_steps(l, o[0].value, &s->steps);
    } else {
        acemq__load_steps(l, v, &s->steps); /* a sequence of steps, or nothing */
    }
}

static void choice(acemq__loader *l, acemq__step *s, yaml_node_t *v, yaml_node_t **id)
{
    if (need_mapping(l, v, "choice", "{when: [...], otherwise: {steps: [...]}}") != 0) return;
    acemq__load_opt o[] = {{"id", NULL, NULL}, {"when", NULL, NULL}, {"otherwise", NULL, NULL}};
    acemq__load_options(l, v, o, N_OPTS(o), "choice");
    *id = o[0].value;
    yaml_node_t *whens = o[1].value;
    if (!whens || (whens->type == YAML_SEQUENCE_NODE &&
                   whens->data.sequence.items.top == whens->data.sequence.items.start)) {
        acemq__load_error(l, whens ? acemq__load_where(whens) : s->where,
                          "choice needs at least one 'when'");
    } else if (whens->type != YAML_SEQUENCE_NODE) {
        char buf[64];
        acemq__load_error(l, acemq__load_where(whens),
                          "expected a sequence for 'when' ([{simple: ..., steps: [...]}, ...]), "
                          "found %s",
                          acemq__load_found(whens, buf, sizeof buf));
    } else {
        size_t n = (size_t)(whens->data.sequence.items.top - whens->data.sequence.items.start);
        s->whens = calloc(n, sizeof *s->whens);
        if (!s->whens) {
            acemq__load_nomem(l);
            return;
        }
        for (size_t i = 0; i < n; i++) {
            yaml_node_t *w = acemq__load_node(l, whens->data.sequence.items.start[i]);
            if (w) when(l, w, &s->whens[s->n_whens++]);
        }
    }
    if (o[2].key) otherwise(l, s, o[2].value);
}

/* The repository an idempotent_consumer names, by its index. */
static void repository(acemq__loader *l, acemq__step *s, const yaml_node_t *v)
{
    char *name = NULL;
    if (acemq__load_string(l, v, "repository", &name) != 0) return;
    const char *bare = name[0] == '#' ? name + 1 : name; /* Camel's "#bean" reference */
    const acemq__route_file *f = l->file;
    for (size_t i = 0; i < f->n_repos; i++) {
        if (f->repos[i].name && strcmp(f->repos[i].name, bare) == 0) {
            s->repository = i;
            free(name);
            return;
        }
    }
    char defined[256] = "";
    size_t w = 0;
    for (size_t i = 0; i < f->n_repos && w < sizeof defined; i++) {
        int k = snprintf(defined + w, sizeof defined - w, "%s%s", i ? ", " : "",
                         f->repos[i].name ? f->repos[i].name : "?");
        if (k < 0) break;
        w += (size_t)k;
    }
    acemq__load_error(l, acemq__load_where(v), "repository '%s' is not defined (%s%s)", bare,
                      f->n_repos ? "defined: " : "the file's 'repositories' define none", defined);
    free(name);
}

static void idempotent_consumer(acemq__loader *l, acemq__step *s, yaml_node_t *v, yaml_node_t **id)
{
    s->eager = 1;
    s->remove_on_failure = 1;
    s->skip_duplicate = 1;
    s->completion_eager = 0;
    if (need_mapping(l, v, "idempotent_consumer",
                     "{repository: NAME, expression: EXPR, steps: [...]}") != 0)
        return;
    acemq__load_opt o[] = {
        {"id", NULL, NULL},
        {"repository", NULL, NULL},
        {"idempotent_repository", NULL, NULL},
        {"expression", NULL, NULL},
        {"simple", NULL, NULL},
        {"steps", NULL, NULL},
        {"eager", NULL, NULL},
        {"remove_on_failure", NULL, NULL},
        {"skip_duplicate", NULL, NULL},
        {"completion_eager", NULL, NULL},
    };
    const char *in = "idempotent_consumer";
    acemq__load_options(l, v, o, N_OPTS(o), in);
    *id = o[0].value;
    int k = pick(l, s->where, o + 1, 2, 1, in);
    if (k >= 0) repository(l, s, o[1 + k].value);
    k = pick(l, s->where, o + 3, 2, 1, in);
    if (k >= 0) {
        const yaml_node_t *text = o[3 + k].value;
        int constant = 0;
        if (k == 1 || expression_value(l, text, 1, in, &text, &constant) == 0)
            (void)acemq__load_expr(l, text, "expression", constant, &s->expr, &s->expr_text);
    }
    int *flags[] = {&s->eager, &s->remove_on_failure, &s->skip_duplicate, &s->completion_eager};
    for (size_t i = 0; i < 4; i++)
        if (o[6 + i].key) (void)acemq__load_bool(l, o[6 + i].value, o[6 + i].name, flags[i]);
    acemq__load_steps(l, o[5].value, &s->steps);
}

typedef void (*kind_reader)(acemq__loader *, acemq__step *, yaml_node_t *, yaml_node_t **);

static const kind_reader readers[] = {
    set_header, set_body, log_step, to_step, exec_step, filter, choice, idempotent_consumer,
};

/* The step's kind key among the element's keys; `id` may sit beside it. */
static int find_kind(acemq__loader *l, yaml_node_t *el, yaml_node_t **kind_key,
                     yaml_node_t **kind_value, yaml_node_t **id)
{
    int kind = -1, reported = 0;
    for (yaml_node_pair_t *p = el->data.mapping.pairs.start; p < el->data.mapping.pairs.top; p++) {
        yaml_node_t *key = acemq__load_node(l, p->key), *value = acemq__load_node(l, p->value);
        if (!key || !value) continue;
        char buf[64], norm[64];
        if (key->type != YAML_SCALAR_NODE) {
            acemq__load_error(l, acemq__load_where(key),
                              "expected a step's kind as a key, found %s",
                              acemq__load_found(key, buf, sizeof buf));
            reported = 1;
            continue;
        }
        acemq__load_normalise(acemq__load_text(key), norm, sizeof norm);
        if (strcmp(norm, "id") == 0) {
            *id = value;
            continue;
        }
        int k = -1;
        for (size_t i = 0; i < N_KINDS && k < 0; i++) {
            char want[64];
            acemq__load_normalise(kind_names[i], want, sizeof want);
            if (norm[0] && strcmp(norm, want) == 0) k = (int)i;
        }
        if (k < 0) {
            acemq__load_error(l, acemq__load_where(key),
                              "unknown step '%s' (known: set_header, set_body, log, to, exec, "
                              "filter, choice, idempotent_consumer)",
                              acemq__load_text(key));
            reported = 1;
        } else if (kind >= 0) {
            acemq__load_error(l, acemq__load_where(key),
                              "a step has one kind: '%s' is a second one beside '%s' (start "
                              "another step with '-')",
                              acemq__load_text(key), kind_names[kind]);
            reported = 1;
        } else {
            kind = k;
            *kind_key = key;
            *kind_value = value;
        }
    }
    if (kind < 0 && !reported)
        acemq__load_error(l, acemq__load_where(el),
                          "a step needs a kind (set_header, set_body, log, to, exec, filter, "
                          "choice, idempotent_consumer)");
    return reported ? -1 : kind;
}

static void load_step(acemq__loader *l, yaml_node_t *el, acemq__step *s)
{
    s->where = acemq__load_where(el);
    if (el->type != YAML_MAPPING_NODE) {
        char buf[64];
        acemq__load_error(l, acemq__load_where(el),
                          "expected a step (a mapping such as '- log: TEXT'), found %s",
                          acemq__load_found(el, buf, sizeof buf));
        return;
    }
    yaml_node_t *key = NULL, *value = NULL, *outer_id = NULL, *inner_id = NULL;
    int kind = find_kind(l, el, &key, &value, &outer_id);
    if (kind < 0) return;
    s->kind = (acemq__step_kind)kind;
    s->where = acemq__load_where(key);
    unsigned ordinal = ++l->ordinals[kind];
    readers[kind](l, s, value, &inner_id);
    if (outer_id && inner_id) {
        acemq__load_error(l, acemq__load_where(inner_id), "the step's id is given twice");
        return;
    }
    const yaml_node_t *id = inner_id ? inner_id : outer_id;
    if (id) {
        if (acemq__load_string(l, id, "id", &s->id) == 0)
            (void)acemq__load_id_ok(l, id, "step id", s->id);
        return;
    }
    char made[64];
    (void)snprintf(made, sizeof made, "%s%u", kind_names[kind], ordinal);
    s->id = strdup(made);
    if (!s->id) acemq__load_nomem(l);
}

void acemq__load_steps(acemq__loader *l, yaml_node_t *seq, acemq__steps *out)
{
    out->v = NULL;
    out->n = 0;
    if (!seq || acemq__load_is_null(seq)) return;
    if (seq->type != YAML_SEQUENCE_NODE) {
        char buf[64];
        acemq__load_error(l, acemq__load_where(seq),
                          "expected a sequence of steps for 'steps', found %s",
                          acemq__load_found(seq, buf, sizeof buf));
        return;
    }
    if (l->depth >= ACEMQ__LOAD_MAX_DEPTH) {
        acemq__load_error(l, acemq__load_where(seq), "steps nest deeper than %d levels",
                          ACEMQ__LOAD_MAX_DEPTH);
        return;
    }
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n == 0) return;
    out->v = calloc(n, sizeof *out->v);
    if (!out->v) {
        acemq__load_nomem(l);
        return;
    }
    l->depth++;
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *el = acemq__load_node(l, seq->data.sequence.items.start[i]);
        if (el) load_step(l, el, &out->v[out->n++]);
    }
    l->depth--;
}

static void step_free(acemq__step *s)
{
    free(s->id);
    free(s->name);
    acemq__expr_free(s->expr);
    free(s->expr_text);
    acemq__pred_free(s->pred);
    free(s->pred_text);
    acemq__steps_free(&s->steps);
    for (size_t i = 0; i < s->n_whens; i++) {
        acemq__pred_free(s->whens[i].pred);
        free(s->whens[i].text);
        acemq__steps_free(&s->whens[i].steps);
    }
    free(s->whens);
    acemq__uri_free(&s->to);
    free(s->command);
}

void acemq__steps_free(acemq__steps *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++)
        step_free(&s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}
