/* test_redis_idem.c — the Redis idempotency store where it differs from the
 * others, against the real server of scripts/services.sh and private
 * redis-server processes this test starts in a temporary directory:
 *
 *   test_redis_idem PATH-TO-services.sh
 *
 * Four processes on one store, a lease and a whole record running out on
 * the server's clock, a stale confirm that leaves the record as it was,
 * the script cache flushed and the shared server
 * restarted under an open store, connections the server closes, bad URLs, a
 * wrong password, a server that is down or stops answering, a server
 * older than 7.0, and the durability warning. Needs ACEMQ_REDIS_URL; exits 77 (skipped) without it.
 * Waits poll what the server says; nothing asserts on time. */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "acemq/acemq.h"
#include "conformance/backends.h"

static const char *services;

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Polls cond until it holds; fails after a bound far above any real wait,
 * so a broken store fails the test instead of hanging it. */
#define WAIT_UNTIL(cond)                                                                           \
    do {                                                                                           \
        int waited_ = 0;                                                                           \
        while (!(cond)) {                                                                          \
            if (++waited_ > 6000) fail_msg("still not true: %s", #cond);                           \
            pause_ms(10);                                                                          \
        }                                                                                          \
    } while (0)

static acemq_idem *open_url(const char *url, int64_t lease, int64_t retention)
{
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    if (lease) o.lease_ms = lease;
    if (retention) o.retention_ms = retention;
    acemq_idem *h = NULL;
    int rc = acemq_idem_open(&h, url, &o);
    if (rc != 0) fail_msg("open %s: %s (%s)", url, acemq_strerror(rc), acemq_idem_errmsg(NULL));
    return h;
}

static acemq_idem *open_fresh(int64_t lease, int64_t retention, char *url, size_t cap)
{
    assert_int_equal(test_backend_fresh_url("redis", url, cap), 0);
    return open_url(url, lease, retention);
}

/* ---- private servers ------------------------------------------------------ */

typedef struct server {
    pid_t pid;
    int port;
    char dir[256];
} server;

/* A TCP socket bound to a port of the kernel's choice on loopback; *port
 * gets the port. */
static int bind_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static int free_port(void)
{
    int port = 0;
    close(bind_loopback(&port));
    return port;
}

/* Starts redis-server on a free port with extra arguments (NULL-ended) and
 * waits until it answers PING (with AUTH when password is set). */
static void server_start(server *s, const char *password, const char *const *extra)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof s->dir, "%s/acemq-redis-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(s->dir));
    s->port = free_port();
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    const char *argv[32] = {"redis-server", "--port",    port,       "--bind",
                            "127.0.0.1",    "--save",    "",         "--dir",
                            s->dir,         "--logfile", "redis.log"};
    int argc = 11;
    if (password) {
        argv[argc++] = "--requirepass";
        argv[argc++] = password;
    }
    for (int i = 0; extra && extra[i]; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
    int up = 0;
    for (int i = 0; i < 1000 && !up; i++) {
        redisContext *c = redisConnect("127.0.0.1", s->port);
        if (c && !c->err) {
            redisReply *r = password ? redisCommand(c, "AUTH %s", password) : NULL;
            if (r) freeReplyObject(r);
            r = redisCommand(c, "PING");
            up = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
        }
        if (c) redisFree(c);
        if (!up) pause_ms(10);
    }
    if (!up) fail_msg("redis-server on port %d did not start (see %s/redis.log)", s->port, s->dir);
}

static void server_stop(server *s)
{
    (void)kill(s->pid, SIGCONT);
    (void)kill(s->pid, SIGTERM);
    int status;
    (void)waitpid(s->pid, &status, 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", s->dir);
}

static void server_url(const server *s, const char *auth, const char *query, char *url, size_t cap)
{
    snprintf(url, cap, "redis://%s127.0.0.1:%d%s", auth ? auth : "", s->port, query ? query : "");
}

/* ---- the log ------------------------------------------------------------- */

static char captured[4096];

static void capture(void *ctx, int level, const char *text)
{
    (void)ctx;
    assert_int_equal(level, ACEMQ_LOG_WARNING);
    size_t n = strlen(captured);
    snprintf(captured + n, sizeof captured - n, "%s\n", text);
}

/* ---- tests --------------------------------------------------------------- */

enum { PROCS = 4, IDS = 2000 };

/* Four processes race over the same ids: each id is CLAIMED exactly once. */
static void four_processes(void **state)
{
    (void)state;
    char url[512];
    assert_int_equal(test_backend_fresh_url("redis", url, sizeof url), 0);
    atomic_int *claims = mmap(NULL, sizeof(atomic_int) * IDS, PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(claims != MAP_FAILED);
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] != 0) continue;
        acemq_idem *h = NULL;
        if (acemq_idem_open(&h, url, NULL) != 0) _exit(2);
        int bad = 0;
        for (int n = 0; n < IDS; n++) {
            int i = (n * (2 * p + 1) + p * 500) % IDS; /* each its own order */
            char id[32];
            int len = snprintf(id, sizeof id, "proc-%05d", i);
            acemq_claim c;
            int rc = acemq_idem_try_claim(h, id, (size_t)len, NULL, &c);
            if (rc == ACEMQ_CLAIMED) {
                atomic_fetch_add(&claims[i], 1);
                if (n % 2 == 0 && acemq_idem_confirm(h, id, (size_t)len, c.token) != 0) bad = 1;
            } else if (rc != ACEMQ_IN_PROGRESS && rc != ACEMQ_ALREADY_CONFIRMED) {
                bad = 1;
            }
        }
        acemq_idem_close(h);
        _exit(bad);
    }
    for (int p = 0; p < PROCS; p++) {
        int status = 0;
        assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    for (int i = 0; i < IDS; i++)
        if (atomic_load(&claims[i]) != 1)
            fail_msg("id %d claimed %d times", i, atomic_load(&claims[i]));
    munmap(claims, sizeof(atomic_int) * IDS);
}

/* With the system clock the server's clock runs the lease: the holder
 * stalls, another handle polls until the server lets it take over, and the
 * stalled holder's confirm changes nothing. */
static void lease_runs_out_on_server_clock(void **state)
{
    (void)state;
    char url[512];
    acemq_idem *holder = open_fresh(150, 0, url, sizeof url);
    acemq_idem *other = open_url(url, 150, 0);
    acemq_claim c, o;
    assert_int_equal(acemq_idem_try_claim(holder, "job", 3, NULL, &c), ACEMQ_CLAIMED);
    int rc;
    WAIT_UNTIL((rc = acemq_idem_try_claim(other, "job", 3, NULL, &o)) != ACEMQ_IN_PROGRESS);
    assert_int_equal(rc, ACEMQ_CLAIMED);
    assert_int_equal(o.takeover, 1);
    assert_true(o.token > c.token);
    assert_int_equal(acemq_idem_confirm(holder, "job", 3, c.token), ACEMQ_ESTALE);
    assert_non_null(strstr(acemq_idem_errmsg(holder), "not the current claim"));
    assert_int_equal(acemq_idem_confirm(other, "job", 3, o.token), 0);
    assert_int_equal(acemq_idem_is_confirmed(holder, "job", 3), 1);
    acemq_idem_close(holder);
    acemq_idem_close(other);
}

/* Once the record itself is gone from the server (lease + retention ran
 * out), the next claim's token is still above the stalled holder's, and
 * that holder stays fenced. */
static void token_grows_after_record_expired(void **state)
{
    (void)state;
    char url[512];
    acemq_idem *h = open_fresh(50, 50, url, sizeof url);
    acemq_claim c, again;
    assert_int_equal(acemq_idem_try_claim(h, "gone", 4, NULL, &c), ACEMQ_CLAIMED);
    acemq_idem_record r;
    WAIT_UNTIL(acemq_idem_inspect(h, "gone", 4, &r) == ACEMQ_ENOENT);
    assert_int_equal(acemq_idem_try_claim(h, "gone", 4, NULL, &again), ACEMQ_CLAIMED);
    assert_int_equal(again.takeover, 0);
    assert_true(again.token > c.token);
    assert_int_equal(acemq_idem_confirm(h, "gone", 4, c.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(h, "gone", 4, again.token), 0);
    /* Redis expired the confirmation by itself too; purge finds nothing. */
    WAIT_UNTIL(acemq_idem_inspect(h, "gone", 4, &r) == ACEMQ_ENOENT);
    uint64_t purged = 99;
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 0);
    acemq_idem_close(h);
}

static redisContext *raw_connect(void)
{
    const char *url = getenv("ACEMQ_REDIS_URL"); /* main checked it */
    const char *port = url ? strrchr(url, ':') : NULL;
    redisContext *c = redisConnect("127.0.0.1", port ? atoi(port + 1) : 6379);
    assert_true(c && !c->err);
    return c;
}

/* The key of id's record in the store that url opens: {prefix}:id:<id>. */
static void record_key(const char *url, const char *id, char *key, size_t cap)
{
    char prefix[128];
    assert_int_equal(test_backend_url_param(url, "prefix", prefix, sizeof prefix), 0);
    int n = snprintf(key, cap, "{%s}:id:%s", prefix, id);
    assert_true(n > 0 && (size_t)n < cap);
}

/* What the server holds for key: its value (a copy, "" when absent) and its
 * expiry as an absolute time in ms (PEXPIRETIME: -2 absent, -1 none). */
static long long record_now(redisContext *raw, const char *key, char *value, size_t cap)
{
    redisReply *r = redisCommand(raw, "GET %s", key);
    assert_non_null(r);
    value[0] = '\0';
    if (r->type == REDIS_REPLY_STRING) {
        assert_true(r->len < cap);
        memcpy(value, r->str, r->len);
        value[r->len] = '\0';
    }
    freeReplyObject(r);
    r = redisCommand(raw, "PEXPIRETIME %s", key);
    assert_true(r && r->type == REDIS_REPLY_INTEGER);
    long long at = r->integer;
    freeReplyObject(r);
    return at;
}

/* On the server's clock, where a confirmation's retention is its key's
 * expiry (scripts.c): a stale confirm leaves the record byte for byte as it
 * was, a claim and a confirmation alike, expiry included, and a confirm
 * keeps the claim's fingerprint and stores its result. */
static void stale_confirm_changes_nothing(void **state)
{
    (void)state;
    char url[512], key[600], before[512], after[512];
    acemq_idem *h = open_fresh(0, 600000, url, sizeof url);
    redisContext *raw = raw_connect();
    record_key(url, "order-7", key, sizeof key);
    acemq_claim_opts brief = {.lease_ms = 1};
    acemq_claim stalled, current, dup;
    assert_int_equal(acemq_idem_try_claim(h, "order-7", 7, &brief, &stalled), ACEMQ_CLAIMED);
    acemq_claim_opts held = {.lease_ms = 600000, .fingerprint = "fp-1", .fingerprint_len = 4};
    int rc;
    WAIT_UNTIL((rc = acemq_idem_try_claim(h, "order-7", 7, &held, &current)) != ACEMQ_IN_PROGRESS);
    assert_int_equal(rc, ACEMQ_CLAIMED);

    long long at = record_now(raw, key, before, sizeof before);
    assert_int_equal(acemq_idem_confirm(h, "order-7", 7, stalled.token), ACEMQ_ESTALE);
    long long at_after = record_now(raw, key, after, sizeof after);
    assert_string_equal(after, before);
    assert_int_equal(at_after, at);
    assert_int_equal(acemq_idem_is_confirmed(h, "order-7", 7), 0);

    assert_int_equal(acemq_idem_confirm_result(h, "order-7", 7, current.token, "done", 4), 0);
    at = record_now(raw, key, before, sizeof before);
    assert_int_equal(acemq_idem_confirm(h, "order-7", 7, stalled.token), ACEMQ_ESTALE);
    at_after = record_now(raw, key, after, sizeof after);
    assert_string_equal(after, before);
    assert_int_equal(at_after, at);
    assert_int_equal(acemq_idem_is_confirmed(h, "order-7", 7), 1);

    char result[8] = {0};
    acemq_claim_opts same = {.fingerprint = "fp-1",
                             .fingerprint_len = 4,
                             .result_buf = result,
                             .result_cap = sizeof result};
    assert_int_equal(acemq_idem_try_claim(h, "order-7", 7, &same, &dup), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(dup.has_result, 1);
    assert_int_equal(dup.result_len, 4);
    assert_memory_equal(result, "done", 4);
    acemq_claim_opts other = {.fingerprint = "fp-2", .fingerprint_len = 4};
    assert_int_equal(acemq_idem_try_claim(h, "order-7", 7, &other, &dup), ACEMQ_EMISMATCH);
    redisFree(raw);
    acemq_idem_close(h);
}

/* SCRIPT FLUSH under an open store: the next calls load the scripts
 * again, single and batched. */
static void scripts_reloaded_after_flush(void **state)
{
    (void)state;
    char url[512];
    acemq_idem *h = open_fresh(0, 0, url, sizeof url);
    redisContext *raw = raw_connect();
    acemq_claim c;
    redisReply *r = redisCommand(raw, "SCRIPT FLUSH");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(acemq_idem_try_claim(h, "a", 1, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(h, "a", 1, c.token), 0);
    r = redisCommand(raw, "SCRIPT FLUSH");
    assert_non_null(r);
    freeReplyObject(r);
    acemq_idem_key keys[3] = {{"a", 1}, {"b", 1}, {"b", 1}};
    acemq_claim out[3];
    int st[3];
    assert_int_equal(acemq_idem_try_claim_many(h, 3, keys, NULL, out, st), 1);
    assert_int_equal(st[0], ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(st[1], ACEMQ_CLAIMED);
    assert_int_equal(st[2], ACEMQ_IN_PROGRESS);
    redisFree(raw);
    acemq_idem_close(h);
}

static void run_services(const char *what)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' %s redis >/dev/null", services, what);
    if (system(cmd) != 0) fail_msg("%s failed", cmd);
}

/* The shared server restarted (its data and script cache gone) under an
 * open store: the next call connects again, loads the scripts and works. */
static void server_restart(void **state)
{
    (void)state;
    char url[512];
    acemq_idem *h = open_fresh(0, 0, url, sizeof url);
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(h, "before", 6, NULL, &c), ACEMQ_CLAIMED);
    run_services("stop");
    run_services("start");
    assert_int_equal(acemq_idem_try_claim(h, "after", 5, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(h, "after", 5, c.token), 0);
    assert_int_equal(acemq_idem_is_confirmed(h, "after", 5), 1);
    acemq_idem_close(h);
}

/* Closes every connection to port but admin's, as a server does to its
 * clients at CLIENT KILL, and waits until it has. */
static void kill_clients(redisContext *admin)
{
    redisReply *r = redisCommand(admin, "CLIENT KILL TYPE normal SKIPME yes");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    freeReplyObject(r);
}

/* The server closes the store's connection (CLIENT KILL) just after a call:
 * the next call, on a socket the server closed, either fails with ACEMQ_EIO
 * ("whether it ran is unknown") or runs, and the call after it runs on a new
 * connection. A connection closed while it sat idle is noticed before
 * anything is sent on it, so that call runs. */
static void connection_closed_by_server(void **state)
{
    (void)state;
    server s;
    server_start(&s, NULL, NULL);
    char url[300];
    server_url(&s, NULL, NULL, url, sizeof url);
    acemq_idem *h = open_url(url, 0, 0);
    redisContext *admin = redisConnect("127.0.0.1", s.port);
    assert_true(admin && !admin->err);
    acemq_claim c;
    for (int round = 0; round < 20; round++) {
        char id[32];
        int n = snprintf(id, sizeof id, "busy-%d", round);
        assert_int_equal(acemq_idem_try_claim(h, id, (size_t)n, NULL, &c), ACEMQ_CLAIMED);
        kill_clients(admin);
        int rc = acemq_idem_confirm(h, id, (size_t)n, c.token);
        if (rc != 0 && rc != ACEMQ_EIO)
            fail_msg("confirm after CLIENT KILL: %s", acemq_err_name(rc));
        assert_int_equal(acemq_idem_confirm(h, id, (size_t)n, c.token), 0);
        assert_int_equal(acemq_idem_is_confirmed(h, id, (size_t)n), 1);
    }
    assert_int_equal(acemq_idem_try_claim(h, "idle", 4, NULL, &c), ACEMQ_CLAIMED);
    kill_clients(admin);
    pause_ms(300); /* idle longer than the store's check (IDLE_CHECK_MS, connection.c) */
    assert_int_equal(acemq_idem_confirm(h, "idle", 4, c.token), 0);
    assert_int_equal(acemq_idem_is_confirmed(h, "idle", 4), 1);
    redisFree(admin);
    acemq_idem_close(h);
    server_stop(&s);
}

/* Bad URLs: refused at open with a reason that names the part. */
static void bad_urls(void **state)
{
    (void)state;
    static const struct {
        const char *url, *says;
    } cases[] = {
        {"redis:127.0.0.1:6379", "not of the form"},
        {"redis://127.0.0.1:99999", "port"},
        {"redis://127.0.0.1:12ab", "port"},
        {"redis://127.0.0.1:6379/x", "database"},
        {"redis://127.0.0.1:6379/-1", "database"},
        {"redis://user@127.0.0.1:6379", "no password"},
        {"redis://:bad%zz@127.0.0.1:6379", "escape"},
        {"redis://[::1:6379", "]"},
        {"redis://127.0.0.1:6379?prefix=a{b}", "prefix"},
        {"redis://127.0.0.1:6379?prefix=", "prefix"},
        {"redis://127.0.0.1:6379?connect_timeout_ms=0", "connect_timeout_ms"},
        {"redis://127.0.0.1:6379?command_timeout_ms=soon", "command_timeout_ms"},
        {"redis://127.0.0.1:6379?db=1", "unknown URL parameter 'db'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        acemq_idem *h = (acemq_idem *)1;
        int rc = acemq_idem_open(&h, cases[i].url, NULL);
        if (rc != ACEMQ_EURL)
            fail_msg("%s: %s, expected ACEMQ_EURL", cases[i].url, acemq_err_name(rc));
        assert_null(h);
        if (!strstr(acemq_idem_errmsg(NULL), cases[i].says))
            fail_msg("%s: '%s' does not say '%s'", cases[i].url, acemq_idem_errmsg(NULL),
                     cases[i].says);
    }
}

/* A server that requires a password: none or a wrong one is ACEMQ_EAUTH
 * with the server's words; the right one, alone or with the default user,
 * opens; a db beyond the server's is refused. */
static void passwords(void **state)
{
    (void)state;
    server s;
    server_start(&s, "s3cret:@x", NULL);
    char url[600];
    acemq_idem *h = NULL;
    server_url(&s, NULL, NULL, url, sizeof url);
    assert_int_equal(acemq_idem_open(&h, url, NULL), ACEMQ_EAUTH);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "NOAUTH"));
    server_url(&s, ":wrong@", NULL, url, sizeof url);
    assert_int_equal(acemq_idem_open(&h, url, NULL), ACEMQ_EAUTH);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "AUTH"));
    /* ':' and '@' in a password: percent-escaped, or the last '@' splits. */
    server_url(&s, ":s3cret%3A%40x@", "/3", url, sizeof url);
    h = open_url(url, 0, 0);
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(h, "x", 1, NULL, &c), ACEMQ_CLAIMED);
    acemq_idem_close(h);
    server_url(&s, "default:s3cret:@x@", NULL, url, sizeof url);
    h = open_url(url, 0, 0);
    acemq_idem_close(h);
    server_url(&s, ":s3cret:@x@", "/999", url, sizeof url);
    assert_int_equal(acemq_idem_open(&h, url, NULL), ACEMQ_EURL);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "SELECT"));
    server_stop(&s);
}

