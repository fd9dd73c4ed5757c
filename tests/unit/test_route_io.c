/* test_route_io.c — routes' sources, endpoints and exec step (route/io.h)
 * without servers: timer:, file:, amqp: (on the in-process broker), log:,
 * and exec's child process (output, failures, environment, 1 MiB, timeout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "acemq/broker.h"
#include "acemq/common.h"
#include "backends/test_control.h"
#include "route/io.h"

/* --- URIs and steps, built by hand ------------------------------------------ */

/* A URI whose strings live in the struct: nothing to free. */
typedef struct test_uri {
    acemq__uri u;
    char query[256];
    char *names[8], *values[8];
} test_uri;

/* t from scheme, path and "a=b&c=d" (no decoding: tests write plain values). */
static acemq__uri *uri_make(test_uri *t, const char *scheme, const char *path, const char *query)
{
    memset(t, 0, sizeof *t);
    t->u.text = t->u.scheme = (char *)scheme;
    t->u.path = (char *)path;
    t->u.names = t->names;
    t->u.values = t->values;
    snprintf(t->query, sizeof t->query, "%s", query ? query : "");
    char *save = NULL;
    for (char *kv = strtok_r(t->query, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(kv, '=');
        assert_true(eq && t->u.n < 8);
        *eq = '\0';
        t->names[t->u.n] = kv;
        t->values[t->u.n++] = eq + 1;
    }
    return &t->u;
}

/* A `to` step; t holds its URI's strings. */
static acemq__step *step_make(acemq__step *s, test_uri *t, const char *id, const char *scheme,
                              const char *path, const char *query)
{
    memset(s, 0, sizeof *s);
    s->kind = ACEMQ__STEP_TO;
    s->id = (char *)id;
    s->to = *uri_make(t, scheme, path, query); /* its arrays point into t */
    return s;
}

static acemq__source *must_open_source(const char *scheme, const char *path, const char *query,
                                       const acemq__route_env *env)
{
    test_uri t;
    acemq__source *s = NULL;
    acemq__buf why = {0};
    int rc = acemq__source_open(uri_make(&t, scheme, path, query), env, &s, &why);
    if (rc != 0) fail_msg("open %s:%s: %s", scheme, path, acemq__buf_str(&why));
    acemq__buf_free(&why);
    return s;
}

static int open_source_fails(const char *scheme, const char *path, const char *query,
                             const acemq__route_env *env, acemq__buf *why)
{
    test_uri t;
    acemq__source *s = NULL;
    int rc = acemq__source_open(uri_make(&t, scheme, path, query), env, &s, why);
    assert_null(s);
    return rc;
}

static acemq__endpoint *must_open_endpoint(acemq__step *st, const acemq__route_env *env)
{
    acemq__endpoint *e = NULL;
    acemq__buf why = {0};
    int rc = acemq__endpoint_open(st, env, &e, &why);
    if (rc != 0) fail_msg("open %s: %s", st->to.scheme, acemq__buf_str(&why));
    acemq__buf_free(&why);
    return e;
}

/* The next exchange, waited for up to 5 s. */
static acemq__exchange take(acemq__source *s)
{
    acemq__exchange x;
    acemq__buf why = {0};
    acemq__exchange_init(&x, "r1");
    int rc = acemq__source_next(s, 5000, &x, &why);
    if (rc != 0) fail_msg("next: %s: %s", acemq_err_name(rc), acemq__buf_str(&why));
    acemq__buf_free(&why);
    return x;
}

static void must_done(acemq__source *s, acemq__exchange *x, int completed)
{
    acemq__buf why = {0};
    int rc = acemq__source_done(s, x, completed, &why);
    if (rc != 0) fail_msg("done: %s: %s", acemq_err_name(rc), acemq__buf_str(&why));
    acemq__buf_free(&why);
    acemq__exchange_free(x);
}

/* What next answers when it gives no exchange; its why into why (may be NULL). */
static int next_rc(acemq__source *s, int timeout_ms, acemq__buf *why)
{
    acemq__exchange x;
    acemq__buf mine = {0};
    acemq__exchange_init(&x, "r1");
    int rc = acemq__source_next(s, timeout_ms, &x, why ? why : &mine);
    if (rc == 0) (void)acemq__source_done(s, &x, 1, &mine);
    acemq__exchange_free(&x);
    acemq__buf_free(&mine);
    assert_int_not_equal(rc, 0);
    return rc;
}

/* A header or property, "(absent)" when it is not there. */
static const char *field(const acemq__fields *f, const char *name)
{
    const char *v = acemq__fields_get(f, name);
    return v ? v : "(absent)";
}

/* A scratch directory, removed by rm_tree. */
static void make_dir(char dir[64])
{
    snprintf(dir, 64, "%s", "/tmp/acemq-route-io-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void rm_tree(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* DIR/NAME, in a buffer the next call reuses. */
static const char *path_of(const char *dir, const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static void write_text(const char *dir, const char *name, const char *text, time_t mtime)
{
    FILE *f = fopen(path_of(dir, name), "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    struct timespec t[2] = {{mtime, 0}, {mtime, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path_of(dir, name), t, 0), 0);
}

static int exists(const char *dir, const char *name)
{
    struct stat st;
    return stat(path_of(dir, name), &st) == 0;
}

static char *read_text(const char *dir, const char *name)
{
    static char text[4096];
    FILE *f = fopen(path_of(dir, name), "r");
    assert_non_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    assert_int_equal(fclose(f), 0);
    return text;
}

/* --- timer: ------------------------------------------------------------------ */

static void test_timer_repeat_and_fields(void **state)
{
    (void)state;
    acemq__source *s = must_open_source("timer", "tick", "period=0&delay=0&repeatCount=3", NULL);
    for (int i = 1; i <= 3; i++) {
        acemq__exchange x = take(s);
        char want[8];
        snprintf(want, sizeof want, "%d", i);
        assert_string_equal(field(&x.properties, "CamelTimerCounter"), want);
        assert_string_equal(field(&x.properties, "CamelTimerName"), "tick");
        assert_string_equal(field(&x.properties, "CamelTimerPeriod"), "0");
        /* RFC 3339 UTC with milliseconds: 2024-05-01T12:00:00.123Z */
        char shape[32];
        snprintf(shape, sizeof shape, "%s", field(&x.headers, "firedTime"));
        for (char *c = shape; *c; c++)
            if (*c >= '0' && *c <= '9') *c = '9';
        assert_string_equal(shape, "9999-99-99T99:99:99.999Z");
        must_done(s, &x, 1);
    }
    assert_int_equal(next_rc(s, 0, NULL), 1);
    assert_int_equal(next_rc(s, 0, NULL), 1);
    acemq__source_close(s);
}

static void test_timer_timeouts(void **state)
{
    (void)state;
    /* The first exchange is due at once, the second a minute later: a wait
     * shorter than that comes back empty. */
    acemq__source *s = must_open_source("timer", "slow", "period=60000&delay=0", NULL);
    acemq__exchange x = take(s);
    must_done(s, &x, 1);
    assert_int_equal(next_rc(s, 10, NULL), ACEMQ_ENOENT);
    assert_int_equal(next_rc(s, 0, NULL), ACEMQ_ENOENT);
    acemq__source_close(s);
    s = must_open_source("timer", "late", "delay=60000", NULL);
    assert_int_equal(next_rc(s, 0, NULL), ACEMQ_ENOENT);
    acemq__source_close(s);
    acemq__buf why = {0};
    assert_int_equal(open_source_fails("timer", "bad", "period=soon", NULL, &why), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq__buf_str(&why), "period"));
    assert_int_equal(open_source_fails("timer", "bad", "delay=-5", NULL, &why), ACEMQ_EINVAL);
    assert_int_equal(open_source_fails("nope", "x", NULL, NULL, &why), ACEMQ_EINVAL);
    acemq__buf_free(&why);
}

/* --- file: source --------------------------------------------------------------- */

static void test_file_source(void **state)
{
    (void)state;
    char dir[64];
    make_dir(dir);
    write_text(dir, "b.json", "second", 2000000000);
    write_text(dir, "a.json", "first", 1000000000);
    write_text(dir, "c.txt", "not included", 1000);
    write_text(dir, ".hidden.json", "hidden", 1000);
    assert_int_equal(mkdir(path_of(dir, "dir.json"), 0700), 0);
    acemq__source *s = must_open_source("file", dir, "include=*.json&delay=0", NULL);
    /* Oldest first. */
    acemq__exchange a = take(s);
    assert_string_equal(field(&a.headers, "fileName"), "a.json");
    assert_string_equal(acemq__buf_str(&a.body), "first");
    acemq__exchange b = take(s);
    assert_string_equal(field(&b.headers, "fileName"), "b.json");
    /* Both in flight: nothing else matches. */
    assert_int_equal(next_rc(s, 0, NULL), ACEMQ_ENOENT);
    /* Completed: moved to .done. Failed: offered again. */
    must_done(s, &a, 1);
    assert_false(exists(dir, "a.json"));
    assert_string_equal(read_text(dir, ".done/a.json"), "first");
    must_done(s, &b, 0);
    assert_true(exists(dir, "b.json"));
    b = take(s);
    assert_string_equal(field(&b.headers, "fileName"), "b.json");
    assert_string_equal(acemq__buf_str(&b.body), "second");
    must_done(s, &b, 1);
    assert_string_equal(read_text(dir, ".done/b.json"), "second");
    /* What is left is hidden, not included, or not a regular file. */
    assert_int_equal(next_rc(s, 0, NULL), ACEMQ_ENOENT);
    assert_true(exists(dir, ".hidden.json") && exists(dir, "c.txt"));
    acemq__source_close(s);
    /* Default include: every name not starting with '.'. A failed file
     * waits out its delay (a minute here); closing leaves it where it is. */
    s = must_open_source("file", dir, "delay=60000", NULL);
    acemq__exchange c = take(s);
    assert_string_equal(field(&c.headers, "fileName"), "c.txt");
    must_done(s, &c, 0);
    assert_int_equal(next_rc(s, 0, NULL), ACEMQ_ENOENT);
    acemq__source_close(s);
    assert_true(exists(dir, "c.txt"));
    rm_tree(dir);
    /* A directory that is not there: said at open, with its name. */
    acemq__buf why = {0};
    assert_true(open_source_fails("file", "/nonexistent/acemq-route-io", NULL, NULL, &why) < 0);
    assert_non_null(strstr(acemq__buf_str(&why), "/nonexistent/acemq-route-io"));
    assert_non_null(strstr(acemq__buf_str(&why), "No such file or directory"));
    acemq__buf_free(&why);
}

/* --- amqp: source and endpoint ---------------------------------------------------- */

static acemq_broker *broker_with_queue(const char *url)
{
    acemq_broker *ctl = NULL;
    assert_int_equal(acemq_broker_open(&ctl, url, NULL), 0);
    assert_int_equal(acemq__memory_broker_declare(ctl, "q", NULL), 0);
    return ctl;
}

static void publish_one(acemq_broker *ctl, const char *id, const char *headers_json)
{
    acemq_broker_msg m = {"", "q", id, NULL, headers_json, 7, id, strlen(id)};
    acemq_publish_result r;
    assert_int_equal(acemq_broker_publish(ctl, &m, 1, &r), 0);
    assert_int_equal(r.outcome, ACEMQ_PUBLISH_CONFIRMED);
}

static void assert_depth(acemq_broker *ctl, size_t ready, size_t unacked)
{
    size_t r = 99, u = 99;
    assert_int_equal(acemq__memory_broker_depth(ctl, "q", &r, &u), 0);
    assert_int_equal(r, ready);
    assert_int_equal(u, unacked);
}

static void test_amqp_round_trip(void **state)
{
    (void)state;
    acemq_broker *ctl = broker_with_queue("memory:route-io");
    acemq__route_env env = {"memory:route-io", NULL};
    acemq__step to, to2;
    test_uri t, t2;
    step_make(&to, &t, "to1", "amqp", "exchange:", "routingKey=${header.dest}");
    acemq__endpoint *e = must_open_endpoint(&to, &env);
    acemq__source *s = must_open_source("amqp", "queue:q", "retryDelay=0&prefetch=4", &env);

    acemq__exchange out;
    acemq__exchange_init(&out, "r1");
    assert_int_equal(acemq__fields_set(&out.headers, "dest", "q"), 0);
    assert_int_equal(acemq__fields_set(&out.headers, "note", "a b=c"), 0);
    assert_int_equal(acemq__exchange_set_body(&out, "pay\0load", 8), 0);
    acemq__buf why = {0};
    int rc = acemq__endpoint_send(e, &out, &why);
    if (rc != 0) fail_msg("send: %s", acemq__buf_str(&why));
    acemq__exchange in = take(s);
    assert_string_equal(in.id, out.id);
    assert_string_equal(field(&in.headers, "dest"), "q");
    assert_string_equal(field(&in.headers, "note"), "a b=c");
    assert_int_equal(in.body.len, 8);
    assert_memory_equal(in.body.p, "pay\0load", 8);
    assert_string_equal(field(&in.properties, "amqp.exchange"), "");
    assert_string_equal(field(&in.properties, "amqp.routing_key"), "q");
    assert_string_equal(field(&in.properties, "amqp.redelivered"), "false");
    /* Failed: back in the queue at once (retryDelay=0), redelivered. */
    must_done(s, &in, 0);
    in = take(s);
    assert_string_equal(in.id, out.id);
    assert_string_equal(field(&in.properties, "amqp.redelivered"), "true");
    /* Completed: acknowledged, the queue empty. */
    must_done(s, &in, 1);
    assert_depth(ctl, 0, 0);
    assert_int_equal(next_rc(s, 0, NULL), ACEMQ_ENOENT);
    /* Unroutable: the step fails. */
    acemq__memory_broker_unroutable(ctl, "nowhere");
    step_make(&to2, &t2, "to2", "amqp", "exchange:nowhere", "routingKey=k");
    acemq__endpoint *e2 = must_open_endpoint(&to2, &env);
    assert_int_equal(acemq__endpoint_send(e2, &out, &why), ACEMQ_EBACKEND);
    assert_non_null(strstr(acemq__buf_str(&why), "unroutable"));
    acemq__endpoint_close(e2);
    acemq__endpoint_close(e);
    acemq__source_close(s);
    acemq__exchange_free(&out);
    acemq__buf_free(&why);
    acemq_broker_close(ctl);
}

static void test_amqp_headers_held_cancelled(void **state)
{
    (void)state;
    acemq_broker *ctl = broker_with_queue("memory:route-io-h");
    publish_one(ctl, "m-1", "{\"s\":\"text\",\"n\":12,\"r\":1.5,\"b\":true,\"a\":[1],\"o\":{}}");
    acemq__route_env env = {"memory:route-io-h", NULL};
    acemq__source *s = must_open_source("amqp", "queue:q", "retryDelay=60000", &env);
    acemq__exchange x = take(s);
    assert_string_equal(x.id, "m-1");
    /* Strings as they are, numbers and booleans as text, the rest skipped. */
    assert_string_equal(field(&x.headers, "s"), "text");
    assert_string_equal(field(&x.headers, "n"), "12");
    assert_string_equal(field(&x.headers, "r"), "1.5");
    assert_string_equal(field(&x.headers, "b"), "true");
    assert_string_equal(field(&x.headers, "x-acemq-attempts"), "7");
    assert_null(acemq__fields_get(&x.headers, "a"));
    assert_null(acemq__fields_get(&x.headers, "o"));
    /* Failed with a minute's retryDelay: held, given back at close. */
    must_done(s, &x, 0);
    assert_int_equal(next_rc(s, 0, NULL), ACEMQ_ENOENT);
    assert_depth(ctl, 0, 1);
    acemq__source_close(s);
    assert_depth(ctl, 1, 0);
    /* The queue goes while a delivery is in hand: next says so as "nothing
     * came" with a reason; the delivery is void, and settling it is fine. */
    s = must_open_source("amqp", "queue:q", NULL, &env);
    x = take(s);
    assert_int_equal(acemq__memory_broker_delete(ctl, "q"), 0);
    acemq__buf why = {0};
    assert_int_equal(next_rc(s, 0, &why), ACEMQ_ENOENT);
    assert_non_null(strstr(acemq__buf_str(&why), "cancelled"));
    must_done(s, &x, 1);
    /* The handle consumes again once the queue is back. */
    assert_int_equal(acemq__memory_broker_declare(ctl, "q", NULL), 0);
    publish_one(ctl, "m-2", NULL);
    x = take(s);
    assert_string_equal(x.id, "m-2");
    must_done(s, &x, 1);
    acemq__source_close(s);
    assert_int_equal(open_source_fails("amqp", "queue:missing", NULL, &env, &why), ACEMQ_ENOENT);
    assert_non_null(strstr(acemq__buf_str(&why), "missing"));
    acemq__route_env none = {NULL, NULL};
    assert_int_equal(open_source_fails("amqp", "queue:q", NULL, &none, &why), ACEMQ_EINVAL);
    assert_int_equal(open_source_fails("amqp", "exchange:q", NULL, &env, &why), ACEMQ_EINVAL);
    acemq__buf_free(&why);
    acemq_broker_close(ctl);
}

/* --- log: and file: endpoints ------------------------------------------------------- */

static void test_log_endpoint(void **state)
{
    (void)state;
    FILE *log = tmpfile();
    assert_non_null(log);
    acemq__route_env env = {NULL, log};
    acemq__step st;
    test_uri t;
    acemq__endpoint *e =
        must_open_endpoint(step_make(&st, &t, "to1", "log", "audit", "showHeaders=true"), &env);
    acemq__exchange x;
    acemq__exchange_init(&x, "r1");
    snprintf(x.id, sizeof x.id, "%s", "ex-1");
    assert_int_equal(acemq__exchange_set_body(&x, "hello \"world\"\n", 14), 0);
    assert_int_equal(acemq__fields_set(&x.headers, "a", "1"), 0);
    assert_int_equal(acemq__fields_set(&x.headers, "b", "x y"), 0);
    acemq__buf why = {0};
    assert_int_equal(acemq__endpoint_send(e, &x, &why), 0);
    acemq__endpoint_close(e);
    e = must_open_endpoint(step_make(&st, &t, "to2", "log", "plain", "showBody=false"), &env);
    assert_int_equal(acemq__endpoint_send(e, &x, &why), 0);
    acemq__endpoint_close(e);

    rewind(log);
    char line[512];
    assert_non_null(fgets(line, sizeof line, log));
    assert_string_equal(line, "route=r1 step=to1 log=audit exchange=ex-1 "
                              "body=\"hello \\\"world\\\"\\n\" headers=\"a=1, b=x y\"\n");
    assert_non_null(fgets(line, sizeof line, log));
    assert_string_equal(line, "route=r1 step=to2 log=plain exchange=ex-1\n");
    assert_null(fgets(line, sizeof line, log));
    assert_int_equal(fclose(log), 0);
    e = NULL;
    step_make(&st, &t, "to3", "log", "bad", "showBody=maybe");
    assert_int_equal(acemq__endpoint_open(&st, &env, &e, &why), ACEMQ_EINVAL);
    assert_null(e);
    step_make(&st, &t, "to4", "ftp", "host", NULL);
    assert_int_equal(acemq__endpoint_open(&st, &env, &e, &why), ACEMQ_EINVAL);
    acemq__exchange_free(&x);
    acemq__buf_free(&why);
}

static int send_named(acemq__endpoint *e, const char *file_name, acemq__buf *why)
{
    acemq__exchange x;
    acemq__exchange_init(&x, "r1");
    if (file_name) assert_int_equal(acemq__fields_set(&x.headers, "fileName", file_name), 0);
    assert_int_equal(acemq__exchange_set_body(&x, "contents", 8), 0);
    int rc = acemq__endpoint_send(e, &x, why);
    acemq__exchange_free(&x);
    return rc;
}

static void test_file_endpoint(void **state)
{
    (void)state;
    char dir[64];
    make_dir(dir);
    acemq__route_env env = {NULL, NULL};
    acemq__step st;
    test_uri t;
    acemq__endpoint *e = must_open_endpoint(step_make(&st, &t, "to1", "file", dir, NULL), &env);
    acemq__buf why = {0};
    assert_int_equal(send_named(e, "out.txt", &why), 0);
    assert_string_equal(read_text(dir, "out.txt"), "contents");
    assert_false(exists(dir, ".out.txt.tmp"));
    assert_int_equal(send_named(e, "out.txt", &why), 0); /* replaced whole */
    assert_string_equal(read_text(dir, "out.txt"), "contents");
    const char *bad[] = {"../escape", "a/b", ".", ".."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(send_named(e, bad[i], &why), ACEMQ_EINVAL);
    assert_false(exists(dir, "../escape"));
    /* No fileName header: the exchange id names the file. */
    assert_int_equal(send_named(e, NULL, &why), 0);
    acemq__endpoint_close(e);

    /* fileName as an expression. */
    e = must_open_endpoint(
        step_make(&st, &t, "to2", "file", dir, "fileName=${header.fileName}.bak"), &env);
    assert_int_equal(send_named(e, "x", &why), 0);
    assert_string_equal(read_text(dir, "x.bak"), "contents");
    acemq__endpoint_close(e);
    e = NULL;
    step_make(&st, &t, "to3", "file", "/nonexistent/acemq-route-io", NULL);
    assert_true(acemq__endpoint_open(&st, &env, &e, &why) < 0);
    assert_null(e);
    assert_non_null(strstr(acemq__buf_str(&why), "/nonexistent/acemq-route-io"));
    acemq__buf_free(&why);
    rm_tree(dir);
}

/* --- exec ------------------------------------------------------------------------- */

static int run(const char *command, int64_t timeout_ms, acemq__exchange *x, acemq__buf *why)
{
    acemq__buf_clear(why);
    return acemq__exec_run(command, timeout_ms, x, why);
}

static void test_exec_output_failure_env(void **state)
{
    (void)state;
    acemq__exchange x;
    acemq__exchange_init(&x, "route-7");
    acemq__buf why = {0};
    assert_int_equal(acemq__exchange_set_body(&x, "hello", 5), 0);
    assert_int_equal(run("tr a-z A-Z", 0, &x, &why), 0);
    assert_string_equal(acemq__buf_str(&x.body), "HELLO");
    assert_int_equal(run("echo first >&2; echo 'last words' >&2; exit 3", 0, &x, &why),
                     ACEMQ_EBACKEND);
    assert_non_null(strstr(acemq__buf_str(&why), "exit status 3"));
    assert_non_null(strstr(acemq__buf_str(&why), "last words"));
    assert_null(strstr(acemq__buf_str(&why), "first"));
    assert_string_equal(acemq__buf_str(&x.body), "HELLO"); /* a failure leaves the body */
    assert_int_equal(run("kill -9 $$", 0, &x, &why), ACEMQ_EBACKEND);
    assert_non_null(strstr(acemq__buf_str(&why), "signal 9"));

    /* The environment: ours, the headers' (names kept, other bytes '_'),
     * and the process's own. */
    snprintf(x.id, sizeof x.id, "%s", "ex-42");
    assert_int_equal(acemq__fields_set(&x.headers, "order-id", "o 1"), 0);
    assert_int_equal(acemq__fields_set(&x.headers, "Kind", "k"), 0);
    assert_int_equal(setenv("ACEMQ_ROUTE_IO_TEST", "inherited", 1), 0);
    assert_int_equal(run("printf '%s|%s|%s|%s|%s' \"$ACEMQ_ROUTE_ID\" \"$ACEMQ_EXCHANGE_ID\" "
                         "\"$ACEMQ_HEADER_order_id\" \"$ACEMQ_HEADER_Kind\" "
                         "\"$ACEMQ_ROUTE_IO_TEST\"",
                         0, &x, &why),
                     0);
    assert_string_equal(acemq__buf_str(&x.body), "route-7|ex-42|o 1|k|inherited");
    assert_int_equal(unsetenv("ACEMQ_ROUTE_IO_TEST"), 0);
    acemq__exchange_free(&x);
    acemq__buf_free(&why);
}

static void test_exec_pipes_and_timeout(void **state)
{
    (void)state;
    size_t n = (size_t)1 << 20;
    char *big = malloc(n);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('a' + i % 26);
    acemq__exchange x;
    acemq__exchange_init(&x, "r1");
    acemq__buf why = {0};
    /* cat writes as it reads: both pipes fill unless they are polled together. */
    assert_int_equal(acemq__exchange_set_body(&x, big, n), 0);
    assert_int_equal(run("cat", 0, &x, &why), 0);
    assert_int_equal(x.body.len, n);
    assert_memory_equal(x.body.p, big, n);
    /* A command that reads nothing: our write meets EPIPE, not SIGPIPE. */
    assert_int_equal(run("exec 0<&-; echo done", 0, &x, &why), 0);
    assert_string_equal(acemq__buf_str(&x.body), "done\n");
    free(big);
    assert_int_equal(run("echo started >&2; sleep 30", 100, &x, &why), ACEMQ_EBACKEND);
    assert_non_null(strstr(acemq__buf_str(&why), "no exit within 100 ms"));
    assert_non_null(strstr(acemq__buf_str(&why), "started"));
    /* Its pipes closed but no exit: the deadline still holds. */
    assert_int_equal(run("exec >&- 2>&-; sleep 30", 100, &x, &why), ACEMQ_EBACKEND);
    assert_non_null(strstr(acemq__buf_str(&why), "no exit within"));
    acemq__exchange_free(&x);
    acemq__buf_free(&why);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timer_repeat_and_fields),
        cmocka_unit_test(test_timer_timeouts),
        cmocka_unit_test(test_file_source),
        cmocka_unit_test(test_amqp_round_trip),
        cmocka_unit_test(test_amqp_headers_held_cancelled),
        cmocka_unit_test(test_log_endpoint),
        cmocka_unit_test(test_file_endpoint),
        cmocka_unit_test(test_exec_output_failure_env),
        cmocka_unit_test(test_exec_pipes_and_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
