/* fiu_faults.c — the seeded decisions behind fiu_faults.h, and the re-exec
 * that puts libfiu's POSIX preload library in front of the test.
 *
 * libfiu asks decide() on every wrapped call while a point is enabled; the
 * decision comes from a counter-based generator (splitmix64) advanced
 * atomically, so the calls of one thread see the same sequence for the same
 * seed, and a thread of the library that allocates meanwhile only takes
 * numbers from it, never corrupts it.
 */
#define _GNU_SOURCE
#include "fault/fiu_faults.h"

#include <dlfcn.h>
#include <errno.h>
#include <fiu-control.h>
#include <fiu.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FIU_POSIX_PRELOAD
#define FIU_POSIX_PRELOAD "/usr/lib/fiu/fiu_posix_preload.so"
#endif

typedef struct point {
    const char *name;  /* libfiu's name for the wrapped call */
    const char *label; /* in the summary */
    unsigned kind;
    int err[2]; /* errno of a failure, one of the two at random (0: only err[0]) */
    atomic_uint_fast64_t injected;
} point;

static point points[] = {
    {"libc/mm/malloc", "malloc", FIU_MEM, {ENOMEM, 0}, 0},
    {"libc/mm/calloc", "calloc", FIU_MEM, {ENOMEM, 0}, 0},
    {"libc/mm/realloc", "realloc", FIU_MEM, {ENOMEM, 0}, 0},
    {"libc/str/strdup", "strdup", FIU_MEM, {ENOMEM, 0}, 0},
    {"posix/io/rw/write", "write", FIU_FILE, {ENOSPC, EIO}, 0},
    {"posix/io/rw/pwrite", "pwrite", FIU_FILE, {ENOSPC, EIO}, 0},
    {"posix/io/rw/writev", "writev", FIU_FILE, {ENOSPC, EIO}, 0},
    {"posix/io/sync/fsync", "fsync", FIU_FILE, {EIO, 0}, 0},
    {"posix/io/sync/fdatasync", "fdatasync", FIU_FILE, {EIO, 0}, 0},
    {"posix/io/rw/read", "read", FIU_FILE, {EIO, 0}, 0},
    {"posix/io/rw/pread", "pread", FIU_FILE, {EIO, 0}, 0},
    {"posix/io/net/send", "send", FIU_NET, {ECONNRESET, EPIPE}, 0},
    {"posix/io/net/sendto", "sendto", FIU_NET, {ECONNRESET, EPIPE}, 0},
    {"posix/io/net/sendmsg", "sendmsg", FIU_NET, {ECONNRESET, EPIPE}, 0},
    {"posix/io/net/recv", "recv", FIU_NET, {ECONNRESET, 0}, 0},
    {"posix/io/net/recvfrom", "recvfrom", FIU_NET, {ECONNRESET, 0}, 0},
    {"posix/io/net/recvmsg", "recvmsg", FIU_NET, {ECONNRESET, 0}, 0},
};
#define N_POINTS (sizeof points / sizeof points[0])

static atomic_uint_fast64_t gen_state;
static _Atomic double probability;
static int mem_live;

void *fiu_faults_errno(int e)
{
    return (void *)(intptr_t)e; // NOLINT(performance-no-int-to-ptr): libfiu's failinfo is a void *
}

void fiu_faults_seed(uint64_t seed)
{
    atomic_store(&gen_state, seed);
}

uint64_t fiu_faults_next(void)
{
    uint64_t z = atomic_fetch_add(&gen_state, 0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* libfiu's external callback: runs inside the wrapped call, with libfiu's
 * recursion guard up, so it must not itself call a wrapped function that
 * could fail (it calls none). */
static int decide(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)failnum;
    (void)flags;
    for (size_t i = 0; i < N_POINTS; i++) {
        if (strcmp(points[i].name, name) != 0) continue;
        uint64_t r = fiu_faults_next();
        if ((double)(r >> 11) * 0x1p-53 >= atomic_load(&probability)) return 0;
        int e = points[i].err[1] && (r & 1) ? points[i].err[1] : points[i].err[0];
        *failinfo = fiu_faults_errno(e);
        atomic_fetch_add(&points[i].injected, 1);
        return 1;
    }
    return 0;
}

void fiu_faults_on(unsigned kinds, double p)
{
    atomic_store(&probability, p);
    for (size_t i = 0; i < N_POINTS; i++) {
        if (!(points[i].kind & kinds) || (points[i].kind == FIU_MEM && !mem_live)) continue;
        if (fiu_enable_external(points[i].name, 1, NULL, 0, decide) != 0) {
            fprintf(stderr, "fiu: cannot enable %s\n", points[i].name);
            abort();
        }
    }
}

void fiu_faults_off(void)
{
    /* fiu_disable of a point that is not enabled fails harmlessly. */
    for (size_t i = 0; i < N_POINTS; i++)
        (void)fiu_disable(points[i].name);
}

int fiu_faults_mem_live(void)
{
    return mem_live;
}

uint64_t fiu_faults_injected(void)
{
    uint64_t n = 0;
    for (size_t i = 0; i < N_POINTS; i++)
        n += atomic_load(&points[i].injected);
    return n;
}

void fiu_faults_summary(char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_POINTS && used < cap; i++) {
        uint64_t n = atomic_load(&points[i].injected);
        if (n == 0) continue;
        int w = snprintf(buf + used, cap - used, "%s%s=%llu", used ? " " : "", points[i].label,
                         (unsigned long long)n);
        if (w < 0) break;
        used += (size_t)w;
    }
    if (used == 0) snprintf(buf, cap, "none");
}

