/* broker.c — the AMQP 0-9-1 broker, on rabbitmq-c: one connection and one
 * channel in confirm mode per handle; pipelined publishing with publisher
 * confirms, across calls (acemq_broker_send / _collect), what the window
 * has room for framed here and written in one go (backends/amqp/frames.h);
 * basic.return for unroutable messages; reconnect with back-off.
 *
 * Invariants. Delivery tags are counted by the channel from 1 after
 * confirm.select, one per basic.publish. Each outstanding send records the
 * tag of its first message, and its messages were published back to back,
 * so within a send message i has tag first_tag + i, and the sends' tag ranges
 * follow each other in order. That arithmetic holds only while the channel
 * stays the same, so anything that changes or doubts the channel (lost
 * connection, confirm timeout, a frame we cannot read, a channel the broker
 * closed) answers every outstanding send at once, leaving what was
 * unconfirmed UNKNOWN, and the next send starts from a fresh channel and
 * tag 1: a late confirm is never paired with the wrong message. A send that
 * is done (answered, or given up) ignores later frames. A channel the broker
 * closed (publishing to a missing exchange: 404) is answered with close-ok
 * and reopened by the next send; the connection stays.
 *
 * A message is CONFIRMED only by an ack that covers it with no basic.return
 * seen for it first. RabbitMQ acks an unroutable mandatory message after
 * returning it, and a return carries no delivery tag, so the return is
 * matched to the oldest unanswered message, over the outstanding sends in
 * order, with the same message id, exchange and routing key (returns come
 * in publish order), and that mark turns the ack that follows into RETURNED.
 *
 * A resource alarm: the broker says connection.blocked (asked for at login)
 * and stops reading. Nothing more is written then, the connection is kept
 * and the confirm timeout stands still until connection.unblocked, from
 * which it runs again; only acemq_broker_stop_waiting (or the relay's stop
 * flag) ends the wait before that, as a timeout would.
 *
 * Reasons handed out in results point at static text or into the send's
 * slot (why[], reasons[]), which stays valid until the slot is reused: not
 * before the next call after the send is collected.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <jansson.h>

#include "backends/amqp/amqp_self.h"
#include "backends/amqp/frames.h"
#include "backends/builtin.h"
#include "broker/broker_backend.h"
#include "os/mono_time.h"

/* --- outstanding sends --------------------------------------------------- */

static sendrec *nth_send(amqp_self *s, size_t k)
{
    return &s->sends[(s->head + k) % ACEMQ_BROKER_MAX_SENDS];
}

/* The slot's per-message arrays, with room for n. */
static int grow_send(sendrec *sr, size_t n)
{
    if (n <= sr->cap && sr->state) return 0;
    size_t c = sr->cap ? sr->cap : 64;
    while (c < n)
        c *= 2;
    unsigned char *st = realloc(sr->state, c);
    if (st) sr->state = st;
    int64_t *at = realloc(sr->sent_at_us, c * sizeof *at);
    if (at) sr->sent_at_us = at;
    const char **r = realloc(sr->ret_reason, c * sizeof *r);
    if (r) sr->ret_reason = r;
    if (!st || !at || !r) return ACEMQ_ENOMEM;
    sr->cap = c;
    return 0;
}

static void free_reasons(sendrec *sr)
{
    for (size_t i = 0; i < sr->n_reasons; i++)
        free(sr->reasons[i]);
    sr->n_reasons = 0;
}

static void free_send(sendrec *sr)
{
    free_reasons(sr);
    free(sr->reasons);
    free(sr->state);
    free(sr->sent_at_us);
    free(sr->ret_reason);
}

/* A copy of a return's reply text that lives as long as the send's results;
 * the same text as the previous return shares its copy, since a batch to a
 * missing route returns many messages with one reason. */
static const char *keep_reason(sendrec *sr, const char *text)
{
    if (sr->n_reasons && strcmp(sr->reasons[sr->n_reasons - 1], text) == 0)
        return sr->reasons[sr->n_reasons - 1];
    if (sr->n_reasons == sr->cap_reasons) {
        size_t c = sr->cap_reasons ? 2 * sr->cap_reasons : 8;
        char **r = realloc(sr->reasons, c * sizeof *r);
        if (!r) return NULL;
        sr->reasons = r;
        sr->cap_reasons = c;
    }
    char *copy = strdup(text);
    if (!copy) return NULL;
    sr->reasons[sr->n_reasons++] = copy;
    return copy;
}

