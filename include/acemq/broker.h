/* acemq/broker.h — publishing to a message broker with publisher confirms,
 * and consuming from it with manual acknowledgements (below, "Consuming").
 *
 * What the relay needs from a broker, and no more: publish a batch of
 * messages, pipelined (up to `window` unconfirmed at once, not one at a
 * time), and learn for each whether the broker took responsibility for it.
 * Every message ends in exactly one outcome:
 *
 *   ACEMQ_PUBLISH_CONFIRMED  the broker confirmed it (basic.ack): mark it published;
 *   ACEMQ_PUBLISH_NACKED     the broker refused it (basic.nack): a failure;
 *   ACEMQ_PUBLISH_RETURNED   unroutable (mandatory flag, basic.return): a failure,
 *                            never a success, although a confirm follows it;
 *   ACEMQ_PUBLISH_UNKNOWN    no confirm within the timeout, or the connection was
 *                            lost first: it may or may not have been taken, so
 *                            the relay marks nothing and lets the lease run out.
 *
 * URLs: "amqp://user:pass@host:port/vhost" (AMQP 0-9-1 on rabbitmq-c) and
 * "memory:" (in-process, for tests; faults can be injected).
 *
 * A handle is used by one thread at a time. After a lost connection the next
 * publish reconnects, waiting out a back-off that doubles per failed attempt
 * (100 ms up to 10 s); until it succeeds publish returns ACEMQ_EIO.
 */
#ifndef ACEMQ_BROKER_H
#define ACEMQ_BROKER_H

#include "acemq/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum acemq_publish_outcome {
    ACEMQ_PUBLISH_CONFIRMED = 0,
    ACEMQ_PUBLISH_NACKED = 1,
    ACEMQ_PUBLISH_RETURNED = 2,
    ACEMQ_PUBLISH_UNKNOWN = 3
} acemq_publish_outcome;

typedef struct acemq_broker_options {
    int window;             /* unconfirmed messages in flight at most; default 256 */
    int confirm_timeout_ms; /* wait for a confirm this long, then UNKNOWN; default 30,000 */
    int heartbeat_s;        /* AMQP heartbeat; 0 off; default 30 */
    int connect_timeout_ms; /* default 5,000 */
} acemq_broker_options;

ACEMQ_EXTERN void acemq_broker_options_init(acemq_broker_options *o);

typedef struct acemq_broker_msg {
    const char *exchange; /* "" is the default exchange */
    const char *routing_key;
    const char *message_id;   /* AMQP message_id */
    const char *content_type; /* NULL: none */
    const char *headers_json; /* a JSON object of strings, sent as AMQP headers; NULL: none */
    int attempts;             /* sent as the header "x-acemq-attempts" */
    const void *body;
    size_t body_len;
} acemq_broker_msg;

/* What happened to one message: outcome, and for NACKED / RETURNED / UNKNOWN
 * the broker's words (reply text of basic.return, "nack", "timeout", "lost
 * connection: ..."), owned by the handle until its next publish.
 * confirm_us: microseconds from the message's publish to the broker's
 * answer (ack or nack) as read by the handle, saturated at UINT32_MAX; 0
 * when no answer came (UNKNOWN). It sits where the padding after outcome
 * was, so the struct keeps its size and layout on 64-bit systems. */
typedef struct acemq_publish_result {
    int outcome; /* an acemq_publish_outcome */
    uint32_t confirm_us;
    const char *reason;
} acemq_publish_result;

typedef struct acemq_broker acemq_broker;

ACEMQ_EXTERN int acemq_broker_open(acemq_broker **out, const char *url,
                                   const acemq_broker_options *o);
ACEMQ_EXTERN void acemq_broker_close(acemq_broker *b);

/* Publishes msgs[0..n) persistent and mandatory, up to window unconfirmed at
 * once, and waits until each has an outcome in results[i]. Returns 0 when
 * every message has one (whatever it is), or an error (ACEMQ_EIO: not
 * connected and the reconnect failed; nothing was sent, every outcome is
 * UNKNOWN). */
ACEMQ_EXTERN int acemq_broker_publish(acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                                      acemq_publish_result *results);

