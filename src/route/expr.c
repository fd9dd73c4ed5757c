/* expr.c — templates of Camel's simple language (expr.h): literal text with
 * ${...} parts, compiled once into a list of parts and evaluated per
 * exchange, and the SimpleDateFormat subset of ${date:now:PATTERN}. */
#include "route/expr.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acemq/common.h"
#include "route/expr_internal.h"

typedef enum part_kind {
    PART_TEXT,
    PART_HEADER,
    PART_PROPERTY,
    PART_BODY,
    PART_ID,
    PART_DATE
} part_kind;

typedef enum date_kind {
    DATE_TEXT,
    DATE_YEAR,
    DATE_YEAR2,
    DATE_MONTH,
    DATE_MONTH_SHORT,
    DATE_MONTH_LONG,
    DATE_DAY,
    DATE_HOUR,
    DATE_MINUTE,
    DATE_SECOND,
    DATE_MILLI
} date_kind;

/* One piece of a date pattern: literal text (a span of the pool) or a
 * field printed zero-padded to `width` digits. */
typedef struct date_item {
    date_kind kind;
    size_t off, len; /* DATE_TEXT: the span in the pool */
    size_t width;    /* fields: how many pattern letters there were */
} date_item;

typedef struct part {
    part_kind kind;
    size_t off, len;  /* PART_TEXT: a span of the pool; HEADER, PROPERTY: the name at
                         pool + off, NUL-terminated (the NUL replaces its "}") */
    date_item *items; /* PART_DATE */
    size_t n_items, cap_items;
} part;

/* The pool is a copy of the template's text that the parts point into. A
 * literal span never covers a ${...} part, so a part may rewrite its own
 * bytes: a name's closing "}" becomes its NUL, and a date pattern's literal
 * text is unquoted in place (never longer than the pattern it comes from). */
struct acemq__expr {
    char *pool;
    size_t pool_len;
    part *parts;
    size_t n, cap;
};

