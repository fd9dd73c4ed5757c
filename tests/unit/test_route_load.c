/* test_route_load.c — the route file loader (route/model.h): the example's
 * exact model, Camel's spellings, every step kind and form, URIs, errors with
 * their places, and each tests/route/broken file (argv[1]) giving its one error. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "acemq/common.h"
#include "route/exchange.h"
#include "route/model.h"

static const char *broken_dir; /* argv[1] */

#define EXAMPLE                                                                                    \
    "repositories:\n"                                                                              \
    "  dedupe: { url: \"memory:\" }          # or sqlite:...\n"                                    \
    "broker: \"amqp://guest:guest@127.0.0.1:5672/\"\n"                                             \
    "routes:\n"                                                                                    \
    "  - id: pinned\n"                                                                             \
    "    from: \"timer:tick?period=1000&repeatCount=5\"\n"                                         \
    "    steps:\n"                                                                                 \
    "      - set_header: { name: messageId, value: \"fixed-1\" }\n"                                \
    "      - idempotent_consumer:\n"                                                               \
    "          repository: dedupe\n"                                                               \
    "          expression: \"${header.messageId}\"\n"                                              \
    "          steps:\n"                                                                           \
    "            - log: \"Processing unique message ${header.messageId}\"\n"                       \
    "            - to: \"log:processed?showBody=true&showHeaders=true\"\n"

static void print_errors(const acemq__route_errors *e)
{
    for (size_t i = 0; i < e->n; i++)
        print_message("  %s\n", e->lines[i]);
}

static acemq__route_file *load_ok(const char *text)
{
    acemq__route_errors e = {0};
    acemq__route_file *f = NULL;
    int rc = acemq__route_load_text("test.yaml", text, strlen(text), &f, &e);
    print_errors(&e);
    assert_int_equal(rc, 0);
    assert_int_equal(e.n, 0);
    assert_non_null(f);
    acemq__route_errors_free(&e);
    return f;
}

/* Loads text that must fail; its errors are left in e. */
static void load_bad(const char *text, acemq__route_errors *e)
{
    acemq__route_file *f = (acemq__route_file *)&f; /* must become NULL */
    int rc = acemq__route_load_text("bad.yaml", text, strlen(text), &f, e);
    if (rc != ACEMQ_EINVAL) print_errors(e);
    assert_int_equal(rc, ACEMQ_EINVAL);
    assert_null(f);
    assert_true(e->n > 0);
}

/* Asserts that text fails with exactly one error containing each of the
 * NULL-ended strings. */
static void one_error(const char *text, ...)
{
    acemq__route_errors e = {0};
    load_bad(text, &e);
    if (e.n != 1) print_errors(&e);
    assert_int_equal(e.n, 1);
    va_list ap;
    va_start(ap, text);
    for (const char *want = va_arg(ap, const char *); want; want = va_arg(ap, const char *)) {
        if (!strstr(e.lines[0], want)) print_message("want '%s' in '%s'\n", want, e.lines[0]);
        assert_non_null(strstr(e.lines[0], want));
    }
    va_end(ap);
    acemq__route_errors_free(&e);
}

/* The template's text on an exchange with header messageId=m-1 and body b. */
static char *eval(const acemq__expr *x)
{
    assert_non_null(x);
    acemq__exchange ex;
    acemq__exchange_init(&ex, "r");
    assert_int_equal(acemq__fields_set(&ex.headers, "messageId", "m-1"), 0);
    assert_int_equal(acemq__exchange_set_body(&ex, "b", 1), 0);
    acemq__buf out = {0};
    assert_int_equal(acemq__expr_eval(x, &ex, &out), 0);
    char *s = strdup(acemq__buf_str(&out));
    assert_non_null(s);
    acemq__buf_free(&out);
    acemq__exchange_free(&ex);
    return s;
}

static void assert_evals(const acemq__expr *x, const char *want)
{
    char *got = eval(x);
    assert_string_equal(got, want);
    free(got);
}

