/* bench_consumer.c — see bench_consumer.h. */
#include "bench_consumer.h"

#include <amqp_framing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

#include "bench_common.h"

struct bench_consumer {
    amqp_connection_state_t c;
    pthread_t thread;
    atomic_long got;
    atomic_int stop;
};

static void *consume_main(void *arg)
{
    bench_consumer *k = arg;
    while (!atomic_load(&k->stop)) {
        amqp_maybe_release_buffers(k->c);
        /* A short timeout, so that finish() is not kept waiting. */
        struct timeval tv = {0, 50000};
        amqp_envelope_t env;
        amqp_rpc_reply_t r = amqp_consume_message(k->c, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_NORMAL) {
            atomic_fetch_add(&k->got, 1);
            amqp_destroy_envelope(&env);
        } else if (r.reply_type != AMQP_RESPONSE_LIBRARY_EXCEPTION ||
                   r.library_error != AMQP_STATUS_TIMEOUT) {
            die("consumer: %s", r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                                    ? amqp_error_string2(r.library_error)
                                    : "the broker closed the channel");
        }
    }
    return NULL;
}

bench_consumer *bench_consumer_start(amqp_connection_state_t c, const char *queue)
{
    bench_consumer *k = calloc(1, sizeof *k);
    if (!k) die("out of memory");
    k->c = c;
    atomic_init(&k->got, 0);
    atomic_init(&k->stop, 0);
    amqp_basic_consume(c, 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 1 /* no_ack */, 0,
                       amqp_empty_table);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("basic.consume failed");
    if (pthread_create(&k->thread, NULL, consume_main, k) != 0) die("pthread_create failed");
    return k;
}

long bench_consumer_finish(bench_consumer *k, long want, double timeout_s)
{
    double until = mono_now() + timeout_s;
    while (atomic_load(&k->got) < want && mono_now() < until) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&k->stop, 1);
    if (pthread_join(k->thread, NULL) != 0) die("pthread_join failed");
    long got = atomic_load(&k->got);
    /* Deliveries still on their way are dropped with the connection, and
     * a close that fails leaves nothing behind that the count depends on. */
    amqp_rpc_reply_t r = amqp_connection_close(k->c, AMQP_REPLY_SUCCESS);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        fprintf(stderr, "%s: consumer: connection.close failed; the connection is dropped\n",
                bench_name);
    if (amqp_destroy_connection(k->c) != AMQP_STATUS_OK)
        fprintf(stderr, "%s: consumer: the connection's socket did not close cleanly\n",
                bench_name);
    free(k);
    return got;
}
