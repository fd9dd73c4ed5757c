/* consume.c — the in-process broker's queues and consumers: what a test
 * declares gets a copy of each message published to it, and a consuming
 * handle takes them one at a time, settles them (ack, requeue, dead-letter)
 * and loses its connection on request (acemq__memory_broker_cut), all as
 * the AMQP adapter does against RabbitMQ (docs/broker.md, "Consuming").
 *
 * Invariants, under the shared broker's lock. A message is in exactly one
 * place: a queue's ready list, or one handle's unacked array (with the queue
 * it came from), until it is acked, dropped or dead-lettered (freed there,
 * copies made for the dead-letter queues). Whatever takes a message out of
 * a handle's hands without the handle settling it (a cut, a handle closed)
 * puts it back at the head of its queue, in tag order, marked redelivered.
 * A handle's tags count from 1 on each consumer (a new channel), and the
 * handle bumps b->generation whenever it learns that its deliveries in hand
 * are void, so the core refuses their tags from then on. Deleted queues stay
 * allocated (flagged) until the broker is freed: a handle may still point
 * at one.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "backends/memory/broker_self.h"
#include "backends/test_control.h"
#include "broker/broker_backend.h"

typedef struct mq_msg {
    struct mq_msg *next; /* in a queue's ready list */
    char *message_id, *exchange, *routing_key, *content_type, *headers_json;
    int attempts, redelivered;
    size_t body_len;
    unsigned char *body;
} mq_msg;

typedef struct binding {
    char exchange[256], key[256];
} binding;

struct mq_queue {
    char name[256];
    char dlx[256];
    int has_dlx, deleted;
    binding *binds;
    size_t n_binds;
    mq_msg *head, *tail;
    size_t ready, unacked;
    mq_queue *next;
};

/* --- messages ------------------------------------------------------------ */

/* The fields of a message to copy into one block; strings may be NULL. */
typedef struct msg_fields {
    const char *message_id, *exchange, *routing_key, *content_type, *headers_json;
    int attempts;
    const void *body;
    size_t body_len;
} msg_fields;

static size_t zlen(const char *z)
{
    return z ? strlen(z) + 1 : 0;
}

static char *put(char **at, const char *z)
{
    if (!z) return NULL;
    size_t n = strlen(z) + 1;
    char *out = memcpy(*at, z, n);
    *at += n;
    return out;
}

static mq_msg *msg_new(const msg_fields *f)
{
    size_t need = sizeof(mq_msg) + zlen(f->message_id) + zlen(f->exchange) + zlen(f->routing_key) +
                  zlen(f->content_type) + zlen(f->headers_json) + f->body_len;
    mq_msg *m = malloc(need);
    if (!m) return NULL;
    char *at = (char *)(m + 1);
    m->next = NULL;
    m->message_id = put(&at, f->message_id);
    m->exchange = put(&at, f->exchange);
    m->routing_key = put(&at, f->routing_key);
    m->content_type = put(&at, f->content_type);
    m->headers_json = put(&at, f->headers_json);
    m->attempts = f->attempts;
    m->redelivered = 0;
    m->body_len = f->body_len;
    m->body = (unsigned char *)at;
    if (f->body_len) memcpy(m->body, f->body, f->body_len);
    return m;
}

/* The headers as the AMQP adapter delivers them: the published ones (a JSON
 * object, else none) with x-acemq-attempts as a number. NULL when out of
 * memory; free() the result. */
static char *delivered_headers(const char *published, int attempts)
{
    json_t *o = published ? json_loads(published, 0, NULL) : NULL;
    if (o && !json_is_object(o)) {
        json_decref(o);
        o = NULL;
    }
    if (!o) o = json_object();
    if (!o) return NULL;
    char *z = NULL;
    if (json_object_set_new(o, "x-acemq-attempts", json_integer(attempts)) == 0)
        z = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return z;
}

/* --- queues -------------------------------------------------------------- */

static mq_queue *find_queue(const shared_broker *s, const char *name)
{
    for (mq_queue *q = s->queues; q; q = q->next)
        if (!q->deleted && strcmp(q->name, name) == 0) return q;
    return NULL;
}

