/* broker.c — the backend-neutral half of publishing: options, argument checks,
 * error text, and the promise that every message ends with an outcome.
 * Every error a call returns leaves its own text on the handle (or, for
 * open, on the thread); a success leaves the last error's text as it was. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/broker_backend.h"
#include "broker/broker_internal.h"
#include "core/url.h"
#include "os/mono_time.h"

#if UINTPTR_MAX == UINT64_MAX
/* confirm_us took the padding after outcome: programs built against the
 * header without it still agree on the size and on where reason is. */
_Static_assert(sizeof(acemq_publish_result) == 16 && offsetof(acemq_publish_result, reason) == 8,
               "acemq_publish_result keeps its 64-bit layout");
#endif

/* acemq_broker_stop_waiting may be called from a signal handler: its store
 * must not take a lock. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "atomic_int is lock-free");

void acemq_broker_options_init(acemq_broker_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->window = 256;
    o->confirm_timeout_ms = 30000;
    o->heartbeat_s = 30;
    o->connect_timeout_ms = 5000;
}

static _Thread_local char open_error[512];

int acemq__broker_fail(acemq_broker *b, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(b ? b->errmsg : open_error, b ? sizeof b->errmsg : sizeof open_error, fmt, ap);
    va_end(ap);
    return code;
}

const char *acemq_broker_errmsg(const acemq_broker *b)
{
    return b ? b->errmsg : open_error;
}

acemq__registry acemq__broker_registry;

int acemq_broker_open(acemq_broker **out, const char *url, const acemq_broker_options *o)
{
    if (!out) return acemq__broker_fail(NULL, ACEMQ_EINVAL, "out must not be NULL");
    *out = NULL;
    if (!url) return acemq__broker_fail(NULL, ACEMQ_EINVAL, "url must not be NULL");
    acemq_broker *b = calloc(1, sizeof *b);
    if (!b) return acemq__broker_fail(NULL, ACEMQ_ENOMEM, "out of memory");
    if (o)
        b->opts = *o;
    else
        acemq_broker_options_init(&b->opts);
    int rc;
    char scheme[32];
    const acemq__broker_backend *backend = NULL;
    if (b->opts.window < 1 || b->opts.window > 65535)
        rc = acemq__broker_fail(b, ACEMQ_EINVAL, "window must be within 1..65535");
    else if (b->opts.confirm_timeout_ms < 1)
        rc = acemq__broker_fail(b, ACEMQ_EINVAL, "confirm_timeout_ms must be positive");
    else if (b->opts.heartbeat_s < 0 || b->opts.heartbeat_s > 3600)
        rc = acemq__broker_fail(b, ACEMQ_EINVAL, "heartbeat_s must be within 0..3600");
    else if (b->opts.connect_timeout_ms < 1)
        rc = acemq__broker_fail(b, ACEMQ_EINVAL, "connect_timeout_ms must be positive");
    else if (acemq__url_scheme(url, scheme, sizeof scheme) == 0 &&
             (backend = (const void *)acemq__registry_find(&acemq__broker_registry, scheme)) !=
                 NULL)
        rc = backend->open(b, url);
    else {
        char known[256];
        acemq__registry_names(&acemq__broker_registry, known, sizeof known);
        rc = acemq__broker_fail(b, ACEMQ_EURL, "unknown broker '%s'; known: %s", url, known);
    }
    if (rc != 0) {
        (void)acemq__broker_fail(NULL, rc, "%s", b->errmsg);
        free(b);
        return rc;
    }
    *out = b;
    return 0;
}

void acemq_broker_close(acemq_broker *b)
{
    if (!b) return;
    if (b->methods) b->methods->close(b);
    free(b->held);
    free(b->ack_tags);
    free(b);
}

int acemq_broker_blocked(const acemq_broker *b)
{
    return b ? atomic_load(&b->blocked) : 0;
}

void acemq_broker_stop_waiting(acemq_broker *b)
{
    if (b) atomic_store(&b->stop_waiting, 1);
}

int acemq__broker_stop_asked(const acemq_broker *b)
{
    return atomic_load(&b->stop_waiting) || (b->stop_flag && *b->stop_flag);
}

void acemq__broker_watch_stop(acemq_broker *b, volatile sig_atomic_t *flag)
{
    if (b) b->stop_flag = flag;
}

void acemq__broker_watch_blocked(acemq_broker *b,
                                 void (*fn)(void *ctx, int blocked, const char *reason), void *ctx)
{
    if (!b) return;
    b->on_blocked = fn;
    b->on_blocked_ctx = ctx;
}

int64_t acemq__broker_now_us(void)
{
    return acemq__mono_us();
}

uint32_t acemq__broker_confirm_us(int64_t sent_us, int64_t at_us)
{
    int64_t d = at_us - sent_us;
    return d <= 0 ? 0 : d >= (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

/* The first field of m the backends cannot do without that is missing, or NULL. */
static const char *missing_field(const acemq_broker_msg *m)
{
    if (!m->exchange) return "exchange is NULL";
    if (!m->routing_key) return "routing_key is NULL";
    if (!m->message_id) return "message_id is NULL";
    if (!m->body && m->body_len) return "body is NULL but body_len is not 0";
    return NULL;
}

