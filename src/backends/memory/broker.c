/* broker.c — an in-process broker for unit tests: it takes messages,
 * and fails on request in each of the ways a real broker can (refused
 * connection, nack, dropped connection with confirms lost, confirms that
 * never come, unroutable exchanges). Queues that tests declare get copies
 * of what is published to them, for consumers (consume.c).
 *
 * Confirms are held the way a real broker's are late: each handle keeps the
 * outcomes of what it sent in a queue, and answers them oldest first only
 * when its window is full or a send is collected. So with pipelined sends,
 * confirms of two sends are in flight at once, and a dropped connection
 * loses all of them, as on the wire.
 *
 * Named brokers ("memory:NAME") are shared by every handle on the name and
 * freed with the last one; a mutex guards each, since a test thread reads
 * what a relay thread publishes.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/builtin.h"
#include "backends/memory/broker_self.h"
#include "backends/test_control.h"
#include "broker/broker_backend.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_broker *registry;

/* The broker's mutex, and its condition variable on the monotonic clock
 * (a consumer's wait must not move with the wall clock). */
static int init_sync(shared_broker *s)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&s->arrived, &ca);
    (void)pthread_condattr_destroy(&ca);
    if (rc != 0) return -1;
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        (void)pthread_cond_destroy(&s->arrived);
        return -1;
    }
    return 0;
}

static shared_broker *acquire(const char *name)
{
    pthread_mutex_lock(&registry_lock);
    shared_broker *s = NULL;
    if (*name)
        for (s = registry; s && strcmp(s->name, name) != 0; s = s->next) {
        }
    if (!s) {
        s = calloc(1, sizeof *s);
        if (s && init_sync(s) != 0) {
            free(s);
            s = NULL;
        }
        if (s) {
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
    acemq__mem_free_queues(s);
    (void)pthread_cond_destroy(&s->arrived);
    pthread_mutex_destroy(&s->lock);
    free(s->msgs);
    free(s->unroutable);
    free(s);
}

static void mem_close(acemq_broker *b)
{
    mem_handle *h = b->self;
    if (!h) return;
    acemq__mem_consumer_close(h);
    release_shared(h->sh);
    free(h->q);
    free(h);
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
    return acemq__mem_route(s, m);
}

static int hold(mem_handle *h, acemq_publish_result *res, int outcome, const char *reason)
{
    if (h->q_len == h->q_cap) {
        if (h->q_head > 0) { /* slide the told ones out before growing */
            memmove(h->q, h->q + h->q_head, (h->q_len - h->q_head) * sizeof *h->q);
            h->q_len -= h->q_head;
            h->q_head = 0;
        }
        if (h->q_len == h->q_cap) {
            size_t cap = h->q_cap ? h->q_cap * 2 : 256;
            held *q = realloc(h->q, cap * sizeof *q);
            if (!q) return ACEMQ_ENOMEM;
            h->q = q;
            h->q_cap = cap;
        }
    }
    h->q[h->q_len++] = (held){res, outcome, reason, acemq__broker_now_us()};
    h->q_seq++;
    return 0;
}

/* Tells the oldest held outcomes until `seq` have been told. */
static void tell_until(mem_handle *h, size_t seq)
{
    int64_t at = acemq__broker_now_us();
    while (h->answered_seq < seq && h->q_head < h->q_len) {
        held *x = &h->q[h->q_head++];
        x->res->outcome = x->outcome;
        /* An UNKNOWN (an injected missing confirm) had no answer. */
        x->res->confirm_us =
            x->outcome == ACEMQ_PUBLISH_UNKNOWN ? 0 : acemq__broker_confirm_us(x->sent_at_us, at);
        x->res->reason = x->reason;
        h->answered_seq++;
    }
    if (h->q_head == h->q_len) h->q_head = h->q_len = 0;
}

/* The connection drops: every held confirm is lost, its message stays
 * UNKNOWN (taken or not, nobody can tell). */
static void drop_held(mem_handle *h)
{
    for (size_t i = h->q_head; i < h->q_len; i++)
        h->q[i].res->reason = "lost connection: dropped (injected)";
    h->answered_seq += h->q_len - h->q_head;
    h->q_head = h->q_len = 0;
}

/* What the broker does with one message: keeps it or not, and decides the
 * outcome it will tell later. 1 when the connection dropped before it. */
static int take_one(mem_handle *h, const acemq_broker_msg *m, acemq_publish_result *res,
                    int no_confirm, int *rc)
{
    shared_broker *s = h->sh;
    if (s->fault == ACEMQ__FAULT_DROP && s->fault_after == 0) {
        s->fault = ACEMQ__FAULT_NONE;
        return 1;
    }
    int outcome = ACEMQ_PUBLISH_CONFIRMED;
    const char *reason = NULL;
    if (s->fault == ACEMQ__FAULT_NACK && s->fault_after == 0) {
        outcome = ACEMQ_PUBLISH_NACKED;
        reason = "nack (injected)";
        if (--s->fault_times == 0) s->fault = ACEMQ__FAULT_NONE;
    } else if (is_unroutable(s, m->exchange)) {
        outcome = ACEMQ_PUBLISH_RETURNED;
        reason = "NO_ROUTE";
    } else {
        *rc = store(s, m);
        if (*rc != 0) return 0;
        if (no_confirm) outcome = ACEMQ_PUBLISH_UNKNOWN, reason = "timeout";
    }
    if ((s->fault == ACEMQ__FAULT_NACK || s->fault == ACEMQ__FAULT_DROP) && s->fault_after > 0)
        s->fault_after--;
    *rc = hold(h, res, outcome, reason);
    return 0;
}

static int mem_send(acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                    acemq_publish_result *results)
{
    mem_handle *h = b->self;
    shared_broker *s = h->sh;
    pthread_mutex_lock(&s->lock);
    int fault = s->fault;
    int per_call = fault == ACEMQ__FAULT_REFUSE || fault == ACEMQ__FAULT_NO_CONFIRM;
    if (per_call && --s->fault_times == 0) s->fault = ACEMQ__FAULT_NONE;
    int rc = 0;
    if (per_call && fault == ACEMQ__FAULT_REFUSE) {
        pthread_mutex_unlock(&s->lock);
        return acemq__broker_fail(b, ACEMQ_EIO, "memory broker: connection refused (injected)");
    }
    size_t window = (size_t)b->opts.window;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (take_one(h, &msgs[i], &results[i], per_call, &rc)) {
            drop_held(h);
            for (size_t k = i; k < n; k++)
                results[k].reason = "lost connection: dropped (injected)";
            break; /* the rest stay UNKNOWN, never sent */
        }
        /* A full window: the oldest confirm comes before the next message. */
        if (h->q_len - h->q_head > window) tell_until(h, h->answered_seq + 1);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != 0) {
        /* Out of memory mid-send: what was held is told as lost. */
        drop_held(h);
        return acemq__broker_fail(b, rc, "memory broker: out of memory");
    }
    h->ends[(h->ends_head + h->n_ends++) % ACEMQ_BROKER_MAX_SENDS] = h->q_seq;
    return 0;
}

static int mem_collect(acemq_broker *b)
{
    mem_handle *h = b->self;
    pthread_mutex_lock(&h->sh->lock);
    tell_until(h, h->ends[h->ends_head]);
    pthread_mutex_unlock(&h->sh->lock);
    h->ends_head = (h->ends_head + 1) % ACEMQ_BROKER_MAX_SENDS;
    h->n_ends--;
    return 0;
}

static const acemq__broker_methods memory_methods = {
    .version = ACEMQ__BROKER_METHODS_VERSION,
    .name = "memory",
    .close = mem_close,
    .publish = NULL, /* the core publishes through send + collect */
    .send = mem_send,
    .collect = mem_collect,
    .consume = acemq__mem_consume,
    .next = acemq__mem_next,
    .settle = acemq__mem_settle,
    .ack_many = acemq__mem_ack_many,
};

/* "memory:NAME" or "memory:NAME?unroutable=EXCHANGE": the parameter lets a
 * relay run by the acemq tool meet an unroutable exchange in a test. */
static int open_memory_broker(acemq_broker *b, const char *url)
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
    mem_handle *h = calloc(1, sizeof *h);
    if (!h) return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
    h->sh = acquire(name);
    if (!h->sh) {
        free(h);
        return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
    }
    b->self = h;
    b->methods = &memory_methods;
    if (unroutable) acemq__memory_broker_unroutable(b, unroutable);
    return 0;
}

