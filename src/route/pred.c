/* pred.c — predicates of Camel's simple language (expr.h): comparisons of
 * templates joined by && and ||, parsed once into a tree by recursive
 * descent and evaluated per exchange. */
#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "route/expr.h"
#include "route/expr_internal.h"

/* Parentheses deeper than this are refused, which bounds the recursion of
 * parsing, evaluating and freeing; && and || chains are flat lists. */
#define MAX_DEPTH 64

typedef enum node_kind { NODE_OR, NODE_AND, NODE_CMP, NODE_LONE } node_kind;
typedef enum op { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_CONTAINS, OP_REGEX } op;

/* OPERAND_FIELD is a ${...}: a lone absent header or property in it reads as
 * null. OPERAND_TEXT is quoted text, a number, true or false: never null. */
typedef enum operand_kind { OPERAND_NULL, OPERAND_FIELD, OPERAND_TEXT } operand_kind;

typedef struct operand {
    operand_kind kind;
    acemq__expr *e; /* not OPERAND_NULL */
} operand;

typedef struct node {
    node_kind kind;
    struct node **kids; /* NODE_OR, NODE_AND: two or more */
    size_t n, cap;
    op op;        /* NODE_CMP */
    operand l, r; /* NODE_CMP; NODE_LONE uses l */
    int has_re;   /* NODE_CMP with OP_REGEX and a constant pattern: re holds it */
    regex_t re;
} node;

struct acemq__pred {
    node *root;
};

typedef struct parser {
    const char *s;
    size_t len, i;
    int depth;
    int rc; /* what the failing parse returns: ACEMQ_EINVAL or ACEMQ_ENOMEM */
    acemq__expr_error *err;
} parser;

static void free_operand(operand *o)
{
    acemq__expr_free(o->e);
    o->e = NULL;
}

static void free_node(node *n)
{
    if (!n) return;
    for (size_t i = 0; i < n->n; i++)
        free_node(n->kids[i]);
    free(n->kids);
    free_operand(&n->l);
    free_operand(&n->r);
    if (n->has_re) regfree(&n->re);
    free(n);
}

/* Records the first error (ACEMQ_ENOMEM reads "out of memory"); NULL for the
 * caller to return. */
static void *fail(parser *p, int rc, size_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void *fail(parser *p, int rc, size_t offset, const char *fmt, ...)
{
    if (rc == ACEMQ_ENOMEM) {
        acemq__expr_set_error(p->err, offset, "out of memory");
    } else {
        va_list ap;
        va_start(ap, fmt);
        (void)vsnprintf(p->err->message, sizeof p->err->message, fmt, ap);
        va_end(ap);
        p->err->offset = offset;
    }
    p->rc = rc;
    return NULL;
}

static void skip_space(parser *p)
{
    while (p->i < p->len && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                             p->s[p->i] == '\r' || p->s[p->i] == '\f' || p->s[p->i] == '\v'))
        p->i++;
}

static int at(const parser *p, const char *tok)
{
    size_t k = strlen(tok);
    return p->len - p->i >= k && memcmp(p->s + p->i, tok, k) == 0;
}

static int is_alnum(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* Characters of a bare operand: true, false, null, a number. */
static int is_word_char(char c)
{
    return is_alnum(c) || c == '.' || c == '-' || c == '+';
}

/* A short quotable excerpt of the text at offset, for messages. */
static const char *excerpt(const parser *p, size_t offset, char *buf, size_t size)
{
    size_t n = 0;
    while (offset + n < p->len && n + 1 < size && p->s[offset + n] != ' ' &&
           p->s[offset + n] != '\t' && p->s[offset + n] != '\n')
        n++;
    memcpy(buf, p->s + offset, n);
    buf[n] = '\0';
    return buf;
}

/* 1 when the n bytes at s read as a decimal number (strtod on the whole
 * text, without hex, inf or nan, and in range), with its value in *v.
 * s[n] is a byte that cannot continue a number (a NUL, for viewed text). */
static int as_number(const char *s, size_t n, double *v)
{
    int digit = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] >= '0' && s[i] <= '9')
            digit = 1;
        else if (s[i] != '.' && s[i] != '-' && s[i] != '+' && s[i] != 'e' && s[i] != 'E')
            return 0;
    }
    if (!digit) return 0;
    char *end = NULL;
    errno = 0;
    double d = strtod(s, &end);
    if (end != s + n || errno == ERANGE) return 0;
    *v = d;
    return 1;
}

