/* test_route_run.c — the route runtime on timer sources and the memory and
 * SQLite repositories: the idempotent consumer's answers (new, duplicate,
 * in progress), its options (skip_duplicate, eager, remove_on_failure,
 * completion_eager), what a failed step does to the exchange and its
 * claims, stopping, and a start that cannot open what the file names.
 * The CLI's view of the same: tests/integration/cli_route.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "route/route.h"

typedef struct fixture {
    char dir[64];
    char db[128];
    FILE *log;
    acemq__route_file *file;
    acemq__routes *routes;
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    strcpy(fx->dir, "/tmp/acemq-route-run-XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    snprintf(fx->db, sizeof fx->db, "%s/dedupe.db", fx->dir);
    fx->log = tmpfile();
    assert_non_null(fx->log);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    acemq__route_file_free(fx->file);
    fclose(fx->log);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx->dir);
    assert_int_equal(system(cmd), 0);
    free(fx);
    return 0;
}

/* Loads text (printf-style), runs it until its timers end, and keeps the
 * file for the test to read its counts. */
static void run_text(fixture *fx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void run_text(fixture *fx, const char *fmt, ...)
{
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof text);
    acemq__route_errors errors = {0};
    int rc = acemq__route_load_text("test.yaml", text, (size_t)n, &fx->file, &errors);
    if (rc != 0) fail_msg("%s", errors.n ? errors.lines[0] : "load failed");
    acemq__route_errors_free(&errors);
    acemq__routes_options o = {.log = fx->log, .errlog = fx->log};
    acemq__buf why = {0};
    rc = acemq__routes_start(fx->file, &o, &fx->routes, &why);
    if (rc != 0) fail_msg("start: %s", acemq__buf_str(&why));
    acemq__buf_free(&why);
    acemq__routes_wait(fx->routes, NULL);
    acemq__routes_close(fx->routes);
    fx->routes = NULL;
}

/* Lines of the log that contain text. */
static int log_count(fixture *fx, const char *text)
{
    rewind(fx->log);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, fx->log))
        if (strstr(line, text)) n++;
    return n;
}

static const acemq__route *route0(const fixture *fx)
{
    return &fx->file->routes[0];
}

/* The step at the route's top level, by index. */
static const acemq__step *step_at(const fixture *fx, size_t i)
{
    assert_true(i < route0(fx)->steps.n);
    return &route0(fx)->steps.v[i];
}

/* 1 confirmed, 0 not, in the SQLite repository at fx->db. */
static int confirmed(const fixture *fx, const char *key)
{
    char url[160];
    snprintf(url, sizeof url, "sqlite:%s", fx->db);
    acemq_idem *s;
    assert_int_equal(acemq_idem_open(&s, url, NULL), 0);
    int rc = acemq_idem_is_confirmed(s, key, strlen(key));
    acemq_idem_close(s);
    assert_true(rc >= 0);
    return rc;
}

#define PINNED                                                                                     \
    "repositories:\n"                                                                              \
    "  dedupe: { url: \"%s\" }\n"                                                                  \
    "routes:\n"                                                                                    \
    "  - id: pinned\n"                                                                             \
    "    from: \"timer:tick?period=0&delay=0&repeatCount=5\"\n"                                    \
    "    steps:\n"                                                                                 \
    "      - set_header: { name: messageId, value: \"fixed-1\" }\n"                                \
    "      - idempotent_consumer:\n"                                                               \
    "          repository: dedupe\n"                                                               \
    "          expression: \"${header.messageId}\"\n"                                              \
    "%s"                                                                                           \
    "          steps:\n"                                                                           \
    "            - log: \"Processing ${header.messageId} "                                         \
    "duplicate=${exchangeProperty.duplicate}\"\n"                                                  \
    "%s"

static void a_pinned_key_runs_once_and_four_duplicates_complete(void **state)
{
    fixture *fx = *state;
    run_text(fx, PINNED, "memory:", "",
             "            - to: \"log:processed?showBody=true&showHeaders=true\"\n");
    assert_int_equal(log_count(fx, "Processing fixed-1"), 1);
    assert_int_equal(log_count(fx, "log=processed"), 1);
    assert_int_equal(route0(fx)->counts.exchanges, 5);
    assert_int_equal(route0(fx)->counts.completed, 5);
    assert_int_equal(route0(fx)->counts.failed, 0);
    const acemq__step *idem = step_at(fx, 1);
    assert_int_equal(idem->counts.runs, 5);
    assert_int_equal(idem->counts.duplicates, 4);
    assert_int_equal(idem->steps.v[0].counts.runs, 1);
}