static int bound(const mq_queue *q, const char *exchange, const char *key)
{
    if (exchange[0] == '\0') return strcmp(q->name, key) == 0;
    for (size_t i = 0; i < q->n_binds; i++)
        if (strcmp(q->binds[i].exchange, exchange) == 0 && strcmp(q->binds[i].key, key) == 0)
            return 1;
    return 0;
}

static void push_back(mq_queue *q, mq_msg *m)
{
    m->next = NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    q->ready++;
}

static void push_front(mq_queue *q, mq_msg *m)
{
    m->next = q->head;
    q->head = m;
    if (!q->tail) q->tail = m;
    q->ready++;
}

static mq_msg *pop_front(mq_queue *q)
{
    mq_msg *m = q->head;
    q->head = m->next;
    if (!q->head) q->tail = NULL;
    q->ready--;
    m->next = NULL;
    return m;
}

/* A copy of f into every live queue bound to exchange and key. */
static int route_fields(shared_broker *s, const char *exchange, const char *key,
                        const msg_fields *f)
{
    int routed = 0;
    for (mq_queue *q = s->queues; q; q = q->next) {
        if (q->deleted || !bound(q, exchange, key)) continue;
        mq_msg *m = msg_new(f);
        if (!m) return ACEMQ_ENOMEM;
        push_back(q, m);
        routed = 1;
    }
    if (routed) (void)pthread_cond_broadcast(&s->arrived);
    return 0;
}

int acemq__mem_route(shared_broker *s, const acemq_broker_msg *m)
{
    int any = 0;
    for (mq_queue *q = s->queues; q && !any; q = q->next)
        any = !q->deleted && bound(q, m->exchange, m->routing_key);
    if (!any) return 0; /* no JSON work for brokers without queues */
    char *headers = delivered_headers(m->headers_json, m->attempts);
    if (!headers) return ACEMQ_ENOMEM;
    msg_fields f = {m->message_id, m->exchange, m->routing_key, m->content_type,
                    headers,       m->attempts, m->body,        m->body_len};
    int rc = route_fields(s, m->exchange, m->routing_key, &f);
    free(headers);
    return rc;
}

/* Dead-letters m out of q: copies to q's dead-letter exchange under m's
 * routing key, delivered there as new. m itself is freed by the caller. */
static int dead_letter(shared_broker *s, const mq_queue *q, const mq_msg *m)
{
    if (q->deleted || !q->has_dlx) return 0;
    msg_fields f = {m->message_id,   q->dlx,      m->routing_key, m->content_type,
                    m->headers_json, m->attempts, m->body,        m->body_len};
    return route_fields(s, q->dlx, m->routing_key, &f);
}

static void free_list(mq_msg *m)
{
    while (m) {
        mq_msg *next = m->next;
        free(m);
        m = next;
    }
}

void acemq__mem_free_queues(shared_broker *s)
{
    mq_queue *q = s->queues;
    while (q) {
        mq_queue *next = q->next;
        free_list(q->head);
        free(q->binds);
        free(q);
        q = next;
    }
    s->queues = NULL;
}

/* --- a consumer's deliveries in hand ------------------------------------- */

/* Gives back everything h holds, newest first to the head, so the queue
 * keeps tag order; a deleted queue's messages are dropped. */
static void give_back(mem_handle *h)
{
    for (size_t i = h->n_un; i-- > 0;) {
        unacked *u = &h->un[i];
        u->q->unacked--;
        if (u->q->deleted) {
            free(u->m);
            continue;
        }
        u->m->redelivered = 1;
        push_front(u->q, u->m);
    }
    if (h->n_un) (void)pthread_cond_broadcast(&h->sh->arrived);
    h->n_un = 0;
}

void acemq__mem_consumer_close(mem_handle *h)
{
    pthread_mutex_lock(&h->sh->lock);
    give_back(h);
    pthread_mutex_unlock(&h->sh->lock);
    free(h->un);
    h->un = NULL;
    h->cap_un = 0;
}

/* The connection as the handle finds it on a call: an error (with its text)
 * when it learns now that it was lost or its consumer ended, reconnecting
 * and consuming again when it was, else 0. */
