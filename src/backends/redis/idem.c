/* idem.c — the Redis store's methods: each one EVALSHA of its script
 * (scripts.c) under the handle's lock; try_claim_many runs the claim
 * script once for up to REDIS_CLAIM_MAX ids and confirm_many its script
 * once for up to REDIS_CONFIRM_MAX (one round trip each).
 * idem_redis.h states the invariants.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/redis/idem_redis.h"

/* A number as a script argument. */
typedef struct num {
    char s[24];
} num;

static size_t put(num *n, int64_t v)
{
    return (size_t)snprintf(n->s, sizeof n->s, "%" PRId64, v);
}

/* ARGV[1] of every script: now, or '' when the server's clock decides. */
static size_t put_now(const redis_idem *r, num *n, int64_t now_ms)
{
    if (r->server_clock) {
        n->s[0] = '\0';
        return 0;
    }
    return put(n, now_ms);
}

static int unexpected(acemq_idem *h, const char *op, const redisReply *reply)
{
    return acemq__idem_fail(h, ACEMQ_EBACKEND, "redis: %s: the script answered %s", op,
                            reply->type == REDIS_REPLY_ERROR ? reply->str : "an unexpected reply");
}

static int stale(acemq_idem *h, const char *op, uint64_t token)
{
    return acemq__idem_fail(h, ACEMQ_ESTALE,
                            "%s: token %" PRIu64
                            " is not the current claim on this id (taken over, "
                            "released, never issued or forgotten)",
                            op, token);
}

/* ---- try_claim, try_claim_many ------------------------------------------ */

/* The claim script's arguments of one element. */
typedef struct claim_arg {
    num lease, cap;
} claim_arg;

static int is_int(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER;
}

/* Turns the answer at rep->element[*at] (the claim script's flat reply)
 * into try_claim's, moving *at past it. */
static int claim_answer(acemq_idem *h, const redisReply *rep, size_t *at,
                        const acemq__claim_args *a, acemq_claim *out)
{
    if (rep->type != REDIS_REPLY_ARRAY || *at >= rep->elements || !is_int(rep->element[*at]))
        return unexpected(h, "claim", rep);
    size_t left = rep->elements - *at;
    redisReply **e = rep->element + *at;
    switch (e[0]->integer) {
    case 0:
        if (left < 5 || !is_int(e[1]) || !is_int(e[2]) || !is_int(e[3]) || !is_int(e[4]) ||
            e[1]->integer <= 0)
            break;
        *at += 5;
        out->token = (uint64_t)e[1]->integer;
        out->lease_until_ms = e[2]->integer;
        out->takeover = e[3]->integer != 0;
        /* A confirmation forgotten here never reaches purge; counted as
         * the other stores count it. */
        if (e[4]->integer) ACEMQ__IDEM_COUNT(h, expirations, 1);
        return ACEMQ_CLAIMED;
    case 1:
        if (left < 4 || !is_int(e[1]) || !is_int(e[2]) || e[3]->type != REDIS_REPLY_STRING) break;
        *at += 4;
        out->has_result = e[1]->integer != 0;
        out->result_len = (size_t)e[2]->integer;
        if (a->result_cap > 0 && e[3]->len > 0)
            memcpy(a->result_buf, e[3]->str, e[3]->len < a->result_cap ? e[3]->len : a->result_cap);
        return ACEMQ_ALREADY_CONFIRMED;
    case 2:
        if (left < 2 || !is_int(e[1])) break;
        *at += 2;
        out->lease_until_ms = e[1]->integer;
        return ACEMQ_IN_PROGRESS;
    case 3:
        *at += 1;
        return acemq__idem_fail(h, ACEMQ_EMISMATCH,
                                "id already seen with a different payload fingerprint");
    default:
        break;
    }
    return unexpected(h, "claim", rep);
}

/* A command's argv under construction: the longer of the batch scripts'. */
#define COMMAND_ARGV (REDIS_CLAIM_ARGV > REDIS_CONFIRM_ARGV ? REDIS_CLAIM_ARGV : REDIS_CONFIRM_ARGV)
typedef struct command {
    int argc;
    const char *argv[COMMAND_ARGV];
    size_t lens[COMMAND_ARGV];
} command;

static void add(command *c, const void *s, size_t len)
{
    c->argv[c->argc] = s;
    c->lens[c->argc++] = len;
}

/* Starts c as EVALSHA of script `script` with the records of the m
 * elements which[] names as its first keys, numkeys counting `more` keys
 * the caller adds after them. The records' names go in *keys (free it).
 * ENOMEM with its text on h. */