static void skip_duplicate_false_runs_the_steps_with_duplicate_set(void **state)
{
    fixture *fx = *state;
    run_text(fx, PINNED, "memory:", "          skip_duplicate: false\n", "");
    assert_int_equal(log_count(fx, "Processing fixed-1 duplicate=false"), 1);
    assert_int_equal(log_count(fx, "Processing fixed-1 duplicate=true"), 4);
    assert_int_equal(step_at(fx, 1)->counts.duplicates, 4);
}

static void not_eager_looks_before_and_claims_after(void **state)
{
    fixture *fx = *state;
    char url[160];
    snprintf(url, sizeof url, "sqlite:%s", fx->db);
    run_text(fx, PINNED, url, "          eager: false\n", "");
    assert_int_equal(log_count(fx, "Processing fixed-1"), 1);
    assert_int_equal(step_at(fx, 1)->counts.duplicates, 4);
    assert_int_equal(confirmed(fx, "fixed-1"), 1);
}

/* A step after the block fails every exchange. */
#define FAILS_AFTER                                                                                \
    "repositories:\n"                                                                              \
    "  dedupe: { url: \"sqlite:%s\" }\n"                                                           \
    "routes:\n"                                                                                    \
    "  - id: after\n"                                                                              \
    "    from: \"timer:tick?period=0&delay=0&repeatCount=5\"\n"                                    \
    "    steps:\n"                                                                                 \
    "      - idempotent_consumer:\n"                                                               \
    "          repository: dedupe\n"                                                               \
    "          expression: \"fixed-1\"\n"                                                          \
    "          completion_eager: %s\n"                                                             \
    "          steps:\n"                                                                           \
    "            - log: \"ran\"\n"                                                                 \
    "      - exec: \"echo later step fails >&2; exit 3\"\n"

static void a_failure_after_the_block_releases_the_key_by_default(void **state)
{
    fixture *fx = *state;
    run_text(fx, FAILS_AFTER, fx->db, "false");
    /* The claim waits for the exchange, which fails: released each time. */
    assert_int_equal(log_count(fx, "message=ran"), 5);
    assert_int_equal(route0(fx)->counts.failed, 5);
    assert_int_equal(log_count(fx, "later step fails"), 5);
    assert_int_equal(confirmed(fx, "fixed-1"), 0);
}

static void completion_eager_confirms_when_the_block_ends(void **state)
{
    fixture *fx = *state;
    run_text(fx, FAILS_AFTER, fx->db, "true");
    assert_int_equal(log_count(fx, "message=ran"), 1);
    assert_int_equal(route0(fx)->counts.failed, 5);
    assert_int_equal(step_at(fx, 0)->counts.duplicates, 4);
    assert_int_equal(confirmed(fx, "fixed-1"), 1);
}

#define FLAKY                                                                                      \
    "repositories:\n"                                                                              \
    "  dedupe: { url: \"sqlite:%s\" }\n"                                                           \
    "routes:\n"                                                                                    \
    "  - id: flaky\n"                                                                              \
    "    from: \"timer:tick?period=0&delay=0&repeatCount=5\"\n"                                    \
    "    steps:\n"                                                                                 \
    "      - idempotent_consumer:\n"                                                               \
    "          repository: dedupe\n"                                                               \
    "          expression: \"fixed-1\"\n"                                                          \
    "          remove_on_failure: %s\n"                                                            \
    "          steps:\n"                                                                           \
    "            - log: \"ran\"\n"                                                                 \
    "            - exec: \"test -e %s/failed && exit 0; touch %s/failed; exit 1\"\n"

static void remove_on_failure_lets_the_next_tick_run_it_again(void **state)
{
    fixture *fx = *state;
    run_text(fx, FLAKY, fx->db, "true", fx->dir, fx->dir);
    assert_int_equal(log_count(fx, "message=ran"), 2);
    assert_int_equal(route0(fx)->counts.failed, 1);
    assert_int_equal(route0(fx)->counts.completed, 4);
    assert_int_equal(step_at(fx, 0)->counts.duplicates, 3);
    assert_int_equal(confirmed(fx, "fixed-1"), 1);
}

static void without_remove_on_failure_the_key_stays_held(void **state)
{
    fixture *fx = *state;
    run_text(fx, FLAKY, fx->db, "false", fx->dir, fx->dir);
    assert_int_equal(log_count(fx, "message=ran"), 1);
    assert_int_equal(route0(fx)->counts.failed, 5);
    assert_int_equal(step_at(fx, 0)->counts.in_progress, 4);
    assert_int_equal(log_count(fx, "in progress elsewhere"), 4);
    assert_int_equal(confirmed(fx, "fixed-1"), 0);
}

