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

/* Reads the child's next line into p->line (NUL-terminated): 0; -1 it
 * closed its output; -2 the deadline passed. */
static int read_line(acemq__pipe_child *p, int64_t deadline)
{
    for (;;) {
        char *nl = p->len ? memchr(p->buf, '\n', p->len) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - p->buf);
            free(p->line);
            p->line = malloc(n + 1);
            if (!p->line) return -1;
            memcpy(p->line, p->buf, n);
            p->line[n] = '\0';
            memmove(p->buf, nl + 1, p->len - n - 1);
            p->len -= n + 1;
            return 0;
        }
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
            continue;
        }
        if (r == 0) return -1;
        if (errno == EINTR) continue;
        if (errno != EAGAIN) return -1;
        int64_t left = deadline - acemq__child_now_ms();
        if (left <= 0) return -2;
        struct pollfd pfd = {p->child.from, POLLIN, 0};
        (void)poll(&pfd, 1, left > 1000 ? 1000 : (int)left);
    }
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

int acemq__consume_pipe(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    acemq__pipe_child *p = ctx;
    /* A child that exited after its last answer (one that ends itself
     * every N messages, say) is started again: this message is no failure
     * of its. */
    if (p->running && child_exited(p)) acemq__consume_pipe_end(p);
    char *line = request_line(m);
    if (!line) return failed(c, "%s", "out of memory for the request");
    size_t len = strlen(line);
    int64_t deadline = acemq__child_now_ms() + p->cmd.timeout_ms;
    int rc = -1;
    for (int tries = 0; tries < 2; tries++) {
        if (!p->running) {
            if (acemq__child_start(&p->child, p->cmd.argv, NULL, 1) != 0) {
                int e = errno;
                free(line);
                return failed(c, "cannot start the --pipe command: %s", strerror(e));
            }
            p->running = 1;
            p->len = 0;
        }
        rc = acemq__child_write(&p->child, line, len, deadline);
        if (rc == 0) rc = read_line(p, deadline);
        /* Gone before it read any of the request (it exited just after its
         * last answer): it never had the message; once more, to a new one. */
        if (rc != -1 || !request_untouched(p, len)) break;
        acemq__consume_pipe_end(p);
    }
    free(line);
    if (rc != 0) {
        acemq__consume_pipe_end(p);
        return failed(c, "%s",
                      rc == -2 ? "the --pipe command did not answer within the lease; restarted"
                               : "the --pipe command exited; restarted");
    }
    json_error_t err;
    json_t *answer = json_loads(p->line, 0, &err);
    json_t *ok = json_object_get(answer, "ok");
    int success = json_is_true(ok);
    if (!success) {
        const char *why = json_string_value(json_object_get(answer, "error"));
        if (!json_is_boolean(ok)) {
            why = "the --pipe command's answer is not a JSON object with \"ok\"";
            /* Its answers and our requests may be out of step now. */
            acemq__consume_pipe_end(p);
        }
        failed(c, "%s", why ? why : "the --pipe command answered ok: false");
    }
    json_decref(answer);
    return success ? 0 : 1;
}
