/* test_route_expr.c — Camel's simple language (route/expr.h): templates,
 * aliases and dates; predicates with every operator, null, numbers against
 * text and precedence; each compile error's offset and message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <regex.h>

#include "acemq/common.h"
#include "route/exchange.h"
#include "route/expr.h"

/* An exchange with a known id, headers, properties and body. */
static int setup(void **state)
{
    acemq__exchange *x = malloc(sizeof *x);
    assert_non_null(x);
    acemq__exchange_init(x, "r1");
    (void)snprintf(x->id, sizeof x->id, "ex-1");
    assert_int_equal(acemq__fields_set(&x->headers, "a", "hello"), 0);
    assert_int_equal(acemq__fields_set(&x->headers, "name", "World"), 0);
    assert_int_equal(acemq__fields_set(&x->headers, "n", "5.0"), 0);
    assert_int_equal(acemq__fields_set(&x->headers, "empty", ""), 0);
    assert_int_equal(acemq__fields_set(&x->headers, "flag", "true"), 0);
    assert_int_equal(acemq__fields_set(&x->headers, "pat", "h[a-z]+"), 0);
    assert_int_equal(acemq__fields_set(&x->headers, "bad", "("), 0);
    assert_int_equal(acemq__fields_set(&x->headers, "big", "1e999"), 0);
    assert_int_equal(acemq__fields_set(&x->headers, "bomb", "(h|e)++++++++++++++++++++++++++llo"),
                     0);
    assert_int_equal(acemq__fields_set(&x->headers, "backref", "(a)\\1"), 0);
    assert_int_equal(acemq__fields_set(&x->properties, "p", "prop"), 0);
    assert_int_equal(acemq__exchange_set_body(x, "the body", 8), 0);
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    acemq__exchange *x = *state;
    acemq__exchange_free(x);
    free(x);
    return 0;
}

/* The template's text for x; the caller frees it. */
static char *render(const char *text, const acemq__exchange *x)
{
    acemq__expr *e = NULL;
    acemq__expr_error err = {{0}, 0};
    int rc = acemq__expr_compile(text, &e, &err);
    if (rc != 0) fail_msg("%s: %s at %zu", text, err.message, err.offset);
    acemq__buf out = {0};
    assert_int_equal(acemq__expr_eval(e, x, &out), 0);
    char *s = strdup(acemq__buf_str(&out));
    assert_non_null(s);
    acemq__buf_free(&out);
    acemq__expr_free(e);
    return s;
}

static void renders(const char *text, const acemq__exchange *x, const char *want)
{
    char *got = render(text, x);
    assert_string_equal(got, want);
    free(got);
}

static void expr_fails(const char *text, size_t offset, const char *message)
{
    acemq__expr *e = (acemq__expr *)&e; /* not NULL, so the test sees it cleared */
    acemq__expr_error err = {{0}, 0};
    assert_int_equal(acemq__expr_compile(text, &e, &err), ACEMQ_EINVAL);
    assert_null(e);
    assert_string_equal(err.message, message);
    assert_int_equal(err.offset, offset);
}

/* 1 or 0 for the predicate on x. */
static int holds(const char *text, const acemq__exchange *x)
{
    acemq__pred *p = NULL;
    acemq__expr_error err = {{0}, 0};
    int rc = acemq__pred_compile(text, &p, &err);
    if (rc != 0) fail_msg("%s: %s at %zu", text, err.message, err.offset);
    rc = acemq__pred_eval(p, x);
    acemq__pred_free(p);
    if (rc != 0 && rc != 1) fail_msg("%s: eval returned %d", text, rc);
    return rc;
}

#define TRUE_(text) assert_int_equal(holds(text, x), 1)
#define FALSE_(text) assert_int_equal(holds(text, x), 0)

static void pred_fails(const char *text, size_t offset, const char *message)
{
    acemq__pred *p = (acemq__pred *)&p;
    acemq__expr_error err = {{0}, 0};
    assert_int_equal(acemq__pred_compile(text, &p, &err), ACEMQ_EINVAL);
    assert_null(p);
    if (strcmp(err.message, message) != 0)
        fail_msg("%s: message \"%s\", wanted \"%s\"", text, err.message, message);
    if (err.offset != offset) fail_msg("%s: offset %zu, wanted %zu", text, err.offset, offset);
}

