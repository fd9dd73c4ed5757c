/* consume.c — the AMQP 0-9-1 broker's consuming side, on rabbitmq-c:
 * basic.qos and basic.consume (manual acknowledgements) on a channel of the
 * consumer's own, deliveries read frame by frame under the caller's
 * deadline, acks and nacks, and consuming again after a loss.
 *
 * Invariants. Delivery tags count from 1 on each channel, so a tag means
 * something only on the channel that delivered it: whatever ends that
 * channel (a lost connection, the broker's channel.close or basic.cancel)
 * bumps the handle's generation at once, and the core refuses the old
 * deliveries' tags from then on (broker/consume.c); RabbitMQ gives their
 * messages back to the queue itself. A delivery is read whole (method,
 * content header, body frames) before next returns: a delivery cut short
 * leaves the stream mid-message, which only a new connection repairs, so
 * any failure while reading one drops the connection.
 *
 * rabbitmq-c sends heartbeats and checks the broker's while it waits for a
 * frame (amqp_simple_wait_frame_noblock), so a waiting next keeps the
 * connection alive, and a broker silent for twice the heartbeat ends the
 * wait with AMQP_STATUS_HEARTBEAT_TIMEOUT: a lost connection.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <amqp_framing.h>

#include "backends/amqp/amqp_self.h"
#include "broker/broker_backend.h"
#include "os/mono_time.h"

/* The connection is gone or cannot be trusted: dropped (which voids the
 * deliveries in hand), ACEMQ_EIO with "lost connection: ...". */
static int lost(acemq_broker *b, amqp_self *s, const char *what, int st, int e)
{
    char words[200];
    if ((st == AMQP_STATUS_SOCKET_ERROR || st == AMQP_STATUS_TCP_ERROR) && e)
        (void)snprintf(words, sizeof words, "%s (%s)", amqp_error_string2(st), strerror(e));
    else
        (void)snprintf(words, sizeof words, "%s", amqp_error_string2(st));
    acemq__amqp_drop_connection(s);
    return acemq__broker_fail(b, ACEMQ_EIO, "amqp: lost connection: %s%s", what, words);
}

/* The channel's consumer has ended (the broker's doing): the deliveries in
 * hand are void, and the next call consumes again after the back-off. */
static void consumer_ended(amqp_self *s)
{
    s->consume_open = 0;
    s->owner->generation++;
    s->lost_at_ms = acemq__mono_ms();
}

/* The broker closed channel ch during an RPC of ours or while we waited:
 * it hears close-ok, so the channel number is free again. 0, or ACEMQ_EIO
 * with the connection dropped when even that cannot be sent. */
static int close_ok(acemq_broker *b, amqp_self *s, amqp_channel_t ch)
{
    amqp_channel_close_ok_t ok = {0};
    errno = 0;
    int st = amqp_send_method(s->conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    if (st == AMQP_STATUS_OK) return 0;
    return lost(b, s, "channel.close-ok: ", st, errno);
}

/* What a failed consumer RPC means for the handle, as in
 * acemq__amqp_open_consumer. */
static int refused(acemq_broker *b, amqp_self *s, amqp_channel_t ch, const char *what)
{
    amqp_rpc_reply_t r = amqp_get_rpc_reply(s->conn);
    char msg[480];
    acemq__amqp_describe_reply(msg, sizeof msg, what, r);
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD &&
        r.reply.decoded) {
        int code = ((const amqp_channel_close_t *)r.reply.decoded)->reply_code;
        (void)acemq__broker_fail(b, ACEMQ_EBACKEND, "amqp: queue '%s': %s", s->queue, msg);
        if (close_ok(b, s, ch) != 0) return ACEMQ_EIO;
        return code == AMQP_NOT_FOUND        ? ACEMQ_ENOENT
               : code == AMQP_ACCESS_REFUSED ? ACEMQ_EAUTH
                                             : ACEMQ_EBACKEND;
    }
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_ok_t ok = {0};
        /* A courtesy: the connection is dropped right after either way. */
        (void)amqp_send_method(s->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    }
    acemq__amqp_drop_connection(s);
    return acemq__broker_fail(b, ACEMQ_EIO, "amqp: queue '%s': %s", s->queue, msg);
}

