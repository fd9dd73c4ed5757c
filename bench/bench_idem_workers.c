/* bench_idem_workers.c — what every case of bench_idem runs on: the ids
 * (random UUIDv4 text and short ones, made before the clock starts) and the
 * threads that work through shares of them, each timing itself. */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_idem.h"

static void idset_alloc(idset *s, size_t n, size_t len)
{
    s->n = n;
    s->len = len;
    s->stride = (len + 1 + 7) & ~(size_t)7; /* room for snprintf's NUL, aligned */
    s->buf = malloc(n * s->stride);
    if (!s->buf) die("out of memory for %zu ids", n);
}

/* splitmix64: fixed seed, so every run claims the same ids. */
static uint64_t next_random(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Random UUIDv4 text, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx". */
void make_uuid_ids(idset *s, size_t n)
{
    idset_alloc(s, n, 36);
    uint64_t seed = 42;
    for (size_t i = 0; i < n; i++) {
        uint64_t hi = next_random(&seed), lo = next_random(&seed);
        hi = (hi & ~(uint64_t)0xf000) | 0x4000;
        lo = (lo & ~((uint64_t)3 << 62)) | ((uint64_t)2 << 62);
        int len =
            snprintf(s->buf + i * s->stride, s->stride, "%08x-%04x-%04x-%04x-%012llx",
                     (unsigned)(hi >> 32), (unsigned)(hi >> 16) & 0xffff, (unsigned)hi & 0xffff,
                     (unsigned)(lo >> 48), (unsigned long long)(lo & 0xffffffffffffu));
        if (len != 36) die("uuid text of %d bytes", len);
    }
}

void make_short_ids(idset *s, size_t n)
{
    if (n >= MAX_IDS) die("too many short ids: %zu", n);
    idset_alloc(s, n, 14);
    for (size_t i = 0; i < n; i++)
        if (snprintf(s->buf + i * s->stride, s->stride, "order-%08zu", i) != 14)
            die("short id %zu", i);
}

int worker_fail(worker *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return -1;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    int rc = pthread_barrier_wait(w->gate);
    if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) {
        worker_fail(w, "pthread_barrier_wait: %s", strerror(rc));
        return NULL;
    }
    w->t_start = mono_now();
    w->deadline = w->seconds > 0 ? w->t_start + w->seconds : 0;
    (void)w->run(w);
    w->t_end = mono_now();
    return NULL;
}

/* Runs the workers together and returns the time from the first one starting
 * to the last one finishing. The threads take the times themselves: the main
 * thread may be woken from the barrier long after the workers were (on two
 * cores a short run can be over by then). Per-thread setup (connections,
 * statements) is done by the caller beforehand and is not timed. */
double run_workers(worker *ws, int n)
{
    pthread_t tids[MAX_THREADS];
    pthread_barrier_t gate;
    int rc = pthread_barrier_init(&gate, NULL, (unsigned)n + 1);
    if (rc != 0) die("pthread_barrier_init: %s", strerror(rc));
    for (int t = 0; t < n; t++) {
        ws[t].gate = &gate;
        ws[t].done = 0;
        ws[t].err[0] = '\0';
        rc = pthread_create(&tids[t], NULL, worker_main, &ws[t]);
        if (rc != 0) die("pthread_create: %s", strerror(rc));
    }
    rc = pthread_barrier_wait(&gate);
    if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
        die("pthread_barrier_wait: %s", strerror(rc));
    for (int t = 0; t < n; t++) {
        rc = pthread_join(tids[t], NULL);
        if (rc != 0) die("pthread_join: %s", strerror(rc));
    }
    double first = ws[0].t_start, last = ws[0].t_end;
    for (int t = 1; t < n; t++) {
        if (ws[t].t_start < first) first = ws[t].t_start;
        if (ws[t].t_end > last) last = ws[t].t_end;
    }
    rc = pthread_barrier_destroy(&gate);
    if (rc != 0) die("pthread_barrier_destroy: %s", strerror(rc));
    for (int t = 0; t < n; t++)
        if (ws[t].err[0]) die("thread %d: %s", t, ws[t].err);
    return last - first;
}

/* Splits ids [0, n) into contiguous shares, one per thread. */
void split(worker *ws, int threads, const idset *ids, size_t n, double seconds)
{
    for (int t = 0; t < threads; t++) {
        ws[t].ids = ids;
        ws[t].lo = n * (size_t)t / (size_t)threads;
        ws[t].hi = n * (size_t)(t + 1) / (size_t)threads;
        ws[t].seconds = seconds;
    }
}

size_t total_done(const worker *ws, int n)
{
    size_t sum = 0;
    for (int t = 0; t < n; t++)
        sum += ws[t].done;
    return sum;
}

/* The least-served thread's part of the pairs: in a run sized by time, a
 * figure can look good because one connection kept the write lock while the
 * other starved, and this says so. */
double least_share(const worker *ws, int n)
{
    size_t done = total_done(ws, n), least = done;
    for (int t = 0; t < n; t++)
        if (ws[t].done < least) least = ws[t].done;
    return done ? (double)least / (double)done : 0;
}