static int matches(const char *pattern, const char *s)
{
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    int rc = regexec(&re, s, 0, NULL, 0);
    regfree(&re);
    return rc == 0;
}

static int utc_year(void)
{
    time_t now = time(NULL);
    struct tm tm;
    assert_non_null(gmtime_r(&now, &tm));
    return tm.tm_year + 1900;
}

static void substitutes_parts(void **state)
{
    const acemq__exchange *x = *state;
    renders("Hi ${header.name}, body=${body} id=${id} p=${exchangeProperty.p}", x,
            "Hi World, body=the body id=ex-1 p=prop");
    renders("${header.a}${header.name}", x, "helloWorld");
    renders("no parts at all", x, "no parts at all");
    renders("", x, "");
}

static void accepts_camel_aliases(void **state)
{
    const acemq__exchange *x = *state;
    renders("${headers.name}|${in.header.name}|${in.headers.name}|${in.body}", x,
            "World|World|World|the body");
    renders("${exchangeId}|${messageId}|${id}", x, "ex-1|ex-1|ex-1");
}

static void absent_fields_are_empty(void **state)
{
    const acemq__exchange *x = *state;
    renders("[${header.nope}][${exchangeProperty.nope}][${header.empty}]", x, "[][][]");
    renders("[${header.p}][${exchangeProperty.a}]", x, "[][]"); /* headers are not properties */
}

static void dollar_without_brace_is_literal(void **state)
{
    const acemq__exchange *x = *state;
    renders("$5 and $$ and $", x, "$5 and $$ and $");
    renders("a$b${body}$", x, "a$bthe body$");
    renders("$${header.name}", x, "$World");
    renders("{body} }", x, "{body} }");
}

static void eval_appends_and_keeps_body_bytes(void **state)
{
    acemq__exchange *x = *state;
    acemq__expr *e = NULL;
    assert_int_equal(acemq__expr_compile("[${body}]", &e, NULL), 0);
    acemq__buf out = {0};
    assert_int_equal(acemq__buf_puts(&out, "pre:"), 0);
    assert_int_equal(acemq__expr_eval(e, x, &out), 0);
    assert_string_equal(acemq__buf_str(&out), "pre:[the body]");
    assert_int_equal(acemq__exchange_set_body(x, "a\0b", 3), 0);
    acemq__buf_clear(&out);
    assert_int_equal(acemq__expr_eval(e, x, &out), 0);
    assert_int_equal(out.len, 5);
    assert_memory_equal(out.p, "[a\0b]", 5);
    acemq__buf_free(&out);
    acemq__expr_free(e);
    acemq__expr_free(NULL);
}

static void knows_constant_templates(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int constant;
    } cases[] = {{"", 1},
                 {"plain $ text {}", 1},
                 {"${body}", 0},
                 {"x${header.a}", 0},
                 {"${date:now:yyyy}", 0},
                 {"${id}", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        acemq__expr *e = NULL;
        assert_int_equal(acemq__expr_compile(cases[i].text, &e, NULL), 0);
        assert_int_equal(acemq__expr_is_constant(e), cases[i].constant);
        acemq__expr_free(e);
    }
}

static void formats_dates_in_utc(void **state)
{
    const acemq__exchange *x = *state;
    int before = utc_year();
    char *d = render("${date:now:yyyy-MM-dd}", x);
    int after = utc_year();
    assert_true(matches("^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", d));
    int year = atoi(d);
    assert_true(year == before || year == after);
    free(d);

    d = render("${date:now:yyyy-MM-dd'T'HH:mm:ss.SSS'Z'}", x);
    assert_true(
        matches("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]\\.[0-9]{3}Z$", d));
    free(d);

    d = render("${date:now:yy}", x);
    assert_true(matches("^[0-9]{2}$", d));
    assert_true(atoi(d) == before % 100 || atoi(d) == after % 100);
    free(d);

    d = render("${date:now:'it''s' yyyy} ${date:now:''}", x);
    assert_true(matches("^it's [0-9]{4} '$", d));
    free(d);

    d = render("${date:now:MMM}|${date:now:MMMM}|${date:now:ddd}|${date:now:S}", x);
    assert_true(matches("^(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\\|"
                        "(January|February|March|April|May|June|July|August|September|"
                        "October|November|December)\\|0[0-3][0-9]\\|[0-9]{1,3}$",
                        d));
    free(d);

    d = render("${date:now:HH/mm-ss, 'at' [yyyyy]}", x);
    assert_true(matches("^[0-9]{2}/[0-9]{2}-[0-9]{2}, at \\[0[0-9]{4}\\]$", d));
    free(d);
}