int acemq__amqp_open_consumer(acemq_broker *b, amqp_self *s)
{
    /* Numbers of their own (1001..2000), apart from the confirm channel's
     * (1..1000), and a new one per open: nothing the broker still sends for
     * an earlier consumer is taken for this one's. */
    amqp_channel_t ch = (amqp_channel_t)(1001 + s->consume_channel % 1000);
    s->consume_channel = ch;
    if (!amqp_channel_open(s->conn, ch)) return refused(b, s, ch, "channel.open");
    if (!amqp_basic_qos(s->conn, ch, 0, (uint16_t)s->prefetch, 0))
        return refused(b, s, ch, "basic.qos");
    /* The broker names the consumer (an empty tag); manual acks. */
    if (!amqp_basic_consume(s->conn, ch, amqp_cstring_bytes(s->queue), amqp_empty_bytes, 0, 0, 0,
                            amqp_empty_table))
        return refused(b, s, ch, "basic.consume");
    s->consume_open = 1;
    return 0;
}

int acemq__amqp_consume(acemq_broker *b, const char *queue, int prefetch)
{
    amqp_self *s = b->self;
    s->queue = strdup(queue);
    if (!s->queue) return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
    s->prefetch = prefetch;
    int rc;
    if (s->conn) {
        rc = acemq__amqp_open_consumer(b, s);
    } else { /* lost while it published: connect as publish would */
        int64_t wait = s->lost_at_ms + s->backoff_ms - acemq__mono_ms();
        if (wait > 0) acemq__sleep_ms(wait);
        rc = acemq__amqp_connect(b, s);
    }
    if (rc) {
        /* Still a publishing handle; the confirm channel, if the connection
         * still has it, is as it was, and ensure_ready reopens it if not. */
        free(s->queue);
        s->queue = NULL;
    }
    return rc;
}

/* Connects or consumes again, after the back-off, when the consumer is
 * gone: 0; ACEMQ_EIO (no connection); ACEMQ_EBACKEND (the broker refused
 * the queue, e.g. deleted: 404); ACEMQ_ENOMEM. A back-off that outlasts
 * timeout_ms is waited for only that long, and answered ACEMQ_ENOENT (no
 * delivery in time): the caller's loop, and its stop flag, get their turn,
 * and the loss itself was reported by the call that saw it. */
static int ensure_consuming(acemq_broker *b, amqp_self *s, int timeout_ms)
{
    if (s->conn && s->consume_open) return 0;
    int64_t wait = s->lost_at_ms + s->backoff_ms - acemq__mono_ms();
    if (wait > timeout_ms) {
        if (timeout_ms > 0) acemq__sleep_ms(timeout_ms);
        return acemq__broker_fail(b, ACEMQ_ENOENT, "amqp: not connected; trying again in %lld ms",
                                  (long long)(wait - timeout_ms));
    }
    if (wait > 0) acemq__sleep_ms(wait);
    int rc = s->conn ? acemq__amqp_open_consumer(b, s) : acemq__amqp_connect(b, s);
    if (rc == 0) {
        s->backoff_ms = BACKOFF_MIN_MS;
        return 0;
    }
    s->lost_at_ms = acemq__mono_ms();
    s->backoff_ms = s->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff_ms * 2;
    if (rc == ACEMQ_ENOMEM) return rc;
    /* With the connection kept, the broker refused the queue; without it,
     * whatever it was (a refused login too) is an outage to retry. */
    return s->conn ? ACEMQ_EBACKEND : ACEMQ_EIO;
}

/* errno is cleared first: lost() reports it, and a stale one from an
 * earlier call would name the wrong cause. */
static int read_frame(amqp_self *s, amqp_frame_t *f, int64_t deadline)
{
    struct timeval tv = acemq__amqp_ms_to_tv(deadline - acemq__mono_ms());
    errno = 0;
    return amqp_simple_wait_frame_noblock(s->conn, f, &tv);
}

/* The broker's connection.close: close-ok as a courtesy (the connection is
 * dropped right after either way), then ACEMQ_EIO with its code and text. */
