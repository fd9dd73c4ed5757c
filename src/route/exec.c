/* exec.c — the exec step (io.h): `/bin/sh -c COMMAND` started with
 * posix_spawn, the body written to its standard input while its standard
 * output and error are read in one poll loop, under a deadline. */
#define _GNU_SOURCE /* pipe2: a pipe made close-on-exec atomically */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acemq/common.h"
#include "os/mono_time.h"
#include "route/io.h"

extern char **environ;

/* A line of the child's standard error is passed on whole (so lines of
 * threads do not mix) once it ends, or once it is this long. */
#define ERR_LINE_MAX 65536
/* The last line kept for why is cut to this many bytes. */
#define LAST_LINE_MAX 1024

/* --- the environment ------------------------------------------------------ */

/* environ's entries (borrowed) then ours (owned, from `own` on). */
typedef struct env_list {
    char **v;
    size_t n, cap, own;
} env_list;

static void env_free(env_list *e)
{
    for (size_t i = e->own; i < e->n; i++)
        free(e->v[i]);
    free(e->v);
}

static int env_push(env_list *e, char *entry)
{
    if (e->n + 2 > e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        char **v = realloc(e->v, cap * sizeof *v);
        if (!v) return ACEMQ_ENOMEM;
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = entry;
    e->v[e->n] = NULL;
    return 0;
}

/* Sets NAME=value among ours, replacing an earlier NAME (two headers whose
 * names map to one variable: the later wins). name_len bytes of name. */
static int env_set(env_list *e, const char *name, size_t name_len, const char *value)
{
    size_t vlen = strlen(value);
    char *s = malloc(name_len + 1 + vlen + 1);
    if (!s) return ACEMQ_ENOMEM;
    memcpy(s, name, name_len);
    s[name_len] = '=';
    memcpy(s + name_len + 1, value, vlen + 1);
    for (size_t i = e->own; i < e->n; i++)
        if (strncmp(e->v[i], s, name_len + 1) == 0) {
            free(e->v[i]);
            e->v[i] = s;
            return 0;
        }
    int rc = env_push(e, s);
    if (rc != 0) free(s);
    return rc;
}

static int ours(const char *entry)
{
    return strncmp(entry, "ACEMQ_ROUTE_ID=", 15) == 0 ||
           strncmp(entry, "ACEMQ_EXCHANGE_ID=", 18) == 0 ||
           strncmp(entry, "ACEMQ_HEADER_", 13) == 0;
}

static int is_word_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* The current environment (less the variables we set) and ours. */
static int env_build(const acemq__exchange *x, env_list *e)
{
    memset(e, 0, sizeof *e);
    int rc = 0;
    for (char **p = environ; p && *p && rc == 0; p++)
        if (!ours(*p)) rc = env_push(e, *p);
    e->own = e->n;
    if (rc == 0) rc = env_set(e, "ACEMQ_ROUTE_ID", 14, x->route_id ? x->route_id : "");
    if (rc == 0) rc = env_set(e, "ACEMQ_EXCHANGE_ID", 17, x->id);
    acemq__buf name = {0};
    for (size_t i = 0; i < x->headers.n && rc == 0; i++) {
        acemq__buf_clear(&name);
        rc = acemq__buf_puts(&name, "ACEMQ_HEADER_");
        if (rc == 0) rc = acemq__buf_puts(&name, x->headers.names[i]);
        if (rc != 0) break;
        for (char *c = name.p + 13; *c; c++)
            if (!is_word_char(*c)) *c = '_';
        rc = env_set(e, name.p, name.len, x->headers.values[i]);
    }
    acemq__buf_free(&name);
    if (rc != 0) env_free(e);
    return rc;
}

/* --- the child's standard error ------------------------------------------- */

typedef struct err_pass {
    acemq__buf line; /* the line not yet passed on */
    acemq__buf last; /* the last line that was not empty */
} err_pass;

/* Passes the line held on to our standard error (one write, under the
 * stream's lock) and keeps it as the last line when it has text. */
static void err_flush(err_pass *e)
{
    if (!e->line.len) return;
    flockfile(stderr);
    (void)fwrite(e->line.p, 1, e->line.len, stderr);
    if (e->line.p[e->line.len - 1] != '\n') (void)fputc('\n', stderr);
    funlockfile(stderr);
    size_t n = e->line.len;
    while (n > 0 && (e->line.p[n - 1] == '\n' || e->line.p[n - 1] == '\r'))
        n--;
    if (n > 0) {
        acemq__buf_clear(&e->last);
        (void)acemq__buf_put(&e->last, e->line.p, n < LAST_LINE_MAX ? n : LAST_LINE_MAX);
    }
    acemq__buf_clear(&e->line);
}

static void err_take(err_pass *e, const char *p, size_t n)
{
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) + 1 : n;
        if (acemq__buf_put(&e->line, p, k) != 0) {
            /* Out of memory: what is held goes on, then this piece. */
            err_flush(e);
            flockfile(stderr);
            (void)fwrite(p, 1, k, stderr);
            funlockfile(stderr);
        } else if (nl || e->line.len >= ERR_LINE_MAX) {
            err_flush(e);
        }
        p += k;
        n -= k;
    }
}

