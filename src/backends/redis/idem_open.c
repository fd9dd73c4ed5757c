/* idem_open.c — opening the Redis store (redis://...): the URL, the first
 * connection, the server's version, the scripts, and the check of what the
 * server may forget after a crash; closing it. Registered as "redis" in backends/builtin.c.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/redis/idem_redis.h"
#include "core/log.h"

/* A CONFIG GET answer's value, or NULL when the server answered otherwise. */
static const char *config_value(const redisReply *reply)
{
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) return NULL;
    const redisReply *v = reply->element[1];
    return v->type == REDIS_REPLY_STRING ? v->str : NULL;
}

/* Servers already warned about in this process: each is named once, not
 * once per handle (a consumer opens one per thread). */
#define WARNED_MAX 32
static pthread_mutex_t warned_lock = PTHREAD_MUTEX_INITIALIZER;
static char warned[WARNED_MAX][370];
static int n_warned;

static int first_warning(const char *server)
{
    pthread_mutex_lock(&warned_lock);
    int first = 1;
    for (int i = 0; i < n_warned && first; i++)
        first = strcmp(warned[i], server) != 0;
    if (first && n_warned < WARNED_MAX)
        snprintf(warned[n_warned++], sizeof warned[0], "%s", server);
    pthread_mutex_unlock(&warned_lock);
    return first;
}

/* Reads appendonly and appendfsync and warns, once per server and process,
 * when a crash can lose writes Redis already acknowledged: claims,
 * confirmations and the token counter. Refuses nothing: the operator
 * decides. Fails only when the connection does. */
static int check_durability(acemq_idem *h)
{
    redis_idem *r = h->self;
    const char *names[2] = {"appendonly", "appendfsync"};
    char values[2][32];
    const char *refused = NULL;
    char why[256] = "";
    for (int i = 0; i < 2 && !refused; i++) {
        const char *argv[3] = {"CONFIG", "GET", names[i]};
        redisReply *reply = NULL;
        int rc = acemq__redis_command(h, 3, argv, NULL, &reply);
        if (rc != 0) return rc;
        const char *v = config_value(reply);
        if (v) {
            snprintf(values[i], sizeof values[i], "%s", v);
        } else {
            refused = names[i];
            snprintf(why, sizeof why, "%s",
                     reply->type == REDIS_REPLY_ERROR ? reply->str : "an unexpected answer");
        }
        freeReplyObject(reply);
    }
    char server[300], seen[370];
    snprintf(server, sizeof server, "%s:%d/%d", r->target.host, r->target.port, r->target.db);
    /* Keyed by what was found too: a server reconfigured, or another on a
     * port used before, is a new story. */
    snprintf(seen, sizeof seen, "%s %s %s", server, refused ? "?" : values[0],
             refused ? "?" : values[1]);
    if (refused) {
        if (first_warning(seen))
            acemq__log_warning("redis %s: durability could not be checked (CONFIG GET %s: %s); "
                               "unless appendonly is yes and appendfsync always, a crash can "
                               "forget claims, confirmations and the token counter",
                               server, refused, why);
        return 0;
    }
    if (strcmp(values[0], "yes") != 0) {
        if (first_warning(seen))
            acemq__log_warning(
                "redis %s: appendonly is %s: a crash or restart forgets every claim and "
                "confirmation written since the last RDB snapshot (all of them without one), and "
                "the token counter goes back with them: duplicates are processed again and a "
                "stalled holder's token can be issued again; set appendonly yes, appendfsync "
                "always",
                server, values[0]);
    } else if (strcmp(values[1], "always") != 0) {
        if (first_warning(seen))
            acemq__log_warning("redis %s: appendfsync is %s: a crash of the machine forgets the "
                               "last %s of claims, confirmations and token counter increments; "
                               "set appendfsync always",
                               server, values[1],
                               strcmp(values[1], "everysec") == 0 ? "second or so"
                                                                  : "seconds (until the kernel "
                                                                    "writes the file)");
    }
    return 0;
}

/* The claim script's SET ... NX GET needs Redis 7.0: an older server is
 * refused here, with its version, rather than failing every claim. A
 * server that does not say (INFO denied by its ACL) is let through. */
#define MIN_MAJOR 7

static int check_version(acemq_idem *h)
{
    const char *argv[2] = {"INFO", "server"};
    redisReply *reply = NULL;
    int rc = acemq__redis_command(h, 2, argv, NULL, &reply);
    if (rc != 0) return rc;
    const char *at =
        reply->type == REDIS_REPLY_STRING ? strstr(reply->str, "redis_version:") : NULL;
    if (at) {
        at += strlen("redis_version:");
        char version[32];
        size_t n = strcspn(at, "\r\n");
        snprintf(version, sizeof version, "%.*s",
                 (int)(n < sizeof version ? n : sizeof version - 1), at);
        if (atoi(version) < MIN_MAJOR)
            rc = acemq__idem_fail(h, ACEMQ_EBACKEND,
                                  "redis: the server is version %s; the store needs 7.0 or later",
                                  version);
    }
    freeReplyObject(reply);
    return rc;
}

static void redis_close(acemq_idem *h)
{
    redis_idem *r = h->self;
    if (!r) return;
    acemq__redis_drop(r);
    acemq__redis_target_free(&r->target);
    pthread_mutex_destroy(&r->lock);
    free(r);
    h->self = NULL;
}

static int redis_open(acemq_idem *h, const acemq__url *url)
{
    if (h->opts.flags & ACEMQ_IDEM_CONFIRM_IN_CALLER_TX)
        return acemq__idem_fail(h, ACEMQ_EINVAL,
                                "redis: ACEMQ_IDEM_CONFIRM_IN_CALLER_TX needs a caller's database "
                                "connection; a Redis store has none");
    redis_idem *r = calloc(1, sizeof *r);
    if (!r) return acemq__idem_fail(h, ACEMQ_ENOMEM, "redis: out of memory");
    if (pthread_mutex_init(&r->lock, NULL) != 0) {
        free(r);
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "redis: cannot create the handle's mutex");
    }
    h->self = r;
    h->methods = &acemq__redis_idem_methods;
    int rc = acemq__redis_parse_url(h, url, &r->target, r->prefix, sizeof r->prefix);
    if (rc == 0) {
        const acemq_clock *sys = acemq_clock_system();
        r->server_clock = h->clock.now_ms == sys->now_ms && h->clock.ctx == sys->ctx;
        snprintf(r->token_key, sizeof r->token_key, "{%s}:token", r->prefix);
        r->key_head = (size_t)snprintf(r->key, sizeof r->key, "{%s}:id:", r->prefix);
        pthread_mutex_lock(&r->lock);
        rc = acemq__redis_ensure(h);
        if (rc == 0) rc = check_version(h);
        if (rc == 0) rc = acemq__redis_load_scripts(h);
        if (rc == 0) rc = check_durability(h);
        pthread_mutex_unlock(&r->lock);
    }
    if (rc != 0) {
        redis_close(h);
        h->methods = NULL;
    }
    return rc;
}

const acemq__idem_backend acemq__redis_idem_backend = {{"redis", "redis://"}, redis_open};

void acemq__redis_idem_close(acemq_idem *h)
{
    redis_close(h);
}