static void example_loads_with_exact_values(void **state)
{
    (void)state;
    acemq__route_file *f = load_ok(EXAMPLE);
    assert_string_equal(f->path, "test.yaml");
    assert_string_equal(f->broker, "amqp://guest:guest@127.0.0.1:5672/");
    assert_int_equal(f->broker_where.line, 3);
    assert_int_equal(f->broker_where.column, 9);
    assert_int_equal(f->n_repos, 1);
    assert_string_equal(f->repos[0].name, "dedupe");
    assert_string_equal(f->repos[0].url, "memory:");
    assert_int_equal(f->repos[0].lease_ms, 0);
    assert_int_equal(f->repos[0].where.line, 2);
    assert_int_equal(f->repos[0].where.column, 3);
    assert_null(f->repos[0].store);

    assert_int_equal(f->n_routes, 1);
    const acemq__route *r = &f->routes[0];
    assert_string_equal(r->id, "pinned");
    assert_int_equal(r->where.line, 5);
    assert_int_equal(r->where.column, 5);
    assert_string_equal(r->from.text, "timer:tick?period=1000&repeatCount=5");
    assert_string_equal(r->from.scheme, "timer");
    assert_string_equal(r->from.path, "tick");
    assert_int_equal(r->from.n, 2);
    assert_string_equal(r->from.names[0], "period");
    assert_string_equal(r->from.values[0], "1000");
    assert_string_equal(acemq__uri_param(&r->from, "repeatCount"), "5");
    assert_null(acemq__uri_param(&r->from, "delay"));
    assert_int_equal(r->from.where.line, 6);
    assert_int_equal(r->from.where.column, 11);

    assert_int_equal(r->steps.n, 2);
    const acemq__step *sh = &r->steps.v[0];
    assert_int_equal(sh->kind, ACEMQ__STEP_SET_HEADER);
    assert_string_equal(sh->id, "set_header1");
    assert_int_equal(sh->where.line, 8);
    assert_int_equal(sh->where.column, 9);
    assert_string_equal(sh->name, "messageId");
    assert_string_equal(sh->expr_text, "fixed-1");
    assert_true(acemq__expr_is_constant(sh->expr));
    assert_evals(sh->expr, "fixed-1");

    const acemq__step *ic = &r->steps.v[1];
    assert_int_equal(ic->kind, ACEMQ__STEP_IDEMPOTENT_CONSUMER);
    assert_string_equal(ic->id, "idempotent_consumer1");
    assert_int_equal(ic->repository, 0);
    assert_string_equal(ic->expr_text, "${header.messageId}");
    assert_evals(ic->expr, "m-1");
    assert_int_equal(ic->eager, 1);
    assert_int_equal(ic->remove_on_failure, 1);
    assert_int_equal(ic->skip_duplicate, 1);
    assert_int_equal(ic->completion_eager, 0);
    assert_null(ic->runtime);

    assert_int_equal(ic->steps.n, 2);
    const acemq__step *lg = &ic->steps.v[0];
    assert_int_equal(lg->kind, ACEMQ__STEP_LOG);
    assert_string_equal(lg->id, "log1");
    assert_int_equal(lg->where.line, 13);
    assert_int_equal(lg->where.column, 15);
    assert_evals(lg->expr, "Processing unique message m-1");
    const acemq__step *to = &ic->steps.v[1];
    assert_int_equal(to->kind, ACEMQ__STEP_TO);
    assert_string_equal(to->id, "to1");
    assert_string_equal(to->to.scheme, "log");
    assert_string_equal(to->to.path, "processed");
    assert_string_equal(acemq__uri_param(&to->to, "showBody"), "true");
    assert_string_equal(acemq__uri_param(&to->to, "showHeaders"), "true");
    assert_int_equal(to->to.where.line, 14);
    assert_int_equal(to->to.where.column, 19);
    acemq__route_file_free(f);
}

static void camel_spellings_name_the_same_things(void **state)
{
    (void)state;
    acemq__route_file *f = load_ok("repositories:\n"
                                   "  a: { url: \"memory:\" }\n"
                                   "  b: { url: \"sqlite:b.db\", leaseMs: 60000 }\n"
                                   "routes:\n"
                                   "  - route:\n"
                                   "      id: camel\n"
                                   "      from:\n"
                                   "        uri: \"timer:t\"\n"
                                   "        steps:\n"
                                   "          - setHeader: { name: h, simple: \"${body}\" }\n"
                                   "          - set-header: { name: k, constant: \"c\" }\n"
                                   "          - SetBody: { simple: \"x\" }\n"
                                   "          - idempotentConsumer:\n"
                                   "              idempotentRepository: \"#b\"\n"
                                   "              expression: { simple: \"${header.h}\" }\n"
                                   "              removeOnFailure: false\n"
                                   "              skip-duplicate: false\n"
                                   "              completionEager: true\n"
                                   "              Eager: false\n"
                                   "              steps: []\n");
    const acemq__route *r = &f->routes[0];
    assert_string_equal(r->id, "camel");
    assert_string_equal(f->repos[1].name, "b");
    assert_int_equal(f->repos[1].lease_ms, 60000);
    assert_int_equal(r->steps.n, 4);
    assert_int_equal(r->steps.v[0].kind, ACEMQ__STEP_SET_HEADER);
    assert_string_equal(r->steps.v[0].id, "set_header1");
    assert_evals(r->steps.v[0].expr, "b");
    assert_int_equal(r->steps.v[1].kind, ACEMQ__STEP_SET_HEADER);
    assert_string_equal(r->steps.v[1].id, "set_header2");
    assert_int_equal(r->steps.v[2].kind, ACEMQ__STEP_SET_BODY);
    const acemq__step *ic = &r->steps.v[3];
    assert_int_equal(ic->kind, ACEMQ__STEP_IDEMPOTENT_CONSUMER);
    assert_int_equal(ic->repository, 1);
    assert_string_equal(ic->expr_text, "${header.h}");
    assert_int_equal(ic->remove_on_failure, 0);
    assert_int_equal(ic->skip_duplicate, 0);
    assert_int_equal(ic->completion_eager, 1);
    assert_int_equal(ic->eager, 0);
    assert_int_equal(ic->steps.n, 0);
    acemq__route_file_free(f);
}

