/* bench_common.h — what every benchmark needs: failing loudly, a monotonic
 * clock, and the median of repeated runs (figures are medians, so one noisy
 * run on a shared machine does not decide them). */
#ifndef ACEMQ_BENCH_COMMON_H
#define ACEMQ_BENCH_COMMON_H

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

#endif
