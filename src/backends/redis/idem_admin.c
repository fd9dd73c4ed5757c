/* idem_admin.c — the Redis store's calls for operators: counts (a SCAN of
 * the store's records), inspect and forget of one id. States are decided
 * at the scripts' now: the server's clock, or the injected one.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/redis/idem_redis.h"

#define SCAN_COUNT "64"

int acemq__redis_scan(acemq_idem *h,
                      int (*fn)(acemq_idem *h, redisReply **keys, size_t n, void *arg), void *arg)
{
    redis_idem *r = h->self;
    char match[REDIS_PREFIX_MAX + 16], cursor[32] = "0";
    /* The prefix holds no glob character (connection.c checks it); the
     * ids after it may hold any byte, which '*' matches. */
    snprintf(match, sizeof match, "%.*s*", (int)r->key_head, r->key);
    do {
        const char *argv[6] = {"SCAN", cursor, "MATCH", match, "COUNT", SCAN_COUNT};
        redisReply *reply = NULL;
        int rc = acemq__redis_command(h, 6, argv, NULL, &reply);
        if (rc != 0) return rc;
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
            reply->element[0]->type != REDIS_REPLY_STRING ||
            reply->element[1]->type != REDIS_REPLY_ARRAY ||
            reply->element[0]->len >= sizeof cursor) {
            rc = acemq__idem_fail(h, ACEMQ_EBACKEND, "redis: SCAN answered %s",
                                  reply->type == REDIS_REPLY_ERROR ? reply->str
                                                                   : "an unexpected reply");
            freeReplyObject(reply);
            return rc;
        }
        memcpy(cursor, reply->element[0]->str, reply->element[0]->len);
        cursor[reply->element[0]->len] = '\0';
        redisReply *keys = reply->element[1];
        for (size_t lo = 0; lo < keys->elements && rc == 0; lo += REDIS_PIPELINE_MAX) {
            size_t n = keys->elements - lo;
            if (n > REDIS_PIPELINE_MAX) n = REDIS_PIPELINE_MAX;
            rc = fn(h, keys->element + lo, n, arg);
        }
        freeReplyObject(reply);
        if (rc != 0) return rc;
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

/* What the inspect script told about one record. */
typedef struct seen {
    int present;
    int state; /* an acemq_idem_state */
    uint64_t token;
    int64_t lease_until, expires;
    size_t result_len, fingerprint_len;
} seen;

static int64_t int_of(const redisReply *e)
{
    if (e->type == REDIS_REPLY_INTEGER) return e->integer;
    if (e->type == REDIS_REPLY_STRING) return strtoll(e->str, NULL, 10);
    return 0;
}

/* Reads the inspect script's reply into *s. */
static int read_seen(acemq_idem *h, const redisReply *rep, seen *s)
{
    memset(s, 0, sizeof *s);
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 0) return 0; /* gone meanwhile */
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 7 ||
        rep->element[0]->type != REDIS_REPLY_STRING || rep->element[1]->type != REDIS_REPLY_STRING)
        return acemq__idem_fail(h, ACEMQ_EBACKEND, "redis: inspect: the script answered %s",
                                rep->type == REDIS_REPLY_ERROR ? rep->str : "an unexpected reply");
    redisReply **e = rep->element;
    int64_t now = int_of(e[6]);
    s->present = 1;
    s->token = strtoull(e[1]->str, NULL, 10);
    s->lease_until = int_of(e[2]);
    s->expires = int_of(e[3]);
    s->result_len = (size_t)int_of(e[4]);
    s->fingerprint_len = (size_t)int_of(e[5]);
    if (strcmp(e[0]->str, "d") == 0)
        s->state = s->expires > now ? ACEMQ_IDEM_CONFIRMED : ACEMQ_IDEM_EXPIRED;
    else
        s->state = s->lease_until > now ? ACEMQ_IDEM_HELD : ACEMQ_IDEM_ABANDONED;
    return 0;
}

typedef struct counts_ctx {
    redisReply **keys;
    const char *args[1];
    size_t lens[1];
    acemq_idem_counts *out;
} counts_ctx;

static int build_inspect(acemq_idem *h, void *ctx, size_t i, const char **argv, size_t *lens)
{
    counts_ctx *c = ctx;
    return acemq__redis_evalsha_argv(h->self, RS_INSPECT, c->keys[i]->str, c->keys[i]->len, 1,
                                     c->args, c->lens, argv, lens);
}

