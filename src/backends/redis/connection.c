/* connection.c — the Redis store's connection: the URL
 * (redis://[[user]:password@]host[:port][/db]?prefix=&connect_timeout_ms=&command_timeout_ms=),
 * connecting with AUTH and SELECT under timeouts, one command or a pipeline
 * at a time, the reconnect after a broken connection and the reload of the
 * scripts after NOSCRIPT.
 *
 * Commands go out through send(2) with MSG_NOSIGNAL, not through hiredis,
 * which writes with write(2): on a connection the server closed, write
 * raises SIGPIPE, whose default kills the process, and a library must not
 * change the process's signal handling. hiredis formats the commands and
 * reads the replies; its output buffer stays empty, so it never writes.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "backends/redis/idem_redis.h"

/* ---- the URL ------------------------------------------------------------- */

static int hex(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A malloc'd, percent-decoded copy of s[0..n); NULL on a bad escape (an
 * escaped NUL included) or no memory, *bad says which. */
static char *decoded(const char *s, size_t n, int *bad)
{
    size_t cap = n + 1;
    *bad = 0;
    char *out = cap > n ? malloc(cap) : NULL, *w = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            *w++ = s[i];
            continue;
        }
        int hi = i + 2 < n ? hex(s[i + 1]) : -1;
        int lo = hi >= 0 ? hex(s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            free(out);
            *bad = 1;
            return NULL;
        }
        *w++ = (char)(hi * 16 + lo);
        i += 2;
    }
    *w = '\0';
    return out;
}

static int check_prefix(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > REDIS_PREFIX_MAX) return -1;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == '.' || c == ':';
        if (!ok) return -1;
    }
    return 0;
}

static int url_int(acemq_idem *h, const acemq__url *url, const char *key, int *out)
{
    int64_t v = *out;
    if (acemq__url_param_int(url, key, 1, INT_MAX, &v) != 0)
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "redis: %s='%s'; expected a whole number of milliseconds, 1..%d",
                                key, acemq__url_param(url, key), INT_MAX);
    *out = (int)v;
    return 0;
}

/* user:password@ at the start of auth[0..n). */
static int parse_auth(acemq_idem *h, const char *auth, size_t n, redis_target *t)
{
    const char *colon = memchr(auth, ':', n);
    int bad = 0;
    if (!colon)
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "redis: '%.*s@' has no password; write redis://:password@host or "
                                "redis://user:password@host",
                                (int)n, auth);
    size_t ulen = (size_t)(colon - auth);
    if (ulen > 0) {
        t->user = decoded(auth, ulen, &bad);
        if (!t->user) goto fail;
    }
    t->password = decoded(colon + 1, n - ulen - 1, &bad);
    if (!t->password) goto fail;
    return 0;
fail:
    if (bad)
        return acemq__idem_fail(h, ACEMQ_EURL, "redis: a bad %%-escape in the user or password");
    return acemq__idem_fail(h, ACEMQ_ENOMEM, "redis: out of memory");
}

/* host[:port] or [v6]:port in s[0..n). */
static int parse_host(acemq_idem *h, const char *s, size_t n, redis_target *t)
{
    const char *port = NULL;
    size_t hlen = n;
    const char *host = s;
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close) return acemq__idem_fail(h, ACEMQ_EURL, "redis: '%.*s': no ']'", (int)n, s);
        host = s + 1;
        hlen = (size_t)(close - host);
        if (close + 1 < s + n) {
            if (close[1] != ':')
                return acemq__idem_fail(h, ACEMQ_EURL, "redis: '%.*s': ':' expected after ']'",
                                        (int)n, s);
            port = close + 2;
        }
    } else {
        const char *colon = memchr(s, ':', n);
        if (colon) {
            hlen = (size_t)(colon - s);
            port = colon + 1;
        }
    }
    if (hlen >= sizeof t->host)
        return acemq__idem_fail(h, ACEMQ_EURL, "redis: the host name is over %zu bytes",
                                sizeof t->host - 1);
    if (hlen == 0)
        snprintf(t->host, sizeof t->host, "127.0.0.1");
    else
        snprintf(t->host, sizeof t->host, "%.*s", (int)hlen, host);
    t->port = REDIS_DEFAULT_PORT;
    if (port) {
        size_t plen = (size_t)(s + n - port);
        long v = 0;
        int ok = plen > 0 && plen <= 5;
        for (size_t i = 0; ok && i < plen; i++) {
            ok = port[i] >= '0' && port[i] <= '9';
            v = v * 10 + (port[i] - '0');
        }
        if (!ok || v < 1 || v > 65535)
            return acemq__idem_fail(h, ACEMQ_EURL, "redis: port '%.*s' is not 1..65535", (int)plen,
                                    port);
        t->port = (int)v;
    }
    return 0;
}

