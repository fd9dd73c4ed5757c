/* consume_handlers.c — the two ways `acemq consume` hands a message to a
 * program in any language: --exec runs the command once per message (the
 * body on its standard input, the rest in its environment, exit status 0
 * for success); --pipe keeps one command running and talks to it in JSON
 * lines, one request and one answer per message (docs/consumer.md has the
 * protocol). A command that overstays the lease is killed; a --pipe child
 * that dies or is killed is started again for the next message, and the
 * message it held fails, to be retried.
 */
#include "cli/consume_handlers.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

/* Says why m failed and returns the failure. */
static int failed(acemq_consumer *c, const char *fmt, const char *arg)
{
    char why[512];
    snprintf(why, sizeof why, fmt, arg);
    acemq_consumer_fail(c, why);
    return 1;
}

static int status_failure(acemq_consumer *c, int status)
{
    char n[16];
    if (WIFEXITED(status)) {
        snprintf(n, sizeof n, "%d", WEXITSTATUS(status));
        return failed(c, "the command exited with status %s", n);
    }
    snprintf(n, sizeof n, "%d", WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    return failed(c, "the command was killed by signal %s", n);
}

int acemq__consume_exec(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    acemq__consume_command *cmd = ctx;
    char **env = acemq__child_env(m);
    if (!env) return failed(c, "%s", "out of memory for the command's environment");
    acemq__child ch;
    int rc = acemq__child_start(&ch, cmd->argv, env, 0);
    acemq__child_env_free(env);
    if (rc != 0) return failed(c, "cannot start the command: %s", strerror(errno));
    int64_t deadline = acemq__child_now_ms() + cmd->timeout_ms;
    /* A command that exits without reading its input is judged by its
     * exit status alone. */
    rc = acemq__child_write(&ch, m->delivery->body, m->delivery->body_len, deadline);
    acemq__child_close_input(&ch);
    int status = 0;
    if (rc != -2) rc = acemq__child_wait(&ch, deadline, &status);
    if (rc != 0) {
        acemq__child_kill(&ch);
        return failed(c, "%s", "the command ran past the lease and was killed");
    }
    acemq__child_kill(&ch); /* closes the pipes; it is reaped already */
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : status_failure(c, status);
}

/* ---- --pipe ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const unsigned char *p, size_t n)
{
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) v |= p[i + 2];
        *o++ = b64[v >> 18];
        *o++ = b64[(v >> 12) & 63];
        *o++ = b64[(v >> 6) & 63];
        *o++ = b64[v & 63];
        if (i + 2 >= n) o[-1] = '=';
        if (i + 1 >= n) o[-2] = '=';
    }
    *o = '\0';
    return out;
}

/* buf grown to at least need bytes (doubling); NULL on ENOMEM, buf then
 * freed. */
static char *grow(char *buf, size_t *cap, size_t need)
{
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    char *p = realloc(buf, c);
    if (!p) {
        free(buf);
        return NULL;
    }
    *cap = c;
    return p;
}

/* The request line for m, newline included; NULL on ENOMEM. */
static char *request_line(const acemq_consumer_msg *m)
{
    const acemq_delivery *d = m->delivery;
    char *body = base64(d->body, d->body_len);
    json_t *headers = d->headers_json ? json_loads(d->headers_json, 0, NULL) : NULL;
    json_t *req = json_pack(
        "{s:s?, s:s, s:s, s:s, s:o, s:i, s:s}", "id", d->message_id, "key", m->key, "routing_key",
        d->routing_key ? d->routing_key : "", "exchange", d->exchange ? d->exchange : "", "headers",
        headers ? headers : json_object(), "failures", m->failures, "body", body ? body : "");
    free(body);
    char *text = req && body ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!text) return NULL;
    size_t len = strlen(text);
    char *line = realloc(text, len + 2);
    if (!line) {
        free(text);
        return NULL;
    }
    line[len] = '\n';
    line[len + 1] = '\0';
    return line;
}

void acemq__consume_pipe_end(acemq__pipe_child *p)
{
    if (p->running) acemq__child_kill(&p->child);
    p->running = 0;
    p->len = 0;
}

void acemq__consume_pipe_free(acemq__pipe_child *p)
{
    acemq__consume_pipe_end(p);
    for (size_t i = 0; i < p->n_why; i++)
        free(p->why[i]);
    p->n_why = 0;
    free(p->buf);
    free(p->line);
    p->buf = p->line = NULL;
    p->cap = 0;
}

/* Whether the child has exited; it is reaped then. */
static int child_exited(acemq__pipe_child *p)
{
    int status;
    if (waitpid(p->child.pid, &status, WNOHANG) != p->child.pid) return 0;
    p->child.pid = -1; /* reaped: there is nothing left to kill */
    return 1;
}

/* Whether none of the len bytes written last to the child were read: on
 * Linux FIONREAD on a pipe's write end counts what nobody has read. */
static int request_untouched(const acemq__pipe_child *p, size_t len)
{
    int unread = -1;
    return ioctl(p->child.to, FIONREAD, &unread) == 0 && unread >= 0 && (size_t)unread == len;
}

/* ---- --pipe, a batch in flight ---- */

/* Reads what the child has written into p->buf without waiting: 1 some,
 * 0 none yet, -1 it closed its output. */
static int read_some(acemq__pipe_child *p)
{
    if (p->len == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 4096;
        char *b = cap <= (1u << 26) ? realloc(p->buf, cap) : NULL;
        if (!b) return -1; /* an answer of more than 64 MiB is no answer */
        p->buf = b;
        p->cap = cap;
    }
    ssize_t r = read(p->child.from, p->buf + p->len, p->cap - p->len);
    if (r > 0) {
        p->len += (size_t)r;
        return 1;
    }
    if (r == 0) return -1;
    return errno == EINTR || errno == EAGAIN ? 0 : -1;
}

