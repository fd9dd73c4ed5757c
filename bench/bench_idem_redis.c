/* bench_idem_redis.c — the Redis idempotency store beside the commands a
 * competent hand-written version sends, in the same run on the same
 * server: claim + confirm pairs per second on one connection and on eight
 * (one handle per thread), and claims per second through
 * acemq_idem_try_claim_many of 100 ids against one try_claim at a time.
 *
 * The peer ("raw") claims with SET key 1 NX PX lease and confirms with
 * SET key done XX PX retention: two round trips a pair, as acemq's two
 * scripts, but no token, no fence, no fingerprint, nothing read. Ids are
 * random UUID text; both sides use the same lease and retention. Turns
 * alternate, raw then acemq, and each figure is the median of its turns.
 * The keys both sides wrote are deleted at the end.
 *
 * Targets: pairs >= 0.8 x raw on 1 and on 8 connections; a batch of 100
 * claims >= 5 x one claim at a time. Needs ACEMQ_REDIS_URL (make bench
 * starts the server). Exit status: 0 measured, 1 something broke, 2 usage. */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acemq/acemq.h"

#ifndef ACEMQ_SOURCE_DIR
#define ACEMQ_SOURCE_DIR "."
#endif

#define MAX_THREADS 8
#define BATCH 100
#define LEASE_MS "30000"
#define RETENTION_MS "600000" /* short: the shared server keeps what a run wrote until then */

typedef struct config {
    const char *out_path;
    const char *filter;
    double seconds; /* per turn */
    int reps;
} config;

static char host[256] = "127.0.0.1";
static int port = 6379;
static char store_url[1024];
static char raw_prefix[64], store_prefix[64];

/* Random UUIDv4 text into out (37 bytes), from the state at *x. */
static void uuid_text(uint64_t *x, char *out)
{
    uint64_t v[2];
    for (int i = 0; i < 2; i++) {
        uint64_t z = (*x += 0x9e3779b97f4a7c15u);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        v[i] = z ^ (z >> 31);
    }
    uint64_t hi = (v[0] & ~(uint64_t)0xf000) | 0x4000;
    uint64_t lo = (v[1] & ~((uint64_t)3 << 62)) | ((uint64_t)2 << 62);
    snprintf(out, 37, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(hi >> 32),
             (unsigned)(hi >> 16) & 0xffff, (unsigned)hi & 0xffff, (unsigned)(lo >> 48),
             (unsigned long long)(lo & 0xffffffffffffu));
}

/* ---- the raw peer ---- */

static redisContext *raw_connect(void)
{
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) die("connect %s:%d: %s", host, port, c ? c->errstr : "out of memory");
    return c;
}

/* One raw pair: 0, or 1 when the id was not new. */
static int raw_pair(redisContext *c, const char *id)
{
    char key[128];
    int n = snprintf(key, sizeof key, "{%s}:id:%s", raw_prefix, id);
    const char *claim[6] = {"SET", key, "1", "NX", "PX", LEASE_MS};
    size_t claim_len[6] = {3, (size_t)n, 1, 2, 2, strlen(LEASE_MS)};
    redisReply *r = redisCommandArgv(c, 6, claim, claim_len);
    if (!r) die("raw claim: %s", c->errstr);
    int taken = r->type == REDIS_REPLY_STATUS;
    if (r->type == REDIS_REPLY_ERROR) die("raw claim: %s", r->str);
    freeReplyObject(r);
    if (!taken) return 1;
    const char *confirm[6] = {"SET", key, "done", "XX", "PX", RETENTION_MS};
    size_t confirm_len[6] = {3, (size_t)n, 4, 2, 2, strlen(RETENTION_MS)};
    r = redisCommandArgv(c, 6, confirm, confirm_len);
    if (!r) die("raw confirm: %s", c->errstr);
    if (r->type != REDIS_REPLY_STATUS)
        die("raw confirm: %s", r->type == REDIS_REPLY_ERROR ? r->str : "not OK");
    freeReplyObject(r);
    return 0;
}

