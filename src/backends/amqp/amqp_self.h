/* amqp_self.h — the AMQP 0-9-1 broker's state, shared by its files:
 * broker.c publishes and reads confirms, connection.c connects, opens the
 * channel, reconnects with back-off and follows connection.blocked,
 * consume.c consumes (headers.c turns a delivery's headers into JSON).
 * Internal to src/backends/amqp/.
 */
#ifndef ACEMQ_BACKENDS_AMQP_AMQP_SELF_H
#define ACEMQ_BACKENDS_AMQP_AMQP_SELF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#include <amqp.h>
#include <jansson.h>

#include "backends/amqp/frames.h"
#include "broker/broker_backend.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 10000
#define FRAME_MAX 131072
#define ATTEMPTS_HEADER "x-acemq-attempts"
/* A run of messages written in one go stops growing past this many bytes:
 * more saves no system call worth having and holds more memory. */
#define RUN_BYTES ((size_t)256 * 1024)
/* A wait on a blocked connection looks this often whether it should stop
 * (acemq_broker_stop_waiting, the relay's stop flag). */
#define BLOCKED_SLICE_MS 100

/* A message's state within its send. */
enum { M_UNSENT = 0, M_INFLIGHT, M_RETURNED, M_ANSWERED };

/* One send, from acemq_broker_send until it is collected: sent and answered
 * count messages, lo is the oldest one without an outcome. The arrays and
 * the reasons belong to the slot and are kept for its next send. */
typedef struct sendrec {
    const acemq_broker_msg *msgs;
    acemq_publish_result *results;
    size_t n, sent, answered, lo;
    uint64_t first_tag;
    int done; /* every message answered, or the channel gave up on the rest */
    unsigned char *state;
    int64_t *sent_at_us;
    const char **ret_reason;
    size_t cap;
    char **reasons;
    size_t n_reasons, cap_reasons;
    char why[640];
} sendrec;

typedef struct amqp_self {
    acemq_broker *owner;
    /* amqp_parse_url's copy of the URL: info's strings point into it. */
    char *url_buf;
    struct amqp_connection_info info;
    const char *vhost;

    amqp_connection_state_t conn; /* NULL when there is no connection */
    int channel_open;
    amqp_channel_t channel;
    uint64_t next_tag; /* the delivery tag the channel gives the next publish */

    /* connection.blocked until connection.unblocked (a resource alarm): no
     * more is written and the confirm timeout stands still; it runs again
     * from unblocked_at_us. blocked_why is the broker's reason. */
    int blocked;
    int64_t unblocked_at_us;
    char blocked_why[160];

    /* Reconnecting: the next attempt waits until lost_at_ms + backoff_ms. */
    int64_t lost_at_ms;
    int backoff_ms;

    /* The outstanding sends, oldest at head; inflight counts their messages
     * sent and not answered, the number the window bounds. */
    sendrec sends[ACEMQ_BROKER_MAX_SENDS];
    size_t head, count, inflight;

    /* Consuming (consume.c): the queue and prefetch of acemq_broker_consume
     * (queue NULL: the handle publishes), kept to consume again on a new
     * connection. consume_open: consume_channel has the consumer on it now;
     * whatever ends that bumps owner->generation (the deliveries in hand are
     * void). A consuming handle's connection opens only this channel. */
    char *queue;
    int prefetch;
    amqp_channel_t consume_channel;
    int consume_open;

    /* Per send call, while it sends. */
    char why[640];
    json_t **parsed;
    size_t cap_parsed;
    amqp_table_entry_t *entries;
    size_t cap_entries;
    acemq__frame_buf frames; /* the run being encoded (backends/amqp/frames.h) */
} amqp_self;

/* ---- broker.c ---- */

/* The publish path short of the socket (fuzz/fuzz_headers_json.c drives it
 * with no connection; b may be NULL, errors then go to the thread's open
 * error). prepare checks msgs[0..n) and parses their headers_json into
 * s->parsed: 0, or ACEMQ_EINVAL naming the message and why. encode_one
 * appends m's frames to s->frames with headers (s->parsed[i]) as the AMQP
 * table and m->attempts as x-acemq-attempts: an AMQP_STATUS_*. unparse
 * frees what prepare parsed. */
int acemq__amqp_prepare(acemq_broker *b, amqp_self *s, const acemq_broker_msg *msgs, size_t n);
int acemq__amqp_encode_one(amqp_self *s, const acemq_broker_msg *m, json_t *headers,
                           size_t frame_max);
void acemq__amqp_unparse(amqp_self *s, size_t n);

/* ---- connection.c ---- */

/* ms (below 0: 0) as a timeval for rabbitmq-c's waits. */
struct timeval acemq__amqp_ms_to_tv(int64_t ms);
/* Records a change of connection.blocked with the broker's reason (or why
 * it ended) and tells the handle's watcher. */
void acemq__amqp_set_blocked(amqp_self *s, int blocked, amqp_bytes_t why);
/* mt, when it is connection.blocked or connection.unblocked: recorded as
 * above, 1. Any other method: 0, untouched. */
int acemq__amqp_take_blocked(amqp_self *s, const amqp_method_t *mt);
/* Tears the connection down without the close handshake, and notes when
 * it was lost for the back-off. */
void acemq__amqp_drop_connection(amqp_self *s);
/* rabbitmq-c's words for a failed RPC, with the broker's reply code and
 * text when it closed the connection or the channel. */
void acemq__amqp_describe_reply(char *buf, size_t len, const char *what, amqp_rpc_reply_t r);
/* Connects, logs in and opens the channel in confirm mode now (a consuming
 * handle: its consumer, acemq__amqp_open_consumer): 0, or an error with its
 * text on b. */
int acemq__amqp_connect(acemq_broker *b, amqp_self *s);
/* Makes the handle ready to publish: reopens a channel the broker closed,
 * or reconnects after waiting out the back-off. 0, or an error with its
 * text on b. */
int acemq__amqp_ensure_ready(acemq_broker *b, amqp_self *s);

/* ---- consume.c ---- */

/* Opens a channel, sets its prefetch and consumes s->queue on it: 0, or an
 * error with its text on b: ACEMQ_ENOENT (no such queue: 404), ACEMQ_EAUTH
 * (403), ACEMQ_EBACKEND (another refusal; the connection stays), ACEMQ_EIO
 * (the connection failed, and is dropped). */
int acemq__amqp_open_consumer(acemq_broker *b, amqp_self *s);
/* The slots of version 3 (broker/broker_backend.h). */
int acemq__amqp_consume(acemq_broker *b, const char *queue, int prefetch);
int acemq__amqp_next(acemq_broker *b, int timeout_ms, acemq_delivery **out);
int acemq__amqp_settle(acemq_broker *b, uint64_t tag, int how);
/* The slot of version 4: a batch's basic.acks in one write. */
int acemq__amqp_ack_many(acemq_broker *b, const uint64_t *tags, size_t n, int multiple);

/* ---- headers.c ---- */

/* t as one JSON object in *json (free() it) and the x-acemq-attempts
 * header's value in *attempts (0 without one): 0 or ACEMQ_ENOMEM. */
int acemq__amqp_headers_json(const amqp_table_t *t, char **json, int *attempts);
/* The content header's part of a delivery (p as rabbitmq-c decoded it):
 * message_id, content_type, headers_json (in *headers, free() it) and
 * attempts set in parts, nothing else touched. 0 or ACEMQ_ENOMEM. */
int acemq__amqp_props_parts(const amqp_basic_properties_t *p, acemq__delivery_parts *parts,
                            char **headers);

#endif
