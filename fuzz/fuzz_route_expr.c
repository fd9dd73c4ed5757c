/* fuzz_route_expr.c — libFuzzer target for Camel's simple language: the
 * input as text, compiled as a template and as a predicate, and what
 * compiles evaluated on an exchange with headers, properties and a body. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "core/buf.h"
#include "route/exchange.h"
#include "route/expr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void setup(acemq__exchange *x)
{
    acemq__exchange_init(x, "fuzz");
    if (acemq__fields_set(&x->headers, "a", "hello") != 0 ||
        acemq__fields_set(&x->headers, "n", "5.0") != 0 ||
        acemq__fields_set(&x->headers, "pat", "h[a-z]+") != 0 ||
        acemq__fields_set(&x->headers, "bad", "(") != 0 ||
        acemq__fields_set(&x->properties, "p", "true") != 0 ||
        acemq__exchange_set_body(x, "body\0with a NUL", 15) != 0)
        abort();
}

/* A refused text has a message and an offset within the text. */
static void check_error(const acemq__expr_error *err, size_t len)
{
    if (err->offset > len || err->message[0] == '\0' ||
        memchr(err->message, '\0', sizeof err->message) == NULL)
        abort();
}

/* A template evaluates the same twice unless it reads the clock, and a
 * constant one is its own text. */
static void run_template(const char *text, size_t len, const acemq__exchange *x)
{
    acemq__expr *e = NULL;
    acemq__expr_error err = {{0}, 0};
    int rc = acemq__expr_compile(text, &e, &err);
    if (rc == ACEMQ_ENOMEM) return;
    if (rc != 0) {
        if (rc != ACEMQ_EINVAL || e != NULL) abort();
        check_error(&err, len);
        return;
    }
    acemq__buf a = {0}, b = {0};
    if (acemq__expr_eval(e, x, &a) != 0 || acemq__expr_eval(e, x, &b) != 0) abort();
    int dated = strstr(text, "${date:") != NULL;
    if (!dated && (a.len != b.len || memcmp(acemq__buf_str(&a), acemq__buf_str(&b), a.len) != 0))
        abort();
    if (acemq__expr_is_constant(e) && (a.len != len || memcmp(acemq__buf_str(&a), text, len) != 0))
        abort(); /* a constant template is its own text */
    acemq__buf_free(&a);
    acemq__buf_free(&b);
    acemq__expr_free(e);
}

/* A predicate answers 1 or 0 (or runs out of memory). */
static void run_predicate(const char *text, size_t len, const acemq__exchange *x)
{
    acemq__pred *p = NULL;
    acemq__expr_error err = {{0}, 0};
    int rc = acemq__pred_compile(text, &p, &err);
    if (rc == ACEMQ_ENOMEM) return;
    if (rc != 0) {
        if (rc != ACEMQ_EINVAL || p != NULL) abort();
        check_error(&err, len);
        return;
    }
    rc = acemq__pred_eval(p, x);
    if (rc != 0 && rc != 1 && rc != ACEMQ_ENOMEM) abort();
    acemq__pred_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    text[size] = '\0';
    size_t len = strlen(text); /* the text ends at its first NUL */

    acemq__exchange x;
    setup(&x);
    run_template(text, len, &x);
    run_predicate(text, len, &x);
    acemq__exchange_free(&x);
    free(text);
    return 0;
}
