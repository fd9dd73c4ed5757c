/* route_cmd.c — `acemq route FILE.yaml`: runs the routes of a route file
 * (src/route/) until interrupted or until every finite source has ended;
 * `acemq route --check FILE.yaml` validates one without running it. */
#include <stdio.h>
#include <string.h>

#include <acemq/acemq.h>

#include "cli/cli.h"
#include "cli/metrics.h"
#include "cli/route_metrics.h"
#include "route/route.h"

#define CMD "acemq route"

static void help(void)
{
    fputs("usage: acemq route FILE.yaml [--broker URL] [--metrics HOST:PORT] [-v]\n"
          "       acemq route --check FILE.yaml [--broker URL]\n"
          "\n"
          "Runs every route in FILE.yaml, Camel-style: each route takes exchanges from\n"
          "its source (timer:, amqp:queue:, file:) through its steps (set_header,\n"
          "set_body, log, to, exec, filter, choice, idempotent_consumer). An exchange\n"
          "that fails goes back to its source: an AMQP delivery returns to its queue,\n"
          "a file stays where it is. docs/routes.md describes the file.\n"
          "\n"
          "  --check            load FILE.yaml, open each source and endpoint once, and\n"
          "                     print every error as FILE:LINE:COLUMN: message\n"
          "  --broker URL       amqp://user:pass@host:port/vhost for amqp: sources and\n"
          "                     endpoints (overrides the file's broker:)\n"
          "  --metrics H:P      serve Prometheus metrics on http://H:P/metrics\n"
          "  -v, --verbose      a line for each completed exchange too\n"
          "\n"
          "Log steps print one line each on standard output; failed exchanges are\n"
          "told on standard error. SIGTERM or SIGINT: the exchanges in flight finish,\n"
          "then acemq route exits 0, as it does when every finite source has ended.\n"
          "Exit status: 0 done; 1 a source, endpoint or repository could not open;\n"
          "2 usage error or an invalid route file.\n"
          "\n"
          "Examples:\n"
          "  acemq route examples/idempotent-consumer/route.yaml\n"
          "  acemq route --check routes.yaml\n"
          "  acemq route orders.yaml --broker amqp://guest:guest@127.0.0.1:5672/ \\\n"
          "              --metrics 127.0.0.1:9466\n",
          stdout);
}

typedef struct args {
    const char *file, *broker, *metrics;
    int check, verbose;
} args;

/* 0 parsed; 1 --help printed; -1 usage error (said). */
static int parse(int argc, char **argv, args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help();
            return 1;
        } else if (strcmp(argv[i], "--check") == 0) {
            a->check = 1;
        } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            a->verbose = 1;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--broker", &v)) != 0) {
            if (m < 0) return -1;
            a->broker = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--metrics", &v)) != 0) {
            if (m < 0) return -1;
            a->metrics = v;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, CMD ": unknown option '%s'\n", argv[i]);
            return -1;
        } else if (a->file) {
            fprintf(stderr, CMD ": one route file at a time ('%s' and '%s')\n", a->file, argv[i]);
            return -1;
        } else {
            a->file = argv[i];
        }
    }
    if (!a->file) {
        fputs(CMD ": a route file is required (acemq route --help)\n", stderr);
        return -1;
    }
    if (a->check && a->metrics) {
        fputs(CMD ": --check runs nothing, so --metrics has nothing to show\n", stderr);
        return -1;
    }
    return 0;
}

static void print_errors(const acemq__route_errors *e)
{
    for (size_t i = 0; i < e->n; i++)
        fprintf(stderr, "%s\n", e->lines[i]);
}

static uint64_t duplicates_of(const acemq__steps *steps)
{
    uint64_t n = 0;
    for (size_t i = 0; i < steps->n; i++) {
        const acemq__step *s = &steps->v[i];
        n += __atomic_load_n(&s->counts.duplicates, __ATOMIC_RELAXED) + duplicates_of(&s->steps);
        for (size_t w = 0; w < s->n_whens; w++)
            n += duplicates_of(&s->whens[w].steps);
    }
    return n;
}

/* One line per route when it stops: what became of its exchanges. */
static void summarise(const acemq__route_file *f)
{
    for (size_t i = 0; i < f->n_routes; i++) {
        const acemq__route *r = &f->routes[i];
        printf("route=%s event=summary exchanges=%llu completed=%llu failed=%llu "
               "duplicates=%llu\n",
               r->id, (unsigned long long)r->counts.exchanges,
               (unsigned long long)r->counts.completed, (unsigned long long)r->counts.failed,
               (unsigned long long)duplicates_of(&r->steps));
    }
    (void)fflush(stdout);
}

static int run(const args *a, acemq__route_file *f)
{
    acemq__routes_options o = {.broker_url = a->broker, .verbose = a->verbose};
    acemq__cli_catch_stop_signals();
    acemq__routes *r = NULL;
    acemq__buf why = {0};
    int rc = acemq__routes_start(f, &o, &r, &why);
    if (rc != 0) {
        fprintf(stderr, CMD ": %s\n", why.len ? acemq__buf_str(&why) : acemq_strerror(rc));
        acemq__buf_free(&why);
        return ACEMQ_CLI_FAIL;
    }
    acemq__buf_free(&why);
    acemq__metrics *m = NULL;
    if (a->metrics) {
        char err[256];
        if (acemq__metrics_start(&m, a->metrics, acemq__route_metrics_render, f, err, sizeof err) !=
            0) {
            fprintf(stderr, CMD ": --metrics %s: %s\n", a->metrics, err);
            acemq__cli_stop_requested = 1;
        }
    }
    acemq__routes_wait(r, &acemq__cli_stop_requested);
    acemq__metrics_stop(m);
    acemq__routes_close(r);
    summarise(f);
    return m || !a->metrics ? ACEMQ_CLI_OK : ACEMQ_CLI_FAIL;
}

int acemq__cli_route(int argc, char **argv)
{
    args a = {0};
    int p = parse(argc, argv, &a);
    if (p != 0) return p > 0 ? ACEMQ_CLI_OK : ACEMQ_CLI_USAGE;
    acemq__route_file *f = NULL;
    acemq__route_errors errors = {0};
    int rc = acemq__route_load(a.file, &f, &errors);
    if (rc == 0 && a.check) {
        acemq__routes_options o = {.broker_url = a.broker};
        rc = acemq__routes_check(f, &o, &errors);
    }
    int status;
    if (rc != 0) {
        print_errors(&errors);
        if (errors.n == 0) fprintf(stderr, CMD ": %s: %s\n", a.file, acemq_strerror(rc));
        status = rc == ACEMQ_ENOMEM ? ACEMQ_CLI_FAIL : ACEMQ_CLI_USAGE;
    } else if (a.check) {
        printf("%s: ok (%zu route%s)\n", a.file, f->n_routes, f->n_routes == 1 ? "" : "s");
        status = ACEMQ_CLI_OK;
    } else {
        status = run(&a, f);
    }
    acemq__route_errors_free(&errors);
    acemq__route_file_free(f);
    return status;
}