static void reports_template_errors(void **state)
{
    (void)state;
    expr_fails("abc ${foo} x", 6, "unknown function ${foo}");
    expr_fails("${}", 2, "unknown function ${}");
    expr_fails("${ body}", 2, "unknown function ${ body}");
    expr_fails("x ${header.}", 11, "empty header name in ${header.}");
    expr_fails("${headers.}", 10, "empty header name in ${headers.}");
    expr_fails("${exchangeProperty.}", 19, "empty property name in ${exchangeProperty.}");
    expr_fails("ab ${body", 3, "unterminated ${ (no closing })");
    expr_fails("${body} ${", 8, "unterminated ${ (no closing })");
    expr_fails("${date:now:yyyy-QQ}", 16, "unknown date pattern letter 'Q' (known: y M d H m s S)");
    expr_fails("${date:now:EEE}", 11, "unknown date pattern letter 'E' (known: y M d H m s S)");
    expr_fails("${date:now:'abc}", 11, "unterminated quote in date pattern");
    expr_fails("${date:now:yy'a''}", 13, "unterminated quote in date pattern");
    expr_fails("${date:now}", 10, "missing date pattern: write ${date:now:PATTERN}");
    expr_fails("${date:now:}", 11, "missing date pattern: write ${date:now:PATTERN}");
    expr_fails("${date:later:yyyy}", 7, "unknown date command 'later' in ${date:...} (known: now)");

    acemq__expr *e = NULL;
    acemq__expr_error err;
    assert_int_equal(acemq__expr_compile(NULL, &e, &err), ACEMQ_EINVAL);
    assert_null(e);
    assert_string_equal(err.message, "no template text");
    assert_int_equal(acemq__expr_compile("${foo}", &e, NULL), ACEMQ_EINVAL); /* err optional */
    assert_null(e);
}

static void compares_equality(void **state)
{
    const acemq__exchange *x = *state;
    TRUE_("${header.a} == 'hello'");
    TRUE_("${header.a} == \"hello\"");
    FALSE_("${header.a} == 'Hello'");
    FALSE_("${header.a} == 'hello '");
    TRUE_("${header.a} != 'Hello'");
    FALSE_("${header.a} != 'hello'");
    TRUE_("'abc' == 'abc'");
    FALSE_("'abc' == 'abcd'");
    TRUE_("${body} == 'the body'");
    TRUE_("${id} == 'ex-1'");
    TRUE_("${exchangeProperty.p} == 'prop'");
    TRUE_("${header.a}=='hello'");
    TRUE_(" \t${header.a}   ==\n'hello'  ");
    TRUE_("${header.a} == ${in.header.a}");
}

static void numbers_compare_as_numbers(void **state)
{
    const acemq__exchange *x = *state;
    TRUE_("${header.n} == 5");
    TRUE_("${header.n} == '5'");
    TRUE_("${header.n} == 5.00");
    FALSE_("${header.n} != 5");
    FALSE_("${header.n} == 5.1");
    TRUE_("'10' == '10.0'");
    TRUE_("'1e1' == 10");
    TRUE_("-0 == 0");
    FALSE_("'0x10' == 16");            /* no hex: text */
    FALSE_("' 5' == 5");               /* the whole text must be the number */
    FALSE_("'nan' == 'NaN'");          /* no nan: text, which differs */
    TRUE_("${header.big} == '1e999'"); /* out of range: text */
    FALSE_("${header.big} == '2e999'");

    TRUE_("${header.n} < 6");
    TRUE_("${header.n} <= 5");
    FALSE_("${header.n} > 5");
    TRUE_("${header.n} >= 5");
    FALSE_("${header.n} < 5");
    TRUE_("-1 < 0");
    TRUE_("'2' < '10'"); /* as text it would be false */
    TRUE_("+3 >= 2.5e0");
    FALSE_("${header.a} < 5");
    FALSE_("${header.a} > 5");
    FALSE_("${header.a} >= 'a'"); /* text on both sides: false, not compared as text */
    FALSE_("${header.nope} < 5");
    FALSE_("'' < 5");
    FALSE_("${header.big} > 1");
}

