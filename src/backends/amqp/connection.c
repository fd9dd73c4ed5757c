/* connection.c — the AMQP 0-9-1 broker's connection: connect and log in,
 * one channel in confirm mode (or, consuming, the consumer's channel:
 * consume.c), reconnect with back-off after a loss, and
 * connection.blocked / unblocked as the broker tells them (broker.c reads
 * the frames). */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>

#include "backends/amqp/amqp_self.h"
#include "os/mono_time.h"

struct timeval acemq__amqp_ms_to_tv(int64_t ms)
{
    if (ms < 0) ms = 0;
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

void acemq__amqp_describe_reply(char *buf, size_t len, const char *what, amqp_rpc_reply_t r)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        (void)snprintf(buf, len, "%s: ok", what);
        break;
    case AMQP_RESPONSE_NONE:
        (void)snprintf(buf, len, "%s: no reply from rabbitmq-c", what);
        break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        (void)snprintf(buf, len, "%s: %s", what, amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD && r.reply.decoded) {
            const amqp_connection_close_t *m = r.reply.decoded;
            (void)snprintf(buf, len, "%s: the broker closed the connection: %u %.*s", what,
                           (unsigned)m->reply_code, (int)m->reply_text.len,
                           (const char *)m->reply_text.bytes);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD && r.reply.decoded) {
            const amqp_channel_close_t *m = r.reply.decoded;
            (void)snprintf(buf, len, "%s: the broker closed the channel: %u %.*s", what,
                           (unsigned)m->reply_code, (int)m->reply_text.len,
                           (const char *)m->reply_text.bytes);
        } else {
            (void)snprintf(buf, len, "%s: the broker answered with method 0x%08X", what,
                           (unsigned)r.reply.id);
        }
        break;
    }
}

/* Records the broker's connection.blocked (why: its reason) or the end of
 * the block (why: what ended it), for this handle, acemq_broker_blocked
 * and whoever watches. */
void acemq__amqp_set_blocked(amqp_self *s, int blocked, amqp_bytes_t why)
{
    if (blocked == s->blocked) return;
    if (blocked)
        (void)snprintf(s->blocked_why, sizeof s->blocked_why, "%.*s",
                       why.len > 150 ? 150 : (int)why.len, (const char *)why.bytes);
    else
        s->unblocked_at_us = acemq__broker_now_us();
    s->blocked = blocked;
    acemq_broker *b = s->owner;
    atomic_store(&b->blocked, blocked);
    /* The literals of an end (below) are NUL-terminated; a reason is copied. */
    if (b->on_blocked)
        b->on_blocked(b->on_blocked_ctx, blocked,
                      blocked ? s->blocked_why : (const char *)why.bytes);
}

int acemq__amqp_take_blocked(amqp_self *s, const amqp_method_t *mt)
{
    if (mt->id == AMQP_CONNECTION_BLOCKED_METHOD)
        acemq__amqp_set_blocked(s, 1, ((const amqp_connection_blocked_t *)mt->decoded)->reason);
    else if (mt->id == AMQP_CONNECTION_UNBLOCKED_METHOD)
        acemq__amqp_set_blocked(s, 0, amqp_cstring_bytes("connection.unblocked"));
    else
        return 0;
    return 1;
}

/* Tears the connection down without the close handshake: used when the
 * connection is already gone or can no longer be trusted, where waiting for
 * close-ok would only add the RPC timeout to the caller's wait. */
void acemq__amqp_drop_connection(amqp_self *s)
{
    if (s->conn) {
        /* The socket is closed and the memory freed whatever this returns;
         * a failure here only says the socket close itself failed. */
        (void)amqp_destroy_connection(s->conn);
        s->conn = NULL;
    }
    s->channel_open = 0;
    if (s->consume_open) {
        s->consume_open = 0;
        s->owner->generation++; /* the deliveries in hand are void */
    }
    acemq__amqp_set_blocked(s, 0, amqp_cstring_bytes("connection dropped"));
    s->lost_at_ms = acemq__mono_ms();
}

static int open_channel(acemq_broker *b, amqp_self *s)
{
    char msg[480];
    /* A new number per open: nothing the broker still sends for an earlier
     * incarnation can be taken for this one's. */
    amqp_channel_t ch = (amqp_channel_t)(s->channel % 1000 + 1);
    if (!amqp_channel_open(s->conn, ch)) {
        acemq__amqp_describe_reply(msg, sizeof msg, "channel.open", amqp_get_rpc_reply(s->conn));
        return acemq__broker_fail(b, ACEMQ_EIO, "amqp: %s", msg);
    }
    if (!amqp_confirm_select(s->conn, ch)) {
        acemq__amqp_describe_reply(msg, sizeof msg, "confirm.select", amqp_get_rpc_reply(s->conn));
        return acemq__broker_fail(b, ACEMQ_EIO, "amqp: %s", msg);
    }
    s->channel = ch;
    s->channel_open = 1;
    s->next_tag = 1;
    return 0;
}

/* 1 when the broker closed the connection during login because it will
 * not have this user, password or virtual host (403 ACCESS_REFUSED, 530
 * NOT_ALLOWED): a setting to fix, where a network failure is worth a retry. */
