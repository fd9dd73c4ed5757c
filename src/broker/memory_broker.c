/* memory_broker.c — an in-process broker for unit tests: it takes messages,
 * confirms them at once, and fails on request in each of the ways a real
 * broker can (refused connection, nack, dropped connection with confirms
 * lost, confirms that never come, unroutable exchanges).
 *
 * Named brokers ("memory:NAME") are shared by every handle on the name and
 * freed with the last one; a mutex guards each, since a test thread reads
 * what a relay thread publishes.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/broker_backend.h"
#include "broker/memory_broker.h"

typedef struct shared_broker {
    char name[128];
    int refs;
    pthread_mutex_t lock;
    acemq__stored_msg *msgs;
    size_t n, cap;
    int fault, fault_times;
    size_t fault_after;
    char (*unroutable)[256];
    size_t n_unroutable;
    struct shared_broker *next;
} shared_broker;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_broker *registry;

static shared_broker *acquire(const char *name)
{
    pthread_mutex_lock(&registry_lock);
    shared_broker *s = NULL;
    if (*name)
        for (s = registry; s && strcmp(s->name, name) != 0; s = s->next) {
        }
    if (!s) {
        s = calloc(1, sizeof *s);
        if (s) {
            (void)pthread_mutex_init(&s->lock, NULL);
            snprintf(s->name, sizeof s->name, "%s", name);
            if (*name) {
                s->next = registry;
                registry = s;
            }
        }
    }
    if (s) s->refs++;
    pthread_mutex_unlock(&registry_lock);
    return s;
}

static void release_shared(shared_broker *s)
{
    pthread_mutex_lock(&registry_lock);
    int last = --s->refs == 0;
    if (last && s->name[0]) {
        shared_broker **p = &registry;
        while (*p != s)
            p = &(*p)->next;
        *p = s->next;
    }
    pthread_mutex_unlock(&registry_lock);
    if (!last) return;
    pthread_mutex_destroy(&s->lock);
    free(s->msgs);
    free(s->unroutable);
    free(s);
}

static void mem_close(acemq_broker *b)
{
    if (b->self) release_shared(b->self);
    b->self = NULL;
}

static int is_unroutable(const shared_broker *s, const char *exchange)
{
    for (size_t i = 0; i < s->n_unroutable; i++)
        if (strcmp(s->unroutable[i], exchange) == 0) return 1;
    return 0;
}

static int store(shared_broker *s, const acemq_broker_msg *m)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        acemq__stored_msg *nm = realloc(s->msgs, cap * sizeof *nm);
        if (!nm) return ACEMQ_ENOMEM;
        s->msgs = nm;
        s->cap = cap;
    }
    acemq__stored_msg *d = &s->msgs[s->n++];
    memset(d, 0, sizeof *d);
    snprintf(d->message_id, sizeof d->message_id, "%s", m->message_id);
    snprintf(d->exchange, sizeof d->exchange, "%s", m->exchange);
    snprintf(d->routing_key, sizeof d->routing_key, "%s", m->routing_key);
    d->attempts = m->attempts;
    d->body_len = m->body_len;
    return 0;
}

static int mem_publish(acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                       acemq_publish_result *results)
{
    shared_broker *s = b->self;
    pthread_mutex_lock(&s->lock);
    int fault = s->fault_times > 0 ? s->fault : ACEMQ__FAULT_NONE;
    if (fault != ACEMQ__FAULT_NONE && --s->fault_times == 0) s->fault = ACEMQ__FAULT_NONE;
    int rc = 0;
    if (fault == ACEMQ__FAULT_REFUSE) {
        rc = acemq__broker_fail(b, ACEMQ_EIO, "memory broker: connection refused (injected)");
    } else {
        for (size_t i = 0; rc == 0 && i < n; i++) {
            if (fault == ACEMQ__FAULT_DROP && i >= s->fault_after) {
                for (size_t k = i; k < n; k++)
                    results[k].reason = "lost connection: dropped (injected)";
                break; /* the rest stay UNKNOWN */
            }
            if (fault == ACEMQ__FAULT_NACK) {
                results[i].outcome = ACEMQ_PUBLISH_NACKED;
                results[i].reason = "nack (injected)";
                continue;
            }
            if (is_unroutable(s, msgs[i].exchange)) {
                results[i].outcome = ACEMQ_PUBLISH_RETURNED;
                results[i].reason = "NO_ROUTE";
                continue;
            }
            rc = store(s, &msgs[i]);
            if (rc != 0) {
                rc = acemq__broker_fail(b, rc, "memory broker: out of memory");
                break;
            }
            if (fault == ACEMQ__FAULT_NO_CONFIRM) {
                results[i].reason = "timeout";
            } else if (fault == ACEMQ__FAULT_DROP) {
                /* Taken before the drop, but the confirm is lost with the
                 * connection: UNKNOWN, the case that makes duplicates. */
                results[i].reason = "lost connection: dropped (injected)";
            } else {
                results[i].outcome = ACEMQ_PUBLISH_CONFIRMED;
                results[i].reason = NULL;
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static const acemq__broker_methods memory_methods = {
    .version = ACEMQ__BROKER_METHODS_VERSION,
    .name = "memory",
    .close = mem_close,
    .publish = mem_publish,
};

/* "memory:NAME" or "memory:NAME?unroutable=EXCHANGE": the parameter lets a
 * relay run by the acemq tool meet an unroutable exchange in a test. */
int acemq__broker_open_memory(acemq_broker *b, const char *url)
{
    char name[sizeof((shared_broker *)0)->name];
    const char *rest = url + strlen("memory:");
    const char *q = strchr(rest, '?');
    size_t len = q ? (size_t)(q - rest) : strlen(rest);
    if (len >= sizeof name)
        return acemq__broker_fail(b, ACEMQ_EURL, "memory broker: name too long");
    memcpy(name, rest, len);
    name[len] = '\0';
    const char *unroutable = NULL;
    if (q) {
        if (strncmp(q + 1, "unroutable=", 11) != 0 || !q[12])
            return acemq__broker_fail(b, ACEMQ_EURL,
                                      "memory broker: the only parameter is unroutable=EXCHANGE");
        unroutable = q + 12;
    }
    shared_broker *s = acquire(name);
    if (!s) return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
    b->self = s;
    b->methods = &memory_methods;
    if (unroutable) acemq__memory_broker_unroutable(b, unroutable);
    return 0;
}

void acemq__memory_broker_fault(acemq_broker *b, int fault, int times, size_t after)
{
    shared_broker *s = b->self;
    pthread_mutex_lock(&s->lock);
    s->fault = fault;
    s->fault_times = fault == ACEMQ__FAULT_NONE ? 0 : fault == ACEMQ__FAULT_DROP ? 1 : times;
    s->fault_after = after;
    pthread_mutex_unlock(&s->lock);
}

void acemq__memory_broker_unroutable(acemq_broker *b, const char *exchange)
{
    shared_broker *s = b->self;
    pthread_mutex_lock(&s->lock);
    char(*u)[256] = realloc(s->unroutable, (s->n_unroutable + 1) * sizeof *u);
    if (u) {
        s->unroutable = u;
        snprintf(u[s->n_unroutable], sizeof u[0], "%s", exchange);
        s->n_unroutable++;
    }
    pthread_mutex_unlock(&s->lock);
}

size_t acemq__memory_broker_count(acemq_broker *b)
{
    shared_broker *s = b->self;
    pthread_mutex_lock(&s->lock);
    size_t n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}

int acemq__memory_broker_get(acemq_broker *b, size_t i, acemq__stored_msg *out)
{
    shared_broker *s = b->self;
    pthread_mutex_lock(&s->lock);
    int rc = i < s->n ? 0 : ACEMQ_ENOENT;
    if (rc == 0) *out = s->msgs[i];
    pthread_mutex_unlock(&s->lock);
    return rc;
}