/* Compiles the span s[from, to) as a template into o. */
static int compile_operand(parser *p, operand *o, operand_kind kind, size_t from, size_t to)
{
    o->kind = kind;
    int rc = acemq__expr_compile_span(p->s + from, to - from, from, &o->e, p->err);
    if (rc != 0) p->rc = rc;
    return rc;
}

static int parse_operand(parser *p, operand *o)
{
    char buf[32];
    skip_space(p);
    size_t start = p->i;
    if (start >= p->len) {
        fail(p, ACEMQ_EINVAL, start, "missing operand at the end of the text");
        return p->rc;
    }
    char c = p->s[start];
    if (c == '$' && at(p, "${")) {
        const char *close = memchr(p->s + start, '}', p->len - start);
        if (!close) {
            fail(p, ACEMQ_EINVAL, start, "unterminated ${ (no closing })");
            return p->rc;
        }
        p->i = (size_t)(close - p->s) + 1;
        return compile_operand(p, o, OPERAND_FIELD, start, p->i);
    }
    if (c == '\'' || c == '"') {
        /* A quoted text ends at its next quote outside ${...}: the template
         * inside may quote its own text, as in ${date:now:'T'}. */
        size_t i = start + 1;
        while (i < p->len && p->s[i] != c) {
            if (p->s[i] == '$' && i + 1 < p->len && p->s[i + 1] == '{') {
                const char *close = memchr(p->s + i, '}', p->len - i);
                if (!close) {
                    fail(p, ACEMQ_EINVAL, i, "unterminated ${ (no closing })");
                    return p->rc;
                }
                i = (size_t)(close - p->s);
            }
            i++;
        }
        if (i >= p->len) {
            fail(p, ACEMQ_EINVAL, start, "unterminated quoted text (no closing %s)",
                 c == '"' ? "\"" : "'");
            return p->rc;
        }
        p->i = i + 1;
        return compile_operand(p, o, OPERAND_TEXT, start + 1, i);
    }
    size_t end = start;
    while (end < p->len && is_word_char(p->s[end]))
        end++;
    size_t n = end - start;
    double ignored;
    if (n == 4 && memcmp(p->s + start, "null", 4) == 0) {
        o->kind = OPERAND_NULL;
        p->i = end;
        return 0;
    }
    if ((n == 4 && memcmp(p->s + start, "true", 4) == 0) ||
        (n == 5 && memcmp(p->s + start, "false", 5) == 0) || as_number(p->s + start, n, &ignored)) {
        p->i = end;
        return compile_operand(p, o, OPERAND_TEXT, start, end);
    }
    if (n == 0)
        fail(p, ACEMQ_EINVAL, start,
             "expected an operand (${...}, quoted text, a number, true, false or null) at '%s'",
             excerpt(p, start, buf, sizeof buf));
    else
        fail(p, ACEMQ_EINVAL, start, "unknown operand '%s' (quote text: 'like this')",
             excerpt(p, start, buf, sizeof buf));
    return p->rc;
}

/* Reads a comparison operator: 1 with *o, or 0 with p->i unmoved. */
static int read_op(parser *p, op *o)
{
    static const struct {
        const char *tok;
        op op;
        int word;
    } ops[] = {{"==", OP_EQ, 0},
               {"!=", OP_NE, 0},
               {"<=", OP_LE, 0},
               {">=", OP_GE, 0},
               {"<", OP_LT, 0},
               {">", OP_GT, 0},
               {"contains", OP_CONTAINS, 1},
               {"regex", OP_REGEX, 1}};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        size_t n = strlen(ops[k].tok);
        if (!at(p, ops[k].tok)) continue;
        if (ops[k].word && p->i + n < p->len && is_alnum(p->s[p->i + n])) continue;
        p->i += n;
        *o = ops[k].op;
        return 1;
    }
    return 0;
}