/* Pipelined publishing: acemq_broker_publish split in two, so a caller can
 * send the next batch while the confirms of the previous one are still
 * coming and the window never drains between batches.
 *
 * acemq_broker_send publishes msgs[0..n) as publish does, counting the
 * unconfirmed messages of earlier sends against the window, and returns once
 * every message is sent, without waiting for the last confirms. Outcomes are
 * written into results[] as they arrive, during this and later send and
 * collect calls, so msgs and results must stay valid until the send is
 * collected. Returns 0 (the send is then outstanding and must be collected),
 * or an error with nothing sent and nothing outstanding (every outcome
 * UNKNOWN): ACEMQ_EIO (not connected and the reconnect failed), ACEMQ_EINVAL
 * (a message that cannot be encoded, or ACEMQ_BROKER_MAX_SENDS sends already
 * outstanding).
 *
 * acemq_broker_collect waits until the oldest outstanding send has an
 * outcome for each of its messages and retires it: 0, or ACEMQ_ENOENT when
 * nothing is outstanding. Its reasons stay valid until the next call on b.
 *
 * A lost connection or a confirm timeout answers every outstanding send at
 * once: whatever was unconfirmed, in any of them, is UNKNOWN. publish is
 * refused (ACEMQ_EINVAL) while sends are outstanding. */
#define ACEMQ_BROKER_MAX_SENDS 4
ACEMQ_EXTERN int acemq_broker_send(acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                                   acemq_publish_result *results);
ACEMQ_EXTERN int acemq_broker_collect(acemq_broker *b);

/* A resource alarm (RabbitMQ: memory or disk past its limit) makes the
 * broker stop reading from publishing connections, and it says so with
 * connection.blocked, which the AMQP handle asks for when it logs in. While
 * the connection is blocked the handle writes nothing more, keeps the
 * connection, and does not count the wait against confirm_timeout_ms: what
 * it wrote before waits for the alarm to clear and is confirmed then, where
 * dropping the connection would leave it UNKNOWN and send it again. The
 * confirm timeout starts afresh at connection.unblocked. A wait on a blocked
 * connection therefore lasts as long as the alarm, unless the handle is told
 * to stop waiting.
 *
 * acemq_broker_blocked: 1 while the broker holds b's connection blocked,
 * else 0. Safe from any thread (metrics).
 *
 * acemq_broker_stop_waiting: for shutting down; safe from any thread and
 * from a signal handler. From then on a send or collect that waits on a
 * blocked connection gives up within 100 ms: the unconfirmed stay UNKNOWN
 * ("broker blocked the connection (...); stopped waiting") and the
 * connection is dropped. Waits on a connection that is not blocked keep
 * their confirm timeout. It lasts until b is closed. */
ACEMQ_EXTERN int acemq_broker_blocked(const acemq_broker *b);
ACEMQ_EXTERN void acemq_broker_stop_waiting(acemq_broker *b);

/* Consuming: what a consumer needs from a broker, and no more. A handle
 * either publishes or consumes: acemq_broker_consume turns it into a
 * consuming handle for good, and from then on publish and send answer
 * ACEMQ_EINVAL (a consumer that must publish opens a second handle, so that
 * publisher confirms and deliveries never share a connection's flow control).
 *
 * A delivery is one message the broker handed over and waits to hear about.
 * It belongs to the caller (acemq_delivery_free) and is settled once, by
 * acemq_broker_ack, acemq_broker_ack_many or acemq_broker_reject on the
 * handle that delivered it.
 * tag names it to the handle, not to the broker: it carries which connection
 * delivered it, so a delivery from a connection since lost is refused
 * (ACEMQ_ESTALE, nothing sent) instead of settling another message that
 * reuses its number on the new connection; the broker delivers it again. */
typedef struct acemq_delivery {
    uint64_t tag; /* what ack/reject name; valid only on the connection that delivered it */
    const char *message_id; /* NULL: the message has none */
    /* message_id's length: an AMQP id may hold NUL bytes, so a key is these
     * bytes (two ids that differ after a NUL are two messages). 0 when none. */
    size_t message_id_len;
    const char *exchange; /* "" is the default exchange */
    const char *routing_key;
    const char *content_type; /* NULL: none */
    const char *headers_json; /* the AMQP headers as one JSON object (below); NULL: none */
    int attempts;             /* header "x-acemq-attempts" (what publish sends), else 0 */
    int redelivered;          /* the broker's redelivered flag: 1 when delivered before */
    const void *body;         /* never NULL, even when body_len is 0 */
    size_t body_len;
} acemq_delivery;

/* headers_json: strings as strings (byte sequences that are not UTF-8, and
 * NUL bytes, as U+FFFD), integers as numbers, floats as numbers (NaN and infinities as
 * strings), booleans, void as null, arrays as arrays, tables as objects
 * (RabbitMQ's x-death among them), timestamps as seconds, decimals as
 * strings ("12.34", "-0.5"). attempts is 0 without the header, and when
 * it is negative or not an integer. */