static int refused(amqp_rpc_reply_t r)
{
    if (r.reply_type != AMQP_RESPONSE_SERVER_EXCEPTION ||
        r.reply.id != AMQP_CONNECTION_CLOSE_METHOD || !r.reply.decoded)
        return 0;
    const amqp_connection_close_t *m = r.reply.decoded;
    return m->reply_code == AMQP_ACCESS_REFUSED || m->reply_code == AMQP_NOT_ALLOWED;
}

int acemq__amqp_connect(acemq_broker *b, amqp_self *s)
{
    char msg[480];
    const char *host = s->info.host;
    int port = s->info.port;
    s->conn = amqp_new_connection();
    if (!s->conn) return acemq__broker_fail(b, ACEMQ_ENOMEM, "amqp: amqp_new_connection failed");
    amqp_socket_t *sock = amqp_tcp_socket_new(s->conn);
    if (!sock) {
        acemq__amqp_drop_connection(s);
        return acemq__broker_fail(b, ACEMQ_ENOMEM, "amqp: amqp_tcp_socket_new failed");
    }
    struct timeval tv = acemq__amqp_ms_to_tv(b->opts.connect_timeout_ms);
    errno = 0;
    int st = amqp_socket_open_noblock(sock, host, port, &tv);
    if (st != AMQP_STATUS_OK) {
        int e = errno;
        acemq__amqp_drop_connection(s);
        /* A refused or unreachable connect reaches rabbitmq-c through
         * SO_ERROR, which it does not pass on: errno is then still the
         * non-blocking connect's EINPROGRESS, whose words ("Operation now in
         * progress") would mislead whoever reads the log. */
        const char *words = e == EINPROGRESS ? "refused or unreachable" : e ? strerror(e) : NULL;
        return acemq__broker_fail(b, ACEMQ_EIO, "amqp: cannot connect to %s:%d: %s%s%s%s", host,
                                  port, amqp_error_string2(st), words ? " (" : "",
                                  words ? words : "", words ? ")" : "");
    }
    /* The handshake and every RPC after it (channel.open, confirm.select,
     * connection.close) give up after the connect timeout instead of
     * blocking forever on a broker that accepted the socket and went
     * silent. Confirms are read with their own deadline. */
    if ((st = amqp_set_handshake_timeout(s->conn, &tv)) != AMQP_STATUS_OK ||
        (st = amqp_set_rpc_timeout(s->conn, &tv)) != AMQP_STATUS_OK) {
        acemq__amqp_drop_connection(s);
        return acemq__broker_fail(b, ACEMQ_EIO, "amqp: setting timeouts: %s",
                                  amqp_error_string2(st));
    }
    /* connection.blocked is sent only to clients that say they take it;
     * rabbitmq-c merges this into the capabilities it announces itself. */
    /* consumer_cancel_notify: a consumer whose queue is deleted hears
     * basic.cancel, where it would otherwise wait on a consumer that no
     * longer exists. */
    amqp_table_entry_t cap[2] = {{.key = amqp_cstring_bytes("connection.blocked"),
                                  .value = {.kind = AMQP_FIELD_KIND_BOOLEAN, .value.boolean = 1}},
                                 {.key = amqp_cstring_bytes("consumer_cancel_notify"),
                                  .value = {.kind = AMQP_FIELD_KIND_BOOLEAN, .value.boolean = 1}}};
    amqp_table_entry_t prop = {.key = amqp_cstring_bytes("capabilities"),
                               .value = {.kind = AMQP_FIELD_KIND_TABLE,
                                         .value.table = {.num_entries = 2, .entries = cap}}};
    amqp_table_t props = {.num_entries = 1, .entries = &prop};
    amqp_rpc_reply_t r =
        amqp_login_with_properties(s->conn, s->vhost, 0, FRAME_MAX, b->opts.heartbeat_s, &props,
                                   AMQP_SASL_METHOD_PLAIN, s->info.user, s->info.password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        acemq__amqp_describe_reply(msg, sizeof msg, "login", r);
        /* Read before the drop: the decoded reply lives in the connection's
         * memory, which the drop frees. */
        int code = refused(r) ? ACEMQ_EAUTH : ACEMQ_EIO;
        acemq__amqp_drop_connection(s);
        return acemq__broker_fail(b, code, "amqp: %s@%s:%d vhost '%s': %s", s->info.user, host,
                                  port, s->vhost, msg);
    }
    if (s->queue) /* a refused queue ends the channel only (or drops the connection itself) */
        return acemq__amqp_open_consumer(b, s);
    int rc = open_channel(b, s);
    if (rc) acemq__amqp_drop_connection(s);
    return rc;
}

/* Makes the handle ready to publish: reopens a channel the broker closed,
 * or reconnects after waiting out the back-off. */
int acemq__amqp_ensure_ready(acemq_broker *b, amqp_self *s)
{
    if (s->conn && s->channel_open) return 0;
    if (s->conn) {
        if (open_channel(b, s) == 0) return 0;
        acemq__amqp_drop_connection(s);
    }
    int64_t wait = s->lost_at_ms + s->backoff_ms - acemq__mono_ms();
    if (wait > 0) acemq__sleep_ms(wait);
    int rc = acemq__amqp_connect(b, s);
    if (rc) {
        s->lost_at_ms = acemq__mono_ms();
        s->backoff_ms = s->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff_ms * 2;
        return rc == ACEMQ_ENOMEM ? rc : ACEMQ_EIO;
    }
    s->backoff_ms = BACKOFF_MIN_MS;
    return 0;
}