/* 1 at the end of a comparison: the end, ")", "&&" or "||". */
static int at_boundary(const parser *p)
{
    return p->i >= p->len || p->s[p->i] == ')' || at(p, "&&") || at(p, "||");
}

/* glibc's regcomp copies a group once per repetition it allows (x+ is
 * x x*, x{2,9} nine copies), so nested or stacked repetitions grow the
 * compiled pattern exponentially, and its matching time grows with the
 * square of that size. A pattern is refused when an estimate of its copied
 * size passes REGEX_MAX_NODES, so that neither a route file nor a header
 * that supplies a pattern can exhaust memory or time. */
#define REGEX_MAX_NODES 2000.0
#define REGEX_MAX_GROUPS 32

/* The size of one nesting level: the branches already closed, and the last
 * element, to which a repetition that follows applies. */
typedef struct regex_level {
    double done, last;
} regex_level;

static void regex_element(regex_level *l, double size)
{
    l->done += l->last;
    l->last = size;
}

/* Skips a bracket expression starting at pat[i] == '['; returns the index of
 * its closing ']' (or of the NUL, when it has none: regcomp refuses it). */
static size_t skip_bracket(const char *pat, size_t i)
{
    i++;
    if (pat[i] == '^') i++;
    if (pat[i] == ']') i++;
    while (pat[i] && pat[i] != ']') {
        if (pat[i] == '[' && (pat[i + 1] == ':' || pat[i + 1] == '.' || pat[i + 1] == '=')) {
            char kind = pat[i + 1];
            i += 2;
            while (pat[i] && !(pat[i] == kind && pat[i + 1] == ']'))
                i++;
            if (!pat[i]) return i;
            i += 2;
        } else {
            i++;
        }
    }
    return i;
}

/* The copies x{n}, x{n,} or x{n,m} at pat[i] == '{' makes; *i moves to its '}'. */
static double repeats(const char *pat, size_t *i)
{
    double n = 0, m = -1;
    size_t j = *i + 1;
    for (; pat[j] >= '0' && pat[j] <= '9'; j++)
        if (n < 1e9) n = n * 10 + (pat[j] - '0'); /* past any limit, and finite */
    if (pat[j] == ',') {
        m = 0;
        for (j++; pat[j] >= '0' && pat[j] <= '9'; j++)
            if (m < 1e9) m = m * 10 + (pat[j] - '0');
        if (pat[j - 1] == ',') m = n + 1; /* x{n,}: n copies and a star */
    }
    if (pat[j] != '}') return 1; /* not an interval: regcomp judges it */
    *i = j;
    return m > n ? m : n;
}

/* NULL when regcomp may compile pat, or why it must not. Adjacent
 * repetitions ("a*?", "a+*") are undefined in POSIX extended syntax, and
 * glibc's time to compile and match a stack of them grows much faster than
 * the stack, so they are refused too. */