static void every_step_kind_and_form(void **state)
{
    (void)state;
    acemq__route_file *f =
        load_ok("routes:\n"
                "  - id: all\n"
                "    from: { uri: \"file:/tmp/in?include=*.json&delay=100\" }\n"
                "    steps:\n"
                "      - set_header: { name: a, value: \"v-${header.messageId}\" }\n"
                "      - set_body: \"body ${body}\"\n"
                "      - set_body: { value: \"v\" }\n"
                "      - set_body: { constant: \"c\" }\n"
                "      - set_body: { expression: { constant: \"k\" } }\n"
                "      - log: \"plain ${id}\"\n"
                "      - log: { message: \"mapped\" }\n"
                "      - to: \"amqp:exchange:?routingKey=q\"\n"
                "      - to: { uri: \"file:/tmp/out?fileName=${header.a}.txt\" }\n"
                "      - exec: \"cat\"\n"
                "      - exec: { command: \"tr a-z A-Z\", timeout_ms: 5000 }\n"
                "      - filter:\n"
                "          simple: \"${header.a} == 'x'\"\n"
                "          steps:\n"
                "            - log: \"in filter\"\n"
                "      - filter: { expression: { simple: \"${body} contains 'b'\" } }\n"
                "      - choice:\n"
                "          when:\n"
                "            - simple: \"${header.a} == '1'\"\n"
                "              steps: [ { log: \"one\" } ]\n"
                "            - expression: \"${header.a} == '2'\"\n"
                "              steps: [ { to: \"log:two\" } ]\n"
                "          otherwise:\n"
                "            steps: [ { log: \"other\" } ]\n"
                "      - choice:\n"
                "          when: [ { simple: \"true\" } ]\n"
                "          otherwise:\n"
                "            - log: \"seq\"\n"
                "      - choice:\n"
                "          when: [ { simple: \"true\" } ]\n");
    const acemq__route *r = &f->routes[0];
    assert_string_equal(r->from.scheme, "file");
    assert_string_equal(r->from.path, "/tmp/in");
    assert_string_equal(acemq__uri_param(&r->from, "include"), "*.json");
    const acemq__steps *s = &r->steps;
    assert_int_equal(s->n, 16);
    assert_string_equal(s->v[0].name, "a");
    assert_evals(s->v[0].expr, "v-m-1");
    assert_int_equal(s->v[1].kind, ACEMQ__STEP_SET_BODY);
    assert_evals(s->v[1].expr, "body b");
    assert_evals(s->v[2].expr, "v");
    assert_evals(s->v[3].expr, "c");
    assert_evals(s->v[4].expr, "k");
    assert_string_equal(s->v[4].id, "set_body4");
    assert_int_equal(s->v[5].kind, ACEMQ__STEP_LOG);
    assert_string_equal(s->v[5].expr_text, "plain ${id}");
    assert_evals(s->v[6].expr, "mapped");
    assert_int_equal(s->v[7].kind, ACEMQ__STEP_TO);
    assert_string_equal(s->v[7].to.scheme, "amqp");
    assert_string_equal(s->v[7].to.path, "exchange:");
    assert_string_equal(acemq__uri_param(&s->v[7].to, "routingKey"), "q");
    assert_string_equal(acemq__uri_param(&s->v[8].to, "fileName"), "${header.a}.txt");
    assert_int_equal(s->v[9].kind, ACEMQ__STEP_EXEC);
    assert_string_equal(s->v[9].command, "cat");
    assert_int_equal(s->v[9].timeout_ms, 0);
    assert_string_equal(s->v[10].command, "tr a-z A-Z");
    assert_int_equal(s->v[10].timeout_ms, 5000);

    const acemq__step *fl = &s->v[11];
    assert_int_equal(fl->kind, ACEMQ__STEP_FILTER);
    assert_string_equal(fl->id, "filter1");
    assert_non_null(fl->pred);
    assert_string_equal(fl->pred_text, "${header.a} == 'x'");
    assert_int_equal(fl->steps.n, 1);
    assert_string_equal(fl->steps.v[0].id, "log3"); /* document order: after log1, log2 */
    assert_string_equal(s->v[12].pred_text, "${body} contains 'b'");
    assert_int_equal(s->v[12].steps.n, 0);

    const acemq__step *ch = &s->v[13];
    assert_int_equal(ch->kind, ACEMQ__STEP_CHOICE);
    assert_string_equal(ch->id, "choice1");
    assert_int_equal(ch->n_whens, 2);
    assert_string_equal(ch->whens[0].text, "${header.a} == '1'");
    assert_non_null(ch->whens[0].pred);
    assert_int_equal(ch->whens[0].where.line, 23);
    assert_string_equal(ch->whens[0].steps.v[0].id, "log4");
    assert_string_equal(ch->whens[1].text, "${header.a} == '2'");
    assert_string_equal(ch->whens[1].steps.v[0].id, "to3");
    assert_int_equal(ch->has_otherwise, 1);
    assert_int_equal(ch->steps.n, 1);
    assert_string_equal(ch->steps.v[0].id, "log5");
    assert_int_equal(s->v[14].has_otherwise, 1);
    assert_string_equal(s->v[14].steps.v[0].expr_text, "seq");
    assert_int_equal(s->v[15].has_otherwise, 0);
    assert_int_equal(s->v[15].steps.n, 0);
    assert_string_equal(s->v[15].id, "choice3");
    acemq__route_file_free(f);
}