static void contains_finds_text(void **state)
{
    acemq__exchange *x = *state;
    TRUE_("${body} contains 'body'");
    TRUE_("${body} contains 'the body'");
    FALSE_("${body} contains 'xyz'");
    FALSE_("${body} contains 'the body!'");
    TRUE_("${body}contains'the'");
    TRUE_("${header.a} contains ''");
    TRUE_("${header.a} contains ${header.a}");
    TRUE_("${header.n} contains 5");
    FALSE_("${header.nope} contains ''"); /* null contains nothing */
    FALSE_("${header.a} contains null");
    assert_int_equal(acemq__exchange_set_body(x, "a\0b", 3), 0);
    TRUE_("${body} contains 'b'");
}

static void regex_matches_whole_text(void **state)
{
    acemq__exchange *x = *state;
    TRUE_("${header.a} regex 'h.*o'");
    FALSE_("${header.a} regex 'ell'");
    FALSE_("${header.a} regex 'hell'");
    TRUE_("${header.a} regex 'hello|x'");
    TRUE_("${header.a} regex 'x|hello'");
    TRUE_("${header.a} regex 'h(e|a)l+o'");
    TRUE_("${header.n} regex '[0-9]+\\.[0-9]+'");
    TRUE_("'a)' regex 'a)|hello'"); /* glibc reads a lone ) as itself */
    FALSE_("'xhello' regex 'a)|hello'");
    FALSE_("'a)x' regex 'a)|hello'");
    TRUE_("'' regex ''");
    FALSE_("'a' regex ''");
    TRUE_("${header.a} regex ${header.pat}"); /* a pattern made at run time */
    TRUE_("${header.a} regex '${header.pat}'");
    FALSE_("${header.name} regex ${header.pat}");
    FALSE_("${header.a} regex ${header.bad}");  /* does not compile: matches nothing */
    FALSE_("${header.a} regex ${header.bomb}"); /* refused: matches nothing */
    FALSE_("'aa' regex ${header.backref}");
    FALSE_("${header.nope} regex '.*'");
    TRUE_("55 regex '5+'");
    TRUE_("'2024-01-31' regex '[0-9]{4}-[0-9]{2}-[0-9]{2}'");
    TRUE_("'a)' regex '[)(]a|a[])]'"); /* parentheses in brackets are not groups */
    TRUE_("'x' regex 'x{1,1000}'");
    assert_int_equal(acemq__exchange_set_body(x, "a\0b", 3), 0);
    FALSE_("${body} regex 'a.*'"); /* a body with a NUL is never wholly matched */
}

static void null_is_an_absent_field(void **state)
{
    const acemq__exchange *x = *state;
    TRUE_("${header.nope} == null");
    FALSE_("${header.a} == null");
    FALSE_("${header.nope} != null");
    TRUE_("${header.a} != null");
    FALSE_("${header.empty} == null");
    TRUE_("${header.empty} == ''");
    FALSE_("${header.nope} == ''");
    TRUE_("${header.nope} != 'x'");
    TRUE_("null == null");
    FALSE_("null != null");
    TRUE_("null == ${exchangeProperty.nope}");
    TRUE_("${exchangeProperty.p} != null");
    TRUE_("'${header.nope}' == ''"); /* quoted text is never null */
    FALSE_("'${header.nope}' == null");
    FALSE_("${body} == null");
    FALSE_("${header.nope} < 1");
}

static void lone_operand_is_true_text(void **state)
{
    const acemq__exchange *x = *state;
    TRUE_("${header.flag}");
    TRUE_("true");
    TRUE_("'true'");
    TRUE_("  true  ");
    FALSE_("false");
    FALSE_("'TRUE'");
    FALSE_("${header.a}");
    FALSE_("${header.nope}");
    FALSE_("1");
    FALSE_("null");
}