static const char *regex_refusal(const char *pat)
{
    regex_level st[REGEX_MAX_GROUPS + 1] = {{0, 0}};
    size_t d = 0;
    int after_repetition = 0; /* the element before pat[i] was a repetition */
    for (size_t i = 0; pat[i]; i++) {
        int repetition = pat[i] == '*' || pat[i] == '+' || pat[i] == '?';
        size_t interval_end = i;
        double copies = 0;
        if (pat[i] == '{') {
            copies = repeats(pat, &interval_end);
            repetition = interval_end != i; /* an interval, not a literal '{' */
        }
        if (repetition && after_repetition)
            return "adjacent repetitions (such as '*?' or '+*') are undefined in POSIX extended "
                   "syntax";
        after_repetition = repetition;
        switch (pat[i]) {
        case '(':
            if (d == REGEX_MAX_GROUPS) return "groups nest too deeply";
            st[++d] = (regex_level){0, 0};
            break;
        case ')':
            if (d == 0) { /* glibc reads a lone ')' as itself */
                regex_element(&st[0], 1);
                break;
            }
            d--;
            regex_element(&st[d], st[d + 1].done + st[d + 1].last + 1);
            break;
        case '|':
            regex_element(&st[d], 1);
            break;
        case '*':
        case '?':
            st[d].last += 1;
            break;
        case '+':
            st[d].last = st[d].last * 2 + 1;
            break;
        case '{':
            st[d].last = st[d].last * (copies + 1) + 1;
            i = interval_end;
            break;
        case '[':
            i = skip_bracket(pat, i);
            regex_element(&st[d], 1);
            if (!pat[i]) i--; /* the loop's i++ lands on the NUL */
            break;
        case '\\':
            if (pat[i + 1] >= '1' && pat[i + 1] <= '9')
                return "back-references are not POSIX extended syntax";
            if (pat[i + 1]) i++;
            regex_element(&st[d], 1);
            break;
        default:
            regex_element(&st[d], 1);
            break;
        }
        if (st[d].done + st[d].last > REGEX_MAX_NODES) return "too complex (repetitions multiply)";
    }
    double total = 0;
    for (size_t k = 0; k <= d; k++)
        total += st[k].done + st[k].last;
    return total > REGEX_MAX_NODES ? "too complex (repetitions multiply)" : NULL;
}

static int compile_regex(parser *p, node *n, size_t offset)
{
    size_t len;
    const char *pattern = acemq__expr_constant_text(n->r.e, &len);
    const char *refusal = regex_refusal(pattern);
    if (refusal) {
        fail(p, ACEMQ_EINVAL, offset, "bad regex: %s", refusal);
        return p->rc;
    }
    int rc = regcomp(&n->re, pattern, REG_EXTENDED);
    if (rc == 0) {
        n->has_re = 1;
        return 0;
    }
    if (rc == REG_ESPACE) {
        fail(p, ACEMQ_ENOMEM, offset, "out of memory");
        return p->rc;
    }
    char why[100];
    (void)regerror(rc, &n->re, why, sizeof why);
    fail(p, ACEMQ_EINVAL, offset, "bad regex: %s", why);
    return p->rc;
}

static node *new_node(parser *p, node_kind kind)
{
    node *n = calloc(1, sizeof *n);
    if (!n) return fail(p, ACEMQ_ENOMEM, p->i, "out of memory");
    n->kind = kind;
    return n;
}

static node *parse_comparison(parser *p)
{
    char buf[32];
    node *n = new_node(p, NODE_LONE);
    if (!n) return NULL;
    if (parse_operand(p, &n->l) != 0) goto failed;
    skip_space(p);
    if (at_boundary(p)) return n;
    size_t op_at = p->i;
    if (!read_op(p, &n->op)) {
        fail(p, ACEMQ_EINVAL, op_at, "unknown operator '%s'", excerpt(p, op_at, buf, sizeof buf));
        goto failed;
    }
    n->kind = NODE_CMP;
    skip_space(p);
    size_t right_at = p->i;
    if (parse_operand(p, &n->r) != 0) goto failed;
    if (n->op == OP_REGEX && n->r.kind == OPERAND_TEXT && acemq__expr_is_constant(n->r.e) &&
        compile_regex(p, n, right_at) != 0)
        goto failed;
    return n;
failed:
    free_node(n);
    return NULL;
}

static node *parse_or(parser *p);