static const char *const month_short[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const month_long[12] = {"January",   "February", "March",    "April",
                                           "May",       "June",     "July",     "August",
                                           "September", "October",  "November", "December"};

void acemq__expr_set_error(acemq__expr_error *err, size_t offset, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->offset = offset;
}

static int no_memory(acemq__expr_error *err, size_t offset)
{
    acemq__expr_set_error(err, offset, "out of memory");
    return ACEMQ_ENOMEM;
}

static part *add_part(acemq__expr *e, part_kind kind, size_t off, size_t len)
{
    if (!e->parts || e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 4;
        part *parts = realloc(e->parts, cap * sizeof *parts);
        if (!parts) return NULL;
        e->parts = parts;
        e->cap = cap;
    }
    part *p = &e->parts[e->n++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->off = off;
    p->len = len;
    return p;
}

static date_item *add_item(part *p, date_kind kind)
{
    if (!p->items || p->n_items == p->cap_items) {
        size_t cap = p->cap_items ? p->cap_items * 2 : 8;
        date_item *items = realloc(p->items, cap * sizeof *items);
        if (!items) return NULL;
        p->items = items;
        p->cap_items = cap;
    }
    date_item *d = &p->items[p->n_items++];
    memset(d, 0, sizeof *d);
    d->kind = kind;
    return d;
}

/* Appends one literal byte of a date pattern, written at pool[*w]. */
static int date_literal(acemq__expr *e, part *p, size_t *w, char c)
{
    date_item *last = p->n_items ? &p->items[p->n_items - 1] : NULL;
    if (!last || last->kind != DATE_TEXT) {
        last = add_item(p, DATE_TEXT);
        if (!last) return ACEMQ_ENOMEM;
        last->off = *w;
    }
    e->pool[(*w)++] = c;
    last->len++;
    return 0;
}

static int is_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int date_field(char letter, size_t run, date_kind *kind)
{
    switch (letter) {
    case 'y':
        *kind = run == 2 ? DATE_YEAR2 : DATE_YEAR;
        return 0;
    case 'M':
        *kind = run >= 4 ? DATE_MONTH_LONG : run == 3 ? DATE_MONTH_SHORT : DATE_MONTH;
        return 0;
    case 'd':
        *kind = DATE_DAY;
        return 0;
    case 'H':
        *kind = DATE_HOUR;
        return 0;
    case 'm':
        *kind = DATE_MINUTE;
        return 0;
    case 's':
        *kind = DATE_SECOND;
        return 0;
    case 'S':
        *kind = DATE_MILLI;
        return 0;
    default:
        return -1;
    }
}

/* Compiles the pattern pool[start, end) of a ${date:now:...} part. */
static int compile_date(acemq__expr *e, part *p, size_t start, size_t end, size_t base,
                        acemq__expr_error *err)
{
    size_t r = start, w = start; /* read and write positions: w <= r throughout */
    while (r < end) {
        char c = e->pool[r];
        if (c == '\'' && r + 1 < end && e->pool[r + 1] == '\'') {
            if (date_literal(e, p, &w, '\'') != 0) return no_memory(err, base + r);
            r += 2;
        } else if (c == '\'') {
            size_t open = r++;
            for (;;) {
                if (r >= end) {
                    acemq__expr_set_error(err, base + open, "unterminated quote in date pattern");
                    return ACEMQ_EINVAL;
                }
                if (e->pool[r] == '\'' && (r + 1 >= end || e->pool[r + 1] != '\'')) break;
                if (e->pool[r] == '\'') r++; /* '' inside quotes is one quote */
                if (date_literal(e, p, &w, e->pool[r]) != 0) return no_memory(err, base + r);
                r++;
            }
            r++;
        } else if (is_letter(c)) {
            size_t run = 1;
            while (r + run < end && e->pool[r + run] == c)
                run++;
            date_kind kind;
            if (date_field(c, run, &kind) != 0) {
                acemq__expr_set_error(err, base + r,
                                      "unknown date pattern letter '%c' (known: y M d H m s S)", c);
                return ACEMQ_EINVAL;
            }
            date_item *d = add_item(p, kind);
            if (!d) return no_memory(err, base + r);
            d->width = run;
            r += run;
        } else {
            if (date_literal(e, p, &w, c) != 0) return no_memory(err, base + r);
            r++;
        }
    }
    return 0;
}

static int starts(const char *s, size_t n, const char *prefix)
{
    size_t k = strlen(prefix);
    return n >= k && memcmp(s, prefix, k) == 0;
}

static int is_word(const char *s, size_t n, const char *word)
{
    return n == strlen(word) && memcmp(s, word, n) == 0;
}

/* The prefixes of a named field, Camel's aliases included. */
static const struct {
    const char *prefix;
    part_kind kind;
    const char *what;
} named[] = {
    {"header.", PART_HEADER, "header"},
    {"headers.", PART_HEADER, "header"},
    {"in.header.", PART_HEADER, "header"},
    {"in.headers.", PART_HEADER, "header"},
    {"exchangeProperty.", PART_PROPERTY, "property"},
};

/* Compiles the ${...} whose function is pool[start, end) (end is its "}"). */
static int compile_function(acemq__expr *e, size_t start, size_t end, size_t base,
                            acemq__expr_error *err)
{
    const char *f = e->pool + start;
    size_t n = end - start;
    if (is_word(f, n, "body") || is_word(f, n, "in.body"))
        return add_part(e, PART_BODY, 0, 0) ? 0 : no_memory(err, base + start);
    if (is_word(f, n, "id") || is_word(f, n, "exchangeId") || is_word(f, n, "messageId"))
        return add_part(e, PART_ID, 0, 0) ? 0 : no_memory(err, base + start);
    for (size_t i = 0; i < sizeof named / sizeof *named; i++) {
        if (!starts(f, n, named[i].prefix)) continue;
        size_t k = strlen(named[i].prefix);
        if (k == n) {
            acemq__expr_set_error(err, base + end, "empty %s name in ${%s}", named[i].what,
                                  named[i].prefix);
            return ACEMQ_EINVAL;
        }
        if (!add_part(e, named[i].kind, start + k, n - k)) return no_memory(err, base + start);
        e->pool[end] = '\0';
        return 0;
    }
    if (starts(f, n, "date:")) {
        const char *cmd = f + 5;
        const char *colon = memchr(cmd, ':', n - 5);
        size_t cmd_len = colon ? (size_t)(colon - cmd) : n - 5;
        if (!is_word(cmd, cmd_len, "now")) {
            acemq__expr_set_error(err, base + start + 5,
                                  "unknown date command '%.*s' in ${date:...} (known: now)",
                                  (int)(cmd_len > 40 ? 40 : cmd_len), cmd);
            return ACEMQ_EINVAL;
        }
        if (!colon || start + 9 == end) {
            acemq__expr_set_error(err, base + end,
                                  "missing date pattern: write ${date:now:PATTERN}");
            return ACEMQ_EINVAL;
        }
        part *p = add_part(e, PART_DATE, 0, 0);
        if (!p) return no_memory(err, base + start);
        return compile_date(e, p, start + 9, end, base, err);
    }
    acemq__expr_set_error(err, base + start, "unknown function ${%.*s}", (int)(n > 60 ? 60 : n), f);
    return ACEMQ_EINVAL;
}

static int add_text(acemq__expr *e, size_t from, size_t to)
{
    if (from == to) return 0;
    return add_part(e, PART_TEXT, from, to - from) ? 0 : ACEMQ_ENOMEM;
}

int acemq__expr_compile_span(const char *text, size_t len, size_t base, acemq__expr **out,
                             acemq__expr_error *err)
{
    *out = NULL;
    acemq__expr *e = calloc(1, sizeof *e);
    if (!e) return no_memory(err, base);
    e->pool = malloc(len + 1);
    if (!e->pool) {
        free(e);
        return no_memory(err, base);
    }
    memcpy(e->pool, text, len);
    e->pool[len] = '\0';
    e->pool_len = len;

    int rc = 0;
    size_t i = 0, lit = 0; /* lit: where the literal text being gathered starts */
    while (rc == 0 && i < len) {
        if (e->pool[i] != '$' || i + 1 >= len || e->pool[i + 1] != '{') {
            i++;
            continue;
        }
        const char *close = memchr(e->pool + i + 2, '}', len - i - 2);
        if (!close) {
            acemq__expr_set_error(err, base + i, "unterminated ${ (no closing })");
            rc = ACEMQ_EINVAL;
            break;
        }
        size_t end = (size_t)(close - e->pool);
        rc = add_text(e, lit, i);
        if (rc != 0) {
            rc = no_memory(err, base + i);
            break;
        }
        rc = compile_function(e, i + 2, end, base, err);
        i = lit = end + 1;
    }
    if (rc == 0 && add_text(e, lit, len) != 0) rc = no_memory(err, base + lit);
    if (rc != 0) {
        acemq__expr_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

int acemq__expr_compile(const char *text, acemq__expr **out, acemq__expr_error *err)
{
    acemq__expr_error scratch;
    if (!err) err = &scratch;
    if (!out) return ACEMQ_EINVAL;
    *out = NULL;
    if (!text) {
        acemq__expr_set_error(err, 0, "no template text");
        return ACEMQ_EINVAL;
    }
    return acemq__expr_compile_span(text, strlen(text), 0, out, err);
}

int acemq__expr_is_constant(const acemq__expr *e)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->parts[i].kind != PART_TEXT) return 0;
    return 1;
}

const char *acemq__expr_constant_text(const acemq__expr *e, size_t *n)
{
    if (!acemq__expr_is_constant(e)) return NULL;
    *n = e->pool_len; /* the one text part, if any, spans the whole pool */
    return e->pool;
}

void acemq__expr_free(acemq__expr *e)
{
    if (!e) return;
    for (size_t i = 0; i < e->n; i++)
        free(e->parts[i].items);
    free(e->parts);
    free(e->pool);
    free(e);
}

/* The clock, read once per evaluation so that every date part agrees. */
typedef struct now {
    int read;
    struct tm tm;
    long millis;
} now;

static int read_now(now *t)
{
    if (t->read) return 0;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return ACEMQ_EIO;
    if (!gmtime_r(&ts.tv_sec, &t->tm)) return ACEMQ_ERANGE;
    t->millis = ts.tv_nsec / 1000000;
    t->read = 1;
    return 0;
}

/* Appends v in decimal, zero-padded to width digits. */
static int put_number(acemq__buf *out, long long v, size_t width)
{
    static const char zeros[] = "0000000000000000";
    char digits[24];
    int rc = 0;
    if (v < 0) {
        rc = acemq__buf_put(out, "-", 1);
        v = -v;
    }
    int k = snprintf(digits, sizeof digits, "%lld", v);
    if (k < 0) return ACEMQ_EINVAL;
    for (size_t pad = width > (size_t)k ? width - (size_t)k : 0; rc == 0 && pad > 0;) {
        size_t chunk = pad < sizeof zeros - 1 ? pad : sizeof zeros - 1;
        rc = acemq__buf_put(out, zeros, chunk);
        pad -= chunk;
    }
    return rc == 0 ? acemq__buf_put(out, digits, (size_t)k) : rc;
}

static int eval_date(const acemq__expr *e, const part *p, now *t, acemq__buf *out)
{
    int rc = read_now(t);
    long long year = (long long)t->tm.tm_year + 1900;
    int mon = t->tm.tm_mon;
    for (size_t i = 0; rc == 0 && i < p->n_items; i++) {
        const date_item *d = &p->items[i];
        switch (d->kind) {
        case DATE_TEXT:
            rc = acemq__buf_put(out, e->pool + d->off, d->len);
            break;
        case DATE_YEAR:
            rc = put_number(out, year, d->width);
            break;
        case DATE_YEAR2:
            rc = put_number(out, (year % 100 + 100) % 100, 2);
            break;
        case DATE_MONTH:
            rc = put_number(out, mon + 1, d->width);
            break;
        case DATE_MONTH_SHORT:
            rc = acemq__buf_puts(out, month_short[mon]);
            break;
        case DATE_MONTH_LONG:
            rc = acemq__buf_puts(out, month_long[mon]);
            break;
        case DATE_DAY:
            rc = put_number(out, t->tm.tm_mday, d->width);
            break;
        case DATE_HOUR:
            rc = put_number(out, t->tm.tm_hour, d->width);
            break;
        case DATE_MINUTE:
            rc = put_number(out, t->tm.tm_min, d->width);
            break;
        case DATE_SECOND:
            rc = put_number(out, t->tm.tm_sec, d->width);
            break;
        case DATE_MILLI:
            rc = put_number(out, t->millis, d->width);
            break;
        }
    }
    return rc;
}

static size_t id_len(const acemq__exchange *x)
{
    return strnlen(x->id, sizeof x->id);
}

static int eval_part(const acemq__expr *e, const part *p, const acemq__exchange *x, now *t,
                     acemq__buf *out)
{
    const char *v;
    switch (p->kind) {
    case PART_TEXT:
        return acemq__buf_put(out, e->pool + p->off, p->len);
    case PART_HEADER:
        v = acemq__fields_get(&x->headers, e->pool + p->off);
        return v ? acemq__buf_puts(out, v) : 0;
    case PART_PROPERTY:
        v = acemq__fields_get(&x->properties, e->pool + p->off);
        return v ? acemq__buf_puts(out, v) : 0;
    case PART_BODY:
        return acemq__buf_put(out, x->body.p, x->body.len);
    case PART_ID:
        return acemq__buf_put(out, x->id, id_len(x));
    case PART_DATE:
        return eval_date(e, p, t, out);
    }
    return ACEMQ_EINVAL;
}

int acemq__expr_eval(const acemq__expr *e, const acemq__exchange *x, acemq__buf *out)
{
    size_t mark = out->len;
    now t = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < e->n; i++)
        rc = eval_part(e, &e->parts[i], x, &t, out);
    if (rc != 0 && out->p) { /* the buffer as it was */
        out->len = mark;
        out->p[mark] = '\0';
    }
    return rc;
}

int acemq__expr_view(const acemq__expr *e, const acemq__exchange *x, acemq__buf *scratch,
                     const char **p, size_t *n)
{
    const char *v = NULL;
    if (e->n == 0) {
        *p = "";
        *n = 0;
        return 0;
    }
    if (e->n == 1) {
        const part *only = &e->parts[0];
        switch (only->kind) {
        case PART_TEXT:
            *p = e->pool;
            *n = e->pool_len;
            return 0;
        case PART_HEADER:
        case PART_PROPERTY:
            v = acemq__fields_get(only->kind == PART_HEADER ? &x->headers : &x->properties,
                                  e->pool + only->off);
            *p = v ? v : "";
            *n = v ? strlen(v) : 0;
            return v ? 0 : 1;
        case PART_BODY:
            *p = acemq__buf_str(&x->body);
            *n = x->body.len;
            return 0;
        case PART_ID:
            *p = x->id;
            *n = id_len(x);
            if (*n == sizeof x->id) break; /* not NUL-terminated: copy it */
            return 0;
        case PART_DATE:
            break;
        }
    }
    acemq__buf_clear(scratch);
    int rc = acemq__expr_eval(e, x, scratch);
    if (rc == 0 && !scratch->p) rc = acemq__buf_put(scratch, "", 0);
    if (rc != 0) return rc;
    *p = scratch->p;
    *n = scratch->len;
    return 0;
}