static int batch_begin(acemq_idem *h, command *c, int script, size_t m, size_t more,
                       const size_t *which, const acemq__bytes *ids, num *nkeys, char **keys)
{
    redis_idem *r = h->self;
    size_t bytes = 0;
    for (size_t x = 0; x < m; x++)
        bytes += r->key_head + ids[which[x]].len;
    c->argc = 0;
    *keys = malloc(bytes);
    if (!*keys) {
        (void)acemq__idem_fail(h, ACEMQ_ENOMEM, "redis: out of memory for %zu ids", m);
        return ACEMQ_ENOMEM;
    }
    add(c, "EVALSHA", 7);
    add(c, r->sha[script], 40);
    add(c, nkeys->s, put(nkeys, (int64_t)(m + more)));
    char *k = *keys;
    for (size_t x = 0; x < m; x++) {
        const acemq__bytes *id = &ids[which[x]];
        memcpy(k, r->key, r->key_head);
        memcpy(k + r->key_head, id->data, id->len);
        add(c, k, r->key_head + id->len);
        k += r->key_head + id->len;
    }
    return 0;
}

/* Runs the claim script once over the m elements which[] names
 * (1..REDIS_CLAIM_MAX). Caller holds r->lock. */
static int claim_send(acemq_idem *h, size_t m, const size_t *which, const acemq__bytes *ids,
                      const acemq__claim_args *a, redisReply **reply)
{
    redis_idem *r = h->self;
    command c;
    claim_arg args[REDIS_CLAIM_MAX];
    num nkeys = {{0}}, now = {{0}}, ret = {{0}};
    char *keys = NULL;
    int rc = batch_begin(h, &c, RS_CLAIM, m, 1, which, ids, &nkeys, &keys);
    if (rc != 0) return rc;
    add(&c, r->token_key, strlen(r->token_key));
    add(&c, now.s, put_now(r, &now, a[which[0]].now_ms));
    add(&c, ret.s, put(&ret, h->opts.retention_ms));
    for (size_t x = 0; x < m; x++) {
        const acemq__claim_args *e = &a[which[x]];
        add(&c, args[x].lease.s, put(&args[x].lease, e->lease_until_ms - e->now_ms));
        add(&c, e->fingerprint.len ? (const char *)e->fingerprint.data : "", e->fingerprint.len);
        add(&c, args[x].cap.s, put(&args[x].cap, (int64_t)e->result_cap));
    }
    rc = acemq__redis_evalsha(h, c.argc, c.argv, c.lens, reply);
    free(keys);
    return rc;
}

/* Claims the m elements which[] names (1..REDIS_CLAIM_MAX) with one run of
 * the claim script, filling their out[] and status[]. Caller holds
 * r->lock. */
static void claim_run(acemq_idem *h, size_t m, const size_t *which, const acemq__bytes *ids,
                      const acemq__claim_args *a, acemq_claim *out, int *status)
{
    redisReply *reply = NULL;
    int rc = claim_send(h, m, which, ids, a, &reply);
    /* After a failed call every element shares its error: their claims may
     * or may not have been made, as for a single call. After an answer that
     * cannot be read, the rest share that. */
    size_t at = 0;
    for (size_t x = 0; x < m; x++) {
        size_t i = which[x];
        memset(&out[i], 0, sizeof out[i]);
        status[i] = rc != 0 ? rc : claim_answer(h, reply, &at, &a[i], &out[i]);
        if (status[i] < 0) memset(&out[i], 0, sizeof out[i]);
        if (status[i] < 0 && status[i] != ACEMQ_EMISMATCH) rc = status[i];
    }
    if (reply) freeReplyObject(reply);
}

static int redis_try_claim(acemq_idem *h, const acemq__bytes *id, const acemq__claim_args *a,
                           acemq_claim *out)
{
    redis_idem *r = h->self;
    size_t zero = 0;
    int status = 0;
    pthread_mutex_lock(&r->lock);
    claim_run(h, 1, &zero, id, a, out, &status);
    pthread_mutex_unlock(&r->lock);
    return status;
}

static int redis_try_claim_many(acemq_idem *h, size_t n, const acemq__bytes *ids,
                                const acemq__claim_args *a, acemq_claim *out, int *status)
{
    redis_idem *r = h->self;
    size_t which[REDIS_CLAIM_MAX];
    pthread_mutex_lock(&r->lock);
    for (size_t lo = 0; lo < n; lo += REDIS_CLAIM_MAX) {
        size_t k = n - lo < REDIS_CLAIM_MAX ? n - lo : REDIS_CLAIM_MAX, m = 0;
        for (size_t i = lo; i < lo + k; i++)
            if (ids[i].len != 0) which[m++] = i; /* len 0: answered by the core */
        if (m > 0) claim_run(h, m, which, ids, a, out, status);
    }
    pthread_mutex_unlock(&r->lock);
    return 0;
}