int fiu_faults_iterations(int def)
{
    const char *s = getenv("FIU_ITERATIONS");
    int n = s ? atoi(s) : 0;
    return n > 0 ? n : def;
}

/* The file that defines ASan's runtime when it is a shared library of its
 * own (GCC's default); NULL when there is none or it is linked in. */
static const char *asan_library(void)
{
    void *sym = dlsym(RTLD_DEFAULT, "__asan_init");
    Dl_info info;
    if (!sym || !dladdr(sym, &info) || !info.dli_fname) return NULL;
    return strstr(info.dli_fname, "libasan") ? info.dli_fname : NULL;
}

/* Sets LD_PRELOAD to ASan's runtime (if shared), the preload and what was
 * there before, and executes the test again from the start. */
static void reexec_with_preload(char **argv)
{
    const char *asan = asan_library();
    const char *before = getenv("LD_PRELOAD");
    char value[4096];
    int n = snprintf(value, sizeof value, "%s%s%s%s%s", asan ? asan : "", asan ? ":" : "",
                     FIU_POSIX_PRELOAD, before && *before ? ":" : "", before ? before : "");
    if (n < 0 || (size_t)n >= sizeof value || setenv("LD_PRELOAD", value, 1) != 0) {
        fprintf(stderr, "fiu: cannot set LD_PRELOAD\n");
        exit(1);
    }
    execv("/proc/self/exe", argv);
    fprintf(stderr, "fiu: cannot re-execute with %s: %s\n", value, strerror(errno));
    exit(1);
}

/* The preload defines its recursion counter; it is there when it is loaded. */
static int preload_loaded(void)
{
    return dlsym(RTLD_DEFAULT, "_fiu_called") != NULL;
}

/* One malloc with the point always on: NULL when the preload's wrapper
 * answers malloc, memory when an allocator in front of it does (ASan's). */
static int probe_mem(void)
{
    void *(*volatile alloc)(size_t) = malloc;
    if (fiu_enable("libc/mm/malloc", 1, fiu_faults_errno(ENOMEM), 0) != 0) return 0;
    void *p = alloc(24);
    (void)fiu_disable("libc/mm/malloc");
    free(p);
    return p == NULL;
}

void fiu_faults_start(char **argv, uint64_t seed)
{
    if (!preload_loaded()) {
        if (getenv("FIU_FAULTS_REEXEC")) {
            fprintf(stderr, "fiu: %s did not load\n", FIU_POSIX_PRELOAD);
            exit(1);
        }
        (void)setenv("FIU_FAULTS_REEXEC", "1", 1);
        reexec_with_preload(argv);
    }
    if (fiu_init(0) != 0) {
        fprintf(stderr, "fiu: fiu_init failed\n");
        exit(1);
    }
    const char *s = getenv("FIU_SEED");
    if (s && *s) seed = strtoull(s, NULL, 0);
    fiu_faults_seed(seed);
    mem_live = probe_mem();
    printf("fiu: seed %llu (FIU_SEED=%llu reproduces this run); points: %s%s\n",
           (unsigned long long)seed, (unsigned long long)seed,
           mem_live ? "malloc calloc realloc strdup " : "",
           "write pwrite writev fsync fdatasync read pread send recv");
    if (!mem_live)
        printf("fiu: malloc is answered by an allocator in front of the preload (ASan's): "
               "memory faults are not injected in this build, I/O faults are\n");
    fflush(stdout);
}
