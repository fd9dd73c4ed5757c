/* consume.c — the backend-neutral half of consuming: argument checks, the
 * handle's mode (it publishes or it consumes, never both), deliveries as one
 * block of memory, and the generation in each tag that keeps a delivery
 * from a lost connection from settling another message.
 *
 * Why the generation. Delivery tags are numbered by the channel from 1, and
 * a new channel (after a reconnect, or after the broker closed one) numbers
 * from 1 again. A caller that acks a delivery of the old channel would, by
 * its bare number, ack whichever new delivery has it, and that message
 * would be lost for good. So the backend bumps b->generation whenever the
 * deliveries in hand become void, the core stamps the generation into every
 * tag it hands out, and ack and reject refuse a tag of another generation
 * with ACEMQ_ESTALE without sending anything: the broker delivers that
 * message again anyway. A tag is a plain value, so a copy of a delivery
 * settles as well as the original, once.
 *
 * Why the core keeps the tags in hand (b->held). AMQP has no answer to an
 * ack: one that names a tag the channel no longer holds (settled already)
 * is seen by RabbitMQ only, which closes the channel with 406, and every
 * other delivery then in hand goes back to the queue and comes round again.
 * One caller's double ack would cost all its neighbours a redelivery. So
 * next records each tag it hands out, settle takes it off before the
 * backend sends anything, and a tag not on the list is refused with
 * ACEMQ_EINVAL: nothing goes to the broker. The list is as long as the
 * deliveries in hand (the prefetch bounds it), sorted because tags grow.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "broker/broker_backend.h"
#include "broker/broker_internal.h"

#define TAG_MASK ((UINT64_C(1) << ACEMQ__TAG_BITS) - 1)
#define GEN_MASK UINT64_C(0xFFFF)

uint64_t acemq__broker_tag(const acemq_broker *b, uint64_t backend_tag)
{
    return ((uint64_t)b->generation & GEN_MASK) << ACEMQ__TAG_BITS | (backend_tag & TAG_MASK);
}

/* Appends len bytes and a NUL at *at, for a field of the delivery. */
static const char *put(char **at, const void *bytes, size_t len)
{
    if (!bytes) return NULL;
    char *z = *at;
    if (len) memcpy(z, bytes, len);
    z[len] = '\0';
    *at = z + len + 1;
    return z;
}

acemq_delivery *acemq__delivery_new(const acemq__delivery_parts *p, void **body)
{
    size_t hlen = p->headers_json ? strlen(p->headers_json) : 0;
    size_t need = sizeof(acemq_delivery) + p->message_id_len + p->exchange_len +
                  p->routing_key_len + p->content_type_len + hlen + 5 + p->body_len;
    if (need < p->body_len) return NULL; /* a body_len that wraps the size */
    acemq_delivery *d = malloc(need);
    if (!d) return NULL;
    char *at = (char *)(d + 1);
    d->tag = p->tag;
    d->message_id = put(&at, p->message_id, p->message_id_len);
    d->message_id_len = p->message_id ? p->message_id_len : 0;
    d->exchange = put(&at, p->exchange ? p->exchange : "", p->exchange_len);
    d->routing_key = put(&at, p->routing_key ? p->routing_key : "", p->routing_key_len);
    d->content_type = put(&at, p->content_type, p->content_type_len);
    d->headers_json = put(&at, p->headers_json, hlen);
    d->attempts = p->attempts;
    d->redelivered = p->redelivered;
    d->body = at;
    d->body_len = p->body_len;
    *body = at;
    return d;
}

void acemq_delivery_free(acemq_delivery *d)
{
    free(d);
}

/* Whether the handle's backend fills the consuming slots of version 3. */
static int has_consuming(const acemq_broker *b)
{
    const acemq__broker_methods *m = b->methods;
    return m->version >= 3 && m->consume && m->next && m->settle;
}