static void step_ids_given_or_made(void **state)
{
    (void)state;
    acemq__route_file *f = load_ok("routes:\n"
                                   "  - id: r.1_a-b\n"
                                   "    from: \"timer:t\"\n"
                                   "    steps:\n"
                                   "      - log: { id: hello, message: \"hi\" }\n"
                                   "      - log: \"second\"\n"
                                   "        id: beside\n"
                                   "      - log: \"third\"\n"
                                   "  - id: r2\n"
                                   "    from: \"timer:u\"\n"
                                   "    steps:\n"
                                   "      - log: \"first of r2\"\n");
    const acemq__steps *s = &f->routes[0].steps;
    assert_string_equal(f->routes[0].id, "r.1_a-b");
    assert_string_equal(s->v[0].id, "hello");
    assert_string_equal(s->v[1].id, "beside");
    assert_string_equal(s->v[2].id, "log3"); /* the third log of the route */
    assert_string_equal(f->routes[1].steps.v[0].id, "log1");
    assert_int_equal(f->routes[1].steps.n, 1);
    acemq__route_file_free(f);

    one_error("routes:\n  - id: r\n    from: \"timer:t\"\n    steps:\n"
              "      - log: { id: \"a b\", message: \"x\" }\n",
              "bad.yaml:5:22:", "step id 'a b' may hold only", NULL);
    one_error("routes:\n  - id: r\n    from: \"timer:t\"\n    steps:\n"
              "      - log: { id: x, message: \"x\" }\n        id: y\n",
              "bad.yaml:5:20:", "id is given twice", NULL);
}

static void idempotent_consumer_defaults_and_options(void **state)
{
    (void)state;
    acemq__route_file *f = load_ok("repositories:\n"
                                   "  one: { url: \"memory:\" }\n"
                                   "  two: { url: \"memory:\", lease_ms: 5 }\n"
                                   "routes:\n"
                                   "  - id: r\n"
                                   "    from: \"amqp:queue:orders?prefetch=8&retryDelay=0\"\n"
                                   "    steps:\n"
                                   "      - idempotent_consumer:\n"
                                   "          repository: two\n"
                                   "          simple: \"${header.k}\"\n"
                                   "      - idempotent_consumer:\n"
                                   "          repository: one\n"
                                   "          expression: \"${header.k}\"\n"
                                   "          eager: false\n"
                                   "          remove_on_failure: false\n"
                                   "          skip_duplicate: false\n"
                                   "          completion_eager: true\n");
    assert_null(f->broker); /* amqp: with no broker: the CLI may give one */
    assert_string_equal(f->routes[0].from.path, "queue:orders");
    const acemq__step *a = &f->routes[0].steps.v[0], *b = &f->routes[0].steps.v[1];
    assert_int_equal(a->repository, 1);
    assert_int_equal(f->repos[1].lease_ms, 5);
    assert_int_equal(a->eager, 1);
    assert_int_equal(a->remove_on_failure, 1);
    assert_int_equal(a->skip_duplicate, 1);
    assert_int_equal(a->completion_eager, 0);
    assert_int_equal(a->steps.n, 0);
    assert_int_equal(b->repository, 0);
    assert_int_equal(b->eager, 0);
    assert_int_equal(b->remove_on_failure, 0);
    assert_int_equal(b->skip_duplicate, 0);
    assert_int_equal(b->completion_eager, 1);
    assert_string_equal(b->id, "idempotent_consumer2");
    acemq__route_file_free(f);

    one_error("repositories:\n  one: { url: \"memory:\" }\nroutes:\n  - id: r\n"
              "    from: \"timer:t\"\n    steps:\n      - idempotent_consumer:\n"
              "          repository: one\n          expression: x\n          simple: y\n",
              "bad.yaml:10:11:", "takes 'expression' or 'simple', not both", NULL);
    one_error(
        "routes:\n  - id: r\n    from: \"timer:t\"\n    steps:\n      - idempotent_consumer:\n"
        "          repository: one\n          expression: x\n",
        "bad.yaml:6:23:", "repository 'one' is not defined",
        "the file's 'repositories' define none", NULL);
}