/* Message i's answer, read at at_us. */
static void answer(amqp_self *s, sendrec *sr, size_t i, int outcome, const char *reason,
                   int64_t at_us)
{
    if (sr->state[i] == M_ANSWERED || sr->state[i] == M_UNSENT) return;
    if (sr->state[i] == M_RETURNED) {
        /* Unroutable: whatever the confirm says, it reached no queue. */
        outcome = ACEMQ_PUBLISH_RETURNED;
        reason = sr->ret_reason[i];
    }
    sr->results[i].outcome = outcome;
    sr->results[i].confirm_us = acemq__broker_confirm_us(sr->sent_at_us[i], at_us);
    sr->results[i].reason = reason;
    sr->state[i] = M_ANSWERED;
    sr->answered++;
    s->inflight--;
    while (sr->lo < sr->sent && sr->state[sr->lo] == M_ANSWERED)
        sr->lo++;
    if (sr->answered == sr->n) sr->done = 1;
}

/* basic.ack / basic.nack: one tag, or every tag up to it with multiple,
 * which may reach back into earlier sends. */
static void confirm(amqp_self *s, uint64_t tag, int multiple, int outcome, const char *reason)
{
    int64_t at_us = acemq__broker_now_us(); /* one read for all a multiple ack answers */
    for (size_t k = 0; k < s->count; k++) {
        sendrec *sr = nth_send(s, k);
        if (sr->done || tag < sr->first_tag) continue; /* an earlier channel's, or answered */
        uint64_t rel = tag - sr->first_tag;
        if (!multiple) {
            if (rel < sr->sent) answer(s, sr, (size_t)rel, outcome, reason, at_us);
            if (rel < sr->sent) return;
            continue;
        }
        size_t last = rel < sr->sent ? (size_t)rel : sr->sent - 1;
        for (size_t i = sr->lo; sr->sent && i <= last; i++)
            answer(s, sr, i, outcome, reason, at_us);
        if (rel < sr->sent) return;
    }
    /* A tag never sent: the broker is confused; ignore it. */
}

/* Every outstanding send gives up: what has no outcome keeps UNKNOWN, with
 * why. The channel's tag count can no longer be trusted for any of them. */
static void give_up_all(amqp_self *s, const char *why)
{
    for (size_t k = 0; k < s->count; k++) {
        sendrec *sr = nth_send(s, k);
        if (sr->done) continue;
        (void)snprintf(sr->why, sizeof sr->why, "%s", why);
        for (size_t i = sr->lo; i < sr->n; i++)
            if (sr->state[i] != M_ANSWERED) sr->results[i].reason = sr->why;
        sr->done = 1;
    }
    s->inflight = 0;
}

/* The sends cannot go on on this connection: the unanswered stay UNKNOWN
 * with why (also the handle's error), and the next send reconnects.
 * Returns 1, "the calls stop", for the callers' convenience. */
static int give_up(acemq_broker *b, amqp_self *s, const char *why)
{
    (void)acemq__broker_fail(b, ACEMQ_EIO, "amqp: %s", why);
    give_up_all(s, why);
    acemq__amqp_drop_connection(s);
    return 1;
}

/* The connection is gone or cannot be trusted: give_up with "lost
 * connection: ...". */
static int lost(acemq_broker *b, amqp_self *s, const char *what, const char *words)
{
    char why[640];
    (void)snprintf(why, sizeof why, "lost connection: %s%s", what, words);
    return give_up(b, s, why);
}

/* rabbitmq-c's words for a status, with the system's for a socket error
 * (errno as it was right after the call). */
static const char *status_words(char *buf, size_t len, int st, int e)
{
    if ((st == AMQP_STATUS_SOCKET_ERROR || st == AMQP_STATUS_TCP_ERROR) && e)
        (void)snprintf(buf, len, "%s (%s)", amqp_error_string2(st), strerror(e));
    else
        (void)snprintf(buf, len, "%s", amqp_error_string2(st));
    return buf;
}