static void and_binds_tighter_than_or(void **state)
{
    const acemq__exchange *x = *state;
    TRUE_("true || false && false"); /* (true||false)&&false would be false */
    TRUE_("false && true || true");  /* false&&(true||true) would be false */
    FALSE_("(true || false) && false");
    FALSE_("false && (true || true)");
    TRUE_("false || false || true");
    FALSE_("true && true && false");
    TRUE_("((true))");
    TRUE_("(${header.a} == 'hello' || ${header.a} == 'x') && (${header.n} > 1)");
    FALSE_("(${header.a} == 'hello'||${header.a} == 'x')&&(${header.n} > 9)");
    TRUE_("${header.a} == 'x' || ${header.nope} == null && ${header.flag}");
}

static void long_chains_stay_flat(void **state)
{
    const acemq__exchange *x = *state;
    size_t n = 20000;
    char *text = malloc(n * 8 + 8);
    assert_non_null(text);
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        at += (size_t)sprintf(text + at, "true && ");
    (void)sprintf(text + at, "false");
    FALSE_(text);
    memcpy(text + at, "true", 5); /* with its NUL */
    TRUE_(text);
    free(text);

    char deep[64 * 2 + 8];
    memset(deep, '(', 64);
    memcpy(deep + 64, "true", 4);
    memset(deep + 68, ')', 64);
    deep[132] = '\0';
    TRUE_(deep);
}

static void quoted_text_is_a_template(void **state)
{
    const acemq__exchange *x = *state;
    TRUE_("'${header.name}!' == 'World!'");
    TRUE_("\"Hi ${header.name}\" contains 'Hi W'");
    TRUE_("'${date:now:'T'}' == 'T'"); /* quotes inside ${...} do not end the text */
    TRUE_("\"it's\" == \"it's\"");
    TRUE_("'say \"hi\"' contains '\"'");
    TRUE_("'$5' == '$5'");
}