static void constant_is_literal_text(void **state)
{
    (void)state;
    acemq__route_file *f =
        load_ok("routes:\n  - id: r\n    from: \"timer:t\"\n    steps:\n"
                "      - set_header: { name: t, constant: \"${header.messageId} $x ${body}}\" }\n"
                "      - set_body: { constant: \"${\" }\n");
    const acemq__steps *s = &f->routes[0].steps;
    assert_string_equal(s->v[0].expr_text, "${header.messageId} $x ${body}}");
    assert_evals(s->v[0].expr, "${header.messageId} $x ${body}}");
    assert_evals(s->v[1].expr, "${");
    acemq__route_file_free(f);
}

static void collects_every_error_in_file_order(void **state)
{
    (void)state;
    acemq__route_errors e = {0};
    load_bad("routes:\n"
             "  - id: a\n"
             "    from: \"timer:t?perod=1\"\n"
             "    steps:\n"
             "      - sethead: x\n"
             "      - log: \"${nope}\"\n"
             "      - idempotent_consumer: { repository: r, expression: x, eagr: true }\n"
             "  - id: a\n"
             "    from: { uri: 5 }\n"
             "    bogus: 1\n",
             &e);
    if (e.n != 8) print_errors(&e);
    assert_int_equal(e.n, 8);
    assert_non_null(strstr(e.lines[0], "bad.yaml:3:20: unknown parameter 'perod' for timer:"));
    assert_non_null(strstr(e.lines[1], "bad.yaml:5:9: unknown step 'sethead'"));
    assert_non_null(strstr(e.lines[2], "bad.yaml:6:17: unknown function ${nope} in expression"));
    assert_non_null(strstr(e.lines[3], "bad.yaml:7:44: repository 'r' is not defined"));
    assert_non_null(
        strstr(e.lines[4], "bad.yaml:7:62: unknown option 'eagr' in idempotent_consumer"));
    assert_non_null(strstr(e.lines[5], "bad.yaml:8:9: duplicate route id 'a' (first at line 2)"));
    assert_non_null(strstr(e.lines[6], "bad.yaml:9:18: '5' is not a URI: expected scheme:path"));
    assert_non_null(strstr(e.lines[7], "bad.yaml:10:5: unknown option 'bogus' in a route"));
    acemq__route_errors_free(&e);

    /* the same list can gather several loads */
    load_bad("routes: 5\n", &e);
    load_bad("routes: []\n", &e);
    assert_int_equal(e.n, 2);
    assert_non_null(strstr(e.lines[0], "expected a sequence of routes for 'routes', found '5'"));
    assert_non_null(strstr(e.lines[1], "'routes' is empty"));
    acemq__route_errors_free(&e);
    assert_int_equal(e.n, 0);
    assert_null(e.lines);
}