static void a_key_held_elsewhere_fails_the_exchange_without_running(void **state)
{
    fixture *fx = *state;
    char url[160];
    snprintf(url, sizeof url, "sqlite:%s", fx->db);
    acemq_idem *other;
    assert_int_equal(acemq_idem_open(&other, url, NULL), 0);
    acemq_claim_opts co = {.lease_ms = 600000};
    acemq_claim claim;
    assert_int_equal(acemq_idem_try_claim(other, "fixed-1", 7, &co, &claim), ACEMQ_CLAIMED);
    run_text(fx, PINNED, url, "", "");
    assert_int_equal(log_count(fx, "Processing"), 0);
    assert_int_equal(route0(fx)->counts.failed, 5);
    assert_int_equal(step_at(fx, 1)->counts.in_progress, 5);
    /* The holder still owns it. */
    assert_int_equal(acemq_idem_confirm(other, "fixed-1", 7, claim.token), 0);
    acemq_idem_close(other);
}

static void an_empty_key_fails_the_exchange(void **state)
{
    fixture *fx = *state;
    run_text(fx, "repositories:\n  d: { url: \"memory:\" }\n"
                 "routes:\n  - id: nokey\n    from: \"timer:t?period=0&delay=0&repeatCount=2\"\n"
                 "    steps:\n      - idempotent_consumer:\n          repository: d\n"
                 "          expression: \"${header.absent}\"\n          steps: []\n");
    assert_int_equal(route0(fx)->counts.failed, 2);
    assert_int_equal(log_count(fx, "is empty"), 2);
}

static void stop_ends_a_route_that_would_run_forever(void **state)
{
    fixture *fx = *state;
    const char *text = "routes:\n  - id: forever\n    from: \"timer:t?period=1&delay=0\"\n"
                       "    steps:\n      - log: \"tick\"\n";
    acemq__route_errors errors = {0};
    assert_int_equal(acemq__route_load_text("f.yaml", text, strlen(text), &fx->file, &errors), 0);
    acemq__routes_options o = {.log = fx->log, .errlog = fx->log};
    acemq__buf why = {0};
    assert_int_equal(acemq__routes_start(fx->file, &o, &fx->routes, &why), 0);
    volatile sig_atomic_t stop = 1;
    acemq__routes_wait(fx->routes, &stop);
    acemq__routes_close(fx->routes);
    fx->routes = NULL;
    const acemq__route_counts *c = &route0(fx)->counts;
    assert_int_equal(c->exchanges, c->completed + c->failed);
    assert_int_equal(c->failed, 0);
}

static void a_start_that_cannot_open_names_the_line(void **state)
{
    fixture *fx = *state;
    const char *text = "repositories:\n  d: { url: \"sqlite:/nonexistent/dir/x.db\" }\n"
                       "routes:\n  - id: r\n    from: \"timer:t\"\n    steps: []\n";
    acemq__route_errors errors = {0};
    assert_int_equal(acemq__route_load_text("s.yaml", text, strlen(text), &fx->file, &errors), 0);
    acemq__routes_options o = {.log = fx->log, .errlog = fx->log};
    acemq__buf why = {0};
    assert_int_not_equal(acemq__routes_start(fx->file, &o, &fx->routes, &why), 0);
    assert_null(fx->routes);
    assert_non_null(strstr(acemq__buf_str(&why), "s.yaml:2:"));
    assert_non_null(strstr(acemq__buf_str(&why), "repository 'd'"));
    acemq__buf_free(&why);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_pinned_key_runs_once_and_four_duplicates_complete, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(skip_duplicate_false_runs_the_steps_with_duplicate_set,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(not_eager_looks_before_and_claims_after, setup, teardown),
        cmocka_unit_test_setup_teardown(a_failure_after_the_block_releases_the_key_by_default,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(completion_eager_confirms_when_the_block_ends, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(remove_on_failure_lets_the_next_tick_run_it_again, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(without_remove_on_failure_the_key_stays_held, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_key_held_elsewhere_fails_the_exchange_without_running,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(an_empty_key_fails_the_exchange, setup, teardown),
        cmocka_unit_test_setup_teardown(stop_ends_a_route_that_would_run_forever, setup, teardown),
        cmocka_unit_test_setup_teardown(a_start_that_cannot_open_names_the_line, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
