/* source_file.c — file:DIR as a source (io.h): each regular file of DIR
 * whose name matches the include glob, oldest first, moved to DIR/.done
 * when its exchange completes and offered again `delay` ms after it fails. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acemq/common.h"
#include "os/mono_time.h"
#include "route/io_internal.h"

/* The poll interval never drops below this, so delay=0 does not spin on an
 * empty directory. */
#define MIN_POLL_MS 10

typedef struct file_entry {
    struct file_entry *next;
    int64_t due_ms; /* `later` only */
    char name[];
} file_entry;

/* A name is in `flight` from the next() that offers it until its done(),
 * and is not offered meanwhile; a name in `later` is not offered before its
 * due time (entries past it are dropped at each scan). */
typedef struct file_source {
    char *dir;
    char *include; /* fnmatch glob, FNM_PERIOD: hidden names never match */
    int64_t delay_ms;
    file_entry *flight; /* offered, not settled */
    file_entry *later;  /* failed, not offered before due_ms */
} file_source;

static file_entry *entry_new(const char *name)
{
    size_t n = strlen(name);
    file_entry *e = calloc(1, sizeof *e + n + 1);
    if (e) memcpy(e->name, name, n + 1);
    return e;
}

static file_entry *find(file_entry *list, const char *name)
{
    for (; list; list = list->next)
        if (strcmp(list->name, name) == 0) return list;
    return NULL;
}

/* Takes e out of *list; 1 when it was there. */
static int unlink_entry(file_entry **list, const file_entry *e)
{
    for (file_entry **p = list; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            return 1;
        }
    return 0;
}

static void free_list(file_entry *e)
{
    while (e) {
        file_entry *next = e->next;
        free(e);
        e = next;
    }
}

static int file_open(const acemq__uri *from, const acemq__route_env *env, void **state,
                     acemq__buf *why)
{
    (void)env;
    int64_t delay;
    int rc = acemq__io_int_param(from, "delay", 500, 0, INT32_MAX, &delay, why);
    if (rc != 0) return rc;
    const char *dir = from->path ? from->path : "";
    if (!*dir) return acemq__io_fail(why, ACEMQ_EINVAL, "file: needs a directory");
    DIR *d = opendir(dir);
    if (!d)
        return acemq__io_fail(why, errno == ENOMEM ? ACEMQ_ENOMEM : ACEMQ_EIO,
                              "cannot open directory %s: %s", dir, strerror(errno));
    if (closedir(d) != 0)
        return acemq__io_fail(why, ACEMQ_EIO, "closedir %s: %s", dir, strerror(errno));
    const char *include = acemq__uri_param(from, "include");
    file_source *f = calloc(1, sizeof *f);
    if (f) {
        f->dir = strdup(dir);
        f->include = strdup(include ? include : "*");
    }
    if (!f || !f->dir || !f->include) {
        if (f) {
            free(f->dir);
            free(f->include);
        }
        free(f);
        return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    }
    f->delay_ms = delay;
    *state = f;
    return 0;
}

/* The best candidate so far: oldest modification time, then name. */
typedef struct pick {
    int found;
    struct timespec mtime;
    char name[256];
} pick;

static int older(const struct timespec *a, const char *an, const pick *p)
{
    if (!p->found) return 1;
    if (a->tv_sec != p->mtime.tv_sec) return a->tv_sec < p->mtime.tv_sec;
    if (a->tv_nsec != p->mtime.tv_nsec) return a->tv_nsec < p->mtime.tv_nsec;
    return strcmp(an, p->name) < 0;
}

/* Drops the entries of `later` that are due. */
static void expire_later(file_source *f, int64_t now)
{
    for (file_entry **p = &f->later; *p;) {
        file_entry *e = *p;
        if (e->due_ms <= now) {
            *p = e->next;
            free(e);
        } else {
            p = &e->next;
        }
    }
}

/* One pass over the directory: the file to offer into *best, if any. */
static int scan(file_source *f, pick *best, acemq__buf *why)
{
    expire_later(f, acemq__mono_ms());
    best->found = 0;
    DIR *d = opendir(f->dir);
    if (!d) return acemq__io_fail(why, ACEMQ_EIO, "opendir %s: %s", f->dir, strerror(errno));
    int fd = dirfd(d);
    int rc = 0;
    for (;;) {
        errno = 0;
        const struct dirent *de = readdir(d);
        if (!de) {
            if (errno != 0)
                rc = acemq__io_fail(why, ACEMQ_EIO, "readdir %s: %s", f->dir, strerror(errno));
            break;
        }
        const char *name = de->d_name;
        if (strlen(name) >= sizeof best->name) continue;
        if (fnmatch(f->include, name, FNM_PERIOD) != 0) continue;
        if (find(f->flight, name) || find(f->later, name)) continue;
        struct stat st;
        /* A name gone since readdir is no longer there to offer. */
        if (fd < 0 || fstatat(fd, name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
        if (older(&st.st_mtim, name, best)) {
            best->found = 1;
            best->mtime = st.st_mtim;
            memcpy(best->name, name, strlen(name) + 1);
        }
    }
    if (closedir(d) != 0 && rc == 0)
        rc = acemq__io_fail(why, ACEMQ_EIO, "closedir %s: %s", f->dir, strerror(errno));
    return rc;
}

/* Reads DIR/name whole into body: 0, ACEMQ_ENOENT when it is gone, or an
 * error with why. */
static int read_file(const file_source *f, const char *name, acemq__buf *body, acemq__buf *why)
{
    acemq__buf path = {0};
    int rc = acemq__buf_printf(&path, "%s/%s", f->dir, name);
    if (rc != 0) return acemq__io_fail(why, rc, "out of memory");
    int fd = open(acemq__buf_str(&path), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? ACEMQ_ENOENT
                             : acemq__io_fail(why, ACEMQ_EIO, "cannot open %s: %s",
                                              acemq__buf_str(&path), strerror(errno));
        acemq__buf_free(&path);
        return rc;
    }
    char chunk[65536];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = acemq__io_fail(why, ACEMQ_EIO, "cannot read %s: %s", acemq__buf_str(&path),
                                strerror(errno));
            break;
        }
        if (n == 0) break;
        rc = acemq__buf_put(body, chunk, (size_t)n);
        if (rc != 0) {
            rc = acemq__io_fail(why, rc, "out of memory reading %s", acemq__buf_str(&path));
            break;
        }
    }
    if (close(fd) != 0 && rc == 0)
        rc = acemq__io_fail(why, ACEMQ_EIO, "cannot close %s: %s", acemq__buf_str(&path),
                            strerror(errno));
    acemq__buf_free(&path);
    return rc;
}