static void reports_predicate_errors(void **state)
{
    (void)state;
    pred_fails("", 0, "missing operand at the end of the text");
    pred_fails("   ", 3, "missing operand at the end of the text");
    pred_fails("${header.a} ==", 14, "missing operand at the end of the text");
    pred_fails("true &&", 7, "missing operand at the end of the text");
    pred_fails("${header.a} == 5 ||  ", 21, "missing operand at the end of the text");
    pred_fails("&& true", 0,
               "expected an operand (${...}, quoted text, a number, true, false or null) at '&&'");
    pred_fails("()", 1,
               "expected an operand (${...}, quoted text, a number, true, false or null) at ')'");
    pred_fails("${header.a} = 5", 12, "unknown operator '='");
    pred_fails("${header.a} foo 5", 12, "unknown operator 'foo'");
    pred_fails("${header.a} containsx 'a'", 12, "unknown operator 'containsx'");
    pred_fails("true & false", 5, "unknown operator '&'");
    pred_fails("${header.a} == 5 6", 17, "unexpected text after the comparison: '6'");
    pred_fails("true == true == true", 13, "unexpected text after the comparison: '=='");
    pred_fails("(${header.a} == 5", 0, "unbalanced parentheses: this '(' is never closed");
    pred_fails("(true && (false)", 0, "unbalanced parentheses: this '(' is never closed");
    pred_fails("${header.a} == 5)", 16, "unbalanced parentheses: no '(' before this ')'");
    pred_fails("(${header.a} == 5 6)", 18, "expected ')', && or || at '6)'");
    pred_fails("${header.a} == abc", 15, "unknown operand 'abc' (quote text: 'like this')");
    pred_fails("${header.a} == 1.2.3", 15, "unknown operand '1.2.3' (quote text: 'like this')");
    pred_fails("${header.a} == 'abc", 15, "unterminated quoted text (no closing ')");
    pred_fails("\"abc == 1", 0, "unterminated quoted text (no closing \")");
    pred_fails("${foo} == 1", 2, "unknown function ${foo}");
    pred_fails("'x${header.}' == 1", 11, "empty header name in ${header.}");
    pred_fails("1 == '${date:now:Q}'", 17,
               "unknown date pattern letter 'Q' (known: y M d H m s S)");
    pred_fails("${header.a == 1", 0, "unterminated ${ (no closing })");
    pred_fails("'a${b' == 1", 2, "unterminated ${ (no closing })");

    char deep[65 + 4 + 65 + 1];
    memset(deep, '(', 65);
    memcpy(deep + 65, "true", 4);
    memset(deep + 69, ')', 65);
    deep[134] = '\0';
    pred_fails(deep, 64, "parentheses nest deeper than 64");

    acemq__pred *p = NULL;
    acemq__expr_error err = {{0}, 0};
    assert_int_equal(acemq__pred_compile("${header.a} regex 'a('", &p, &err), ACEMQ_EINVAL);
    assert_null(p);
    assert_int_equal(err.offset, 18);
    assert_int_equal(strncmp(err.message, "bad regex: ", 11), 0);
    assert_true(strlen(err.message) > 11);
    assert_int_equal(acemq__pred_compile("1 regex '[z-a]'", &p, &err), ACEMQ_EINVAL);
    assert_int_equal(err.offset, 8);
    assert_int_equal(strncmp(err.message, "bad regex: ", 11), 0);
    pred_fails("'aa' regex '(a)\\1'", 11,
               "bad regex: back-references are not POSIX extended syntax");
    pred_fails("'a' regex '((((((((((((a|b)+)+)+)+)+)+)+)+)+)+)+)+'", 10,
               "bad regex: too complex (repetitions multiply)");
    pred_fails("'a' regex '(a|b)++'", 10,
               "bad regex: adjacent repetitions (such as '*?' or '+*') are undefined in POSIX "
               "extended syntax");
    pred_fails("'a' regex 'a*?'", 10,
               "bad regex: adjacent repetitions (such as '*?' or '+*') are undefined in POSIX "
               "extended syntax");
    pred_fails("'a' regex 'h(e|a)*{2}'", 10,
               "bad regex: adjacent repetitions (such as '*?' or '+*') are undefined in POSIX "
               "extended syntax");
    /* An escaped or bracketed symbol is an element, not a repetition. */
    assert_int_equal(acemq__pred_compile("'a*' regex 'a\\**'", &p, &err), 0);
    acemq__pred_free(p);
    assert_int_equal(acemq__pred_compile("'?' regex '[*?]+'", &p, &err), 0);
    acemq__pred_free(p);
    pred_fails("'a' regex '((a{1,100}){1,100})'", 10,
               "bad regex: too complex (repetitions multiply)");
    pred_fails("'a' regex 'a{99999999999999999999999}'", 10,
               "bad regex: too complex (repetitions multiply)");
    memset(deep, '(', 33);
    memcpy(deep + 33, "a", 2);
    char nested[sizeof deep + 16];
    (void)snprintf(nested, sizeof nested, "1 regex '%s'", deep);
    pred_fails(nested, 8, "bad regex: groups nest too deeply");
    assert_int_equal(acemq__pred_compile(NULL, &p, &err), ACEMQ_EINVAL);
    assert_string_equal(err.message, "no predicate text");
    assert_int_equal(acemq__pred_compile("true ==", &p, NULL), ACEMQ_EINVAL); /* err optional */
    acemq__pred_free(NULL);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(substitutes_parts),
        T(accepts_camel_aliases),
        T(absent_fields_are_empty),
        T(dollar_without_brace_is_literal),
        T(eval_appends_and_keeps_body_bytes),
        T(knows_constant_templates),
        T(formats_dates_in_utc),
        T(reports_template_errors),
        T(compares_equality),
        T(numbers_compare_as_numbers),
        T(contains_finds_text),
        T(regex_matches_whole_text),
        T(null_is_an_absent_field),
        T(lone_operand_is_true_text),
        T(and_binds_tighter_than_or),
        T(long_chains_stay_flat),
        T(quoted_text_is_a_template),
        T(reports_predicate_errors),
    };
#undef T
    return cmocka_run_group_tests_name("route_expr", tests, NULL, NULL);
}
