/* broker_backend.h — the contract between the generic broker layer and a broker.
 *
 * Versioned like the stores' tables: version first, slots only appended, the
 * core checks version before a newer slot. The generic layer (broker.c)
 * checks arguments, fills every result with UNKNOWN before the backend runs
 * (so a backend that gives up early leaves honest answers) and keeps the
 * error text. Every error a slot returns has its text set on b
 * (acemq__broker_fail) by the slot itself.
 */
#ifndef ACEMQ_BROKER_BACKEND_H
#define ACEMQ_BROKER_BACKEND_H

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include "acemq/broker.h"
#include "core/registry.h"

#define ACEMQ__BROKER_METHODS_VERSION 4

typedef struct acemq__broker_methods {
    int version;
    const char *name;
    void (*close)(acemq_broker *b);
    /* Publishes and fills results[i] for each message it got an answer for;
     * the others stay UNKNOWN. Reasons point into memory the backend keeps
     * until its next publish. */
    int (*publish)(acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                   acemq_publish_result *results);
    /* Version 2: pipelined publishing (acemq_broker_send / _collect). The
     * core counts outstanding sends and never calls send with
     * ACEMQ_BROKER_MAX_SENDS of them outstanding, nor collect with none. A
     * backend with these may leave publish NULL: the core publishes through
     * send + collect. send returns 0 with the send outstanding, or an error
     * with nothing sent and nothing outstanding. */
    int (*send)(acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                acemq_publish_result *results);
    int (*collect)(acemq_broker *b);
    /* Version 3: consuming (acemq_broker_consume / _next / _ack / _reject).
     * The core checks the arguments and the handle's mode, calls consume at
     * most once successfully, and next and settle only after it. next puts
     * the backend's own delivery tag in (*out)->tag (below 2^48; the core
     * adds the generation, acemq__broker_tag). settle gets that tag back
     * only for a delivery of the current generation: how is an
     * acemq__settle, and the tag of a delivery handed out and not yet
     * settled: the core refuses a second settle of one delivery itself.
     * Every slot may be NULL: the core answers ENOTSUP. */
    int (*consume)(acemq_broker *b, const char *queue, int prefetch);
    int (*next)(acemq_broker *b, int timeout_ms, acemq_delivery **out);
    int (*settle)(acemq_broker *b, uint64_t tag, int how);
    /* Version 4: acknowledges tags[0..n) (n >= 1, ascending, each a tag of
     * the current generation handed out and not settled, as settle gets
     * them) in one write. multiple 1: they are every tag in hand up to
     * tags[n - 1], and one basic.ack with multiple set on tags[n - 1]
     * settles them all; 0: one basic.ack each. 0 when sent, or an error
     * with its text on b: ACEMQ_ESTALE (no consumer now: nothing sent),
     * ACEMQ_EIO (the connection failed while sending and is dropped; what
     * reached the broker is acknowledged, the rest comes again). NULL: the
     * core acknowledges through settle, one tag at a time. */
    int (*ack_many)(acemq_broker *b, const uint64_t *tags, size_t n, int multiple);
} acemq__broker_methods;

enum acemq__settle { ACEMQ__ACK = 0, ACEMQ__REQUEUE, ACEMQ__REJECT };

struct acemq_broker {
    const acemq__broker_methods *methods;
    void *self;
    acemq_broker_options opts;
    int outstanding; /* sends not yet collected */
    char errmsg[512];
    /* Written by the thread that publishes, read from any (acemq_broker_blocked). */
    atomic_int blocked;
    /* acemq_broker_stop_waiting, from any thread or a signal handler. */
    atomic_int stop_waiting;
    /* A caller's stop flag that counts as stop_waiting once set
     * (acemq__broker_watch_stop): acemq_relay_run's, whose loop cannot look
     * at it while a collect waits. */
    volatile sig_atomic_t *stop_flag;
    /* Told of each change of blocked, on the thread that publishes, with the
     * broker's reason (or why it ended): the relay logs it. */
    void (*on_blocked)(void *ctx, int blocked, const char *reason);
    void *on_blocked_ctx;
    /* Set once acemq_broker_consume succeeded: the handle no longer publishes. */
    int consuming;
    /* Consuming: bumped by the backend each time the deliveries in hand
     * become void (a lost connection, a channel or consumer the broker
     * ended), so that their tags, which a new channel reuses from 1, are
     * told apart from the new ones' (acemq__broker_tag). */
    uint32_t generation;
    /* Consuming: the backend tags handed out in generation held_gen and not
     * settled since, ascending (broker/consume.c). A second ack of one
     * delivery is refused here, nothing sent: RabbitMQ would close the
     * channel over the unknown tag, and every other delivery in hand would
     * go back to the queue with it. */
    uint64_t *held;
    size_t n_held, cap_held;
    uint32_t held_gen;
    /* acemq_broker_ack_many's scratch (the tags it sends, ascending) and
     * how many times it sent one basic.ack with multiple set
     * (acemq__broker_multiple_acks). */
    uint64_t *ack_tags;
    size_t cap_ack_tags;
    uint64_t multiple_acks;
};

int acemq__broker_fail(acemq_broker *b, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* For acemq_publish_result.confirm_us: the monotonic clock in microseconds
 * (0 if it cannot be read), and the time from a publish at sent_us to an
 * answer read at at_us, saturated to 0..UINT32_MAX. */
int64_t acemq__broker_now_us(void);
uint32_t acemq__broker_confirm_us(int64_t sent_us, int64_t at_us);

/* A delivery as the caller sees it: one block holding the struct, its
 * strings and its body. Each string given as bytes and length (bytes NULL:
 * none, the field NULL); headers_json NUL-terminated or NULL. The body's
 * body_len bytes are left for the backend to fill through *body. NULL when
 * out of memory. */
typedef struct acemq__delivery_parts {
    uint64_t tag;
    const void *message_id, *exchange, *routing_key, *content_type;
    size_t message_id_len, exchange_len, routing_key_len, content_type_len;
    const char *headers_json;
    int attempts, redelivered;
    size_t body_len;
} acemq__delivery_parts;
acemq_delivery *acemq__delivery_new(const acemq__delivery_parts *p, void **body);

/* A delivery's tag as the caller holds it: the backend's own tag in the low
 * 48 bits, the handle's generation (mod 2^16) above. */
#define ACEMQ__TAG_BITS 48
uint64_t acemq__broker_tag(const acemq_broker *b, uint64_t backend_tag);

/* Whether a wait on a blocked connection should give up now:
 * acemq_broker_stop_waiting was called, or the watched stop flag is set. */
int acemq__broker_stop_asked(const acemq_broker *b);

/* A broker as the registry knows it: the scheme of the URLs it serves and
 * how to open one. */
typedef struct acemq__broker_backend {
    acemq__registry_entry entry; /* scheme "amqp", shown "amqp://" */
    /* Fills b->methods and b->self, or returns an error with its text on b.
     * The URL text is passed whole: amqp:// URLs carry user, password, host,
     * port and vhost that rabbitmq-c's amqp_parse_url reads. */
    int (*open)(acemq_broker *b, const char *url);
} acemq__broker_backend;

/* The brokers by URL scheme (core/registry.h): each entry is the
 * first member of a acemq__broker_backend. */
extern acemq__registry acemq__broker_registry;

#endif