/* Nobody listens: a clear error at open, at once. */
static void server_down(void **state)
{
    (void)state;
    char url[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?connect_timeout_ms=500", free_port());
    acemq_idem *h = (acemq_idem *)1;
    assert_int_equal(acemq_idem_open(&h, url, NULL), ACEMQ_EIO);
    assert_null(h);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "cannot connect"));
}

/* A server that stops answering (SIGSTOP): the call fails with a clear
 * error once command_timeout_ms runs out, instead of hanging; when the
 * server answers again the next call reconnects. */
static void server_stops_answering(void **state)
{
    (void)state;
    server s;
    server_start(&s, NULL, NULL);
    char url[300];
    server_url(&s, NULL, "?command_timeout_ms=200", url, sizeof url);
    acemq_idem *h = open_url(url, 0, 0);
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(h, "p", 1, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(kill(s.pid, SIGSTOP), 0);
    assert_int_equal(acemq_idem_confirm(h, "p", 1, c.token), ACEMQ_EIO);
    assert_non_null(strstr(acemq_idem_errmsg(h), "command_timeout_ms=200"));
    assert_int_equal(kill(s.pid, SIGCONT), 0);
    /* The confirm may have run when the server woke: either way the token
     * is this holder's and confirming again is fine. */
    assert_int_equal(acemq_idem_confirm(h, "p", 1, c.token), 0);
    assert_int_equal(acemq_idem_is_confirmed(h, "p", 1), 1);
    acemq_idem_close(h);
    server_stop(&s);
}

/* A server older than 7.0 (a stand-in that answers INFO as Redis 6.2 does,
 * in a child process) is refused at open, with its version named: the
 * claim script needs SET ... NX GET. */
static void old_server_refused(void **state)
{
    (void)state;
    int port = 0;
    int fd = bind_loopback(&port);
    assert_int_equal(listen(fd, 1), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        static const char info[] = "# Server\r\nredis_version:6.2.6\r\nredis_mode:standalone\r\n";
        char reply[256], in[4096];
        int n = snprintf(reply, sizeof reply, "$%zu\r\n%s\r\n", strlen(info), info);
        int c = accept(fd, NULL, NULL);
        if (c < 0 || read(c, in, sizeof in) <= 0) _exit(1);
        if (strstr(in, "INFO") == NULL || write(c, reply, (size_t)n) != n) _exit(2);
        while (read(c, in, sizeof in) > 0)
            continue;
        _exit(0);
    }
    close(fd);
    char url[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    acemq_idem *h = (acemq_idem *)1;
    assert_int_equal(acemq_idem_open(&h, url, NULL), ACEMQ_EBACKEND);
    assert_null(h);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "version 6.2.6"));
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "7.0 or later"));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* The durability check at open: a warning naming what can be lost when
 * appendonly is off or appendfsync is not always, none when both are
 * safe, and a warning that it could not check when CONFIG is renamed. */
