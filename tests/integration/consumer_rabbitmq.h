/* consumer_rabbitmq.h — what the parts of test_consumer_rabbitmq share:
 * work queues that other connections may consume (the fixture's own
 * queues are exclusive to the admin connection), a look at a queue's
 * counts, temporary SQLite files and fresh shared stores, bounded waits,
 * and the fleet tests (consumer_rabbitmq_fleet.c), which run consumers in
 * processes of their own.
 */
#ifndef ACEMQ_TEST_CONSUMER_RABBITMQ_H
#define ACEMQ_TEST_CONSUMER_RABBITMQ_H

#include <stddef.h>
#include <stdint.h>

#include "acemq/consumer.h"

/* A fresh queue named after what (test_name), durable, neither exclusive
 * nor auto-delete, expiring unused after ten minutes as a net; quorum: a
 * quorum queue (x-queue-type). Purged, in case a crashed run left it. */
void work_queue(char *q, size_t len, const char *what, int quorum);
void drop_queue(const char *q);
/* queue.declare passive: messages ready and consumers of q. */
void queue_counts(const char *q, uint32_t *ready, uint32_t *consumers);
/* Waits (bounded, 60 s) until q has no consumer, then says how many
 * messages are ready: once the consumers are gone whatever they left
 * unacknowledged is back in the queue, so 0 means nothing unsettled. */
uint32_t ready_once_idle(const char *q);

/* A fresh temporary directory; rm_tmpdir removes it with the SQLite files
 * in it (the databases, their -wal, -shm and -acemq-issue companions). */
void make_tmpdir(char *dir, size_t len);
void rm_tmpdir(const char *dir);
/* A store of URL kind "sqlite" (a file in dir), "postgres" (a fresh table,
 * ACEMQ_PG_URL) or "redis" (a fresh prefix, ACEMQ_REDIS_URL): 0 with the
 * URL, or -1 when the server's variable is unset. drop_store deletes what
 * a shared store left on its server (best effort). */
int store_url(char *url, size_t len, const char *kind, const char *dir);
void drop_store(const char *kind, const char *url);
acemq_idem *open_store(const char *url);

int64_t mono_ms(void);
void sleep_ms(int ms);

/* A consumer running on a thread of its own until stop_runner. */
typedef struct runner runner;
runner *start_runner(acemq_consumer *c);
/* 1 once run returned (a handler that called acemq_consumer_stop). */
int runner_done(runner *r);
/* Stops the consumer, joins the thread, frees r: run's result. */
int stop_runner(runner *r);

/* consumer_rabbitmq_fleet.c */
void fleet_sqlite(void **state);
void fleet_postgres(void **state);
void fleet_redis(void **state);
void fleet_quorum_sqlite(void **state);

#endif
