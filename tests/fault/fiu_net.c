/* fiu_net.c — send, recv, read and write of the test program, in front of
 * libfiu's wrappers: an injected failure on a socket shuts the socket down
 * (fiu_net.h). A failure counts as injected when fiu_faults' count of
 * injected failures moved during the call; the library calls under test
 * run on the test's thread, one at a time.
 */
#define _GNU_SOURCE
#include "fault/fiu_net.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "fault/fiu_faults.h"

/* The project builds with hidden visibility; these must be seen by the
 * libraries' calls. */
#define INTERPOSED __attribute__((visibility("default")))

typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*recv_fn)(int, void *, size_t, int);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*read_fn)(int, void *, size_t);

static atomic_long resets;

long fiu_net_resets(void)
{
    return atomic_load(&resets);
}

/* The next definition of name after this program's: libfiu's wrapper (or
 * ASan's interceptor in front of it), else libc's; looked up once into
 * *slot. */
static void *next_definition(void *_Atomic *slot, const char *name)
{
    void *f = atomic_load(slot);
    if (f) return f;
    f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "fiu_net: no definition of %s after the program's\n", name);
        abort();
    }
    atomic_store(slot, f);
    return f;
}

/* After a call on fd that failed: when the failure was injected (the count
 * moved since before) and fd is a socket, the socket is shut down. errno
 * stays the call's. */
static void reset_if_injected(int fd, uint64_t before)
{
    int e = errno;
    struct stat st;
    if (fiu_faults_injected() != before && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
        shutdown(fd, SHUT_RDWR) == 0)
        atomic_fetch_add(&resets, 1);
    errno = e;
}

INTERPOSED ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    static void *_Atomic real;
    uint64_t before = fiu_faults_injected();
    ssize_t n = ((send_fn)next_definition(&real, "send"))(fd, buf, len, flags);
    if (n < 0) reset_if_injected(fd, before);
    return n;
}

INTERPOSED ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    static void *_Atomic real;
    uint64_t before = fiu_faults_injected();
    ssize_t n = ((recv_fn)next_definition(&real, "recv"))(fd, buf, len, flags);
    if (n < 0) reset_if_injected(fd, before);
    return n;
}

INTERPOSED ssize_t write(int fd, const void *buf, size_t len)
{
    static void *_Atomic real;
    uint64_t before = fiu_faults_injected();
    ssize_t n = ((write_fn)next_definition(&real, "write"))(fd, buf, len);
    if (n < 0) reset_if_injected(fd, before);
    return n;
}

INTERPOSED ssize_t read(int fd, void *buf, size_t len)
{
    static void *_Atomic real;
    uint64_t before = fiu_faults_injected();
    ssize_t n = ((read_fn)next_definition(&real, "read"))(fd, buf, len);
    if (n < 0) reset_if_injected(fd, before);
    return n;
}
