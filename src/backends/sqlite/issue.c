/* issue.c — issue numbers shared by every process on one database
 * file, through a counter file beside it (see backends/sqlite/issue.h). */
#define _GNU_SOURCE /* O_CLOEXEC */
#include "backends/sqlite/issue.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* splitmix64's finaliser: spreads a weak seed over all the bits. */
static uint64_t mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* A fresh counter starts at a random value, so that a counter file deleted
 * and made anew while processes still hold the old one's issues does not
 * start where the old one did. Never blocks: a system still gathering
 * entropy gets the clock and pid. */
static uint64_t random_start(void)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) {
        struct timespec ts = {0, 0};
        (void)clock_gettime(CLOCK_REALTIME, &ts);
        seed = ((uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec) ^
               ((uint64_t)getpid() << 32);
    }
    return mix64(seed);
}

/* The process-wide counter, for databases with no file: one process holds
 * them, so an atomic add keeps every issue apart. */
static _Atomic uint64_t process_next;

int acemq__issue_open(const char *path, int *fd)
{
    *fd = -1;
    if (!path || !*path) return 0;
    struct stat st;
    /* A name that is no file here (a VFS of its own): SQLite's business,
     * private to this process as far as we can tell. */
    if (stat(path, &st) != 0) return 0;
    char name[4096];
    int len = snprintf(name, sizeof name, "%s-acemq-issue", path);
    if (len < 0 || (size_t)len >= sizeof name) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int f = open(name, O_RDWR | O_CREAT | O_CLOEXEC, st.st_mode & 0666);
    if (f < 0) return -1;
    *fd = f;
    return 0;
}

/* The counter file's lock is a POSIX record lock: a process's own, so a
 * forked child that still holds its parent's descriptor is kept apart from
 * it too. Such a lock excludes other processes, not this one's threads, and
 * any close of the file in this process drops it: the mutex keeps both out
 * while a number is taken. */
static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;

static int lock_file(int fd, short type)
{
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    int rc;
    do
        rc = fcntl(fd, F_SETLKW, &l);
    while (rc != 0 && errno == EINTR);
    return rc;
}

static int next_from_file(int fd, uint64_t *issue)
{
    uint64_t v = 0;
    ssize_t got = pread(fd, &v, sizeof v, 0);
    if (got < 0) return -1;
    if (got != (ssize_t)sizeof v) v = random_start(); /* new, or cut short by a crash */
    uint64_t next = v + 1;
    if (pwrite(fd, &next, sizeof next, 0) != (ssize_t)sizeof next) {
        if (errno == 0) errno = EIO;
        return -1;
    }
    *issue = v;
    return 0;
}

int acemq__issue_next(int fd, uint64_t *issue)
{
    if (fd < 0) {
        uint64_t zero = 0;
        /* Seeded once, lazily: a random start, for the same reason as a file's. */
        (void)atomic_compare_exchange_strong(&process_next, &zero, random_start());
        *issue = atomic_fetch_add(&process_next, 1);
        return 0;
    }
    if (pthread_mutex_lock(&file_lock) != 0) return -1;
    int rc = -1;
    if (lock_file(fd, F_WRLCK) == 0) {
        rc = next_from_file(fd, issue);
        int saved = errno;
        if (lock_file(fd, F_UNLCK) != 0 && rc == 0)
            rc = -1;
        else
            errno = saved;
    }
    (void)pthread_mutex_unlock(&file_lock);
    return rc;
}

void acemq__issue_close(int fd)
{
    if (fd < 0) return;
    (void)pthread_mutex_lock(&file_lock);
    (void)close(fd);
    (void)pthread_mutex_unlock(&file_lock);
}