int acemq_broker_consume(acemq_broker *b, const char *queue, int prefetch)
{
    if (!b) return ACEMQ_EINVAL;
    if (!queue) return acemq__broker_fail(b, ACEMQ_EINVAL, "queue must not be NULL");
    if (strlen(queue) > 255) return acemq__broker_fail(b, ACEMQ_EINVAL, "queue: at most 255 bytes");
    if (prefetch < 0 || prefetch > 65535)
        return acemq__broker_fail(b, ACEMQ_EINVAL, "prefetch must be within 0..65535");
    if (b->consuming) return acemq__broker_fail(b, ACEMQ_EINVAL, "the handle consumes already");
    if (b->outstanding)
        return acemq__broker_fail(b, ACEMQ_EINVAL, "%d sends outstanding: collect them first",
                                  b->outstanding);
    if (!has_consuming(b))
        return acemq__broker_fail(b, ACEMQ_ENOTSUP, "the %s broker does not consume",
                                  b->methods->name);
    int rc = b->methods->consume(b, queue, prefetch);
    if (rc == 0) b->consuming = 1;
    return rc;
}

/* Room for one more tag in b->held: 0 or ACEMQ_ENOMEM (with its text). */
static int reserve_held(acemq_broker *b)
{
    if (b->n_held < b->cap_held) return 0;
    size_t cap = b->cap_held ? 2 * b->cap_held : 64;
    uint64_t *held = realloc(b->held, cap * sizeof *held);
    if (!held) return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
    b->held = held;
    b->cap_held = cap;
    return 0;
}

/* The first index in b->held whose tag is not below tag. */
static size_t held_at(const acemq_broker *b, uint64_t tag)
{
    size_t lo = 0, hi = b->n_held;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->held[mid] < tag)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Records tag as handed out now, in the current generation (room reserved). */
static void hold_tag(acemq_broker *b, uint64_t tag)
{
    if (b->held_gen != b->generation) { /* those of an earlier generation are void */
        b->n_held = 0;
        b->held_gen = b->generation;
    }
    size_t i = b->n_held && b->held[b->n_held - 1] < tag ? b->n_held : held_at(b, tag);
    if (i < b->n_held && b->held[i] == tag) return; /* a backend that reused a tag */
    memmove(&b->held[i + 1], &b->held[i], (b->n_held - i) * sizeof *b->held);
    b->held[i] = tag;
    b->n_held++;
}

/* Takes tag off the list: 1 when it was on it (in hand, unsettled), else 0. */
static int release_tag(acemq_broker *b, uint64_t tag)
{
    if (b->held_gen != b->generation) return 0;
    size_t i = held_at(b, tag);
    if (i == b->n_held || b->held[i] != tag) return 0;
    memmove(&b->held[i], &b->held[i + 1], (b->n_held - i - 1) * sizeof *b->held);
    b->n_held--;
    return 1;
}

static int not_consuming(acemq_broker *b)
{
    return acemq__broker_fail(b, ACEMQ_EINVAL, "the handle does not consume: call consume first");
}

int acemq_broker_next(acemq_broker *b, int timeout_ms, acemq_delivery **out)
{
    if (out) *out = NULL;
    if (!b) return ACEMQ_EINVAL;
    if (!out) return acemq__broker_fail(b, ACEMQ_EINVAL, "out must not be NULL");
    if (timeout_ms < 0)
        return acemq__broker_fail(b, ACEMQ_EINVAL, "timeout_ms must not be negative");
    if (!b->consuming) return not_consuming(b);
    /* Room first: a delivery taken from the backend can no longer be
     * refused for want of memory to record it. */
    int rc = reserve_held(b);
    if (rc != 0) return rc;
    acemq_delivery *d = NULL;
    rc = b->methods->next(b, timeout_ms, &d);
    if (rc != 0) return rc;
    hold_tag(b, d->tag & TAG_MASK);
    d->tag = acemq__broker_tag(b, d->tag);
    *out = d;
    return 0;
}

/* Takes d's tag off the list of those in hand, as settling it does: 0, or
 * why d cannot be settled (ACEMQ_ESTALE, ACEMQ_EINVAL; nothing taken). */
