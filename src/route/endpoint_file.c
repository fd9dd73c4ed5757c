/* endpoint_file.c — file:DIR?fileName=EXPR as a `to` (io.h): the body
 * written to DIR/.NAME.tmp, fsync'd, then renamed to DIR/NAME, so a reader
 * of DIR (a file: source among them) sees the whole file or none of it. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acemq/common.h"
#include "route/expr.h"
#include "route/io_internal.h"

typedef struct file_endpoint {
    char *dir;
    acemq__expr *file_name; /* NULL: the header fileName, else the exchange id */
} file_endpoint;

static void file_close(void *state)
{
    file_endpoint *f = state;
    if (!f) return;
    acemq__expr_free(f->file_name);
    free(f->dir);
    free(f);
}

static int file_open(const acemq__step *step, const acemq__route_env *env, void **state,
                     acemq__buf *why)
{
    (void)env;
    const char *dir = step->to.path ? step->to.path : "";
    if (!*dir) return acemq__io_fail(why, ACEMQ_EINVAL, "file: needs a directory");
    struct stat st;
    if (stat(dir, &st) != 0)
        return acemq__io_fail(why, ACEMQ_EIO, "directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return acemq__io_fail(why, ACEMQ_EINVAL, "%s is not a directory", dir);
    file_endpoint *f = calloc(1, sizeof *f);
    if (f) f->dir = strdup(dir);
    if (!f || !f->dir) {
        file_close(f);
        return acemq__io_fail(why, ACEMQ_ENOMEM, "out of memory");
    }
    const char *name = acemq__uri_param(&step->to, "fileName");
    if (name) {
        acemq__expr_error err;
        memset(&err, 0, sizeof err);
        int rc = acemq__expr_compile(name, &f->file_name, &err);
        if (rc != 0) {
            file_close(f);
            return rc == ACEMQ_EINVAL ? acemq__io_fail(why, rc, "fileName at byte %zu: %s",
                                                       err.offset, err.message)
                                      : acemq__io_fail(why, rc, "out of memory");
        }
    }
    *state = f;
    return 0;
}

/* Writes all n bytes to fd: 0 or -1 with errno. */
static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The body into tmp, made durable, then renamed to path. */
static int write_file(const char *tmp, const char *path, const acemq__buf *body, acemq__buf *why)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return acemq__io_fail(why, ACEMQ_EIO, "cannot create %s: %s", tmp, strerror(errno));
    int rc = 0;
    if (write_all(fd, body->p ? body->p : "", body->len) != 0)
        rc = acemq__io_fail(why, ACEMQ_EIO, "cannot write %s: %s", tmp, strerror(errno));
    else if (fsync(fd) != 0)
        rc = acemq__io_fail(why, ACEMQ_EIO, "cannot fsync %s: %s", tmp, strerror(errno));
    /* close can report a deferred write error (NFS): it counts. */
    if (close(fd) != 0 && rc == 0)
        rc = acemq__io_fail(why, ACEMQ_EIO, "cannot close %s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = acemq__io_fail(why, ACEMQ_EIO, "cannot rename %s to %s: %s", tmp, path,
                            strerror(errno));
    if (rc != 0) (void)unlink(tmp);
    return rc;
}

static int file_send(void *state, const acemq__exchange *x, acemq__buf *why)
{
    const file_endpoint *f = state;
    acemq__buf name = {0}, tmp = {0}, path = {0};
    int rc = 0;
    if (f->file_name) {
        rc = acemq__expr_eval(f->file_name, x, &name);
    } else {
        const char *h = acemq__fields_get(&x->headers, "fileName");
        rc = acemq__buf_puts(&name, h && *h ? h : x->id);
    }
    if (rc != 0) {
        rc = acemq__io_fail(why, rc, "out of memory");
    } else if (name.len == 0 || strlen(acemq__buf_str(&name)) != name.len ||
               strchr(acemq__buf_str(&name), '/') || strcmp(acemq__buf_str(&name), ".") == 0 ||
               strcmp(acemq__buf_str(&name), "..") == 0) {
        /* One name inside DIR: never a path that leaves it, nor DIR itself. */
        rc = acemq__io_fail(why, ACEMQ_EINVAL, "file name '%s' is not a plain file name",
                            acemq__buf_str(&name));
    } else {
        rc = acemq__buf_printf(&tmp, "%s/.%s.tmp", f->dir, acemq__buf_str(&name));
        if (rc == 0) rc = acemq__buf_printf(&path, "%s/%s", f->dir, acemq__buf_str(&name));
        if (rc != 0)
            rc = acemq__io_fail(why, rc, "out of memory");
        else
            rc = write_file(acemq__buf_str(&tmp), acemq__buf_str(&path), &x->body, why);
    }
    acemq__buf_free(&name);
    acemq__buf_free(&tmp);
    acemq__buf_free(&path);
    return rc;
}

const acemq__endpoint_ops acemq__endpoint_file_ops = {"file", file_open, file_send, file_close};