/* basic.qos(prefetch: unacknowledged deliveries in hand at most, 0 no limit)
 * and basic.consume(queue, manual acknowledgements) on a channel of its own.
 * 0, or: ACEMQ_ENOENT (no such queue), ACEMQ_EAUTH (the broker refused the
 * queue to this user), ACEMQ_EBACKEND (another refusal, e.g. an exclusive
 * queue of another connection), ACEMQ_EIO (no connection), ACEMQ_EINVAL (a
 * handle that already consumes, or has sends outstanding); the broker's words
 * in acemq_broker_errmsg. A handle whose consume failed is as it was. */
ACEMQ_EXTERN int acemq_broker_consume(acemq_broker *b, const char *queue, int prefetch);

/* Waits up to timeout_ms (0: only what has already come) for the next
 * delivery: 0 with *out, the caller's to free; ACEMQ_ENOENT when none came
 * in time; ACEMQ_EIO when the connection is lost (a broker that closed it,
 * a cut socket, or no heartbeat from it within twice heartbeat_s);
 * ACEMQ_EBACKEND when the broker ended the consumer (basic.cancel: the queue
 * was deleted) or closed its channel. After EIO or EBACKEND the deliveries
 * in hand are void (ACEMQ_ESTALE; the broker delivers them again), and the
 * next call connects again, once the back-off publish uses has run out,
 * and consumes again; a call whose timeout_ms ends before the back-off does
 * waits timeout_ms and answers ACEMQ_ENOENT, so a caller's stop flag is
 * looked at as often as it asks. rabbitmq-c answers heartbeats only inside calls on the
 * handle: call next (or ack) at least every heartbeat_s. */
ACEMQ_EXTERN int acemq_broker_next(acemq_broker *b, int timeout_ms, acemq_delivery **out);

/* basic.ack of d. 0 (sent: AMQP does not answer an ack), ACEMQ_ESTALE (d
 * came on a connection or channel since lost: nothing sent), ACEMQ_EINVAL
 * (d was settled already, or is not this handle's: nothing sent, and the
 * deliveries in hand stay valid), ACEMQ_EIO (the connection failed while
 * sending; d is then stale). */
ACEMQ_EXTERN int acemq_broker_ack(acemq_broker *b, const acemq_delivery *d);

/* Acknowledges d[0..n) at once: what acemq_broker_ack on each would do,
 * judged per delivery by the same rules, in one write to the broker. When
 * the deliveries acknowledged are every one in hand up to the highest tag
 * among them, that is a single basic.ack with multiple set; else one
 * basic.ack each, written together. status[i] (status NULL: not wanted)
 * gets d[i]'s answer as acemq_broker_ack would give it: 0 (sent),
 * ACEMQ_ESTALE (came on a connection or channel since lost: nothing sent
 * for it), ACEMQ_EINVAL (NULL, settled already, named earlier in d, or not
 * this handle's: nothing sent for it, and the others go on), ACEMQ_EIO
 * (the connection failed while sending; it is then stale). Returns 0 when
 * every status is 0 (n 0 included); else ACEMQ_EIO when the connection
 * failed, else the first refused delivery's error; acemq_broker_errmsg has
 * the last error's text. ACEMQ_EINVAL with no status written: b, or d with
 * n above 0, NULL. */
ACEMQ_EXTERN int acemq_broker_ack_many(acemq_broker *b, const acemq_delivery *const *d, size_t n,
                                       int *status);

/* requeue 1: back to the queue (basic.nack with requeue), delivered again
 * with redelivered set; 0: to the queue's dead-letter exchange
 * (x-dead-letter-exchange), or dropped when it has none. Returns as ack. */
ACEMQ_EXTERN int acemq_broker_reject(acemq_broker *b, const acemq_delivery *d, int requeue);

/* Frees a delivery from acemq_broker_next, settled or not (an unsettled one
 * stays with the broker until the connection ends). NULL is fine. */
ACEMQ_EXTERN void acemq_delivery_free(acemq_delivery *d);

/* The broker's own words for the last error on b, or the argument that was
 * wrong; a call that succeeds leaves it as it was. With b NULL, why the last
 * acemq_broker_open in this thread failed. */
ACEMQ_EXTERN const char *acemq_broker_errmsg(const acemq_broker *b);

#ifdef __cplusplus
}
#endif
#endif