/* Reads one frame, waiting until deadline at most (a frame already buffered
 * comes back at once, even past the deadline). */
static int read_frame(amqp_self *s, amqp_frame_t *f, int64_t deadline)
{
    struct timeval tv = acemq__amqp_ms_to_tv(deadline - acemq__mono_ms());
    return amqp_simple_wait_frame_noblock(s->conn, f, &tv);
}

/* Marks the oldest unanswered message, over the sends in order, that
 * matches a return; returns come in publish order. */
static void mark_returned(amqp_self *s, const char *text, const char *id, const char *exchange,
                          const char *key)
{
    for (size_t k = 0; k < s->count; k++) {
        sendrec *sr = nth_send(s, k);
        for (size_t i = sr->lo; !sr->done && i < sr->sent; i++) {
            const acemq_broker_msg *msg = &sr->msgs[i];
            if (sr->state[i] == M_INFLIGHT && strcmp(msg->message_id, id) == 0 &&
                strcmp(msg->exchange, exchange) == 0 && strcmp(msg->routing_key, key) == 0) {
                const char *r = keep_reason(sr, text);
                sr->ret_reason[i] = r ? r : "returned";
                sr->state[i] = M_RETURNED;
                return;
            }
        }
    }
}

/* After basic.return come the message's content header and body frames; the
 * header carries the message id that says which message came back. */
static int take_return(acemq_broker *b, amqp_self *s, amqp_channel_t ch,
                       const amqp_basic_return_t *m, int64_t deadline)
{
    char text[300], exchange[260], key[260], id[260];
    (void)snprintf(text, sizeof text, "%.*s", (int)m->reply_text.len,
                   (const char *)m->reply_text.bytes);
    if (text[0] == '\0') (void)snprintf(text, sizeof text, "returned (%u)", m->reply_code);
    (void)snprintf(exchange, sizeof exchange, "%.*s", (int)m->exchange.len,
                   (const char *)m->exchange.bytes);
    (void)snprintf(key, sizeof key, "%.*s", (int)m->routing_key.len,
                   (const char *)m->routing_key.bytes);
    amqp_frame_t f;
    int st = read_frame(s, &f, deadline);
    if (st != AMQP_STATUS_OK)
        return lost(b, s, "reading a returned message: ", amqp_error_string2(st));
    if (f.frame_type != AMQP_FRAME_HEADER)
        return lost(b, s, "", "a returned message came without its content header");
    const amqp_basic_properties_t *p = f.payload.properties.decoded;
    id[0] = '\0';
    if (p && (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG))
        (void)snprintf(id, sizeof id, "%.*s", (int)p->message_id.len,
                       (const char *)p->message_id.bytes);
    uint64_t left = f.payload.properties.body_size;
    while (left > 0) {
        st = read_frame(s, &f, deadline);
        if (st != AMQP_STATUS_OK)
            return lost(b, s, "reading a returned message: ", amqp_error_string2(st));
        if (f.frame_type != AMQP_FRAME_BODY)
            return lost(b, s, "", "a returned message's body was cut short");
        left -= f.payload.body_fragment.len < left ? f.payload.body_fragment.len : left;
    }
    if (ch == s->channel) mark_returned(s, text, id, exchange, key);
    return 0;
}

/* channel.close from the broker: every outstanding send gives up (RabbitMQ
 * ignores a closed channel's traffic), and the broker hears close-ok so the
 * channel number is free again. */