static node *parse_unary(parser *p)
{
    skip_space(p);
    if (p->i >= p->len || p->s[p->i] != '(') return parse_comparison(p);
    size_t open = p->i++;
    if (++p->depth > MAX_DEPTH)
        return fail(p, ACEMQ_EINVAL, open, "parentheses nest deeper than %d", MAX_DEPTH);
    node *n = parse_or(p);
    if (!n) return NULL;
    skip_space(p);
    if (p->i >= p->len) {
        free_node(n);
        return fail(p, ACEMQ_EINVAL, open, "unbalanced parentheses: this '(' is never closed");
    }
    if (p->s[p->i] != ')') {
        char buf[32];
        free_node(n);
        return fail(p, ACEMQ_EINVAL, p->i, "expected ')', && or || at '%s'",
                    excerpt(p, p->i, buf, sizeof buf));
    }
    p->i++;
    p->depth--;
    return n;
}

static int add_kid(node *list, node *kid)
{
    if (!list->kids || list->n == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 4;
        node **kids = realloc(list->kids, cap * sizeof(node *));
        if (!kids) return ACEMQ_ENOMEM;
        list->kids = kids;
        list->cap = cap;
    }
    list->kids[list->n++] = kid;
    return 0;
}

/* One or more terms joined by tok: the term alone, or a flat list of them. */
static node *parse_list(parser *p, node_kind kind, const char *tok, node *(*term)(parser *))
{
    node *first = term(p);
    if (!first) return NULL;
    node *list = NULL;
    for (;;) {
        skip_space(p);
        if (!at(p, tok)) break;
        p->i += 2;
        if (!list) {
            list = new_node(p, kind);
            if (!list) {
                free_node(first);
                return NULL;
            }
            if (add_kid(list, first) != 0) {
                free_node(first);
                free_node(list);
                return fail(p, ACEMQ_ENOMEM, p->i, "out of memory");
            }
        }
        node *next = term(p);
        if (!next) break;
        if (add_kid(list, next) != 0) {
            free_node(next);
            fail(p, ACEMQ_ENOMEM, p->i, "out of memory");
            break;
        }
    }
    if (p->rc != 0) {
        free_node(list ? list : first);
        return NULL;
    }
    return list ? list : first;
}

static node *parse_and(parser *p)
{
    return parse_list(p, NODE_AND, "&&", parse_unary);
}

static node *parse_or(parser *p)
{
    return parse_list(p, NODE_OR, "||", parse_and);
}

int acemq__pred_compile(const char *text, acemq__pred **out, acemq__expr_error *err)
{
    acemq__expr_error scratch;
    if (!err) err = &scratch;
    if (!out) return ACEMQ_EINVAL;
    *out = NULL;
    if (!text) {
        acemq__expr_set_error(err, 0, "no predicate text");
        return ACEMQ_EINVAL;
    }
    parser p = {.s = text, .len = strlen(text), .err = err};
    node *root = parse_or(&p);
    if (!root) return p.rc;
    skip_space(&p);
    if (p.i < p.len) {
        char buf[32];
        free_node(root);
        if (p.s[p.i] == ')')
            fail(&p, ACEMQ_EINVAL, p.i, "unbalanced parentheses: no '(' before this ')'");
        else
            fail(&p, ACEMQ_EINVAL, p.i, "unexpected text after the comparison: '%s'",
                 excerpt(&p, p.i, buf, sizeof buf));
        return p.rc;
    }
    acemq__pred *pred = malloc(sizeof *pred);
    if (!pred) {
        free_node(root);
        fail(&p, ACEMQ_ENOMEM, 0, "out of memory");
        return p.rc;
    }
    pred->root = root;
    *out = pred;
    return 0;
}

void acemq__pred_free(acemq__pred *pred)
{
    if (!pred) return;
    free_node(pred->root);
    free(pred);
}

/* A text an operand reads as: null, or n bytes at s (NUL-terminated). */
typedef struct value {
    int null;
    const char *s;
    size_t n;
} value;

static int read_operand(const operand *o, const acemq__exchange *x, acemq__buf *scratch, value *v)
{
    memset(v, 0, sizeof *v);
    v->s = "";
    if (o->kind == OPERAND_NULL) {
        v->null = 1;
        return 0;
    }
    int rc = acemq__expr_view(o->e, x, scratch, &v->s, &v->n);
    if (rc < 0) return rc;
    v->null = rc == 1 && o->kind == OPERAND_FIELD;
    return 0;
}