int acemq__redis_parse_url(acemq_idem *h, const acemq__url *url, redis_target *t, char *prefix,
                           size_t prefix_cap)
{
    static const char *const known[] = {"prefix", "connect_timeout_ms", "command_timeout_ms", NULL};
    const char *bad = NULL;
    memset(t, 0, sizeof *t);
    if (acemq__url_check_params(url, known, &bad) != 0)
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "redis: unknown URL parameter '%s' (known: prefix, "
                                "connect_timeout_ms, command_timeout_ms)",
                                bad ? bad : "");
    const char *p = url->rest;
    if (p[0] != '/' || p[1] != '/')
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "redis: '%s' is not of the form "
                                "redis://[[user]:password@]host[:port][/db]",
                                p);
    p += 2;
    const char *slash = strchr(p, '/');
    size_t authority = slash ? (size_t)(slash - p) : strlen(p);
    const char *at = NULL;
    for (size_t i = 0; i < authority; i++)
        if (p[i] == '@') at = p + i; /* the last '@': a password may hold one */
    int rc = 0;
    if (at) rc = parse_auth(h, p, (size_t)(at - p), t);
    const char *host = at ? at + 1 : p;
    if (rc == 0) rc = parse_host(h, host, (size_t)(p + authority - host), t);
    if (rc == 0 && slash && slash[1] != '\0') {
        char *end = NULL;
        errno = 0;
        long db = strtol(slash + 1, &end, 10);
        if (errno != 0 || *end != '\0' || db < 0 || db > INT_MAX || slash[1] < '0' ||
            slash[1] > '9')
            rc = acemq__idem_fail(h, ACEMQ_EURL, "redis: database '%s' is not a number 0..%d",
                                  slash + 1, INT_MAX);
        else
            t->db = (int)db;
    }
    t->connect_timeout_ms = REDIS_DEFAULT_CONNECT_TIMEOUT_MS;
    t->command_timeout_ms = REDIS_DEFAULT_COMMAND_TIMEOUT_MS;
    if (rc == 0) rc = url_int(h, url, "connect_timeout_ms", &t->connect_timeout_ms);
    if (rc == 0) rc = url_int(h, url, "command_timeout_ms", &t->command_timeout_ms);
    const char *pre = acemq__url_param(url, "prefix");
    if (!pre) pre = REDIS_DEFAULT_PREFIX;
    if (rc == 0 && check_prefix(pre) != 0)
        rc = acemq__idem_fail(h, ACEMQ_EURL,
                              "redis: prefix '%s': 1..%d characters of A-Z a-z 0-9 _ - . : "
                              "(no braces: it is the keys' hash tag)",
                              pre, REDIS_PREFIX_MAX);
    if (rc == 0) snprintf(prefix, prefix_cap, "%s", pre);
    if (rc != 0) acemq__redis_target_free(t);
    return rc;
}

void acemq__redis_target_free(redis_target *t)
{
    free(t->user);
    if (t->password) memset(t->password, 0, strlen(t->password));
    free(t->password);
    t->user = t->password = NULL;
}

/* ---- sending and receiving ------------------------------------------------ */

/* An I/O error on c, worded as hiredis words its own (see io_fail). */
static void set_io_error(redisContext *c, int err)
{
    c->err = REDIS_ERR_IO;
    snprintf(c->errstr, sizeof c->errstr, "%s", strerror(err));
}

/* Sends all of buf; 0, or -1 with the error on c. A send past the
 * socket's SO_SNDTIMEO (command_timeout_ms) fails with EAGAIN. */