/* Puts name in `later`, due delay ms from now: 0 or ACEMQ_ENOMEM. */
static int retry_later(file_source *f, const char *name)
{
    file_entry *e = entry_new(name);
    if (!e) return ACEMQ_ENOMEM;
    e->due_ms = acemq__mono_ms() + f->delay_ms;
    e->next = f->later;
    f->later = e;
    return 0;
}

/* Offers the file picked: 0, ACEMQ_ENOENT when it vanished, or an error
 * (either way the name is tried again after delay). */
static int offer(file_source *f, const char *name, acemq__exchange *x, acemq__buf *why)
{
    acemq__buf body = {0};
    int rc = read_file(f, name, &body, why);
    if (rc == 0) rc = acemq__fields_set(&x->headers, "fileName", name);
    file_entry *e = rc == 0 ? entry_new(name) : NULL;
    if (rc == 0 && !e) rc = ACEMQ_ENOMEM;
    if (rc == ACEMQ_ENOMEM && !why->len) (void)acemq__io_fail(why, rc, "out of memory");
    if (rc != 0) {
        acemq__buf_free(&body);
        /* Kept out of the scans until due, so that a file that cannot be
         * read is not read again at once. */
        (void)retry_later(f, name);
        return rc;
    }
    acemq__buf_free(&x->body);
    x->body = body;
    e->next = f->flight;
    f->flight = e;
    x->source_ctx = e;
    return 0;
}

static int file_next(void *state, int timeout_ms, acemq__exchange *x, acemq__buf *why)
{
    file_source *f = state;
    int64_t deadline = acemq__mono_ms() + timeout_ms;
    for (;;) {
        pick best;
        int rc = scan(f, &best, why);
        if (rc != 0) return rc;
        if (best.found) {
            rc = offer(f, best.name, x, why);
            if (rc != ACEMQ_ENOENT) return rc;
            continue; /* gone between the scan and the open: look again */
        }
        int64_t left = deadline - acemq__mono_ms();
        if (left <= 0) return ACEMQ_ENOENT;
        int64_t poll = f->delay_ms < MIN_POLL_MS ? MIN_POLL_MS : f->delay_ms;
        acemq__sleep_ms(left < poll ? left : poll);
    }
}

/* Moves DIR/name to DIR/.done/name, making .done when it is missing. */
static int move_done(const file_source *f, const char *name, acemq__buf *why)
{
    acemq__buf done_dir = {0}, from = {0}, to = {0};
    int rc = acemq__buf_printf(&done_dir, "%s/.done", f->dir);
    if (rc == 0) rc = acemq__buf_printf(&from, "%s/%s", f->dir, name);
    if (rc == 0) rc = acemq__buf_printf(&to, "%s/.done/%s", f->dir, name);
    if (rc != 0) {
        rc = acemq__io_fail(why, rc, "out of memory");
    } else if (mkdir(acemq__buf_str(&done_dir), 0777) != 0 && errno != EEXIST) {
        rc = acemq__io_fail(why, ACEMQ_EIO, "cannot make %s: %s", acemq__buf_str(&done_dir),
                            strerror(errno));
    } else if (rename(acemq__buf_str(&from), acemq__buf_str(&to)) != 0) {
        rc = acemq__io_fail(why, ACEMQ_EIO, "cannot move %s to %s: %s", acemq__buf_str(&from),
                            acemq__buf_str(&to), strerror(errno));
    }
    acemq__buf_free(&done_dir);
    acemq__buf_free(&from);
    acemq__buf_free(&to);
    return rc;
}

static int file_done(void *state, acemq__exchange *x, int completed, acemq__buf *why)
{
    file_source *f = state;
    file_entry *e = x->source_ctx;
    if (!e || !unlink_entry(&f->flight, e))
        return acemq__io_fail(why, ACEMQ_EINVAL, "settled twice, or not this source's");
    x->source_ctx = NULL;
    int rc = completed ? move_done(f, e->name, why) : 0;
    /* Failed, or completed but still in DIR: offered again after delay. */
    if (!completed || rc != 0) {
        e->due_ms = acemq__mono_ms() + f->delay_ms;
        e->next = f->later;
        f->later = e;
        return rc;
    }
    free(e);
    return 0;
}

static void file_close(void *state)
{
    file_source *f = state;
    if (!f) return;
    free_list(f->flight);
    free_list(f->later);
    free(f->dir);
    free(f->include);
    free(f);
}

const acemq__source_ops acemq__source_file_ops = {"file", file_open, file_next, file_done,
                                                  file_close};
