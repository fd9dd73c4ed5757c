/* bench_route.c — what the idempotent_consumer step costs a route: exchanges
 * per second through a timer route (period 0: back to back) whose only step
 * is an idempotent_consumer on the memory repository, keyed on each
 * exchange's own id (a UUIDv7, so every key is new and each exchange makes a
 * claim and a confirm), beside the same route with no step, in the same
 * run. Target: the step costs at most 10 % (ratio >= 0.9).
 *
 * Figures are medians over --reps turns, the two routes alternating. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "route/route.h"

static const char *const with_step = "repositories:\n"
                                     "  dedupe: { url: \"memory:\" }\n"
                                     "routes:\n"
                                     "  - id: bench\n"
                                     "    from: \"timer:bench?period=0&delay=0&repeatCount=%ld\"\n"
                                     "    steps:\n"
                                     "      - idempotent_consumer:\n"
                                     "          repository: dedupe\n"
                                     "          expression: \"${id}\"\n"
                                     "          steps: []\n";

static const char *const without_step =
    "routes:\n"
    "  - id: bench\n"
    "    from: \"timer:bench?period=0&delay=0&repeatCount=%ld\"\n"
    "    steps: []\n";

/* Exchanges per second through the route that fmt describes. */
static double run_route(const char *fmt, long exchanges)
{
    char text[1024];
    int n = snprintf(text, sizeof text, fmt, exchanges);
    if (n < 0 || (size_t)n >= sizeof text) die("route text too long");
    acemq__route_file *f = NULL;
    acemq__route_errors errors = {0};
    if (acemq__route_load_text("bench.yaml", text, (size_t)n, &f, &errors) != 0)
        die("route does not load: %s", errors.n ? errors.lines[0] : "?");
    acemq__routes *r = NULL;
    acemq__buf why = {0};
    acemq__routes_options o = {0};
    FILE *devnull = fopen("/dev/null", "w");
    if (!devnull) die("cannot open /dev/null");
    o.log = devnull;
    o.errlog = stderr;
    double t0 = mono_now();
    if (acemq__routes_start(f, &o, &r, &why) != 0)
        die("routes do not start: %s", acemq__buf_str(&why));
    acemq__routes_wait(r, NULL);
    double secs = mono_now() - t0;
    uint64_t completed = f->routes[0].counts.completed;
    acemq__routes_close(r);
    if (completed != (uint64_t)exchanges)
        die("%llu of %ld exchanges completed", (unsigned long long)completed, exchanges);
    acemq__route_file_free(f);
    acemq__buf_free(&why);
    if (fclose(devnull) != 0) die("closing /dev/null");
    return (double)exchanges / secs;
}

static void usage(const char *why)
{
    if (why) fprintf(stderr, "bench_route: %s\n", why);
    fputs("usage: bench_route [--exchanges N] [--reps N] [--out FILE]\n"
          "  --exchanges N  timer ticks per turn (default 300000)\n"
          "  --reps N       turns; medians are reported (default 5)\n"
          "  --out FILE     append JSON lines here (default bench/results/latest.jsonl)\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    bench_name = "bench_route";
    long exchanges = 300000;
    int reps = 5;
    const char *out_path = ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) usage(NULL);
        if (!v) usage("an option needs a value");
        char *end;
        long n = strtol(v, &end, 10);
        if (strcmp(a, "--exchanges") == 0 && !*end && n >= 1000)
            exchanges = n;
        else if (strcmp(a, "--reps") == 0 && !*end && n >= 1 && n <= 64)
            reps = (int)n;
        else if (strcmp(a, "--out") == 0)
            out_path = v;
        else
            usage("unknown option or bad value");
        i++;
    }
    FILE *out = fopen(out_path, "a");
    if (!out) die("%s: cannot append", out_path);
    printf("route: exchanges/s through a timer route, %ld ticks per turn, %d turns\n", exchanges,
           reps);
    double with[64], without[64];
    for (int r = 0; r < reps; r++) {
        without[r] = run_route(without_step, exchanges);
        with[r] = run_route(with_step, exchanges);
    }
    double a = median(with, reps), b = median(without, reps);
    bench_header();
    bench_result res = {.bench = "route",
                        .name = "timer/idempotent_consumer/memory",
                        .value = a,
                        .unit = "exchanges/s",
                        .peer = "the same route without the step",
                        .peer_value = b,
                        .ratio = a / b,
                        .target = ">= 0.9 x peer",
                        .target_met = a / b >= 0.9};
    bench_report(out, &res);
    if (fclose(out) != 0) die("%s: write failed", out_path);
    return 0;
}