/* ---- confirm, confirm_many, release, renew, is_confirmed ----------------- */

/* Runs a fencing script that answers 1 (done) or 0 (stale). */
static int fenced(acemq_idem *h, const char *op, int which, const acemq__bytes *id, uint64_t token,
                  int nargs, const char **args, size_t *lens)
{
    redis_idem *r = h->self;
    num tok = {{0}};
    lens[1] = (size_t)snprintf(tok.s, sizeof tok.s, "%" PRIu64, token);
    args[1] = tok.s;
    pthread_mutex_lock(&r->lock);
    size_t klen = acemq__redis_key(r, id);
    redisReply *reply = NULL;
    int rc = acemq__redis_script(h, which, klen, nargs, args, lens, &reply);
    if (rc == 0) {
        if (!is_int(reply))
            rc = unexpected(h, op, reply);
        else if (reply->integer != 1)
            rc = stale(h, op, token);
    }
    pthread_mutex_unlock(&r->lock);
    if (reply) freeReplyObject(reply);
    return rc;
}

static int redis_confirm(acemq_idem *h, const acemq__bytes *id, uint64_t token,
                         const acemq__bytes *result, int64_t now_ms, int64_t expires_ms)
{
    redis_idem *r = h->self;
    num now = {{0}}, ret = {{0}};
    const char *args[4] = {now.s, NULL, ret.s, result->len ? (const char *)result->data : ""};
    size_t lens[4] = {put_now(r, &now, now_ms), 0, put(&ret, expires_ms - now_ms), result->len};
    return fenced(h, "confirm", RS_CONFIRM, id, token, 4, args, lens);
}

/* Runs the confirm_many script once over the m elements which[] names
 * (1..REDIS_CONFIRM_MAX), filling their status[]. Caller holds r->lock. */
static void confirm_run(acemq_idem *h, size_t m, const size_t *which, const acemq__bytes *ids,
                        const uint64_t *tokens, const acemq__bytes *results, int64_t now_ms,
                        int64_t expires_ms, int *status)
{
    redis_idem *r = h->self;
    command c;
    num toks[REDIS_CONFIRM_MAX], nkeys = {{0}}, now = {{0}}, ret = {{0}};
    char *keys = NULL;
    redisReply *reply = NULL;
    int rc = batch_begin(h, &c, RS_CONFIRM_MANY, m, 0, which, ids, &nkeys, &keys);
    if (rc == 0) {
        add(&c, now.s, put_now(r, &now, now_ms));
        add(&c, ret.s, put(&ret, expires_ms - now_ms));
        for (size_t x = 0; x < m; x++) {
            const acemq__bytes *res = &results[which[x]];
            add(&c, toks[x].s,
                (size_t)snprintf(toks[x].s, sizeof toks[x].s, "%" PRIu64, tokens[which[x]]));
            add(&c, res->len ? (const char *)res->data : "", res->len);
        }
        rc = acemq__redis_evalsha(h, c.argc, c.argv, c.lens, &reply);
        free(keys);
    }
    /* One script: a failed run, or an answer that cannot be read, is every
     * element's answer. */
    if (rc == 0 && (reply->type != REDIS_REPLY_ARRAY || reply->elements != m))
        rc = unexpected(h, "confirm", reply);
    for (size_t x = 0; rc == 0 && x < m; x++)
        if (!is_int(reply->element[x])) rc = unexpected(h, "confirm", reply);
    for (size_t x = 0; x < m; x++) {
        size_t i = which[x];
        if (rc != 0)
            status[i] = rc;
        else
            status[i] = reply->element[x]->integer == 1 ? 0 : stale(h, "confirm", tokens[i]);
    }
    if (reply) freeReplyObject(reply);
}

static int redis_confirm_many(acemq_idem *h, size_t n, const acemq__bytes *ids,
                              const uint64_t *tokens, const acemq__bytes *results, int64_t now_ms,
                              int64_t expires_ms, int *status)
{
    redis_idem *r = h->self;
    size_t which[REDIS_CONFIRM_MAX];
    pthread_mutex_lock(&r->lock);
    for (size_t lo = 0; lo < n; lo += REDIS_CONFIRM_MAX) {
        size_t k = n - lo < REDIS_CONFIRM_MAX ? n - lo : REDIS_CONFIRM_MAX, m = 0;
        for (size_t i = lo; i < lo + k; i++)
            if (ids[i].len != 0) which[m++] = i; /* len 0: answered by the core */
        if (m > 0) confirm_run(h, m, which, ids, tokens, results, now_ms, expires_ms, status);
    }
    pthread_mutex_unlock(&r->lock);
    return 0;
}