static void expression_errors_point_inside_the_scalar(void **state)
{
    (void)state;
    const char *head = "routes:\n  - id: r\n    from: \"timer:t\"\n    steps:\n";
    char text[512];
    (void)snprintf(text, sizeof text, "%s      - log: ab ${foo}\n", head);
    one_error(text, "bad.yaml:5:19:", "unknown function ${foo}", NULL);
    (void)snprintf(text, sizeof text, "%s      - log: 'it''s ${foo}'\n", head);
    one_error(text, "bad.yaml:5:23:", NULL); /* 'it''s: the doubled quote counts */
    (void)snprintf(text, sizeof text, "%s      - log: \"ab ${body\"\n", head);
    one_error(text, "bad.yaml:5:18:", "unterminated ${", NULL);
    (void)snprintf(text, sizeof text, "%s      - log: |\n          ${foo}\n", head);
    one_error(text, "bad.yaml:5:14:", NULL); /* a block scalar: its start */
    (void)snprintf(text, sizeof text, "%s      - filter: { simple: \"${body} ==\" }\n", head);
    one_error(text, "bad.yaml:5:", "in predicate", NULL);
    (void)snprintf(text, sizeof text, "%s      - to: \"amqp:exchange:x?routingKey=${nope}\"\n",
                   head);
    one_error(text, "bad.yaml:5:43:", "unknown function ${nope} in parameter 'routingKey'", NULL);
}

static void uris_and_their_parameters(void **state)
{
    (void)state;
    acemq__route_file *f = load_ok("routes:\n  - id: r\n"
                                   "    from: \"file:/in%20box?include=%2A.json%26x&&delay=7\"\n"
                                   "    steps:\n      - to: \"log:x?showBody=false\"\n");
    const acemq__uri *u = &f->routes[0].from;
    assert_string_equal(u->path, "/in%20box"); /* only values are decoded */
    assert_string_equal(acemq__uri_param(u, "include"), "*.json&x");
    assert_string_equal(acemq__uri_param(u, "delay"), "7");
    assert_int_equal(u->n, 2);
    assert_null(acemq__uri_param(u, "Include"));
    assert_null(acemq__uri_param(NULL, "include"));
    assert_null(acemq__uri_param(u, NULL));
    acemq__route_file_free(f);

    const char *head = "routes:\n  - id: r\n";
    char text[512];
#define FROM(uri) ((void)snprintf(text, sizeof text, "%s    from: \"%s\"\n", head, uri), text)
    one_error(FROM("log:x?showBody=true&amp;showHeaders=true"), "unknown source scheme 'log:'",
              NULL);
    one_error(FROM("timer:t?period=1&amp;delay=1"),
              "bad.yaml:3:29:", "unknown parameter 'amp;delay' for timer:", NULL);
    one_error(FROM("timer:t?period"), "bad.yaml:3:20:", "parameter 'period' has no value", NULL);
    one_error(FROM("timer:t?period=1&period=2"), "parameter 'period' is given twice", NULL);
    one_error(FROM("timer:t?=1"), "has no name", NULL);
    one_error(FROM("timer:t?repeatCount=-1"), "must be a whole number from 0 to", NULL);
    one_error(FROM("timer:t?period=99999999999"), "must be a whole number from 0 to 2147483647",
              NULL);
    one_error(FROM("amqp:queue:q?prefetch=0"), "from 1 to 65535", NULL);
    one_error(FROM("amqp:queue:"), "an amqp: source is amqp:queue:NAME", NULL);
    one_error(FROM("file:/x?include="), "parameter 'include' of file: is empty", NULL);
    one_error(FROM("file:/x?include=%2"), "bad.yaml:3:28:", "bad percent escape", NULL);
    one_error(FROM("file:/x?include=a%00"), "bad percent escape", NULL);
    one_error(FROM("timer:"), "timer: needs a name", NULL);
    one_error(FROM("file:?delay=1"), "file: needs a directory", NULL);
    one_error(FROM(":x"), "is not a URI", NULL);
    one_error(FROM("tick"), "is not a URI", NULL);
#undef FROM
#define TO(uri)                                                                                    \
    ((void)snprintf(text, sizeof text,                                                             \
                    "%s    from: \"timer:t\"\n    steps:\n      - to: \"%s\"\n", head, uri),       \
     text)
    one_error(TO("amqp:queue:q"), "an amqp: endpoint is amqp:exchange:NAME", NULL);
    one_error(TO("timer:t"), "unknown endpoint scheme 'timer:'", NULL);
    one_error(TO("log:"), "log: needs a name", NULL);
    one_error(TO("log:x?showHeaders=1"), "expected true or false, not '1'", NULL);
    one_error(TO("file:/o?include=x"), "unknown parameter 'include' for file: (known: fileName)",
              NULL);
#undef TO
}