static int count_keys(acemq_idem *h, redisReply **keys, size_t n, void *arg)
{
    counts_ctx *c = arg;
    redis_idem *r = h->self;
    redisReply *replies[REDIS_PIPELINE_MAX];
    c->keys = keys;
    int rc = acemq__redis_script_many(h, n, build_inspect, c, replies);
    for (size_t i = 0; i < n; i++) {
        seen s = {0};
        if (rc == 0 && replies[i]) rc = read_seen(h, replies[i], &s);
        if (replies[i]) freeReplyObject(replies[i]);
        if (rc != 0 || !s.present) continue;
        acemq_idem_counts *o = c->out;
        o->held += s.state == ACEMQ_IDEM_HELD;
        o->abandoned += s.state == ACEMQ_IDEM_ABANDONED;
        o->confirmed += s.state == ACEMQ_IDEM_CONFIRMED;
        o->expired += s.state == ACEMQ_IDEM_EXPIRED;
        if (s.state != ACEMQ_IDEM_HELD ||
            (o->has_next_lease && o->next_lease_until_ms <= s.lease_until))
            continue;
        size_t idlen = keys[i]->len - r->key_head;
        o->has_next_lease = 1;
        o->next_id_len = idlen;
        memcpy(o->next_id, keys[i]->str + r->key_head,
               idlen < sizeof o->next_id ? idlen : sizeof o->next_id);
        o->next_token = s.token;
        o->next_lease_until_ms = s.lease_until;
    }
    return rc;
}

int acemq__redis_idem_counts(acemq_idem *h, int64_t now_ms, acemq_idem_counts *out)
{
    redis_idem *r = h->self;
    counts_ctx c;
    char now[24] = "";
    if (!r->server_clock) snprintf(now, sizeof now, "%" PRId64, now_ms);
    c.args[0] = now;
    c.lens[0] = strlen(now);
    c.out = out;
    pthread_mutex_lock(&r->lock);
    int rc = acemq__redis_scan(h, count_keys, &c);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int acemq__redis_idem_inspect(acemq_idem *h, const acemq__bytes *id, int64_t now_ms,
                              acemq_idem_record *out)
{
    redis_idem *r = h->self;
    char now[24] = "";
    if (!r->server_clock) snprintf(now, sizeof now, "%" PRId64, now_ms);
    const char *args[1] = {now};
    size_t lens[1] = {strlen(now)};
    seen s = {0};
    pthread_mutex_lock(&r->lock);
    size_t klen = acemq__redis_key(r, id);
    redisReply *reply = NULL;
    int rc = acemq__redis_script(h, RS_INSPECT, klen, 1, args, lens, &reply);
    if (rc == 0) rc = read_seen(h, reply, &s);
    pthread_mutex_unlock(&r->lock);
    if (reply) freeReplyObject(reply);
    if (rc != 0) return rc;
    if (!s.present) return acemq__idem_fail(h, ACEMQ_ENOENT, "redis: no record for this id");
    memset(out, 0, sizeof *out);
    out->state = s.state;
    out->token = s.token;
    if (s.state == ACEMQ_IDEM_HELD || s.state == ACEMQ_IDEM_ABANDONED)
        out->lease_until_ms = s.lease_until;
    else
        out->expires_ms = s.expires;
    out->has_result = s.result_len > 0;
    out->result_len = s.result_len;
    out->fingerprint_len = s.fingerprint_len;
    return 0;
}

/* The record goes; the token counter stays, so its holder's token is
 * never issued again. */
int acemq__redis_idem_forget(acemq_idem *h, const acemq__bytes *id, int64_t now_ms)
{
    (void)now_ms;
    redis_idem *r = h->self;
    pthread_mutex_lock(&r->lock);
    size_t klen = acemq__redis_key(r, id);
    const char *argv[2] = {"DEL", r->key};
    size_t lens[2] = {3, klen};
    redisReply *reply = NULL;
    int rc = acemq__redis_command(h, 2, argv, lens, &reply);
    if (rc == 0) {
        if (reply->type == REDIS_REPLY_INTEGER)
            rc = reply->integer > 0;
        else
            rc = acemq__idem_fail(h, ACEMQ_EBACKEND, "redis: DEL answered %s",
                                  reply->type == REDIS_REPLY_ERROR ? reply->str
                                                                   : "an unexpected reply");
    }
    pthread_mutex_unlock(&r->lock);
    if (reply) freeReplyObject(reply);
    return rc;
}
