/* bench_amqp.h — a plain rabbitmq-c connection for the benches' peers and
 * queues (bench_amqp.c). */
#ifndef ACEMQ_BENCH_AMQP_H
#define ACEMQ_BENCH_AMQP_H

#include <amqp.h>

/* A connection to url with channel 1 open, and its end; die on failure. */
amqp_connection_state_t mq_connect(const char *url);
void mq_close(amqp_connection_state_t c);

#endif