static void wrong_types_say_what_was_expected(void **state)
{
    (void)state;
    const char *head = "routes:\n  - id: r\n    from: \"timer:t\"\n    steps:\n";
    char text[512];
#define STEP(s) ((void)snprintf(text, sizeof text, "%s      - %s\n", head, s), text)
    one_error(STEP("log: [a]"), "expected a string for 'log', found a sequence", NULL);
    one_error(STEP("log:"), "expected a string for 'log', found nothing", NULL);
    one_error(STEP("set_header: x"), "expected a mapping for set_header", NULL);
    one_error(STEP("set_header: { value: x }"), "bad.yaml:5:9: missing 'name' in set_header", NULL);
    one_error(STEP("set_header: { name: n }"), "missing 'value' or 'simple' or 'constant' or",
              NULL);
    one_error(STEP("set_header: { name: n, value: a, constant: b }"),
              "takes 'value' or 'constant', not both", NULL);
    one_error(STEP("exec: { command: x, timeout_ms: soon }"),
              "expected a whole number for 'timeout_ms', found 'soon'", NULL);
    one_error(STEP("exec: { command: x, timeout_ms: -1 }"), "'timeout_ms' must be from 0", NULL);
    one_error(STEP("exec: \"\""), "the command of exec is empty", NULL);
    one_error(STEP("filter: { steps: [] }"), "missing 'simple' or 'expression' in filter", NULL);
    one_error(STEP("filter: { expression: { constant: x } }"),
              "bad.yaml:5:33: a predicate is written with 'simple', not 'constant'", NULL);
    one_error(STEP("choice: { when: x }"), "expected a sequence for 'when'", NULL);
    one_error(STEP("choice: { when: [ x ] }"), "expected a mapping for a when", NULL);
    one_error(STEP("5"), "expected a step (a mapping such as '- log: TEXT'), found '5'", NULL);
    one_error(STEP("{ id: x }"), "a step needs a kind", NULL);
    one_error(STEP("{ [a]: x }"), "expected a step's kind as a key, found a sequence", NULL);
    one_error(STEP("log: { message: x, message: y }"), "'message' is given twice in log", NULL);
    one_error(STEP("to: { id: t }"), "missing 'uri' in to", NULL);
#undef STEP
    one_error("repositories: [a]\nroutes:\n  - id: r\n    from: \"timer:t\"\n",
              "expected a mapping for 'repositories'", NULL);
    one_error("repositories:\n  a: \"memory:\"\nroutes:\n  - id: r\n    from: \"timer:t\"\n",
              "expected a mapping for repository 'a' ({url: ...}), found 'memory:'", NULL);
    one_error("repositories:\n  a: { url: x }\n  a: { url: y }\nroutes:\n  - id: r\n"
              "    from: \"timer:t\"\n",
              "bad.yaml:3:3:", "repository 'a' is defined twice", NULL);
    one_error("broker: { a: b }\nroutes:\n  - id: r\n    from: \"timer:t\"\n",
              "expected a string for 'broker', found a mapping", NULL);
    one_error("routes:\n  - id: r\n    from: \"timer:t\"\n    steps: [ { log: x } ]\n"
              "rutes: []\n",
              "bad.yaml:5:1:", "unknown option 'rutes' in the file's top level", NULL);
    one_error("routes:\n  - from: \"timer:t\"\n", "bad.yaml:2:5: missing 'id' in route", NULL);
    one_error("routes:\n  - x\n", "expected a route", NULL);
    one_error("routes:\n  - id: r\n    from: \"timer:t\"\n    steps: [ { log: \"\\0\" } ]\n",
              "holds a NUL character", NULL);
    one_error("routes:\n  - id: r\n    from: { uri: \"timer:t\", steps: [] }\n    steps: []\n",
              "steps given both in the route and in its from", NULL);
}

static void yaml_level_errors(void **state)
{
    (void)state;
    one_error("routes: [\n", "bad.yaml:2:1:", "invalid YAML", NULL);
    one_error("routes: [ { id: r, from: \"timer:t\" } ]\n---\nc: d\n",
              "bad.yaml:3:1: a second YAML document", NULL);
    one_error("", "bad.yaml:1:1: the file is empty", NULL);
    one_error("# only a comment\n", "the file is empty", NULL);
    one_error("- a\n", "expected a mapping with 'repositories', 'broker' and 'routes'", NULL);
    one_error("&a [*a]\n", "take no YAML aliases", NULL);
    one_error("routes: \"\\xff\xff\"\n", "invalid text", NULL);
    one_error("repositories: { r: &u { url: \"memory:\" }, s: *u }\n"
              "routes: [ { id: r, from: \"timer:t\" } ]\n",
              "bad.yaml:1:20:", "take no YAML aliases", NULL);

    /* nesting is bounded: 40 filters deep */
    acemq__buf b = {0};
    assert_int_equal(acemq__buf_puts(&b, "routes:\n  - id: r\n    from: \"timer:t\"\n    steps:"),
                     0);
    for (int i = 0; i < 40; i++)
        assert_int_equal(acemq__buf_puts(&b, " [ { filter: { simple: \"true\", steps:"), 0);
    assert_int_equal(acemq__buf_puts(&b, " []"), 0);
    for (int i = 0; i < 40; i++)
        assert_int_equal(acemq__buf_puts(&b, " } } ]"), 0);
    assert_int_equal(acemq__buf_puts(&b, "\n"), 0);
    one_error(acemq__buf_str(&b), "steps nest deeper than 32 levels", NULL);
    acemq__buf_free(&b);
}