static int channel_closed(acemq_broker *b, amqp_self *s, amqp_channel_t ch,
                          const amqp_channel_close_t *m)
{
    char why[640];
    (void)snprintf(why, sizeof why, "channel closed by the broker: %u %.*s",
                   (unsigned)m->reply_code, (int)m->reply_text.len,
                   (const char *)m->reply_text.bytes);
    (void)acemq__broker_fail(b, ACEMQ_EIO, "amqp: %s", why);
    give_up_all(s, why);
    s->channel_open = 0;
    amqp_channel_close_ok_t ok = {0};
    int st = amqp_send_method(s->conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    if (st != AMQP_STATUS_OK) {
        (void)acemq__broker_fail(b, ACEMQ_EIO, "amqp: %s; then channel.close-ok: %s", why,
                                 amqp_error_string2(st));
        acemq__amqp_drop_connection(s);
    }
    return 1;
}

/* Handles one frame; non-zero when the sends cannot go on (the reasons are
 * already on the unanswered). */
static int take_frame(acemq_broker *b, amqp_self *s, const amqp_frame_t *f, int64_t deadline)
{
    if (f->frame_type != AMQP_FRAME_METHOD) return 0;
    const amqp_method_t *mt = &f->payload.method;
    switch (mt->id) {
    case AMQP_BASIC_ACK_METHOD:
        if (f->channel == s->channel) {
            const amqp_basic_ack_t *a = mt->decoded;
            confirm(s, a->delivery_tag, a->multiple, ACEMQ_PUBLISH_CONFIRMED, NULL);
        }
        return 0;
    case AMQP_BASIC_NACK_METHOD:
        if (f->channel == s->channel) {
            const amqp_basic_nack_t *a = mt->decoded;
            confirm(s, a->delivery_tag, a->multiple, ACEMQ_PUBLISH_NACKED,
                    "nack: the broker refused the message");
        }
        return 0;
    case AMQP_BASIC_RETURN_METHOD:
        return take_return(b, s, f->channel, mt->decoded, deadline);
    case AMQP_CHANNEL_CLOSE_METHOD:
        return channel_closed(b, s, f->channel, mt->decoded);
    case AMQP_CONNECTION_CLOSE_METHOD: {
        const amqp_connection_close_t *m = mt->decoded;
        char words[300];
        (void)snprintf(words, sizeof words, "%u %.*s", (unsigned)m->reply_code,
                       (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        amqp_connection_close_ok_t ok = {0};
        /* A courtesy: the connection is dropped right after either way. */
        (void)amqp_send_method(s->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        return lost(b, s, "closed by the broker: ", words);
    }
    default:
        (void)acemq__amqp_take_blocked(s, mt);
        return 0;
    }
}

/* When the oldest unanswered message, over all sends, times out: the
 * timeout runs from its publish, or from the last connection.unblocked if
 * that came later (a blocked wait does not count). */
static int64_t oldest_deadline(acemq_broker *b, amqp_self *s)
{
    for (size_t k = 0; k < s->count; k++) {
        sendrec *sr = nth_send(s, k);
        if (!sr->done && sr->lo < sr->sent) {
            int64_t from_us = sr->sent_at_us[sr->lo];
            if (s->unblocked_at_us > from_us) from_us = s->unblocked_at_us;
            return from_us / 1000 + b->opts.confirm_timeout_ms;
        }
    }
    return acemq__mono_ms(); /* nothing in flight: callers do not wait then */
}

/* Reads and handles one frame: 0 to go on, 1 when every outstanding send
 * gave up (lost connection, timeout, closed channel). */
static int pump(acemq_broker *b, amqp_self *s)
{
    /* Blocked: no timeout, but a look at the stop request every slice. */
    int64_t deadline = s->blocked ? acemq__mono_ms() + BLOCKED_SLICE_MS : oldest_deadline(b, s);
    amqp_frame_t f;
    errno = 0;
    int st = read_frame(s, &f, deadline);
    if (st == AMQP_STATUS_TIMEOUT && s->blocked) {
        if (!acemq__broker_stop_asked(b)) return 0;
        char why[640];
        (void)snprintf(why, sizeof why, "broker blocked the connection (%s); stopped waiting",
                       s->blocked_why);
        return give_up(b, s, why);
    }
    if (st == AMQP_STATUS_TIMEOUT) {
        (void)acemq__broker_fail(b, ACEMQ_EIO, "amqp: no confirm within %d ms; connection dropped",
                                 b->opts.confirm_timeout_ms);
        /* Confirms may still come for these tags; a new channel next time
         * keeps them from being read as a later send's. */
        give_up_all(s, "timeout");
        acemq__amqp_drop_connection(s);
        return 1;
    }
    if (st != AMQP_STATUS_OK) {
        char words[200];
        return lost(b, s, "", status_words(words, sizeof words, st, errno));
    }
    int stop = take_frame(b, s, &f, deadline);
    /* Decoded frames live in rabbitmq-c's pools until released; without this
     * a long run grows them without bound. */
    if (s->conn) amqp_maybe_release_buffers(s->conn);
    return stop;
}

static int too_long(const char *z)
{
    return z && strlen(z) > 255;
}

/* Checks every message, and parses its headers, before anything is sent:
 * one that rabbitmq-c cannot encode fails the call whole (ACEMQ_EINVAL,
 * nothing sent) rather than half-way through, where it would break the
 * connection. AMQP short strings hold 255 bytes; the content header must fit
 * in one frame. */
static int check_msgs(acemq_broker *b, amqp_self *s, const acemq_broker_msg *msgs, size_t n,
                      size_t *max_entries)
{
    *max_entries = 1;
    memset(s->parsed, 0, n * sizeof(json_t *));
    for (size_t i = 0; i < n; i++) {
        const acemq_broker_msg *m = &msgs[i];
        if (too_long(m->exchange) || too_long(m->routing_key) || too_long(m->message_id) ||
            too_long(m->content_type))
            return acemq__broker_fail(b, ACEMQ_EINVAL,
                                      "message %zu: exchange, routing_key, message_id and "
                                      "content_type must be at most 255 bytes",
                                      i);
        if (!m->headers_json) continue;
        json_error_t err;
        json_t *o = json_loads(m->headers_json, 0, &err);
        if (!o)
            return acemq__broker_fail(b, ACEMQ_EINVAL, "message %zu: headers_json: %s (line %d)", i,
                                      err.text, err.line);
        s->parsed[i] = o;
        if (!json_is_object(o))
            return acemq__broker_fail(b, ACEMQ_EINVAL,
                                      "message %zu: headers_json is not a JSON object", i);
        const char *k;
        json_t *v;
        size_t bytes = 0;
        json_object_foreach(o, k, v)
        {
            if (!json_is_string(v))
                return acemq__broker_fail(b, ACEMQ_EINVAL,
                                          "message %zu: header '%s' is not a string", i, k);
            if (strlen(k) > 255)
                return acemq__broker_fail(b, ACEMQ_EINVAL,
                                          "message %zu: a header name is longer than 255 bytes", i);
            bytes += 6 + strlen(k) + json_string_length(v);
        }
        if (bytes > FRAME_MAX - 2048)
            return acemq__broker_fail(b, ACEMQ_EINVAL,
                                      "message %zu: headers take %zu bytes; at most %d fit", i,
                                      bytes, FRAME_MAX - 2048);
        if (json_object_size(o) + 1 > *max_entries) *max_entries = json_object_size(o) + 1;
    }
    return 0;
}

/* Appends message m's frames to the run (s->frames), bodies split at
 * frame_max. */
int acemq__amqp_encode_one(amqp_self *s, const acemq_broker_msg *m, json_t *headers,
                           size_t frame_max)
{
    size_t k = 0;
    if (headers) {
        const char *key;
        json_t *v;
        json_object_foreach(headers, key, v)
        {
            if (strcmp(key, ATTEMPTS_HEADER) == 0) continue; /* ours is the truth */
            amqp_table_entry_t *e = &s->entries[k++];
            e->key = amqp_cstring_bytes(key);
            e->value.kind = AMQP_FIELD_KIND_UTF8;
            e->value.value.bytes.len = json_string_length(v);
            e->value.value.bytes.bytes = (void *)json_string_value(v);
        }
    }
    amqp_table_entry_t *e = &s->entries[k++];
    e->key = amqp_cstring_bytes(ATTEMPTS_HEADER);
    e->value.kind = AMQP_FIELD_KIND_I32;
    e->value.value.i32 = m->attempts;

    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_HEADERS_FLAG;
    p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p.message_id = amqp_cstring_bytes(m->message_id);
    if (m->content_type) {
        p._flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
        p.content_type = amqp_cstring_bytes(m->content_type);
    }
    p.headers.num_entries = (int)k;
    p.headers.entries = s->entries;
    amqp_bytes_t body = {.len = m->body_len, .bytes = (void *)m->body};
    /* mandatory: an unroutable message comes back as basic.return instead of
     * vanishing behind a confirm. */
    amqp_basic_publish_t method = {.ticket = 0,
                                   .exchange = amqp_cstring_bytes(m->exchange),
                                   .routing_key = amqp_cstring_bytes(m->routing_key),
                                   .mandatory = 1,
                                   .immediate = 0};
    return acemq__frames_add_publish(&s->frames, s->channel, frame_max, &method, &p, body);
}

/* --- send and collect ---------------------------------------------------- */

/* Headers parsed for one send, and the table its largest message needs. */
int acemq__amqp_prepare(acemq_broker *b, amqp_self *s, const acemq_broker_msg *msgs, size_t n)
{
    size_t want = n ? n : 1; /* never a NULL array, even for an empty send */
    if (want > s->cap_parsed) {
        json_t **p = realloc(s->parsed, want * sizeof(json_t *));
        if (!p) return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
        s->parsed = p;
        s->cap_parsed = want;
    }
    size_t max_entries = 1;
    int rc = check_msgs(b, s, msgs, n, &max_entries);
    if (rc) return rc;
    if (max_entries > s->cap_entries) {
        amqp_table_entry_t *e = realloc(s->entries, max_entries * sizeof *e);
        if (!e) return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
        s->entries = e;
        s->cap_entries = max_entries;
    }
    return 0;
}

void acemq__amqp_unparse(amqp_self *s, size_t n)
{
    for (size_t i = 0; i < n && s->parsed; i++)
        if (s->parsed[i]) {
            json_decref(s->parsed[i]);
            s->parsed[i] = NULL;
        }
}

/* Publishes sr's messages, reading confirms whenever the window (over every
 * outstanding send) is full, until all are sent or the channel gives up.
 * What the window has room for goes out as one run: its frames encoded,
 * then written with one system call where the socket takes them (three per
 * message before, one per frame). */
static void send_all(acemq_broker *b, amqp_self *s, sendrec *sr)
{
    size_t window = (size_t)b->opts.window;
    while (!sr->done && sr->sent < sr->n) {
        /* A blocked connection is sent nothing more: the broker would not
         * read it, and a full socket would stall the write. */
        if (s->inflight >= window || s->blocked) {
            (void)pump(b, s); /* a give-up sets sr->done */
            continue;
        }
        size_t first = sr->sent, room = window - s->inflight, k = 0;
        int negotiated = amqp_get_frame_max(s->conn); /* read once per run */
        size_t frame_max = negotiated > 0 ? (size_t)negotiated : (size_t)FRAME_MAX;
        s->frames.len = 0;
        while (k < room && first + k < sr->n && s->frames.len < RUN_BYTES) {
            int st =
                acemq__amqp_encode_one(s, &sr->msgs[first + k], s->parsed[first + k], frame_max);
            /* check_msgs() keeps the unencodable from getting here; should
             * one, the connection ends, as it did when rabbitmq-c had sent
             * the method frame before failing on the header. */
            if (st != AMQP_STATUS_OK) {
                char words[200];
                (void)lost(b, s, "basic.publish: ", status_words(words, sizeof words, st, 0));
                return;
            }
            k++;
        }
        /* In flight before the write: a write that fails may have sent any
         * part of the run, so all of it is left UNKNOWN, never unsent. */
        int64_t now_us = acemq__broker_now_us();
        for (size_t i = first; i < first + k; i++) {
            sr->state[i] = M_INFLIGHT;
            sr->sent_at_us[i] = now_us;
        }
        sr->sent += k;
        s->inflight += k;
        s->next_tag += k;
        int fd = amqp_get_sockfd(s->conn);
        if (acemq__frames_write(&s->frames, fd, b->opts.confirm_timeout_ms) != 0) {
            char words[200];
            if (errno == ETIMEDOUT)
                (void)snprintf(words, sizeof words, "the broker read nothing for %d ms",
                               b->opts.confirm_timeout_ms);
            else
                (void)status_words(words, sizeof words, AMQP_STATUS_SOCKET_ERROR, errno);
            (void)lost(b, s, "basic.publish: ", words);
            return;
        }
    }
}

static int amqp_send(acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                     acemq_publish_result *results)
{
    amqp_self *s = b->self;
    s->why[0] = '\0';
    sendrec *sr = nth_send(s, s->count);
    free_reasons(sr); /* the slot's previous send was collected before this call */
    if (grow_send(sr, n)) return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
    /* The messages first: a bad one is the caller's error whatever the
     * connection's state, and costs no reconnect. */
    int rc = acemq__amqp_prepare(b, s, msgs, n);
    if (!rc) {
        rc = acemq__amqp_ensure_ready(b, s);
        if (rc) {
            (void)snprintf(s->why, sizeof s->why, "not connected: %s", b->errmsg);
            for (size_t i = 0; i < n; i++)
                results[i].reason = s->why;
        }
    }
    if (!rc) {
        /* A reconnect gave up every earlier send, so the new channel's tags
         * start with this one. */
        memset(sr->state, M_UNSENT, n);
        sr->msgs = msgs;
        sr->results = results;
        sr->n = n;
        sr->sent = sr->answered = sr->lo = 0;
        sr->first_tag = s->next_tag;
        sr->done = n == 0;
        sr->why[0] = '\0';
        s->count++;
        send_all(b, s, sr);
    }
    acemq__amqp_unparse(s, n);
    return rc;
}

static int amqp_collect(acemq_broker *b)
{
    amqp_self *s = b->self;
    sendrec *sr = nth_send(s, 0);
    while (!sr->done)
        (void)pump(b, s); /* a give-up sets sr->done */
    s->head = (s->head + 1) % ACEMQ_BROKER_MAX_SENDS;
    s->count--;
    return 0;
}

static void amqp_close(acemq_broker *b)
{
    amqp_self *s = b->self;
    if (!s) return;
    if (s->conn) {
        /* The polite close, bounded by the RPC timeout: the broker logs a
         * clean close instead of a vanished client. Its answer changes
         * nothing now. */
        (void)amqp_connection_close(s->conn, AMQP_REPLY_SUCCESS);
        acemq__amqp_drop_connection(s);
    }
    for (size_t k = 0; k < ACEMQ_BROKER_MAX_SENDS; k++)
        free_send(&s->sends[k]);
    free(s->parsed);
    free(s->entries);
    acemq__frames_free(&s->frames);
    free(s->queue);
    free(s->url_buf);
    free(s);
    b->self = NULL;
}

static const acemq__broker_methods amqp_methods = {
    .version = ACEMQ__BROKER_METHODS_VERSION,
    .name = "amqp091",
    .close = amqp_close,
    .publish = NULL, /* the core publishes through send + collect */
    .send = amqp_send,
    .collect = amqp_collect,
    .consume = acemq__amqp_consume,
    .next = acemq__amqp_next,
    .settle = acemq__amqp_settle,
    .ack_many = acemq__amqp_ack_many,
};

static int open_amqp(acemq_broker *b, const char *url)
{
    amqp_self *s = calloc(1, sizeof *s);
    if (!s) return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
    s->url_buf = strdup(url);
    if (!s->url_buf) {
        free(s);
        return acemq__broker_fail(b, ACEMQ_ENOMEM, "out of memory");
    }
    amqp_default_connection_info(&s->info);
    int st = amqp_parse_url(s->url_buf, &s->info);
    if (st != AMQP_STATUS_OK || s->info.ssl) {
        free(s->url_buf);
        free(s);
        /* The URL is not echoed: it may hold a password. */
        return acemq__broker_fail(b, ACEMQ_EURL,
                                  "amqp: malformed URL (%s); expected "
                                  "amqp://user:pass@host:port/vhost",
                                  st != AMQP_STATUS_OK ? amqp_error_string2(st)
                                                       : "amqps:// is not supported");
    }
    /* "amqp://host:port/" names the empty vhost by the letter of the URI
     * spec, which no broker has; RabbitMQ's default "/" is meant, and is
     * also "amqp://host:port/%2f". */
    s->vhost = s->info.vhost && s->info.vhost[0] ? s->info.vhost : "/";
    s->backoff_ms = BACKOFF_MIN_MS;
    s->owner = b;
    int rc = acemq__amqp_connect(b, s);
    if (rc) {
        free(s->url_buf);
        free(s);
        return rc;
    }
    b->self = s;
    b->methods = &amqp_methods;
    return 0;
}

const acemq__broker_backend acemq__amqp_broker_backend = {{"amqp", "amqp://"}, open_amqp};
