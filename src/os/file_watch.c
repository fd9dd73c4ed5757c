/* file_watch.c — see file_watch.h. The directory is watched, not the files:
 * a -wal or -journal file comes and goes with the connections that use it,
 * and a watch on a file that is deleted and made again would see nothing of
 * the new one. */
#include "os/file_watch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef __linux__
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

/* The names whose writes count: the file itself and SQLite's companions.
 * Writes to -shm go through a memory map, which inotify does not see. */
static int is_watched_name(const acemq__file_watch *w, const char *name)
{
    if (strncmp(name, w->base, w->base_len) != 0) return 0;
    const char *rest = name + w->base_len;
    return *rest == '\0' || strcmp(rest, "-wal") == 0 || strcmp(rest, "-journal") == 0;
}

int acemq__file_watch_open(acemq__file_watch *w, const char *path)
{
    w->fd = -1;
    w->base = NULL;
    w->base_len = 0;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (*base == '\0') {
        errno = EINVAL;
        return -1;
    }
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    w->base = strdup(base);
    if (!dir || !w->base) {
        free(dir);
        acemq__file_watch_close(w);
        errno = ENOMEM;
        return -1;
    }
    w->base_len = strlen(w->base);
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    int ok =
        w->fd >= 0 && inotify_add_watch(w->fd, dir, IN_MODIFY | IN_ONLYDIR | IN_EXCL_UNLINK) >= 0;
    int saved = errno;
    free(dir);
    if (ok) return 0;
    acemq__file_watch_close(w);
    errno = saved;
    return -1;
}

/* Reads every queued event: 1 if one was a write to a watched name or an
 * overflow, 0 if none was, -1 when the watch is gone or reading failed. */
static int take_events(acemq__file_watch *w)
{
    /* Aligned for struct inotify_event, as inotify(7) shows. */
    _Alignas(struct inotify_event) char buf[4096];
    int hit = 0, gone = 0;
    for (;;) {
        ssize_t n = read(w->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) return -1; /* errno set by read; 0 cannot happen on inotify */
        for (ssize_t off = 0; off < n;) {
            const struct inotify_event *e = (const struct inotify_event *)(const void *)(buf + off);
            if (e->mask & IN_Q_OVERFLOW) hit = 1;
            if (e->mask & IN_IGNORED) gone = 1;
            if ((e->mask & IN_MODIFY) && e->len > 0 && is_watched_name(w, e->name)) hit = 1;
            off += (ssize_t)(sizeof *e + e->len);
        }
    }
    if (gone) {
        errno = ENOENT;
        return -1;
    }
    return hit;
}

int acemq__file_watch_wait(acemq__file_watch *w, int timeout_ms)
{
    if (w->fd < 0) {
        errno = EBADF;
        return -1;
    }
    struct pollfd p = {.fd = w->fd, .events = POLLIN};
    int n = poll(&p, 1, timeout_ms);
    if (n < 0) return errno == EINTR ? 0 : -1; /* a signal: the caller looks again */
    if (n == 0) return 0;
    return take_events(w);
}

void acemq__file_watch_close(acemq__file_watch *w)
{
    if (w->fd >= 0) (void)close(w->fd);
    w->fd = -1;
    free(w->base);
    w->base = NULL;
    w->base_len = 0;
}

#else /* no inotify: the caller polls */

int acemq__file_watch_open(acemq__file_watch *w, const char *path)
{
    (void)path;
    w->fd = -1;
    w->base = NULL;
    w->base_len = 0;
    errno = ENOSYS;
    return -1;
}

int acemq__file_watch_wait(acemq__file_watch *w, int timeout_ms)
{
    (void)w;
    (void)timeout_ms;
    errno = ENOSYS;
    return -1;
}

void acemq__file_watch_close(acemq__file_watch *w)
{
    w->fd = -1;
}

#endif