static int send_all(redisContext *c, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            set_io_error(c, errno);
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A pipeline's formatted commands, sent in one go. */
typedef struct outgoing {
    char *p;
    size_t len, cap;
} outgoing;

/* Adds one command; 0, or ACEMQ_ENOMEM. */
static int outgoing_add(outgoing *o, int argc, const char **argv, const size_t *lens)
{
    char *cmd = NULL;
    int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (n < 0) return ACEMQ_ENOMEM;
    if (!o->p || o->len + (size_t)n > o->cap) {
        size_t cap = o->cap ? o->cap : 512;
        while (cap < o->len + (size_t)n)
            cap *= 2;
        char *p = realloc(o->p, cap);
        if (!p) {
            redisFreeCommand(cmd);
            return ACEMQ_ENOMEM;
        }
        o->p = p;
        o->cap = cap;
    }
    memcpy(o->p + o->len, cmd, (size_t)n);
    o->len += (size_t)n;
    redisFreeCommand(cmd);
    return 0;
}

/* One command and its reply: 0 with *reply set; -1 with the error on c
 * (*reply NULL); ACEMQ_ENOMEM when the command could not be formatted. */
static int round_trip(redisContext *c, int argc, const char **argv, const size_t *lens,
                      redisReply **reply)
{
    *reply = NULL;
    char *cmd = NULL;
    int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (n < 0) return ACEMQ_ENOMEM;
    int rc = send_all(c, cmd, (size_t)n);
    redisFreeCommand(cmd);
    void *got = NULL;
    if (rc != 0 || redisGetReply(c, &got) != REDIS_OK || !got) return -1;
    *reply = got;
    return 0;
}

static int64_t mono_ms(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_MONOTONIC, &t) != 0) return 0;
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- connecting ---------------------------------------------------------- */

void acemq__redis_drop(redis_idem *r)
{
    if (r->c) redisFree(r->c);
    r->c = NULL;
}

int acemq__redis_io_fail(acemq_idem *h, const char *doing)
{
    redis_idem *r = h->self;
    const char *why = r->c && r->c->errstr[0] ? r->c->errstr : "connection lost";
    /* hiredis words a read past SO_RCVTIMEO as strerror(EAGAIN). */
    int timed_out = r->c && r->c->err == REDIS_ERR_IO &&
                    (strcmp(why, strerror(EAGAIN)) == 0 || strcmp(why, strerror(ETIMEDOUT)) == 0);
    int rc;
    if (timed_out)
        rc = acemq__idem_fail(h, ACEMQ_EIO,
                              "redis: %s on %s:%d: no answer within command_timeout_ms=%d; whether "
                              "it ran is unknown",
                              doing, r->target.host, r->target.port, r->target.command_timeout_ms);
    else
        rc = acemq__idem_fail(h, ACEMQ_EIO, "redis: %s on %s:%d: %s", doing, r->target.host,
                              r->target.port, why);
    acemq__redis_drop(r);
    return rc;
}