/* Deletes every key under the prefix. */
static void raw_clean(redisContext *c, const char *prefix)
{
    char match[96], cursor[32] = "0";
    snprintf(match, sizeof match, "{%s}*", prefix);
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor, match);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) die("SCAN failed");
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            redisReply *d =
                redisCommand(c, "UNLINK %b", keys->element[i]->str, keys->element[i]->len);
            if (!d) die("UNLINK: %s", c->errstr);
            freeReplyObject(d);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
}

/* ---- the turns ---- */

enum { SIDE_RAW, SIDE_ACEMQ, SIDE_SINGLE, SIDE_MANY };

typedef struct worker {
    pthread_t thread;
    int side;
    uint64_t seed;
    double seconds;
    long done;
    redisContext *conn;
    acemq_idem *store;
} worker;
static void *work(void *arg)
{
    worker *w = arg;
    char ids[BATCH][37];
    acemq_idem_key keys[BATCH];
    acemq_claim out[BATCH];
    int status[BATCH];
    double end = mono_now() + w->seconds;
    while (mono_now() < end) {
        if (w->side == SIDE_RAW) {
            uuid_text(&w->seed, ids[0]);
            if (raw_pair(w->conn, ids[0]) != 0) die("raw: a random id was not new");
            w->done++;
        } else if (w->side == SIDE_ACEMQ || w->side == SIDE_SINGLE) {
            uuid_text(&w->seed, ids[0]);
            acemq_claim c;
            if (acemq_idem_try_claim(w->store, ids[0], 36, NULL, &c) != ACEMQ_CLAIMED)
                die("try_claim: %s", acemq_idem_errmsg(w->store));
            if (w->side == SIDE_ACEMQ && acemq_idem_confirm(w->store, ids[0], 36, c.token) != 0)
                die("confirm: %s", acemq_idem_errmsg(w->store));
            w->done++;
        } else {
            for (int i = 0; i < BATCH; i++) {
                uuid_text(&w->seed, ids[i]);
                keys[i].id = ids[i];
                keys[i].id_len = 36;
            }
            int n = acemq_idem_try_claim_many(w->store, BATCH, keys, NULL, out, status);
            if (n != BATCH)
                die("try_claim_many: %d of %d: %s", n, BATCH, acemq_idem_errmsg(w->store));
            w->done += BATCH;
        }
    }
    return NULL;
}

/* One turn of side on threads connections: operations per second. Every
 * thread of every turn starts its ids from a seed of its own. */
static acemq_idem_options store_opts;

static double turn(int side, int threads, double seconds)
{
    static uint64_t turns;
    uint64_t seed = ++turns;
    worker w[MAX_THREADS];
    memset(w, 0, sizeof w);
    for (int t = 0; t < threads; t++) {
        w[t].side = side;
        w[t].seed = seed * 7919 + (uint64_t)t * 104729 + (uint64_t)getpid();
        w[t].seconds = seconds;
        if (side == SIDE_RAW) {
            w[t].conn = raw_connect();
        } else if (acemq_idem_open(&w[t].store, store_url, &store_opts) != 0) {
            die("open %s: %s", store_url, acemq_idem_errmsg(NULL));
        }
    }
    double t0 = mono_now();
    for (int t = 0; t < threads; t++)
        if (pthread_create(&w[t].thread, NULL, work, &w[t]) != 0) die("pthread_create");
    long done = 0;
    for (int t = 0; t < threads; t++) {
        if (pthread_join(w[t].thread, NULL) != 0) die("pthread_join");
        done += w[t].done;
    }
    double elapsed = mono_now() - t0;
    for (int t = 0; t < threads; t++) {
        if (w[t].conn) redisFree(w[t].conn);
        acemq_idem_close(w[t].store);
    }
    return (double)done / elapsed;
}

