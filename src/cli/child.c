/* child.c — what `acemq consume` needs to run a command for a message: the
 * message's environment, a child in its own process group (so a hung one
 * is killed whole), writing to it and waiting for it under a deadline.
 */
#define _GNU_SOURCE
#include "cli/child.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

extern char **environ;

int64_t acemq__child_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void acemq__child_env_free(char **env)
{
    if (!env) return;
    for (char **e = env; *e; e++)
        free(*e);
    free(env);
}

/* Appends "name=value" to env (n used, room for cap); 0 or -1. */
static int env_add(char ***env, size_t *n, size_t *cap, const char *name, const char *value,
                   size_t value_len)
{
    if (*n + 2 > *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        char **p = realloc(*env, c * sizeof *p);
        if (!p) return -1;
        *env = p;
        *cap = c;
    }
    size_t len = strlen(name);
    char *s = malloc(len + 1 + value_len + 1);
    if (!s) return -1;
    memcpy(s, name, len);
    s[len] = '=';
    /* A NUL inside a value ends it: the environment holds C strings. */
    memcpy(s + len + 1, value, value_len);
    s[len + 1 + value_len] = '\0';
    (*env)[(*n)++] = s;
    (*env)[*n] = NULL;
    return 0;
}

/* ACEMQ_HEADER_<NAME>: the name upper-cased, every other byte than a
 * letter or digit made '_'. */
static int add_headers(char ***env, size_t *n, size_t *cap, const char *headers_json)
{
    json_t *h = headers_json ? json_loads(headers_json, 0, NULL) : NULL;
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(h, name, v)
    {
        char var[300];
        int len = snprintf(var, sizeof var, "ACEMQ_HEADER_%s", name);
        if (len < 0 || (size_t)len >= sizeof var) continue;
        for (char *p = var + 13; *p; p++)
            *p = isalnum((unsigned char)*p) ? (char)toupper((unsigned char)*p) : '_';
        char *text = json_is_string(v) ? strdup(json_string_value(v))
                                       : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        rc = text ? env_add(env, n, cap, var, text, strlen(text)) : -1;
        free(text);
        if (rc != 0) break;
    }
    json_decref(h);
    return rc;
}

char **acemq__child_env(const acemq_consumer_msg *m)
{
    char **env = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (char **e = environ; *e && rc == 0; e++) {
        if (strncmp(*e, "ACEMQ_", 6) == 0) continue; /* ours are the message's */
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[256];
        size_t len = (size_t)(eq - *e);
        if (len >= sizeof name) continue;
        memcpy(name, *e, len);
        name[len] = '\0';
        rc = env_add(&env, &n, &cap, name, eq + 1, strlen(eq + 1));
    }
    const acemq_delivery *d = m->delivery;
    char failures[16];
    snprintf(failures, sizeof failures, "%d", m->failures);
    if (rc == 0 && d->message_id)
        rc = env_add(&env, &n, &cap, "ACEMQ_MESSAGE_ID", d->message_id, strlen(d->message_id));
    if (rc == 0) rc = env_add(&env, &n, &cap, "ACEMQ_KEY", m->key, strlen(m->key));
    if (rc == 0)
        rc = env_add(&env, &n, &cap, "ACEMQ_ROUTING_KEY", d->routing_key ? d->routing_key : "",
                     d->routing_key ? strlen(d->routing_key) : 0);
    if (rc == 0)
        rc = env_add(&env, &n, &cap, "ACEMQ_EXCHANGE", d->exchange ? d->exchange : "",
                     d->exchange ? strlen(d->exchange) : 0);
    if (rc == 0 && d->content_type)
        rc =
            env_add(&env, &n, &cap, "ACEMQ_CONTENT_TYPE", d->content_type, strlen(d->content_type));
    if (rc == 0) rc = env_add(&env, &n, &cap, "ACEMQ_FAILURES", failures, strlen(failures));
    if (rc == 0) rc = add_headers(&env, &n, &cap, d->headers_json);
    if (rc != 0 || !env) {
        acemq__child_env_free(env);
        return NULL;
    }
    return env;
}

int acemq__child_start(acemq__child *ch, char *const *argv, char *const *env, int want_output)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    memset(ch, 0, sizeof *ch);
    ch->pid = -1;
    ch->to = ch->from = -1;
    if (pipe2(in, O_CLOEXEC) != 0) return -1;
    if (want_output && pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    /* acemq ignores SIGPIPE for itself, and an ignored signal stays ignored
     * across exec: the command gets the default back, so that a `... | head`
     * in it ends as it would in a shell. Made here: the child may only make
     * async-signal-safe calls. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    pid_t pid = fork();
    if (pid < 0) {
        close(in[0]);
        close(in[1]);
        if (want_output) {
            close(out[0]);
            close(out[1]);
        }
        return -1;
    }
    if (pid == 0) {
        /* Only async-signal-safe calls from here to exec. */
        (void)setpgid(0, 0);
        (void)sigaction(SIGPIPE, &dfl, NULL);
        if (dup2(in[0], STDIN_FILENO) < 0) _exit(127);
        if (want_output && dup2(out[1], STDOUT_FILENO) < 0) _exit(127);
        execvpe(argv[0], argv, env ? env : environ);
        _exit(127);
    }
    (void)setpgid(pid, pid); /* both sides, so the group exists whoever runs first */
    close(in[0]);
    if (want_output) close(out[1]);
    ch->pid = pid;
    ch->to = in[1];
    ch->from = want_output ? out[0] : -1;
    /* Non-blocking, so a child that stops reading costs the deadline, not
     * a hang. */
    (void)fcntl(ch->to, F_SETFL, fcntl(ch->to, F_GETFL) | O_NONBLOCK);
    if (ch->from >= 0) (void)fcntl(ch->from, F_SETFL, fcntl(ch->from, F_GETFL) | O_NONBLOCK);
    return 0;
}

int acemq__child_write(acemq__child *ch, const void *bytes, size_t n, int64_t deadline_ms)
{
    const char *p = bytes;
    while (n > 0) {
        ssize_t w = write(ch->to, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno != EAGAIN) return -1; /* EPIPE: it stopped reading */
        int64_t left = deadline_ms - acemq__child_now_ms();
        if (left <= 0) return -2;
        struct pollfd pfd = {ch->to, POLLOUT, 0};
        (void)poll(&pfd, 1, left > 1000 ? 1000 : (int)left);
    }
    return 0;
}

void acemq__child_close_input(acemq__child *ch)
{
    if (ch->to >= 0) close(ch->to);
    ch->to = -1;
}

int acemq__child_wait(acemq__child *ch, int64_t deadline_ms, int *status)
{
    long nap_us = 50;
    for (;;) {
        pid_t r = waitpid(ch->pid, status, WNOHANG);
        if (r == ch->pid) {
            ch->pid = -1;
            return 0;
        }
        if (r < 0 && errno != EINTR) return -1;
        if (acemq__child_now_ms() >= deadline_ms) return -2;
        struct timespec t = {0, nap_us * 1000};
        (void)nanosleep(&t, NULL);
        nap_us = nap_us < 10000 ? nap_us * 2 : 10000;
    }
}

void acemq__child_kill(acemq__child *ch)
{
    if (ch->pid > 0) {
        (void)kill(-ch->pid, SIGKILL);
        (void)kill(ch->pid, SIGKILL);
        int status;
        while (waitpid(ch->pid, &status, 0) < 0 && errno == EINTR) {
        }
        ch->pid = -1;
    }
    acemq__child_close_input(ch);
    if (ch->from >= 0) close(ch->from);
    ch->from = -1;
}
