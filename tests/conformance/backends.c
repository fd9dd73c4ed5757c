/* backends.c — temporary store locations for per-backend suites. */
#include "conformance/backends.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int test_backend_fresh_url(const char *backend, char *url, size_t cap)
{
    if (strcmp(backend, "memory") == 0) {
        snprintf(url, cap, "memory:");
        return 0;
    }
    if (strcmp(backend, "memory-presize") == 0) {
        /* Tables sized for max_entries at open; small enough that the many
         * stores a suite opens stay cheap. */
        snprintf(url, cap, "memory:?presize=1&max_entries=65536");
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

const char *test_backend_kind(const char *backend)
{
    return strcmp(backend, "memory-presize") == 0 ? "memory" : backend;
}

const char *test_backend_from_args(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "memory") != 0 && strcmp(argv[1], "memory-presize") != 0 &&
                     strcmp(argv[1], "sqlite") != 0)) {
        fprintf(stderr, "usage: %s memory|memory-presize|sqlite\n", argc > 0 ? argv[0] : "test");
        exit(2);
    }
    return argv[1];
}
