/* bench_idem_redis.c — the Redis idempotency store beside the commands a
 * competent hand-written version sends, in the same run on the same
 * server: the cases of bench_idem_remote.h, named redis/uuid/...
 *
 * The peer ("raw") claims with SET key 1 NX PX lease and confirms with
 * SET key done XX PX retention: two round trips a pair, as acemq's two
 * scripts, but no token, no fence, no fingerprint, nothing read. Both
 * sides use the same lease and retention. The keys both sides wrote are
 * deleted at the end.
 *
 * Targets: pairs >= 0.8 x raw on 1 and on 8 connections; a batch of 100
 * claims >= 5 x one claim at a time. Needs ACEMQ_REDIS_URL (make bench
 * starts the server). Exit status: 0 measured, 1 something broke, 2 usage. */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"
#include "bench_idem_remote.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEASE_MS "30000"
#define RETENTION_MS "600000" /* short: the shared server keeps what a run wrote until then */

static char host[256] = "127.0.0.1";
static int port = 6379;
static char store_url[1024];
static char raw_prefix[64], store_prefix[64];

/* ---- the raw peer ---- */

static redisContext *raw_connect(void)
{
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) die("connect %s:%d: %s", host, port, c ? c->errstr : "out of memory");
    return c;
}

static void *raw_open(void)
{
    return raw_connect();
}

static void raw_close(void *conn)
{
    redisFree(conn);
}

/* One raw pair: 0, or 1 when the id was not new. */
static int raw_pair(void *conn, const char *id)
{
    redisContext *c = conn;
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
    remote_config cfg;
    remote_parse_args(argc, argv, &cfg);
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
    acemq_idem_options store_opts;
    acemq_idem_options_init(&store_opts);
    store_opts.lease_ms = atoi(LEASE_MS);
    store_opts.retention_ms = atoi(RETENTION_MS);
    remote_bench b = {
        "redis", "raw SET NX PX + SET XX", store_url, &store_opts, raw_open, raw_pair, raw_close};

    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("opening %s", cfg.out_path);
    printf("bench_idem_redis: claim + confirm of random UUID ids on %s:%d, %.1f s a turn, "
           "median of %d\n",
           host, port, cfg.seconds, cfg.reps);
    bench_header();
    remote_run_cases(out, &cfg, &b);
    if (fclose(out) != 0) die("closing %s", cfg.out_path);

    redisContext *admin = raw_connect();
    raw_clean(admin, raw_prefix);
    raw_clean(admin, store_prefix);
    redisFree(admin);
    return 0;
}