static int closed_by_broker(acemq_broker *b, amqp_self *s, const amqp_connection_close_t *m)
{
    amqp_connection_close_ok_t ok = {0};
    char words[320];
    (void)snprintf(words, sizeof words, "%u %.*s", (unsigned)m->reply_code, (int)m->reply_text.len,
                   (const char *)m->reply_text.bytes);
    (void)amqp_send_method(s->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    acemq__amqp_drop_connection(s);
    return acemq__broker_fail(b, ACEMQ_EIO, "amqp: lost connection: closed by the broker: %s",
                              words);
}

/* The next frame on the consumer's channel while a delivery is read, frames
 * of other channels skipped (the idle confirm channel's, an earlier
 * consumer's), except the connection's own: connection.close ends the read
 * with the broker's words (ACEMQ_EIO, *rc set, returns -1) rather than as an
 * unexplained end of the socket, and connection.blocked is kept. Else
 * rabbitmq-c's status. */
static int read_own_frame(acemq_broker *b, amqp_self *s, amqp_frame_t *f, int64_t deadline, int *rc)
{
    for (;;) {
        int st = read_frame(s, f, deadline);
        if (st != AMQP_STATUS_OK || f->channel == s->consume_channel) return st;
        if (f->channel != 0 || f->frame_type != AMQP_FRAME_METHOD) continue;
        const amqp_method_t *mt = &f->payload.method;
        if (mt->id == AMQP_CONNECTION_CLOSE_METHOD) {
            *rc = closed_by_broker(b, s, mt->decoded);
            return -1;
        }
        (void)acemq__amqp_take_blocked(s, mt);
    }
}

static size_t short_len(amqp_bytes_t b)
{
    return b.len;
}

/* The rest of a delivery after its basic.deliver: the content header and
 * the body frames, each waited for up to confirm_timeout_ms (the handle's
 * bound on a broker that stops half-way through an answer). */
static int read_delivery(acemq_broker *b, amqp_self *s, const amqp_basic_deliver_t *m,
                         acemq_delivery **out)
{
    /* The method's fields live in rabbitmq-c's frame memory: copied now. */
    char exchange[256], key[256];
    size_t exchange_len = short_len(m->exchange) < 255 ? short_len(m->exchange) : 255;
    size_t key_len = short_len(m->routing_key) < 255 ? short_len(m->routing_key) : 255;
    if (exchange_len) memcpy(exchange, m->exchange.bytes, exchange_len);
    if (key_len) memcpy(key, m->routing_key.bytes, key_len);
    uint64_t tag = m->delivery_tag;
    int redelivered = m->redelivered != 0;

    amqp_frame_t f;
    int64_t deadline = acemq__mono_ms() + b->opts.confirm_timeout_ms;
    int rc = 0;
    int st = read_own_frame(b, s, &f, deadline, &rc);
    if (rc) return rc;
    if (st != AMQP_STATUS_OK) return lost(b, s, "reading a delivery: ", st, errno);
    if (f.frame_type != AMQP_FRAME_HEADER) {
        acemq__amqp_drop_connection(s);
        return acemq__broker_fail(b, ACEMQ_EIO,
                                  "amqp: lost connection: a delivery came without its content "
                                  "header (frame type %u)",
                                  (unsigned)f.frame_type);
    }
    const amqp_basic_properties_t *p = f.payload.properties.decoded;
    uint64_t body_size = f.payload.properties.body_size;
    if (body_size > SIZE_MAX / 2) {
        acemq__amqp_drop_connection(s);
        return acemq__broker_fail(b, ACEMQ_EIO,
                                  "amqp: lost connection: a delivery of %llu bytes cannot be held",
                                  (unsigned long long)body_size);
    }
    acemq__delivery_parts parts = {
        .tag = tag,
        .exchange = exchange,
        .exchange_len = exchange_len,
        .routing_key = key,
        .routing_key_len = key_len,
        .redelivered = redelivered,
        .body_len = (size_t)body_size,
    };
    char *headers = NULL;
    if (acemq__amqp_props_parts(p, &parts, &headers) != 0) {
        acemq__amqp_drop_connection(s);
        return acemq__broker_fail(b, ACEMQ_ENOMEM,
                                  "out of memory for a delivery's headers; connection dropped "
                                  "(the broker delivers it again)");
    }
    void *body_v;
    acemq_delivery *d = acemq__delivery_new(&parts, &body_v);
    free(headers);
    if (!d) {
        acemq__amqp_drop_connection(s);
        return acemq__broker_fail(b, ACEMQ_ENOMEM,
                                  "out of memory for a delivery of %llu bytes; connection dropped "
                                  "(the broker delivers it again)",
                                  (unsigned long long)body_size);
    }
    unsigned char *body = body_v;
    size_t got = 0;
    while (got < (size_t)body_size) {
        st = read_own_frame(b, s, &f, deadline, &rc);
        if (rc || st != AMQP_STATUS_OK) {
            acemq_delivery_free(d);
            return rc ? rc : lost(b, s, "reading a delivery's body: ", st, errno);
        }
        if (f.frame_type != AMQP_FRAME_BODY ||
            f.payload.body_fragment.len > (size_t)body_size - got) {
            acemq_delivery_free(d);
            acemq__amqp_drop_connection(s);
            return acemq__broker_fail(b, ACEMQ_EIO,
                                      "amqp: lost connection: a delivery's body came cut short "
                                      "or too long (%zu of %llu bytes)",
                                      got, (unsigned long long)body_size);
        }
        memcpy(body + got, f.payload.body_fragment.bytes, f.payload.body_fragment.len);
        got += f.payload.body_fragment.len;
        /* Decoded frames stay in rabbitmq-c's pools until released: a big
         * body would hold them all at once. */
        amqp_maybe_release_buffers_on_channel(s->conn, s->consume_channel);
    }
    /* The core keeps the generation in the tag's top 16 bits; a channel
     * that ever numbered this far (2^48 deliveries) starts again. */
    if (tag >> ACEMQ__TAG_BITS) {
        acemq_delivery_free(d);
        acemq__amqp_drop_connection(s);
        return acemq__broker_fail(b, ACEMQ_EIO,
                                  "amqp: delivery tag %llu past 2^48: connection dropped to "
                                  "number from 1 again (the broker delivers it again)",
                                  (unsigned long long)tag);
    }
    *out = d;
    return 0;
}

/* basic.cancel from the broker: the queue is gone (or its node). The
 * channel is closed too, so nothing of this consumer lingers on it. */
static int cancelled(acemq_broker *b, amqp_self *s)
{
    amqp_channel_t ch = s->consume_channel;
    consumer_ended(s);
    (void)acemq__broker_fail(b, ACEMQ_EBACKEND,
                             "amqp: the broker cancelled the consumer of queue '%s' "
                             "(basic.cancel: the queue was deleted, or its node is down)",
                             s->queue);
    amqp_rpc_reply_t r = amqp_channel_close(s->conn, ch, AMQP_REPLY_SUCCESS);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        char msg[480];
        acemq__amqp_describe_reply(msg, sizeof msg, "channel.close", r);
        acemq__amqp_drop_connection(s);
        return acemq__broker_fail(b, ACEMQ_EIO,
                                  "amqp: the broker cancelled the consumer of queue '%s'; then %s",
                                  s->queue, msg);
    }
    return ACEMQ_EBACKEND;
}