static int contains(const value *hay, const value *needle)
{
    if (needle->n > hay->n) return 0;
    for (size_t i = 0; i + needle->n <= hay->n; i++)
        if (memcmp(hay->s + i, needle->s, needle->n) == 0) return 1;
    return 0;
}

/* 1 when re matches the whole of text. POSIX picks the longest of the
 * leftmost matches, so a match of the whole text exists exactly when the
 * match found runs from its first byte to its last; anchoring by wrapping
 * the pattern as ^(...)$ would misread a pattern with a lone ")" (a literal
 * to glibc), such as "a)|b". */
static int whole_match(const regex_t *re, const value *text)
{
    if (memchr(text->s, '\0', text->n)) return 0; /* no POSIX pattern matches a NUL */
    regmatch_t m[1];
    int rc = regexec(re, text->s, 1, m, 0);
    if (rc == REG_NOMATCH) return 0;
    if (rc != 0) return rc == REG_ESPACE ? ACEMQ_ENOMEM : 0;
    return m[0].rm_so == 0 && (size_t)m[0].rm_eo == text->n;
}

static int regex_match(const node *n, const value *l, const value *r)
{
    if (n->has_re) return whole_match(&n->re, l);
    /* A pattern made at run time: one that does not compile matches nothing. */
    if (memchr(r->s, '\0', r->n) || regex_refusal(r->s)) return 0;
    regex_t re;
    int rc = regcomp(&re, r->s, REG_EXTENDED);
    if (rc != 0) return rc == REG_ESPACE ? ACEMQ_ENOMEM : 0;
    rc = whole_match(&re, l);
    regfree(&re);
    return rc;
}

static int compare(const node *n, const value *l, const value *r)
{
    double a = 0, b = 0;
    int numbers = !l->null && !r->null && as_number(l->s, l->n, &a) && as_number(r->s, r->n, &b);
    int equal;
    switch (n->op) {
    case OP_EQ:
    case OP_NE:
        if (l->null || r->null)
            equal = l->null && r->null;
        else if (numbers)
            equal = a == b;
        else
            equal = l->n == r->n && memcmp(l->s, r->s, l->n) == 0;
        return n->op == OP_EQ ? equal : !equal;
    case OP_LT:
        return numbers && a < b;
    case OP_LE:
        return numbers && a <= b;
    case OP_GT:
        return numbers && a > b;
    case OP_GE:
        return numbers && a >= b;
    case OP_CONTAINS:
        return !l->null && !r->null && contains(l, r);
    case OP_REGEX:
        return l->null || r->null ? 0 : regex_match(n, l, r);
    }
    return 0;
}

static int eval_node(const node *n, const acemq__exchange *x, acemq__buf scratch[2])
{
    value l, r;
    int rc;
    switch (n->kind) {
    case NODE_OR:
    case NODE_AND:
        for (size_t i = 0; i < n->n; i++) {
            rc = eval_node(n->kids[i], x, scratch);
            if (rc < 0) return rc;
            if (rc == (n->kind == NODE_OR)) return rc; /* decided: stop early */
        }
        return n->kind == NODE_AND;
    case NODE_LONE:
        rc = read_operand(&n->l, x, &scratch[0], &l);
        if (rc != 0) return rc;
        return !l.null && l.n == 4 && memcmp(l.s, "true", 4) == 0;
    case NODE_CMP:
        rc = read_operand(&n->l, x, &scratch[0], &l);
        if (rc == 0) rc = read_operand(&n->r, x, &scratch[1], &r);
        return rc != 0 ? rc : compare(n, &l, &r);
    }
    return ACEMQ_EINVAL;
}

int acemq__pred_eval(const acemq__pred *pred, const acemq__exchange *x)
{
    acemq__buf scratch[2] = {{0}, {0}};
    int rc = eval_node(pred->root, x, scratch);
    acemq__buf_free(&scratch[0]);
    acemq__buf_free(&scratch[1]);
    return rc;
}