/* Every result UNKNOWN before the backend runs, and every message checked for
 * what the backends cannot do without. */
static int check_and_reset(acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                           acemq_publish_result *results)
{
    if (!msgs || !results)
        return acemq__broker_fail(b, ACEMQ_EINVAL, "%s must not be NULL",
                                  !msgs ? "msgs" : "results");
    for (size_t i = 0; i < n; i++) {
        results[i].outcome = ACEMQ_PUBLISH_UNKNOWN;
        results[i].confirm_us = 0;
        results[i].reason = "no answer from the broker";
        const char *why = missing_field(&msgs[i]);
        if (why) return acemq__broker_fail(b, ACEMQ_EINVAL, "message %zu: %s", i, why);
    }
    return 0;
}

static int pipelined(const acemq_broker *b)
{
    return b->methods->version >= 2 && b->methods->send && b->methods->collect;
}

int acemq_broker_send(acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                      acemq_publish_result *results)
{
    if (!b) return ACEMQ_EINVAL;
    if (b->consuming)
        return acemq__broker_fail(b, ACEMQ_EINVAL,
                                  "a consuming handle does not publish: open another");
    if (b->outstanding >= ACEMQ_BROKER_MAX_SENDS)
        return acemq__broker_fail(b, ACEMQ_EINVAL, "%d sends outstanding: collect one first",
                                  ACEMQ_BROKER_MAX_SENDS);
    int rc = check_and_reset(b, msgs, n, results);
    if (rc != 0) return rc;
    /* A backend without the pipelined slots publishes at once: its send is
     * answered before it returns, and collect has nothing to wait for. */
    rc = pipelined(b) ? b->methods->send(b, msgs, n, results)
                      : b->methods->publish(b, msgs, n, results);
    if (rc == 0) b->outstanding++;
    return rc;
}

int acemq_broker_collect(acemq_broker *b)
{
    if (!b) return ACEMQ_EINVAL;
    if (b->outstanding == 0) return acemq__broker_fail(b, ACEMQ_ENOENT, "no send outstanding");
    int rc = pipelined(b) ? b->methods->collect(b) : 0;
    if (rc == 0) b->outstanding--;
    return rc;
}

int acemq_broker_publish(acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                         acemq_publish_result *results)
{
    if (!b) return ACEMQ_EINVAL;
    if (b->consuming)
        return acemq__broker_fail(b, ACEMQ_EINVAL,
                                  "a consuming handle does not publish: open another");
    if (n == 0) return 0;
    if (b->outstanding)
        return acemq__broker_fail(b, ACEMQ_EINVAL,
                                  "publish with sends outstanding: collect them first");
    if (!pipelined(b)) {
        int rc = check_and_reset(b, msgs, n, results);
        return rc ? rc : b->methods->publish(b, msgs, n, results);
    }
    int rc = acemq_broker_send(b, msgs, n, results);
    return rc ? rc : acemq_broker_collect(b);
}