static void durability_warning(void **state)
{
    (void)state;
    static const char *const aof_always[] = {"--appendonly", "yes", "--appendfsync", "always",
                                             NULL};
    static const char *const aof_everysec[] = {"--appendonly", "yes", "--appendfsync", "everysec",
                                               NULL};
    static const char *const no_config[] = {"--rename-command", "CONFIG", "", NULL};
    static const struct {
        const char *const *args;
        const char *says;
    } cases[] = {
        {NULL, "appendonly is no"},
        {aof_everysec, "appendfsync is everysec"},
        {no_config, "could not be checked"},
        {aof_always, NULL},
    };
    acemq_log_set(capture, NULL);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        server s;
        server_start(&s, NULL, cases[i].args);
        char url[300];
        server_url(&s, NULL, NULL, url, sizeof url);
        captured[0] = '\0';
        acemq_idem *h = open_url(url, 0, 0);
        acemq_idem *h2 = open_url(url, 0, 0);
        if (cases[i].says) {
            if (!strstr(captured, cases[i].says))
                fail_msg("case %zu: the log says '%s'", i, captured);
            /* Once per server, not once per handle. */
            assert_null(strstr(strstr(captured, "\n") + 1, "redis"));
        } else {
            assert_string_equal(captured, "");
        }
        acemq_idem_close(h);
        acemq_idem_close(h2);
        server_stop(&s);
    }
    acemq_log_set(NULL, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-services.sh\n", argv[0]);
        return 2;
    }
    services = argv[1];
    const char *url = getenv("ACEMQ_REDIS_URL");
    if (!url || !*url) {
        printf("SKIPPED: ACEMQ_REDIS_URL is not set (scripts/services.sh start redis)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(durability_warning),
        cmocka_unit_test(four_processes),
        cmocka_unit_test(lease_runs_out_on_server_clock),
        cmocka_unit_test(token_grows_after_record_expired),
        cmocka_unit_test(stale_confirm_changes_nothing),
        cmocka_unit_test(scripts_reloaded_after_flush),
        cmocka_unit_test(bad_urls),
        cmocka_unit_test(passwords),
        cmocka_unit_test(server_down),
        cmocka_unit_test(old_server_refused),
        cmocka_unit_test(server_stops_answering),
        cmocka_unit_test(server_restart),
        cmocka_unit_test(connection_closed_by_server),
    };
    return cmocka_run_group_tests_name("redis idem", tests, NULL, NULL);
}