static int check_connection(acemq_broker *b, mem_handle *h)
{
    shared_broker *s = h->sh;
    if (h->cut) {
        h->cut = 0;
        h->down = 1;
        h->cq = NULL;
        b->generation++;
        return acemq__broker_fail(b, ACEMQ_EIO, "memory broker: lost connection: cut (injected)");
    }
    if (h->why[0]) {
        give_back(h);
        h->cq = NULL;
        b->generation++;
        (void)acemq__broker_fail(b, ACEMQ_EBACKEND, "memory broker: %s", h->why);
        h->why[0] = '\0';
        return ACEMQ_EBACKEND;
    }
    if (h->cq && h->cq->deleted) {
        give_back(h); /* drops them: the queue is gone */
        h->cq = NULL;
        b->generation++;
        return acemq__broker_fail(b, ACEMQ_EBACKEND,
                                  "memory broker: the broker cancelled the consumer of queue '%s' "
                                  "(basic.cancel: the queue was deleted)",
                                  h->queue);
    }
    if (h->down) {
        if (s->fault == ACEMQ__FAULT_REFUSE) {
            if (--s->fault_times <= 0) s->fault = ACEMQ__FAULT_NONE;
            return acemq__broker_fail(b, ACEMQ_EIO, "memory broker: connection refused (injected)");
        }
        h->down = 0;
    }
    if (!h->cq) {
        mq_queue *q = find_queue(s, h->queue);
        if (!q)
            return acemq__broker_fail(b, ACEMQ_EBACKEND,
                                      "memory broker: basic.consume: the broker closed the "
                                      "channel: 404 NOT_FOUND - no queue '%s'",
                                      h->queue);
        h->cq = q;
        h->next_tag = 1; /* a new channel numbers from 1 */
    }
    return 0;
}

int acemq__mem_consume(acemq_broker *b, const char *queue, int prefetch)
{
    mem_handle *h = b->self;
    shared_broker *s = h->sh;
    pthread_mutex_lock(&s->lock);
    mq_queue *q = find_queue(s, queue);
    if (q) {
        (void)snprintf(h->queue, sizeof h->queue, "%s", queue);
        h->prefetch = prefetch;
        h->cq = q;
        h->next_tag = 1;
    }
    pthread_mutex_unlock(&s->lock);
    if (!q)
        return acemq__broker_fail(b, ACEMQ_ENOENT,
                                  "memory broker: basic.consume: the broker closed the channel: "
                                  "404 NOT_FOUND - no queue '%s'",
                                  queue);
    return 0;
}

/* Hands the head of h's queue over: 0 with *out, or ACEMQ_ENOMEM with the
 * message left where it was. */
static int deliver(acemq_broker *b, mem_handle *h, acemq_delivery **out)
{
    if (h->n_un == h->cap_un) {
        size_t cap = h->cap_un ? 2 * h->cap_un : 16;
        unacked *un = realloc(h->un, cap * sizeof *un);
        if (!un) return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
        h->un = un;
        h->cap_un = cap;
    }
    mq_msg *m = h->cq->head;
    acemq__delivery_parts p = {
        .tag = h->next_tag,
        .message_id = m->message_id,
        .message_id_len = m->message_id ? strlen(m->message_id) : 0,
        .exchange = m->exchange,
        .exchange_len = m->exchange ? strlen(m->exchange) : 0,
        .routing_key = m->routing_key,
        .routing_key_len = m->routing_key ? strlen(m->routing_key) : 0,
        .content_type = m->content_type,
        .content_type_len = m->content_type ? strlen(m->content_type) : 0,
        .headers_json = m->headers_json,
        .attempts = m->attempts < 0 ? 0 : m->attempts, /* as the AMQP adapter reads it */
        .redelivered = m->redelivered,
        .body_len = m->body_len,
    };
    void *body;
    acemq_delivery *d = acemq__delivery_new(&p, &body);
    if (!d) return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
    if (m->body_len) memcpy(body, m->body, m->body_len);
    h->un[h->n_un++] = (unacked){h->next_tag++, pop_front(h->cq), h->cq};
    h->cq->unacked++;
    *out = d;
    return 0;
}