/* The next whole line in p->buf, moved into p->line: 1, or 0 when there
 * is none yet. */
static int take_line(acemq__pipe_child *p)
{
    char *nl = p->len ? memchr(p->buf, '\n', p->len) : NULL;
    if (!nl) return 0;
    size_t n = (size_t)(nl - p->buf);
    char *line = malloc(n + 1);
    if (!line) return 0;
    memcpy(line, p->buf, n);
    line[n] = '\0';
    free(p->line);
    p->line = line;
    memmove(p->buf, nl + 1, p->len - n - 1);
    p->len -= n + 1;
    return 1;
}

/* Writes the batch's requests and reads its answers at once, so that the
 * child works on one while the next is on its way and neither side waits
 * on a full pipe: answers[0..*got) get the answer lines. 0 all answered;
 * -1 the child closed or died; -2 the deadline passed. */
static int exchange(acemq__pipe_child *p, const char *req, size_t len, char **answers, size_t n,
                    size_t *got, int64_t deadline)
{
    size_t written = 0;
    *got = 0;
    while (*got < n) {
        while (*got < n && take_line(p))
            if (!(answers[(*got)++] = strdup(p->line))) return -1;
        if (*got == n) break;
        int64_t left = deadline - acemq__child_now_ms();
        if (left <= 0) return -2;
        struct pollfd pfd[2] = {{p->child.from, POLLIN, 0}, {p->child.to, POLLOUT, 0}};
        if (poll(pfd, written < len ? 2 : 1, left > 1000 ? 1000 : (int)left) < 0 && errno != EINTR)
            return -1;
        if (written < len && (pfd[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = write(p->child.to, req + written, len - written);
            if (w > 0)
                written += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EINTR)
                return -1;
        }
        if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            int r = read_some(p);
            if (r < 0) {
                while (*got < n && take_line(p))
                    if (!(answers[(*got)++] = strdup(p->line))) return -1;
                return *got == n ? 0 : -1;
            }
        }
    }
    return 0;
}

void acemq__consume_pipe_batch(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m, size_t n,
                               acemq_consumer_outcome *out)
{
    (void)c;
    acemq__pipe_child *p = ctx;
    for (size_t i = 0; i < p->n_why; i++)
        free(p->why[i]);
    p->n_why = 0;
    if (p->running && child_exited(p)) acemq__consume_pipe_end(p);
    /* All the requests as one buffer, written as the child reads. */
    size_t len = 0, cap = 0;
    char *req = NULL;
    for (size_t i = 0; i < n; i++) {
        out[i] = (acemq_consumer_outcome){1, "out of memory for the request"};
        char *line = request_line(&m[i]);
        size_t l = line ? strlen(line) : 0;
        if (!line || (len + l + 1 > cap && !(req = grow(req, &cap, len + l + 1)))) {
            free(line);
            free(req);
            return;
        }
        memcpy(req + len, line, l + 1);
        len += l;
        free(line);
    }
    char *answers[ACEMQ__PIPE_BATCH_MAX] = {0};
    size_t got = 0;
    int64_t deadline = acemq__child_now_ms() + p->cmd.timeout_ms;
    int rc = -1;
    for (int tries = 0; tries < 2; tries++) {
        if (!p->running) {
            if (acemq__child_start(&p->child, p->cmd.argv, NULL, 1) != 0) {
                for (size_t i = 0; i < n; i++)
                    out[i].why = "cannot start the --pipe command";
                free(req);
                return;
            }
            p->running = 1;
            p->len = 0;
        }
        rc = exchange(p, req, len, answers, n, &got, deadline);
        /* Gone before it read any request (it exited just after its last
         * answer): it never had these messages; once more, to a new one. */
        if (rc != -1 || got > 0 || !request_untouched(p, len)) break;
        acemq__consume_pipe_end(p);
    }
    free(req);
    /* A worker that closed its output and exits 0 ended on purpose (one
     * that recycles itself every N messages): it handled none of the
     * unanswered ones. Any other end is a crash on the first of them. */
    int status = -1, clean = 0;
    if (rc == -1 && p->running && p->child.pid > 0 &&
        acemq__child_wait(&p->child, acemq__child_now_ms() + 1000, &status) == 0)
        clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    for (size_t i = 0; i < n; i++) {
        if (i > got || (i == got && clean)) {
            /* The worker answers in order: it never got to this one. */
            out[i] = (acemq_consumer_outcome){2, "the --pipe command ended before it"};
            continue;
        }
        if (i == got) { /* the one it was on when it died or hung */
            out[i].why = rc == -2 ? "the --pipe command did not answer within the lease; restarted"
                                  : "the --pipe command exited; restarted";
            continue;
        }
        json_t *answer = json_loads(answers[i], 0, NULL);
        json_t *ok = json_object_get(answer, "ok");
        out[i].failed = !json_is_true(ok);
        out[i].why = NULL;
        if (out[i].failed) {
            const char *why = json_string_value(json_object_get(answer, "error"));
            if (!json_is_boolean(ok)) {
                why = "the --pipe command's answer is not a JSON object with \"ok\"";
                rc = -1; /* its answers and our requests may be out of step now */
            }
            char *kept = strdup(why ? why : "the --pipe command answered ok: false");
            if (kept) p->why[p->n_why++] = kept;
            out[i].why = kept;
        }
        json_decref(answer);
        free(answers[i]);
    }
    if (rc != 0) acemq__consume_pipe_end(p);
}