static struct timeval ms_tv(int ms)
{
    struct timeval tv = {ms / 1000, (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* An error reply to a command sent while connecting. */
static int setup_refused(acemq_idem *h, const char *what, const redisReply *reply)
{
    redis_idem *r = h->self;
    int code = ACEMQ_EBACKEND;
    if (strncmp(reply->str, "WRONGPASS", 9) == 0 || strncmp(reply->str, "NOAUTH", 6) == 0 ||
        strstr(reply->str, "invalid password") || strstr(reply->str, "invalid username") ||
        strstr(reply->str, "without any password configured"))
        code = ACEMQ_EAUTH;
    else if (strstr(reply->str, "DB index"))
        code = ACEMQ_EURL;
    code = acemq__idem_fail(h, code, "redis: %s on %s:%d refused: %s", what, r->target.host,
                            r->target.port, reply->str);
    acemq__redis_drop(r);
    return code;
}

/* One command during setup: 0 when it answered anything but an error. */
static int setup_command(acemq_idem *h, const char *what, int argc, const char **argv)
{
    redis_idem *r = h->self;
    redisReply *reply;
    int rc = round_trip(r->c, argc, argv, NULL, &reply);
    if (rc == ACEMQ_ENOMEM) return acemq__idem_fail(h, rc, "redis: out of memory for %s", what);
    if (rc != 0) return acemq__redis_io_fail(h, what);
    rc = reply->type == REDIS_REPLY_ERROR ? setup_refused(h, what, reply) : 0;
    freeReplyObject(reply);
    return rc;
}

static int connect_now(acemq_idem *h)
{
    redis_idem *r = h->self;
    redis_target *t = &r->target;
    r->c = redisConnectWithTimeout(t->host, t->port, ms_tv(t->connect_timeout_ms));
    if (!r->c) return acemq__idem_fail(h, ACEMQ_ENOMEM, "redis: out of memory for a connection");
    if (r->c->err) {
        int rc = acemq__idem_fail(h, ACEMQ_EIO,
                                  "redis: cannot connect to %s:%d: %s (connect_timeout_ms=%d)",
                                  t->host, t->port, r->c->errstr, t->connect_timeout_ms);
        acemq__redis_drop(r);
        return rc;
    }
    /* Not for the commands `acemq consume` starts: hiredis leaves its
     * socket open across exec. */
    (void)fcntl(r->c->fd, F_SETFD, fcntl(r->c->fd, F_GETFD) | FD_CLOEXEC);
    if (redisSetTimeout(r->c, ms_tv(t->command_timeout_ms)) != REDIS_OK)
        return acemq__redis_io_fail(h, "setting command_timeout_ms");
    int rc = 0;
    if (t->password) {
        const char *argv[3] = {"AUTH", t->user ? t->user : t->password, t->password};
        rc = setup_command(h, "AUTH", t->user ? 3 : 2, argv);
    }
    if (rc == 0 && t->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", t->db);
        const char *argv[2] = {"SELECT", db};
        rc = setup_command(h, "SELECT", 2, argv);
    }
    return rc;
}

/* 1 when the server closed the idle connection (a restart, a timeout on
 * its side): nothing is owed on it, so it can be replaced before sending,
 * and the command runs instead of failing with "whether it ran is
 * unknown". Asked (one poll(2)) only of a connection idle for IDLE_CHECK_MS
 * or more: a server that answered less than that ago has not restarted
 * since, and its idle timeout is whole seconds; a busy connection then
 * pays no system call for it. */
#define IDLE_CHECK_MS 100

static int closed_while_idle(redis_idem *r)
{
    if (mono_ms() - r->last_reply_ms < IDLE_CHECK_MS) return 0;
    struct pollfd p = {.fd = r->c->fd, .events = POLLIN};
    return poll(&p, 1, 0) != 0;
}

int acemq__redis_ensure(acemq_idem *h)
{
    redis_idem *r = h->self;
    if (r->c && !r->c->err && !closed_while_idle(r)) return 0;
    acemq__redis_drop(r);
    int rc = connect_now(h);
    if (rc == 0) r->last_reply_ms = mono_ms();
    return rc;
}

/* ---- commands ------------------------------------------------------------ */

int acemq__redis_is_noscript(const redisReply *reply)
{
    return reply && reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

int acemq__redis_command(acemq_idem *h, int argc, const char **argv, const size_t *lens,
                         redisReply **reply)
{
    redis_idem *r = h->self;
    *reply = NULL;
    int rc = acemq__redis_ensure(h);
    if (rc != 0) return rc;
    rc = round_trip(r->c, argc, argv, lens, reply);
    if (rc == ACEMQ_ENOMEM) {
        (void)acemq__idem_fail(h, rc, "redis: out of memory for %s", argv[0]);
        return ACEMQ_ENOMEM;
    }
    if (rc != 0 || !*reply) {
        (void)acemq__redis_io_fail(h, argv[0]);
        return ACEMQ_EIO;
    }
    r->last_reply_ms = mono_ms();
    return 0;
}

int acemq__redis_load_scripts(acemq_idem *h)
{
    redis_idem *r = h->self;
    for (int i = 0; i < RS_COUNT; i++) {
        const char *argv[3] = {"SCRIPT", "LOAD", acemq__redis_scripts[i]};
        redisReply *reply = NULL;
        int rc = acemq__redis_command(h, 3, argv, NULL, &reply);
        if (rc != 0) return rc;
        if (reply->type == REDIS_REPLY_ERROR) {
            rc = setup_refused(h, "SCRIPT LOAD", reply);
            freeReplyObject(reply);
            return rc;
        }
        if (reply->type != REDIS_REPLY_STRING || reply->len != 40) {
            rc = acemq__idem_fail(h, ACEMQ_EBACKEND, "redis: SCRIPT LOAD answered no SHA1");
            freeReplyObject(reply);
            return rc;
        }
        memcpy(r->sha[i], reply->str, 40);
        r->sha[i][40] = '\0';
        freeReplyObject(reply);
    }
    return 0;
}

int acemq__redis_evalsha(acemq_idem *h, int argc, const char **argv, const size_t *lens,
                         redisReply **reply)
{
    for (int attempt = 0;; attempt++) {
        int rc = acemq__redis_command(h, argc, argv, lens, reply);
        if (rc != 0) return rc;
        if (!acemq__redis_is_noscript(*reply) || attempt == 1) break;
        /* The server lost its script cache (a restart, SCRIPT FLUSH): the
         * script did not run, so loading and running it again is safe. */
        freeReplyObject(*reply);
        *reply = NULL;
        rc = acemq__redis_load_scripts(h);
        if (rc != 0) return rc;
    }
    if (!*reply) return acemq__idem_fail(h, ACEMQ_EBACKEND, "redis: no reply to EVALSHA");
    if ((*reply)->type == REDIS_REPLY_ERROR) {
        int rc = acemq__idem_fail(h, ACEMQ_EBACKEND, "redis: %s", (*reply)->str);
        freeReplyObject(*reply);
        *reply = NULL;
        return rc;
    }
    return 0;
}

int acemq__redis_script(acemq_idem *h, int which, size_t klen, int nargs, const char **args,
                        const size_t *arglens, redisReply **reply)
{
    redis_idem *r = h->self;
    const char *argv[REDIS_ARGV_MAX];
    size_t lens[REDIS_ARGV_MAX];
    int argc = acemq__redis_evalsha_argv(r, which, r->key, klen, nargs, args, arglens, argv, lens);
    return acemq__redis_evalsha(h, argc, argv, lens, reply);
}

int acemq__redis_evalsha_argv(redis_idem *r, int which, const char *key, size_t klen, int nargs,
                              const char **args, const size_t *arglens, const char **argv,
                              size_t *lens)
{
    argv[0] = "EVALSHA";
    lens[0] = 7;
    argv[1] = r->sha[which];
    lens[1] = 40;
    argv[2] = "2";
    lens[2] = 1;
    argv[3] = key;
    lens[3] = klen;
    argv[4] = r->token_key;
    lens[4] = strlen(r->token_key);
    for (int i = 0; i < nargs; i++) {
        argv[5 + i] = args[i];
        lens[5 + i] = arglens[i];
    }
    return 5 + nargs;
}

/* Appends the commands of elements i with todo[i] set, then reads their
 * replies in order. */
static int send_and_read(acemq_idem *h, size_t n, const unsigned char *todo,
                         acemq__redis_build_fn build, void *ctx, redisReply **replies)
{
    redis_idem *r = h->self;
    int rc = acemq__redis_ensure(h);
    if (rc != 0) return rc;
    const char *argv[REDIS_ARGV_MAX];
    size_t lens[REDIS_ARGV_MAX];
    outgoing o = {0};
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (todo[i]) rc = outgoing_add(&o, build(h, ctx, i, argv, lens), argv, lens);
    }
    if (rc != 0) {
        free(o.p);
        return acemq__idem_fail(h, rc, "redis: out of memory for a pipeline");
    }
    rc = send_all(r->c, o.p, o.len);
    free(o.p);
    if (rc != 0) return acemq__redis_io_fail(h, "a pipelined script");
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!todo[i]) continue;
        void *reply = NULL;
        if (redisGetReply(r->c, &reply) != REDIS_OK || !reply)
            rc = acemq__redis_io_fail(h, "a pipelined script");
        else
            replies[i] = reply;
    }
    if (rc == 0) r->last_reply_ms = mono_ms();
    return rc;
}

int acemq__redis_script_many(acemq_idem *h, size_t n, acemq__redis_build_fn build, void *ctx,
                             redisReply **replies)
{
    unsigned char todo[REDIS_PIPELINE_MAX] = {0};
    if (n > REDIS_PIPELINE_MAX)
        return acemq__idem_fail(h, ACEMQ_EINVAL, "redis: internal: %zu commands in one pipeline",
                                n);
    for (size_t i = 0; i < n; i++) {
        replies[i] = NULL;
        todo[i] = 1;
    }
    int rc = send_and_read(h, n, todo, build, ctx, replies);
    if (rc != 0) return rc;
    int again = 0;
    for (size_t i = 0; i < n; i++) {
        todo[i] = (unsigned char)acemq__redis_is_noscript(replies[i]);
        if (todo[i]) {
            freeReplyObject(replies[i]);
            replies[i] = NULL;
            again = 1;
        }
    }
    if (!again) return 0;
    /* The server lost its script cache: those scripts did not run. They
     * run again in their order, after the ones that did. */
    rc = acemq__redis_load_scripts(h);
    return rc != 0 ? rc : send_and_read(h, n, todo, build, ctx, replies);
}

size_t acemq__redis_key(redis_idem *r, const acemq__bytes *id)
{
    memcpy(r->key + r->key_head, id->data, id->len);
    return r->key_head + id->len;
}