int acemq__mem_next(acemq_broker *b, int timeout_ms, acemq_delivery **out)
{
    mem_handle *h = b->self;
    shared_broker *s = h->sh;
    struct timespec until;
    if (clock_gettime(CLOCK_MONOTONIC, &until) != 0)
        return acemq__broker_fail(b, ACEMQ_EIO, "memory broker: clock_gettime: %s",
                                  strerror(errno));
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->lock);
    int rc;
    for (;;) {
        rc = check_connection(b, h);
        if (rc) break;
        int room = h->prefetch == 0 || h->n_un < (size_t)h->prefetch;
        if (room && h->cq && h->cq->head) {
            rc = deliver(b, h, out);
            break;
        }
        int w = pthread_cond_timedwait(&s->arrived, &s->lock, &until);
        if (w == ETIMEDOUT) {
            /* One more look: what came with the timeout still counts. */
            rc = check_connection(b, h);
            if (rc == 0 && (h->prefetch == 0 || h->n_un < (size_t)h->prefetch) && h->cq &&
                h->cq->head)
                rc = deliver(b, h, out);
            else if (rc == 0)
                rc = acemq__broker_fail(b, ACEMQ_ENOENT, "no delivery within %d ms", timeout_ms);
            break;
        }
        if (w != 0) {
            rc = acemq__broker_fail(b, ACEMQ_EIO, "memory broker: pthread_cond_timedwait: %s",
                                    strerror(w));
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Why h cannot settle now, as RabbitMQ's answer would be: an error with
 * its text (ACEMQ_EIO learning of a cut, ACEMQ_ESTALE with no consumer),
 * else 0; *closed is set when the broker has closed the channel already,
 * so that whatever is sent on it is ignored. Under the lock. */
static int settle_check(acemq_broker *b, mem_handle *h, uint64_t tag, int *closed)
{
    *closed = 0;
    if (h->cut) return check_connection(b, h); /* ACEMQ_EIO, learning of the cut */
    if (h->down || !h->cq)
        /* The generation moved when the handle learnt this, so the core
         * lets no delivery's tag get here; a made-up tag might. */
        return acemq__broker_fail(b, ACEMQ_ESTALE, "memory broker: no consumer: tag %llu is stale",
                                  (unsigned long long)tag);
    /* The channel is closed already: RabbitMQ ignores what follows on it,
     * and the next call gives everything back. */
    *closed = h->why[0] != '\0';
    return 0;
}

/* The index of tag in h's hands, or h->n_un; with no such tag the broker
 * closes the channel as RabbitMQ does over an unknown delivery tag, and the
 * next call hears of it. The core refuses a tag it did not hand out or saw
 * settled, so that is a backend's own mistake. */
static size_t unacked_at(mem_handle *h, uint64_t tag)
{
    size_t i = 0;
    while (i < h->n_un && h->un[i].tag != tag)
        i++;
    if (i == h->n_un)
        (void)snprintf(h->why, sizeof h->why,
                       "channel closed by the broker: 406 PRECONDITION_FAILED - unknown "
                       "delivery tag %llu",
                       (unsigned long long)tag);
    return i;
}

/* Settles h->un[i] (how: acemq__settle) and takes it out of h's hands. */
static int settle_at(acemq_broker *b, mem_handle *h, size_t i, int how)
{
    shared_broker *s = h->sh;
    int rc = 0;
    unacked u = h->un[i];
    memmove(&h->un[i], &h->un[i + 1], (h->n_un - i - 1) * sizeof *h->un);
    h->n_un--;
    u.q->unacked--;
    if (how == ACEMQ__REQUEUE && !u.q->deleted) {
        u.m->redelivered = 1;
        push_front(u.q, u.m);
        (void)pthread_cond_broadcast(&s->arrived);
        u.m = NULL;
    } else if (how == ACEMQ__REJECT) {
        rc = dead_letter(s, u.q, u.m);
        if (rc) rc = acemq__broker_fail(b, rc, "out of memory");
    }
    free(u.m);
    return rc;
}

int acemq__mem_settle(acemq_broker *b, uint64_t tag, int how)
{
    mem_handle *h = b->self;
    shared_broker *s = h->sh;
    pthread_mutex_lock(&s->lock);
    int closed;
    int rc = settle_check(b, h, tag, &closed);
    if (rc == 0 && !closed) {
        size_t i = unacked_at(h, tag);
        if (i < h->n_un) rc = settle_at(b, h, i, how);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* As RabbitMQ takes them: multiple acknowledges every delivery in hand up
 * to tags[n - 1] (which must be in hand), whether named or not; else each
 * tag is one basic.ack. */
int acemq__mem_ack_many(acemq_broker *b, const uint64_t *tags, size_t n, int multiple)
{
    mem_handle *h = b->self;
    shared_broker *s = h->sh;
    pthread_mutex_lock(&s->lock);
    int closed;
    int rc = settle_check(b, h, tags[n - 1], &closed);
    if (rc == 0 && !closed && multiple) {
        uint64_t top = tags[n - 1];
        if (unacked_at(h, top) < h->n_un) {
            size_t i = 0;
            while (i < h->n_un)
                if (h->un[i].tag <= top)
                    (void)settle_at(b, h, i, ACEMQ__ACK); /* an ack cannot fail */
                else
                    i++;
        }
    } else if (rc == 0 && !closed) {
        for (size_t k = 0; k < n && !h->why[0]; k++) {
            size_t i = unacked_at(h, tags[k]);
            if (i < h->n_un) (void)settle_at(b, h, i, ACEMQ__ACK);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* --- test controls ------------------------------------------------------- */

static shared_broker *shared_of(acemq_broker *b)
{
    return ((mem_handle *)b->self)->sh;
}

int acemq__memory_broker_declare(acemq_broker *b, const char *queue,
                                 const char *dead_letter_exchange)
{
    shared_broker *s = shared_of(b);
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    if (!find_queue(s, queue)) {
        mq_queue *q = calloc(1, sizeof *q);
        if (q) {
            (void)snprintf(q->name, sizeof q->name, "%s", queue);
            q->has_dlx = dead_letter_exchange != NULL;
            if (q->has_dlx) (void)snprintf(q->dlx, sizeof q->dlx, "%s", dead_letter_exchange);
            q->next = s->queues;
            s->queues = q;
        } else {
            rc = ACEMQ_ENOMEM;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int acemq__memory_broker_bind(acemq_broker *b, const char *queue, const char *exchange,
                              const char *routing_key)
{
    shared_broker *s = shared_of(b);
    pthread_mutex_lock(&s->lock);
    mq_queue *q = find_queue(s, queue);
    int rc = q ? 0 : ACEMQ_ENOENT;
    if (q) {
        binding *bs = realloc(q->binds, (q->n_binds + 1) * sizeof *bs);
        if (bs) {
            q->binds = bs;
            (void)snprintf(bs[q->n_binds].exchange, sizeof bs->exchange, "%s", exchange);
            (void)snprintf(bs[q->n_binds].key, sizeof bs->key, "%s", routing_key);
            q->n_binds++;
        } else {
            rc = ACEMQ_ENOMEM;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int acemq__memory_broker_delete(acemq_broker *b, const char *queue)
{
    shared_broker *s = shared_of(b);
    pthread_mutex_lock(&s->lock);
    mq_queue *q = find_queue(s, queue);
    if (q) {
        q->deleted = 1;
        free_list(q->head);
        q->head = q->tail = NULL;
        q->ready = 0;
        (void)pthread_cond_broadcast(&s->arrived);
    }
    pthread_mutex_unlock(&s->lock);
    return q ? 0 : ACEMQ_ENOENT;
}

int acemq__memory_broker_depth(acemq_broker *b, const char *queue, size_t *ready, size_t *in_hand)
{
    shared_broker *s = shared_of(b);
    pthread_mutex_lock(&s->lock);
    const mq_queue *q = find_queue(s, queue);
    if (q && ready) *ready = q->ready;
    if (q && in_hand) *in_hand = q->unacked;
    pthread_mutex_unlock(&s->lock);
    return q ? 0 : ACEMQ_ENOENT;
}

void acemq__memory_broker_cut(acemq_broker *b)
{
    mem_handle *h = b->self;
    pthread_mutex_lock(&h->sh->lock);
    give_back(h);
    if (b->consuming) h->cut = 1;
    (void)pthread_cond_broadcast(&h->sh->arrived);
    pthread_mutex_unlock(&h->sh->lock);
}