/* Times side a against side b in alternating turns; reports a beside b. */
static void compare(FILE *out, const config *cfg, const char *name, int a, int b, int threads,
                    const char *unit, const char *peer, double target)
{
    if (!bench_wanted(cfg->filter, name)) return;
    double va[32], vb[32], ratio[32];
    for (int r = 0; r < cfg->reps; r++) {
        vb[r] = turn(b, threads, cfg->seconds);
        va[r] = turn(a, threads, cfg->seconds);
        ratio[r] = va[r] / vb[r];
    }
    char want[48];
    snprintf(want, sizeof want, ">= %.1f x %s", target, b == SIDE_RAW ? "raw" : "one at a time");
    bench_result res = {"idem",
                        name,
                        median(va, cfg->reps),
                        unit,
                        peer,
                        median(vb, cfg->reps),
                        median(ratio, cfg->reps),
                        NULL,
                        0};
    res.target = want;
    res.target_met = res.ratio >= target;
    bench_report(out, &res);
}

static void usage(void)
{
    fputs("usage: bench_idem_redis [--out FILE] [--seconds S] [--reps N] [--filter TEXT]\n",
          stderr);
    exit(2);
}

/* host and port from redis://host:port[/...]. */
static void parse_url(const char *url)
{
    const char *p = strstr(url, "://");
    if (!p) die("ACEMQ_REDIS_URL=%s is not redis://host:port", url);
    p += 3;
    const char *at = strchr(p, '@');
    if (at) die("bench_idem_redis: a URL with a password is not supported here");
    size_t n = strcspn(p, ":/?");
    if (n > 0 && n < sizeof host) snprintf(host, sizeof host, "%.*s", (int)n, p);
    if (p[n] == ':') port = atoi(p + n + 1);
}

int main(int argc, char **argv)
{
    bench_name = "bench_idem_redis";
    config cfg = {ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl", NULL, 2.0, 5};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--out") == 0 && v)
            cfg.out_path = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && v)
            cfg.seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && v)
            cfg.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--filter") == 0 && v)
            cfg.filter = argv[++i];
        else
            usage();
    }
    if (cfg.seconds <= 0 || cfg.reps < 1 || cfg.reps > 32) usage();
    const char *url = getenv("ACEMQ_REDIS_URL");
    if (!url || !*url) {
        printf("bench_idem_redis: skipped, ACEMQ_REDIS_URL is not set (scripts/services.sh "
               "start redis)\n");
        return 0;
    }
    parse_url(url);
    snprintf(raw_prefix, sizeof raw_prefix, "bench_raw_%ld", (long)getpid());
    snprintf(store_prefix, sizeof store_prefix, "bench_idem_%ld", (long)getpid());
    snprintf(store_url, sizeof store_url, "%s%sprefix=%s", url, strchr(url, '?') ? "&" : "?",
             store_prefix);
    acemq_idem_options_init(&store_opts);
    store_opts.lease_ms = atoi(LEASE_MS);
    store_opts.retention_ms = atoi(RETENTION_MS);

    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("opening %s", cfg.out_path);
    printf("bench_idem_redis: claim + confirm of random UUID ids on %s:%d, %.1f s a turn, "
           "median of %d\n",
           host, port, cfg.seconds, cfg.reps);
    bench_header();
    compare(out, &cfg, "redis/uuid/1conn", SIDE_ACEMQ, SIDE_RAW, 1, "pairs/s",
            "raw SET NX PX + SET XX", 0.8);
    compare(out, &cfg, "redis/uuid/8conn", SIDE_ACEMQ, SIDE_RAW, 8, "pairs/s",
            "raw SET NX PX + SET XX", 0.8);
    compare(out, &cfg, "redis/uuid/batch100", SIDE_MANY, SIDE_SINGLE, 1, "claims/s",
            "acemq try_claim one at a time", 5.0);
    if (fclose(out) != 0) die("closing %s", cfg.out_path);

    redisContext *admin = raw_connect();
    raw_clean(admin, raw_prefix);
    raw_clean(admin, store_prefix);
    redisFree(admin);
    return 0;
}
