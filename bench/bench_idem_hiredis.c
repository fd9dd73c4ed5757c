/* bench_idem_hiredis.c — the memory store's peer: a real Redis on loopback
 * doing SET NX / SET per id through hiredis, plain or pipelined, started by
 * scripts/services.sh when it is not running. Built without hiredis, the peer
 * says so and measures nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef ACEMQ_BENCH_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

#include "bench_common.h"
#include "bench_idem.h"

#ifdef ACEMQ_BENCH_HAVE_HIREDIS
static int in_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    char buf[4096];
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(buf, sizeof buf, "%.*s/%s", (int)len, path, prog);
        if (access(buf, X_OK) == 0) return 1;
        path += len + (path[len] == ':');
    }
    return 0;
}

static redisContext *redis_connect(int port)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c) return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisReply *r = redisCommand(c, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r) freeReplyObject(r);
    if (!ok) {
        redisFree(c);
        return NULL;
    }
    return c;
}

static int services(const char *action)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s/scripts/services.sh' %s redis", ACEMQ_SOURCE_DIR, action);
    fflush(stdout);
    int st = system(cmd);
    return st == -1 ? -1 : (st >> 8) & 0xff;
}

void redis_prepare(redis_peer *p, int port)
{
    memset(p, 0, sizeof *p);
    p->rc = redis_connect(port);
    if (!p->rc) {
        if (!in_path("redis-server")) {
            snprintf(p->note, sizeof p->note,
                     "redis-server is not installed (scripts/deps.sh installs it)");
            return;
        }
        int st = services("start");
        if (st != 0) {
            snprintf(p->note, sizeof p->note, "scripts/services.sh start redis exited %d", st);
            return;
        }
        p->started = 1;
        p->rc = redis_connect(port);
        if (!p->rc) {
            snprintf(p->note, sizeof p->note, "no PONG from 127.0.0.1:%d after starting it", port);
            return;
        }
    }
    p->available = 1;
}

void redis_finish(redis_peer *p)
{
    if (p->rc) redisFree(p->rc);
    p->rc = NULL;
    if (p->started && services("stop") != 0)
        fprintf(stderr, "bench_idem: scripts/services.sh stop redis failed\n");
}

/* Deletes ids [0, n) in batches, so a run starts on keys nobody holds and the
 * bench leaves nothing behind in a server it may not own. */
static void redis_del(redisContext *c, const idset *ids, size_t n)
{
    enum { BATCH = 1000 };
    const char *argv[BATCH + 1];
    size_t lens[BATCH + 1];
    argv[0] = "DEL";
    lens[0] = 3;
    for (size_t lo = 0; lo < n; lo += BATCH) {
        size_t k = n - lo < BATCH ? n - lo : BATCH;
        for (size_t j = 0; j < k; j++) {
            argv[j + 1] = id_at(ids, lo + j);
            lens[j + 1] = ids->len;
        }
        redisReply *r = redisCommandArgv(c, (int)k + 1, argv, lens);
        if (!r) die("redis DEL: %s", c->errstr);
        int ok = r->type == REDIS_REPLY_INTEGER;
        freeReplyObject(r);
        if (!ok) die("redis DEL: unexpected reply");
    }
}

static int redis_ok(worker *w, redisContext *c, redisReply *r, const char *what, size_t i)
{
    int len = (int)w->ids->len;
    const char *id = id_at(w->ids, i);
    if (!r) return worker_fail(w, "redis %s(%.*s): %s", what, len, id, c->errstr);
    int ok = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (!ok) {
        const char *why = r->str ? r->str : "";
        if (r->type == REDIS_REPLY_NIL) why = "key already held";
        worker_fail(w, "redis %s(%.*s): reply type %d (%s)", what, len, id, r->type, why);
    }
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* The usual hand-rolled Redis idempotency check: claim with a leased SET NX,
 * mark confirmed with a long expiry. Cheaper than acemq's contract (no fencing
 * token is checked on confirm), which favours the peer. */
static int redis_pairs(worker *w)
{
    redisContext *c = w->ctx;
    for (size_t i = w->lo; i < w->hi; i++) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        redisReply *r =
            redisCommand(c, "SET %b claimed NX PX 30000", id_at(w->ids, i), w->ids->len);
        if (redis_ok(w, c, r, "SET NX", i) != 0) return -1;
        r = redisCommand(c, "SET %b confirmed PX 604800000", id_at(w->ids, i), w->ids->len);
        if (redis_ok(w, c, r, "SET", i) != 0) return -1;
        w->done++;
    }
    return 0;
}

/* The batch case's peer: the same commands, pipelined as the batch is
 * claimed, CLAIM_BATCH SET NX in one round trip, then CLAIM_BATCH SET in
 * another. */
static int redis_pipelined_pairs(worker *w)
{
    redisContext *c = w->ctx;
    for (size_t lo = w->lo; lo < w->hi; lo += CLAIM_BATCH) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        size_t k = w->hi - lo < CLAIM_BATCH ? w->hi - lo : CLAIM_BATCH;
        for (int step = 0; step < 2; step++) {
            for (size_t j = 0; j < k; j++) {
                int rc = step == 0 ? redisAppendCommand(c, "SET %b claimed NX PX 30000",
                                                        id_at(w->ids, lo + j), w->ids->len)
                                   : redisAppendCommand(c, "SET %b confirmed PX 604800000",
                                                        id_at(w->ids, lo + j), w->ids->len);
                if (rc != REDIS_OK) return worker_fail(w, "redis append: %s", c->errstr);
            }
            for (size_t j = 0; j < k; j++) {
                void *r = NULL;
                if (redisGetReply(c, &r) != REDIS_OK) r = NULL;
                if (redis_ok(w, c, r, step == 0 ? "SET NX" : "SET", lo + j) != 0) return -1;
            }
        }
        w->done += k;
    }
    return 0;
}

double redis_run(redis_peer *p, int pipelined, const idset *ids, size_t n, double seconds)
{
    redis_del(p->rc, ids, n);
    worker w;
    memset(&w, 0, sizeof w);
    split(&w, 1, ids, n, seconds);
    w.run = pipelined ? redis_pipelined_pairs : redis_pairs;
    w.ctx = p->rc;
    double elapsed = run_workers(&w, 1);
    redis_del(p->rc, ids, w.done);
    if (w.done == 0) die("redis: no pair completed in %.2f s", elapsed);
    return (double)w.done / elapsed;
}
#else
void redis_prepare(redis_peer *p, int port)
{
    (void)port;
    memset(p, 0, sizeof *p);
    snprintf(p->note, sizeof p->note, "bench_idem was built without hiredis");
}

void redis_finish(redis_peer *p)
{
    (void)p;
}

double redis_run(redis_peer *p, int pipelined, const idset *ids, size_t n, double seconds)
{
    (void)p;
    (void)pipelined;
    (void)ids;
    (void)n;
    (void)seconds;
    return 0;
}
#endif
