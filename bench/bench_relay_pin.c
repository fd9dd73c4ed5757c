/* bench_relay_pin.c — --broker-cpu: the broker's node alone on one CPU and
 * everything else (PostgreSQL, the relay, the raw peer) on the others, as if
 * the broker had a host of its own; and the CPUs put back at exit. */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "bench_relay.h"

/* Why the last pin_* or pid_from failed. */
static char pin_error[512];

/* Sets the CPUs of every thread of pid; -1 with pin_error set on failure. */
static int pin_threads(pid_t pid, const cpu_set_t *set)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) {
        snprintf(pin_error, sizeof pin_error, "%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        pid_t tid = (pid_t)strtol(e->d_name, NULL, 10);
        /* A thread that ended since the listing is no matter. */
        if (sched_setaffinity(tid, sizeof *set, set) != 0 && errno != ESRCH) {
            snprintf(pin_error, sizeof pin_error, "sched_setaffinity(%d): %s", (int)tid,
                     strerror(errno));
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

/* pid and every process whose parent it is (a postmaster's server
 * processes; the backends it forks later inherit its CPUs). */
static int pin_tree(pid_t pid, const cpu_set_t *set)
{
    if (pin_threads(pid, set) != 0) return -1;
    DIR *d = opendir("/proc");
    if (!d) {
        snprintf(pin_error, sizeof pin_error, "/proc: %s", strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        char path[300], line[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* gone since the listing */
        int ppid = -1;
        if (fgets(line, sizeof line, f)) {
            const char *rp = strrchr(line, ')'); /* the name may hold spaces */
            if (!rp || sscanf(rp + 1, " %*c %d", &ppid) != 1) ppid = -1;
        }
        fclose(f);
        if (ppid == (int)pid) rc = pin_threads((pid_t)strtol(e->d_name, NULL, 10), set);
    }
    closedir(d);
    return rc;
}

/* The pid in the file env names; -1 with pin_error set when there is none. */
static pid_t pid_from(const char *env, const char *what)
{
    const char *path = getenv(env);
    if (!path || !*path) {
        snprintf(pin_error, sizeof pin_error, "%s is not set (scripts/services.sh env)", env);
        return -1;
    }
    FILE *f = fopen(path, "r");
    long pid = 0;
    int ok = f && fscanf(f, "%ld", &pid) == 1 && pid > 0;
    if (f) fclose(f);
    if (!ok) {
        snprintf(pin_error, sizeof pin_error, "no %s pid in %s", what, path);
        return -1;
    }
    return (pid_t)pid;
}

static int pin_server(const char *env, const char *what, const cpu_set_t *set)
{
    pid_t pid = pid_from(env, what);
    return pid > 0 ? pin_tree(pid, set) : -1;
}

/* --broker-cpu N: the broker's node alone on CPU N, as on a host of its own;
 * PostgreSQL and this process (relay and raw peer alike) on the other CPUs.
 * The two sides then no longer take CPU from each other, which on a
 * machine of two vCPUs is where a relay's database costs it throughput
 * (docs/performance.md, bench_relay, "Fifth round"). all = NULL pins, and
 * a failure stops the bench; all = the CPUs everything had puts them back,
 * as far as it can, saying what it could not (it runs at exit, where
 * stopping again is not allowed). */
static void place_processes(const config *cfg, const cpu_set_t *all)
{
    cpu_set_t broker, rest;
    if (all) {
        broker = *all;
        rest = *all;
    } else {
        cpu_set_t mine;
        if (sched_getaffinity(0, sizeof mine, &mine) != 0) die("sched_getaffinity failed");
        if (!CPU_ISSET(cfg->broker_cpu, &mine) || CPU_COUNT(&mine) < 2)
            die("--broker-cpu %d: not one of at least two CPUs this process may use",
                cfg->broker_cpu);
        CPU_ZERO(&broker);
        CPU_SET(cfg->broker_cpu, &broker);
        rest = mine;
        CPU_CLR(cfg->broker_cpu, &rest);
    }
    int failed = pin_server("ACEMQ_RABBITMQ_PIDFILE", "RabbitMQ", &broker) != 0;
    if (!failed && cfg->pg_url && *cfg->pg_url)
        failed = pin_server("ACEMQ_PG_PIDFILE", "PostgreSQL", &rest) != 0;
    if (!failed) failed = pin_threads(getpid(), &rest) != 0;
    if (failed && !all) die("--broker-cpu: %s", pin_error);
    if (failed) fprintf(stderr, "%s: putting the CPUs back: %s\n", bench_name, pin_error);
}

/* What --broker-cpu changed, put back at exit, however the bench ends: the
 * servers outlive it. */
static config pinned_copy; /* main's own config is gone by exit time */
static const config *pinned_cfg;
static cpu_set_t pinned_from;

void unpin_at_exit(void)
{
    const config *cfg = pinned_cfg;
    pinned_cfg = NULL; /* once */
    if (cfg) place_processes(cfg, &pinned_from);
}

/* --broker-cpu: the broker alone on its CPU (place_processes), put back at
 * exit however the bench ends. */
void pin_broker(const config *cfg)
{
    if (sched_getaffinity(0, sizeof pinned_from, &pinned_from) != 0)
        die("sched_getaffinity failed");
    pinned_copy = *cfg;
    pinned_cfg = &pinned_copy;
    if (atexit(unpin_at_exit) != 0) die("atexit failed");
    place_processes(cfg, NULL);
}
