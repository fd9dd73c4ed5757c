/* backends.c — temporary store locations for per-backend suites. */
#include "conformance/backends.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_DIRS 256
static char *made_dirs[MAX_DIRS];
static int n_made_dirs;

static void remove_made_dirs(void)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal", "-acemq-issue"};
    for (int i = 0; i < n_made_dirs; i++) {
        char path[512];
        for (size_t s = 0; s < sizeof suffixes / sizeof *suffixes; s++) {
            snprintf(path, sizeof path, "%s/idem.db%s", made_dirs[i], suffixes[s]);
            (void)unlink(path);
        }
        (void)rmdir(made_dirs[i]);
        free(made_dirs[i]);
    }
    n_made_dirs = 0;
}

/* A name no earlier run or other process of this run has used: shared
 * servers keep what tests write, so each store gets its own table or key
 * prefix. */
static void fresh_name(char *out, size_t cap)
{
    static unsigned counter;
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, cap, "t%lx_%lx_%u", (unsigned long)getpid(), (unsigned long)ts.tv_nsec,
             __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
}

/* The server's URL from the environment scripts/services.sh exports, or
 * exit 77 (ctest's skip; scripts/ctest-strict.sh fails a run that skips). */
static const char *server_url(const char *var)
{
    const char *v = getenv(var);
    if (!v || !*v) {
        fprintf(stderr, "%s is not set: start the server with scripts/services.sh\n", var);
        exit(77);
    }
    return v;
}

int test_backend_fresh_url(const char *backend, char *url, size_t cap)
{
    char name[64];
    if (strcmp(backend, "memory") == 0) {
        snprintf(url, cap, "memory:");
        return 0;
    }
    if (strcmp(backend, "postgres") == 0) {
        const char *base = server_url("ACEMQ_PG_URL");
        fresh_name(name, sizeof name);
        snprintf(url, cap, "%s%stable=idem_%s", base, strchr(base, '?') ? "&" : "?", name);
        return 0;
    }
    if (strcmp(backend, "redis") == 0) {
        const char *base = server_url("ACEMQ_REDIS_URL");
        fresh_name(name, sizeof name);
        snprintf(url, cap, "%s%sprefix=%s", base, strchr(base, '?') ? "&" : "?", name);
        return 0;
    }
    if (strcmp(backend, "sqlite") != 0) return -1;
    const char *tmp = getenv("TMPDIR");
    char templ[512];
    snprintf(templ, sizeof templ, "%s/acemq-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(templ)) {
        perror("mkdtemp");
        abort();
    }
    if (n_made_dirs == 0) atexit(remove_made_dirs);
    if (n_made_dirs < MAX_DIRS) made_dirs[n_made_dirs++] = strdup(templ);
    snprintf(url, cap, "sqlite:%s/idem.db", templ);
    return 0;
}

int test_backend_url_param(const char *url, const char *key, char *out, size_t cap)
{
    char pattern[32];
    int n = snprintf(pattern, sizeof pattern, "%s=", key);
    const char *v = n > 0 && (size_t)n < sizeof pattern ? strstr(url, pattern) : NULL;
    if (!v) return -1;
    v += n;
    n = snprintf(out, cap, "%.*s", (int)strcspn(v, "&"), v);
    return n >= 0 && (size_t)n < cap ? 0 : -1;
}

const char *test_backend_kind(const char *backend)
{
    return backend;
}

const char *test_backend_from_args(int argc, char **argv)
{
    static const char *const known[] = {"memory", "sqlite", "postgres", "redis"};
    int ok = 0;
    for (size_t i = 0; argc >= 2 && i < sizeof known / sizeof *known; i++)
        if (strcmp(argv[1], known[i]) == 0) ok = 1;
    if (!ok) {
        fprintf(stderr, "usage: %s memory|sqlite|postgres|redis\n", argc > 0 ? argv[0] : "test");
        exit(2);
    }
    return argv[1];
}
