/* bench_common.h — what every benchmark needs: failing loudly, a monotonic
 * clock, the median of repeated runs (figures are medians, so one noisy run
 * on a shared machine does not decide them), and one way to print a case. */
#ifndef ACEMQ_BENCH_COMMON_H
#define ACEMQ_BENCH_COMMON_H

#include <stdio.h>

/* The program's name in die()'s messages; set it first thing in main. */
extern const char *bench_name;

/* Prints "<bench_name>: <message>" on stderr and exits 1. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* CLOCK_MONOTONIC in seconds. */
double mono_now(void);

/* 1 when a case named name is to run: no --filter, or name contains it. */
int bench_wanted(const char *filter, const char *name);

/* The median of v[0..n), n > 0; sorts v. */
double median(double *v, int n);

/* One measured case, beside its peer when there is one. */
typedef struct bench_result {
    const char *bench;  /* "idem", "audit", ... */
    const char *name;   /* the case, e.g. "memory/uuid/1t" */
    double value;       /* acemq's figure */
    const char *unit;   /* "pairs/s", "ns/id", ... */
    const char *peer;   /* what the peer is; NULL: none */
    double peer_value;  /* the peer's figure; <= 0: not measured */
    double ratio;       /* how many times better acemq is; <= 0: none */
    const char *target; /* in words, e.g. ">= 10 x peer"; NULL: no target */
    int target_met;     /* 1 or 0; ignored without a target */
} bench_result;

/* The table's header line, printed once before the cases. */
void bench_header(void);

/* Prints r as a line of the table and appends it to out as a JSON line
 * (docs/design.md, "Benchmarks"); dies when out cannot be written. */
void bench_report(FILE *out, const bench_result *r);

#endif