static int redis_release(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms)
{
    redis_idem *r = h->self;
    num now = {{0}};
    const char *args[2] = {now.s, NULL};
    size_t lens[2] = {put_now(r, &now, now_ms), 0};
    return fenced(h, "release", RS_RELEASE, id, token, 2, args, lens);
}

static int redis_renew(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms,
                       int64_t lease_until_ms)
{
    redis_idem *r = h->self;
    num now = {{0}}, lease = {{0}}, ret = {{0}};
    const char *args[4] = {now.s, NULL, lease.s, ret.s};
    size_t lens[4] = {put_now(r, &now, now_ms), 0, put(&lease, lease_until_ms - now_ms),
                      put(&ret, h->opts.retention_ms)};
    return fenced(h, "renew", RS_RENEW, id, token, 4, args, lens);
}

static int redis_is_confirmed(acemq_idem *h, const acemq__bytes *id, int64_t now_ms)
{
    redis_idem *r = h->self;
    num now = {{0}};
    const char *args[1] = {now.s};
    size_t lens[1] = {put_now(r, &now, now_ms)};
    pthread_mutex_lock(&r->lock);
    size_t klen = acemq__redis_key(r, id);
    redisReply *reply = NULL;
    int rc = acemq__redis_script(h, RS_IS_CONFIRMED, klen, 1, args, lens, &reply);
    if (rc == 0) rc = is_int(reply) ? reply->integer == 1 : unexpected(h, "is_confirmed", reply);
    pthread_mutex_unlock(&r->lock);
    if (reply) freeReplyObject(reply);
    return rc;
}

/* ---- purge --------------------------------------------------------------- */

typedef struct purge_ctx {
    redisReply **keys;
    const char *args[2];
    size_t lens[2];
    num now, ret;
    uint64_t purged;
} purge_ctx;

static int build_purge(acemq_idem *h, void *ctx, size_t i, const char **argv, size_t *lens)
{
    purge_ctx *p = ctx;
    return acemq__redis_evalsha_argv(h->self, RS_PURGE, p->keys[i]->str, p->keys[i]->len, 2,
                                     p->args, p->lens, argv, lens);
}

static int purge_keys(acemq_idem *h, redisReply **keys, size_t n, void *arg)
{
    purge_ctx *p = arg;
    redisReply *replies[REDIS_PIPELINE_MAX];
    p->keys = keys;
    int rc = acemq__redis_script_many(h, n, build_purge, p, replies);
    for (size_t i = 0; i < n; i++) {
        if (!replies[i]) continue;
        if (rc == 0 && !is_int(replies[i])) rc = unexpected(h, "purge", replies[i]);
        if (is_int(replies[i]) && replies[i]->integer == 1) p->purged++;
        freeReplyObject(replies[i]);
    }
    return rc;
}

/* With the server's clock, Redis removes each record at the very instant
 * purge would (its key expiry is set to it), so there is nothing left to
 * purge, and nothing is read. With an injected clock, time runs apart from
 * the server's, and purge walks the records and removes those past their
 * time on that clock. */
static int redis_purge(acemq_idem *h, int64_t now_ms, uint64_t *purged)
{
    redis_idem *r = h->self;
    *purged = 0;
    if (r->server_clock) return 0;
    purge_ctx p;
    memset(&p, 0, sizeof p);
    p.lens[0] = put_now(r, &p.now, now_ms);
    p.lens[1] = put(&p.ret, h->opts.retention_ms);
    p.args[0] = p.now.s;
    p.args[1] = p.ret.s;
    pthread_mutex_lock(&r->lock);
    int rc = acemq__redis_scan(h, purge_keys, &p);
    pthread_mutex_unlock(&r->lock);
    *purged = p.purged;
    return rc;
}

const acemq__idem_methods acemq__redis_idem_methods = {
    .version = ACEMQ__IDEM_METHODS_VERSION,
    .name = "redis",
    .close = acemq__redis_idem_close,
    .try_claim = redis_try_claim,
    .confirm = redis_confirm,
    .release = redis_release,
    .renew = redis_renew,
    .is_confirmed = redis_is_confirmed,
    .purge = redis_purge,
    .try_claim_many = redis_try_claim_many,
    .counts = acemq__redis_idem_counts,
    .inspect = acemq__redis_idem_inspect,
    .forget = acemq__redis_idem_forget,
    .confirm_many = redis_confirm_many,
};
