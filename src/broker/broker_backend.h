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

#define ACEMQ__BROKER_METHODS_VERSION 2

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
} acemq__broker_methods;

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
};

int acemq__broker_fail(acemq_broker *b, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* For acemq_publish_result.confirm_us: the monotonic clock in microseconds
 * (0 if it cannot be read), and the time from a publish at sent_us to an
 * answer read at at_us, saturated to 0..UINT32_MAX. */
int64_t acemq__broker_now_us(void);
uint32_t acemq__broker_confirm_us(int64_t sent_us, int64_t at_us);

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
