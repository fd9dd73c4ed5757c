/* bench_common.c — helpers shared by the benchmarks; see bench_common.h. */
#include "bench_common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *bench_name = "bench";

void die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s: ", bench_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

double mono_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) die("clock_gettime: %s", strerror(errno));
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int bench_wanted(const char *filter, const char *name)
{
    return !filter || strstr(name, filter) != NULL;
}

#define ROW "%-36s %14s %-10s %-28s %14s %8s  %-20s %s\n"

void bench_header(void)
{
    printf("\n" ROW, "case", "acemq", "unit", "peer", "peer", "ratio", "target", "met");
}

/* A figure for the table: thousands separators above 1,000 (the "'" printf
 * flag is not C11), two decimals below; "-" when there is none. */
static void fmt_value(char *buf, size_t cap, double v)
{
    if (v <= 0) {
        snprintf(buf, cap, "-");
        return;
    }
    if (v < 1000) {
        snprintf(buf, cap, "%.2f", v);
        return;
    }
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%.0f", v);
    size_t o = 0;
    for (int i = 0; i < n && o + 2 < cap; i++) {
        if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
}

/* A JSON value: the number (whole above 1,000), or null when there is none. */
static void json_number(char *buf, size_t cap, double v)
{
    if (v <= 0)
        snprintf(buf, cap, "null");
    else
        snprintf(buf, cap, v >= 1000 ? "%.0f" : "%.4g", v);
}

void bench_report(FILE *out, const bench_result *r)
{
    char v[32], pv[32], ratio[32];
    fmt_value(v, sizeof v, r->value);
    fmt_value(pv, sizeof pv, r->peer_value);
    if (r->ratio > 0)
        snprintf(ratio, sizeof ratio, "%.2f", r->ratio);
    else
        snprintf(ratio, sizeof ratio, "-");
    const char *met = !r->target ? "-" : r->target_met ? "yes" : "NO";
    printf(ROW, r->name, v, r->unit, r->peer ? r->peer : "-", pv, ratio,
           r->target ? r->target : "-", met);
    fflush(stdout);

    char jv[32], jpv[32], jratio[32];
    json_number(jv, sizeof jv, r->value);
    json_number(jpv, sizeof jpv, r->peer_value);
    json_number(jratio, sizeof jratio, r->ratio);
    fprintf(out, "{\"bench\":\"%s\",\"case\":\"%s\",\"value\":%s,\"unit\":\"%s\",", r->bench,
            r->name, jv, r->unit);
    if (r->peer)
        fprintf(out, "\"peer\":\"%s\",", r->peer);
    else
        fputs("\"peer\":null,", out);
    fprintf(out, "\"peer_value\":%s,\"ratio\":%s,", jpv, jratio);
    if (r->target)
        fprintf(out, "\"target\":\"%s\",\"target_met\":%s}\n", r->target,
                r->target_met ? "true" : "false");
    else
        fputs("\"target\":null,\"target_met\":null}\n", out);
    if (fflush(out) != 0) die("writing results: %s", strerror(errno));
}
