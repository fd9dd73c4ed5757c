/* broker_amqp_fixture.h — what the parts of test_broker_amqp share (and
 * test_broker_consume, for its admin connection and names): the URL
 * under test and the admin connection (a second, plain rabbitmq-c connection
 * that declares exchanges and queues and reads what arrived), helpers that
 * fail the test when RabbitMQ or the broker refuses, and the tests each part
 * defines, which test_broker_amqp.c runs as one cmocka group.
 *
 * Names carry the pid, and the queues are exclusive to the admin connection,
 * so runs never see each other's messages. */
#ifndef ACEMQ_TEST_BROKER_AMQP_FIXTURE_H
#define ACEMQ_TEST_BROKER_AMQP_FIXTURE_H

#include <stddef.h>

#include <amqp.h>

#include "acemq/broker.h"

/* ACEMQ_AMQP_URL, and its parts as rabbitmq-c parsed them (admin_open). */
extern const char *broker_url;
extern struct amqp_connection_info broker_info;
extern const char *broker_vhost;
/* The admin connection, channel 1 open, between admin_open and admin_close. */
extern amqp_connection_state_t admin_conn;
/* scripts/services.sh, from the command line; NULL skips the alarm tests. */
extern const char *services_sh;

/* The group's setup and teardown: the admin connection opened and closed. */
int admin_open(void **state);
int admin_close(void **state);

/* Fails the test with RabbitMQ's reason unless r is a normal reply. */
void must_ok(amqp_rpc_reply_t r, const char *what);
/* "acemq.test.<pid>.<what>" into buf. */
void test_name(char *buf, size_t len, const char *what);
/* An auto-delete direct exchange, and an exclusive queue bound to ex by key. */
void declare_exchange(const char *ex);
void declare_queue(const char *q, const char *ex, const char *key, amqp_table_t args);
/* A fresh exchange and a durable queue bound to it with key "k", both named
 * after tag (the queue "<tag>.q"); ex and q need room for 128 bytes. */
void bound_route(char *ex, char *q, const char *tag);
/* basic.get: 1 and the message in *m (amqp_destroy_message it), or 0 when
 * the queue is empty. */
int get_one(const char *q, amqp_message_t *m);
/* Whether b holds exactly the bytes of the C string z. */
int bytes_eq(amqp_bytes_t b, const char *z);
/* A broker on broker_url with this confirm window (and confirm timeout);
 * the test fails unless it opens. */
acemq_broker *open_broker(int window);
acemq_broker *open_broker_with_timeout(int window, int confirm_timeout_ms);
/* A message to exchange ex with routing key and message id. */
acemq_broker_msg make_msg(const char *ex, const char *key, const char *id);

/* broker_amqp_outcomes.c */
void many_confirmed_and_intact(void **state);
void bodies_across_frames_arrive_intact(void **state);
void unroutable_is_returned(void **state);
void full_queue_nacks(void **state);
void missing_exchange_closes_channel_then_recovers(void **state);
void pipelined_sends_keep_outcomes_apart(void **state);

/* broker_amqp_faults.c */
void lost_connection_then_reconnects(void **state);
void silent_broker_times_out_then_recovers(void **state);
void stalled_write_times_out_then_recovers(void **state);
void cut_with_sends_outstanding(void **state);

/* broker_amqp_alarm.c */
void blocked_connection_waits_for_the_alarm(void **state);
void stop_waiting_ends_a_blocked_wait(void **state);

/* broker_amqp_refused.c */
void bad_headers_fail_the_call_whole(void **state);
void bad_urls(void **state);
void wrong_password(void **state);

#endif