/* --- the child ------------------------------------------------------------- */

typedef struct child {
    pid_t pid;
    int in, out, err; /* our ends; -1 when closed */
    int epipe;        /* it closed its standard input before taking the body */
} child;

static void close_fd(int *fd)
{
    if (*fd >= 0) (void)close(*fd); /* a pipe end: nothing is lost if close fails */
    *fd = -1;
}

static int nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -1 : 0;
}

/* A close-on-exec pipe whose ends are both above 2: with one of our own
 * standard descriptors closed, an end numbered 0-2 would be overwritten by
 * the child's dup2 of another before its own dup2 ran. 0 or -1 (errno). */
static int make_pipe(int p[2])
{
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    for (int i = 0; i < 2; i++) {
        if (p[i] > STDERR_FILENO) continue;
        int fd = fcntl(p[i], F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
        if (fd < 0) {
            int e = errno;
            close_fd(&p[0]);
            close_fd(&p[1]);
            errno = e;
            return -1;
        }
        close_fd(&p[i]);
        p[i] = fd;
    }
    return 0;
}

static int spawn(child *c, const char *command, char *const *env, acemq__buf *why)
{
    int p[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
    for (int i = 0; i < 3; i++)
        if (make_pipe(p[i]) != 0) {
            int e = errno;
            for (int j = 0; j < i; j++) {
                close_fd(&p[j][0]);
                close_fd(&p[j][1]);
            }
            (void)acemq__buf_printf(why, "cannot make a pipe: %s", strerror(e));
            return ACEMQ_EIO;
        }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, pipe_only;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc == 0) {
        rc = posix_spawnattr_init(&attr);
        if (rc != 0) (void)posix_spawn_file_actions_destroy(&fa);
    }
    if (rc == 0) {
        (void)sigemptyset(&none);
        (void)sigemptyset(&pipe_only);
        (void)sigaddset(&pipe_only, SIGPIPE);
        /* Its own process group, killed whole; no blocked signals; SIGPIPE
         * at its default even when we ignore it, as a shell expects. */
        rc = posix_spawn_file_actions_adddup2(&fa, p[0][0], STDIN_FILENO);
        if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, p[1][1], STDOUT_FILENO);
        if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, p[2][1], STDERR_FILENO);
        if (rc == 0)
            rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                     POSIX_SPAWN_SETSIGDEF);
        if (rc == 0) rc = posix_spawnattr_setpgroup(&attr, 0);
        if (rc == 0) rc = posix_spawnattr_setsigmask(&attr, &none);
        if (rc == 0) rc = posix_spawnattr_setsigdefault(&attr, &pipe_only);
        char *argv[] = {"sh", "-c", (char *)command, NULL};
        if (rc == 0) rc = posix_spawn(&c->pid, "/bin/sh", &fa, &attr, argv, env);
        (void)posix_spawn_file_actions_destroy(&fa);
        (void)posix_spawnattr_destroy(&attr);
    }
    close_fd(&p[0][0]);
    close_fd(&p[1][1]);
    close_fd(&p[2][1]);
    c->in = p[0][1];
    c->out = p[1][0];
    c->err = p[2][0];
    if (rc != 0) {
        close_fd(&c->in);
        close_fd(&c->out);
        close_fd(&c->err);
        (void)acemq__buf_printf(why, "cannot start /bin/sh: %s", strerror(rc));
        return ACEMQ_EIO;
    }
    if (nonblocking(c->in) != 0 || nonblocking(c->out) != 0 || nonblocking(c->err) != 0) {
        (void)acemq__buf_printf(why, "fcntl O_NONBLOCK: %s", strerror(errno));
        return ACEMQ_EIO; /* the caller kills and reaps the child */
    }
    return 0;
}