static void load_reads_a_file_or_says_why_not(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_route_load.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    (void)snprintf(path, sizeof path, "%s/route.yaml", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fputs(EXAMPLE, fp) >= 0, 1);
    assert_int_equal(fclose(fp), 0);

    acemq__route_errors e = {0};
    acemq__route_file *f = NULL;
    assert_int_equal(acemq__route_load(path, &f, &e), 0);
    assert_string_equal(f->path, path);
    assert_string_equal(f->routes[0].id, "pinned");
    acemq__route_file_free(f);
    acemq__route_file_free(NULL);

    char missing[300];
    (void)snprintf(missing, sizeof missing, "%s/absent.yaml", dir);
    f = (acemq__route_file *)&f;
    assert_int_equal(acemq__route_load(missing, &f, &e), ACEMQ_EIO);
    assert_null(f);
    assert_int_equal(e.n, 1);
    char want[400];
    (void)snprintf(want, sizeof want, "%s: cannot read: %s", missing, strerror(ENOENT));
    assert_string_equal(e.lines[0], want);
    assert_int_equal(acemq__route_load(dir, &f, &e), ACEMQ_EIO); /* a directory */
    assert_int_equal(e.n, 2);
    assert_non_null(strstr(e.lines[1], "cannot read: "));
    acemq__route_errors_free(&e);
    acemq__route_errors_free(NULL);

    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* Each broken file's first line: "# expect: LINE:COLUMN: words". */
static void broken_files_give_their_one_error(void **state)
{
    (void)state;
    if (!broken_dir) {
        skip();
        return;
    }
    DIR *d = opendir(broken_dir);
    assert_non_null(d);
    int files = 0;
    for (struct dirent *ent = readdir(d); ent; ent = readdir(d)) {
        size_t len = strlen(ent->d_name);
        if (len < 5 || strcmp(ent->d_name + len - 5, ".yaml") != 0) continue;
        char path[1024];
        (void)snprintf(path, sizeof path, "%s/%s", broken_dir, ent->d_name);
        FILE *fp = fopen(path, "r");
        assert_non_null(fp);
        char first[512];
        assert_non_null(fgets(first, sizeof first, fp));
        assert_int_equal(fclose(fp), 0);
        first[strcspn(first, "\n")] = '\0';
        assert_int_equal(strncmp(first, "# expect: ", 10), 0);
        const char *expect = first + 10;
        const char *words = strchr(strchr(expect, ':') + 1, ':');
        assert_non_null(words);
        char place[1100];
        (void)snprintf(place, sizeof place, "%s:%.*s:", path, (int)(words - expect), expect);
        words += 2; /* ": " */

        acemq__route_errors e = {0};
        acemq__route_file *f = NULL;
        int rc = acemq__route_load(path, &f, &e);
        int ok = rc == ACEMQ_EINVAL && !f && e.n == 1 &&
                 strncmp(e.lines[0], place, strlen(place)) == 0 && strstr(e.lines[0], words);
        if (!ok) {
            print_message("%s: want '%s ... %s', got rc %d and:\n", ent->d_name, place, words, rc);
            print_errors(&e);
        }
        assert_true(ok);
        acemq__route_errors_free(&e);
        files++;
    }
    assert_int_equal(closedir(d), 0);
    assert_true(files >= 15);
}

int main(int argc, char **argv)
{
    broken_dir = argc > 1 ? argv[1] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(example_loads_with_exact_values),
        cmocka_unit_test(camel_spellings_name_the_same_things),
        cmocka_unit_test(every_step_kind_and_form),
        cmocka_unit_test(step_ids_given_or_made),
        cmocka_unit_test(idempotent_consumer_defaults_and_options),
        cmocka_unit_test(constant_is_literal_text),
        cmocka_unit_test(collects_every_error_in_file_order),
        cmocka_unit_test(expression_errors_point_inside_the_scalar),
        cmocka_unit_test(uris_and_their_parameters),
        cmocka_unit_test(wrong_types_say_what_was_expected),
        cmocka_unit_test(yaml_level_errors),
        cmocka_unit_test(load_reads_a_file_or_says_why_not),
        cmocka_unit_test(broken_files_give_their_one_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