static int take(acemq_broker *b, const acemq_delivery *d)
{
    if (!d) return acemq__broker_fail(b, ACEMQ_EINVAL, "delivery must not be NULL");
    if (!b->consuming) return not_consuming(b);
    uint64_t gen = d->tag >> ACEMQ__TAG_BITS;
    if (gen != ((uint64_t)b->generation & GEN_MASK))
        return acemq__broker_fail(b, ACEMQ_ESTALE,
                                  "delivery '%s' came on a connection or channel since lost: "
                                  "nothing sent; the broker delivers it again",
                                  d->message_id ? d->message_id : "(no message id)");
    /* Off the list before the backend sends: whatever it answers, the tag
     * has been used (a send that fails loses the connection, and so the
     * generation, anyway). */
    if (!release_tag(b, d->tag & TAG_MASK))
        return acemq__broker_fail(b, ACEMQ_EINVAL,
                                  "delivery '%s' (tag %llu) is settled already, or was not "
                                  "delivered by this handle: nothing sent",
                                  d->message_id ? d->message_id : "(no message id)",
                                  (unsigned long long)(d->tag & TAG_MASK));
    return 0;
}

static int settle(acemq_broker *b, const acemq_delivery *d, int how)
{
    if (!b) return ACEMQ_EINVAL;
    int rc = take(b, d);
    return rc ? rc : b->methods->settle(b, d->tag & TAG_MASK, how);
}

int acemq_broker_ack(acemq_broker *b, const acemq_delivery *d)
{
    return settle(b, d, ACEMQ__ACK);
}

int acemq_broker_reject(acemq_broker *b, const acemq_delivery *d, int requeue)
{
    return settle(b, d, requeue ? ACEMQ__REQUEUE : ACEMQ__REJECT);
}

/* Room for n tags in b->ack_tags: 0, or -1 when out of memory. */
static int reserve_ack_tags(acemq_broker *b, size_t n)
{
    if (n <= b->cap_ack_tags) return 0;
    if (n > SIZE_MAX / sizeof *b->ack_tags) return -1;
    uint64_t *tags = realloc(b->ack_tags, n * sizeof *tags);
    if (!tags) return -1;
    b->ack_tags = tags;
    b->cap_ack_tags = n;
    return 0;
}

static int tag_order(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, c = *(const uint64_t *)y;
    return (a > c) - (a < c);
}

/* Ascending, as ack_many gets them; a caller's batch mostly is already. */
static void sort_tags(uint64_t *tags, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (tags[i - 1] > tags[i]) {
            qsort(tags, n, sizeof *tags, tag_order);
            return;
        }
}

/* Why multiple is safe. A basic.ack with multiple set on tag t settles
 * every delivery of the channel up to t that is not settled yet. The
 * broker numbers deliveries in the order it sends them, so those are the
 * ones the handle handed out below t and not settled since, which is
 * b->held, and none it has not handed out yet (they come after t). With
 * the batch's tags taken off b->held first, multiple settles exactly the
 * batch when b->held has nothing below the batch's highest tag. */
int acemq_broker_ack_many(acemq_broker *b, const acemq_delivery *const *d, size_t n, int *status)
{
    if (!b) return ACEMQ_EINVAL;
    if (n && !d) return acemq__broker_fail(b, ACEMQ_EINVAL, "deliveries must not be NULL");
    const acemq__broker_methods *m = b->methods;
    /* Without the slot, or without room to gather the tags, each goes on
     * its own: slower, never wrong. */
    int together = b->consuming && m->version >= 4 && m->ack_many && reserve_ack_tags(b, n) == 0;
    size_t k = 0;
    int first = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = take(b, d[i]);
        if (rc == 0 && together)
            b->ack_tags[k++] = d[i]->tag & TAG_MASK;
        else if (rc == 0)
            rc = m->settle(b, d[i]->tag & TAG_MASK, ACEMQ__ACK);
        if (status) status[i] = rc;
        if (rc != 0 && (first == 0 || rc == ACEMQ_EIO)) first = rc;
    }
    if (k == 0) return first;
    sort_tags(b->ack_tags, k);
    uint64_t top = b->ack_tags[k - 1];
    int multiple = k > 1 && (b->n_held == 0 || b->held[0] > top);
    int rc = m->ack_many(b, b->ack_tags, k, multiple);
    if (rc == 0) {
        if (multiple) b->multiple_acks++;
        return first;
    }
    /* The send failed: every delivery it carried answers its error. */
    for (size_t i = 0; status && i < n; i++)
        if (status[i] == 0) status[i] = rc;
    return rc;
}

uint64_t acemq__broker_multiple_acks(const acemq_broker *b)
{
    return b ? b->multiple_acks : 0;
}