/* Reads what fd has: appended to out, or to e when out is NULL; EOF or an
 * error closes it. 0, or an error with why. */
static int drain(int *fd, acemq__buf *out, err_pass *e, acemq__buf *why)
{
    char chunk[65536];
    for (;;) {
        ssize_t n = read(*fd, chunk, sizeof chunk);
        if (n > 0) {
            if (!out) {
                err_take(e, chunk, (size_t)n);
            } else if (acemq__buf_put(out, chunk, (size_t)n) != 0) {
                (void)acemq__buf_puts(why, "out of memory for the command's output");
                return ACEMQ_ENOMEM;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return 0;
        int rc = 0;
        if (n < 0) {
            (void)acemq__buf_printf(why, "reading the command's output: %s", strerror(errno));
            rc = ACEMQ_EIO;
        }
        close_fd(fd);
        return rc;
    }
}

/* Writes what the pipe takes of the body; all of it, or EPIPE, closes it. */
static int feed(child *c, const acemq__buf *body, size_t *off, acemq__buf *why)
{
    while (*off < body->len) {
        ssize_t w = write(c->in, body->p + *off, body->len - *off);
        if (w > 0) {
            *off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) return 0;
        if (w < 0 && errno == EPIPE) {
            c->epipe = 1; /* it stopped reading: its exit status tells the rest */
            break;
        }
        (void)acemq__buf_printf(why, "writing to the command: %s", strerror(errno));
        return ACEMQ_EIO;
    }
    close_fd(&c->in);
    return 0;
}

/* Runs the pipes until all three are closed: 0, 1 when the deadline (0:
 * none) passed first, or an error with why. */
static int pump(child *c, const acemq__buf *body, int64_t deadline, acemq__buf *out, err_pass *e,
                acemq__buf *why)
{
    size_t off = 0;
    if (body->len == 0) close_fd(&c->in);
    while (c->in >= 0 || c->out >= 0 || c->err >= 0) {
        int wait = -1;
        if (deadline) {
            int64_t left = deadline - acemq__mono_ms();
            if (left <= 0) return 1;
            wait = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd p[3] = {{c->in, POLLOUT, 0}, {c->out, POLLIN, 0}, {c->err, POLLIN, 0}};
        int n = poll(p, 3, wait);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            (void)acemq__buf_printf(why, "poll: %s", strerror(errno));
            return ACEMQ_EIO;
        }
        int rc = 0;
        if (c->in >= 0 && p[0].revents) rc = feed(c, body, &off, why);
        if (rc == 0 && c->out >= 0 && p[1].revents) rc = drain(&c->out, out, e, why);
        if (rc == 0 && c->err >= 0 && p[2].revents) rc = drain(&c->err, NULL, e, why);
        if (rc != 0) return rc;
    }
    return 0;
}

/* waitpid for pid, resuming after signals: 0 with *status, or -1 (errno). */
static int reap(pid_t pid, int *status, int options)
{
    for (;;) {
        pid_t r = waitpid(pid, status, options);
        if (r >= 0) return r == pid ? 0 : 1;
        if (errno != EINTR) return -1;
    }
}

/* Waits for the child's exit until deadline (0: none): 0 with *status, 1
 * when the deadline passed, or an error with why. */
static int wait_exit(pid_t pid, int64_t deadline, int *status, acemq__buf *why)
{
    int64_t nap = 1;
    for (;;) {
        int r = reap(pid, status, deadline ? WNOHANG : 0);
        if (r == 0) return 0;
        if (r < 0) {
            (void)acemq__buf_printf(why, "waitpid: %s", strerror(errno));
            return ACEMQ_EIO;
        }
        /* Its pipes are closed, so the exit is near: short naps, growing. */
        int64_t left = deadline - acemq__mono_ms();
        if (left <= 0) return 1;
        acemq__sleep_ms(nap < left ? nap : left);
        if (nap < 50) nap *= 2;
    }
}

/* Kills the child's process group and reaps the child. */
static void kill_and_reap(pid_t pid)
{
    if (kill(-pid, SIGKILL) != 0) (void)kill(pid, SIGKILL);
    int status;
    (void)reap(pid, &status, 0);
}

/* why: what happened, then the last line of its standard error. */
static int fail_text(acemq__buf *why, const err_pass *e, const char *what)
{
    acemq__buf_clear(why);
    (void)acemq__buf_puts(why, what);
    if (e->last.len) (void)acemq__buf_printf(why, ": %s", acemq__buf_str(&e->last));
    return ACEMQ_EBACKEND;
}

/* The process is multithreaded: posix_spawn (no allocation between fork
 * and exec), pipes made close-on-exec so that children other threads start
 * meanwhile do not hold them open, and SIGPIPE blocked in this thread while
 * it writes, so a child that stops reading costs an EPIPE, not the process.
 * The child runs in a process group of its own, killed whole on timeout. */
int acemq__exec_run(const char *command, int64_t timeout_ms, acemq__exchange *x, acemq__buf *why)
{
    env_list env;
    if (env_build(x, &env) != 0) {
        acemq__buf_clear(why);
        (void)acemq__buf_puts(why, "out of memory for the command's environment");
        return ACEMQ_ENOMEM;
    }
    sigset_t pipe_only, old;
    (void)sigemptyset(&pipe_only);
    (void)sigaddset(&pipe_only, SIGPIPE);
    int rc = pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
    if (rc != 0) {
        env_free(&env);
        acemq__buf_clear(why);
        (void)acemq__buf_printf(why, "pthread_sigmask: %s", strerror(rc));
        return ACEMQ_EIO;
    }
    int64_t deadline = timeout_ms > 0 ? acemq__mono_ms() + timeout_ms : 0;
    child c = {-1, -1, -1, -1, 0};
    err_pass e = {{0}, {0}};
    acemq__buf out = {0};
    acemq__buf_clear(why);
    rc = spawn(&c, command, env.v, why);
    int status = 0, timed_out = 0;
    if (c.pid > 0) {
        if (rc == 0) rc = pump(&c, &x->body, deadline, &out, &e, why);
        if (rc == 0) rc = wait_exit(c.pid, deadline, &status, why);
        if (rc != 0) {
            timed_out = rc == 1;
            kill_and_reap(c.pid);
            /* What it wrote before it died, for the last line; the error
             * that ended the run stays in why. */
            acemq__buf scratch = {0};
            if (c.err >= 0) (void)drain(&c.err, NULL, &e, &scratch);
            acemq__buf_free(&scratch);
        }
    }
    close_fd(&c.in);
    close_fd(&c.out);
    close_fd(&c.err);
    err_flush(&e);
    if (c.epipe && !sigismember(&old, SIGPIPE)) {
        /* The SIGPIPE our write raised is pending on this thread: taken
         * here, so unblocking does not deliver it. */
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_only, NULL, &zero) < 0 && errno == EINTR) {
        }
    }
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    char what[64];
    if (timed_out) {
        (void)snprintf(what, sizeof what, "no exit within %lld ms: killed", (long long)timeout_ms);
        rc = fail_text(why, &e, what);
    } else if (rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        (void)snprintf(what, sizeof what, "exit status %d", WEXITSTATUS(status));
        rc = fail_text(why, &e, what);
    } else if (rc == 0 && WIFSIGNALED(status)) {
        (void)snprintf(what, sizeof what, "killed by signal %d", WTERMSIG(status));
        rc = fail_text(why, &e, what);
    } else if (rc == 0) {
        acemq__buf_free(&x->body);
        x->body = out;
        out = (acemq__buf){0};
    }
    acemq__buf_free(&out);
    acemq__buf_free(&e.line);
    acemq__buf_free(&e.last);
    env_free(&env);
    return rc;
}