void acemq__memory_broker_fault(acemq_broker *b, int fault, int times, size_t after)
{
    shared_broker *s = ((mem_handle *)b->self)->sh;
    pthread_mutex_lock(&s->lock);
    s->fault = fault;
    s->fault_times = fault == ACEMQ__FAULT_NONE ? 0 : fault == ACEMQ__FAULT_DROP ? 1 : times;
    if (s->fault_times <= 0) s->fault = ACEMQ__FAULT_NONE;
    s->fault_after = after;
    pthread_mutex_unlock(&s->lock);
}

void acemq__memory_broker_unroutable(acemq_broker *b, const char *exchange)
{
    shared_broker *s = ((mem_handle *)b->self)->sh;
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
    shared_broker *s = ((mem_handle *)b->self)->sh;
    pthread_mutex_lock(&s->lock);
    size_t n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}

int acemq__memory_broker_get(acemq_broker *b, size_t i, acemq__stored_msg *out)
{
    shared_broker *s = ((mem_handle *)b->self)->sh;
    pthread_mutex_lock(&s->lock);
    int rc = i < s->n ? 0 : ACEMQ_ENOENT;
    if (rc == 0) *out = s->msgs[i];
    pthread_mutex_unlock(&s->lock);
    return rc;
}

const acemq__broker_backend acemq__memory_broker_backend = {{"memory", "memory:"},
                                                            open_memory_broker};