/* Handles one method frame while next waits: 1 with *rc set when next
 * returns, else 0. */
static int take_method(acemq_broker *b, amqp_self *s, const amqp_frame_t *f, acemq_delivery **out,
                       int *rc)
{
    const amqp_method_t *mt = &f->payload.method;
    int own = f->channel == s->consume_channel;
    switch (mt->id) {
    case AMQP_BASIC_DELIVER_METHOD:
        if (!own) return 0; /* an earlier consumer's: the broker gives it back */
        *rc = read_delivery(b, s, mt->decoded, out);
        return 1;
    case AMQP_BASIC_CANCEL_METHOD:
        if (!own) return 0;
        *rc = cancelled(b, s);
        return 1;
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *m = mt->decoded;
        char words[320];
        (void)snprintf(words, sizeof words, "%u %.*s", (unsigned)m->reply_code,
                       (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        if (!own) { /* the idle confirm channel: publish reopens it if ever */
            if (f->channel == s->channel) s->channel_open = 0;
            *rc = close_ok(b, s, f->channel);
            return *rc != 0;
        }
        consumer_ended(s);
        (void)acemq__broker_fail(b, ACEMQ_EBACKEND,
                                 "amqp: queue '%s': the broker closed the consumer's channel: %s",
                                 s->queue, words);
        *rc = close_ok(b, s, f->channel);
        if (*rc == 0) *rc = ACEMQ_EBACKEND;
        return 1;
    }
    case AMQP_CONNECTION_CLOSE_METHOD:
        *rc = closed_by_broker(b, s, mt->decoded);
        return 1;
    default:
        (void)acemq__amqp_take_blocked(s, mt);
        return 0;
    }
}

int acemq__amqp_next(acemq_broker *b, int timeout_ms, acemq_delivery **out)
{
    amqp_self *s = b->self;
    int64_t deadline = acemq__mono_ms() + timeout_ms;
    int rc = ensure_consuming(b, s, timeout_ms);
    if (rc) return rc;
    for (;;) {
        amqp_frame_t f;
        int st = read_frame(s, &f, deadline);
        if (st == AMQP_STATUS_TIMEOUT)
            return acemq__broker_fail(b, ACEMQ_ENOENT, "no delivery within %d ms", timeout_ms);
        if (st != AMQP_STATUS_OK) return lost(b, s, "", st, errno);
        if (f.frame_type == AMQP_FRAME_METHOD && take_method(b, s, &f, out, &rc)) {
            if (s->conn) amqp_maybe_release_buffers(s->conn);
            return rc;
        }
        /* A content frame outside a delivery on the consumer's channel
         * means the stream is out of step: only a new connection mends it. */
        if (f.frame_type != AMQP_FRAME_METHOD && f.channel == s->consume_channel) {
            acemq__amqp_drop_connection(s);
            return acemq__broker_fail(b, ACEMQ_EIO,
                                      "amqp: lost connection: a content frame outside a delivery");
        }
        amqp_maybe_release_buffers(s->conn);
    }
}

int acemq__amqp_settle(acemq_broker *b, uint64_t tag, int how)
{
    amqp_self *s = b->self;
    /* The generation moved when the consumer ended, so the core lets no
     * delivery's tag through then; a made-up one might come. */
    if (!s->conn || !s->consume_open)
        return acemq__broker_fail(b, ACEMQ_ESTALE, "amqp: no consumer now: tag %llu is stale",
                                  (unsigned long long)tag);
    errno = 0;
    int st = how == ACEMQ__ACK
                 ? amqp_basic_ack(s->conn, s->consume_channel, tag, 0)
                 : amqp_basic_nack(s->conn, s->consume_channel, tag, 0, how == ACEMQ__REQUEUE);
    if (st != AMQP_STATUS_OK)
        return lost(b, s, how == ACEMQ__ACK ? "basic.ack: " : "basic.nack: ", st, errno);
    return 0;
}

int acemq__amqp_ack_many(acemq_broker *b, const uint64_t *tags, size_t n, int multiple)
{
    amqp_self *s = b->self;
    if (!s->conn || !s->consume_open)
        return acemq__broker_fail(b, ACEMQ_ESTALE, "amqp: no consumer now: %zu tags are stale", n);
    errno = 0;
    if (multiple || n == 1) {
        int st = amqp_basic_ack(s->conn, s->consume_channel, tags[n - 1], multiple);
        return st == AMQP_STATUS_OK ? 0 : lost(b, s, "basic.ack: ", st, errno);
    }
    for (size_t i = 0; i < n; i++) {
        amqp_basic_ack_t ack = {.delivery_tag = tags[i], .multiple = 0};
        int st =
            acemq__frames_add_method(&s->frames, s->consume_channel, AMQP_BASIC_ACK_METHOD, &ack);
        if (st != AMQP_STATUS_OK) {
            /* Nothing of the run went out: acked one at a time instead. */
            s->frames.len = 0;
            for (size_t j = 0; j < n; j++) {
                int rc = acemq__amqp_settle(b, tags[j], ACEMQ__ACK);
                if (rc) return rc;
            }
            return 0;
        }
    }
    if (acemq__frames_write(&s->frames, amqp_get_sockfd(s->conn), b->opts.confirm_timeout_ms) != 0)
        return lost(b, s, "basic.ack: ", AMQP_STATUS_SOCKET_ERROR, errno);
    return 0;
}
