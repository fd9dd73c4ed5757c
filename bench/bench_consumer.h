/* bench_consumer.h — a consumer on a thread of its own that takes a queue's
 * messages as they arrive and counts them.
 *
 * bench_relay --consumer runs one beside every turn, as a relay runs beside
 * the services that consume what it publishes: the queue then stays short.
 * Without it every message of a run stays in the queue; a classic queue on
 * RabbitMQ 3.10 and 3.11 keeps them in its process's memory, whose garbage
 * collection held confirms back by up to 20 ms, and RabbitMQ confirms a
 * persistent message only once it is on disk instead of once it is consumed
 * (docs/broker.md, "When confirms come"). */
#ifndef ACEMQ_BENCH_CONSUMER_H
#define ACEMQ_BENCH_CONSUMER_H

#include <amqp.h>

typedef struct bench_consumer bench_consumer;

/* Takes over c (logged in, channel 1 open) and consumes `queue` on it, with
 * automatic acknowledgement, on a thread of its own. Fails loudly (die). */
bench_consumer *bench_consumer_start(amqp_connection_state_t c, const char *queue);

/* Waits until at least `want` messages have arrived, or `timeout_s` has
 * passed; then stops, closes the connection and frees k. Returns how many
 * messages arrived. */
long bench_consumer_finish(bench_consumer *k, long want, double timeout_s);

#endif
