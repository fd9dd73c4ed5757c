/* broker_amqp_alarm.c — a resource alarm (connection.blocked), raised with
 * `scripts/services.sh alarm rabbitmq`: a blocked send waits for the alarm to
 * clear, and acemq_broker_stop_waiting ends the wait from another thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include <cmocka.h>

#include <amqp.h>

#include "acemq/broker.h"
#include "os/mono_time.h"
#include "integration/broker_amqp_fixture.h"

/* `services.sh alarm|unalarm rabbitmq`: 0 when it worked. */
static int broker_alarm(const char *action)
{
    char cmd[1024];
    (void)snprintf(cmd, sizeof cmd, "'%s' %s rabbitmq", services_sh, action);
    return system(cmd);
}

/* The alarm tests' other thread: waits until the handle reports the
 * connection blocked, keeps it blocked for a second (more than three of the
 * handle's 300 ms confirm timeouts), then clears the alarm, or tells the
 * handle to stop waiting instead (stop_instead). */
typedef struct alarm_watch {
    acemq_broker *b;
    int stop_instead;
    int saw_blocked, still_blocked, cleared;
} alarm_watch;

static void *watch_alarm(void *arg)
{
    alarm_watch *w = arg;
    for (int i = 0; i < 2000 && !acemq_broker_blocked(w->b); i++) /* 20 s at most */
        acemq__sleep_ms(10);
    w->saw_blocked = acemq_broker_blocked(w->b);
    if (w->saw_blocked && w->stop_instead) {
        acemq_broker_stop_waiting(w->b);
        return NULL;
    }
    if (w->saw_blocked) {
        acemq__sleep_ms(1000);
        w->still_blocked = acemq_broker_blocked(w->b);
    }
    w->cleared = broker_alarm("unalarm") == 0;
    return NULL;
}

/* Skips without services.sh; else raises the alarm, with the node's
 * connection already open and confirmed on (so the login is not what the
 * alarm holds up). */
static acemq_broker *open_then_alarm(const char *ex)
{
    if (!services_sh) {
        print_message("no scripts/services.sh given to raise an alarm with\n");
        skip();
    }
    acemq_broker *b = open_broker_with_timeout(256, 300);
    acemq_broker_msg first = make_msg(ex, "k", "before");
    acemq_publish_result r;
    assert_int_equal(acemq_broker_publish(b, &first, 1, &r), 0);
    assert_int_equal(r.outcome, ACEMQ_PUBLISH_CONFIRMED);
    assert_int_equal(acemq_broker_blocked(b), 0);
    if (broker_alarm("alarm") != 0) {
        acemq_broker_close(b);
        fail_msg("services.sh alarm rabbitmq failed");
    }
    return b;
}

/* A memory alarm blocks the connection (connection.blocked) while 20
 * messages are out, for longer than three confirm timeouts of 300 ms. The
 * call waits instead of giving up: the connection is kept, and once the
 * alarm clears every message is confirmed and in the queue once (giving up
 * would have left them UNKNOWN, to be sent again). */
void blocked_connection_waits_for_the_alarm(void **state)
{
    (void)state;
    char ex[128], q[128];
    bound_route(ex, q, "blocked");
    acemq_broker *b = open_then_alarm(ex);
    alarm_watch w = {.b = b};
    pthread_t t;
    if (pthread_create(&t, NULL, watch_alarm, &w) != 0) {
        (void)broker_alarm("unalarm");
        fail_msg("pthread_create failed");
    }
    enum { N = 20 };
    char ids[N][16];
    acemq_broker_msg m[N];
    acemq_publish_result r[N];
    for (int i = 0; i < N; i++) {
        (void)snprintf(ids[i], sizeof ids[i], "b%d", i);
        m[i] = make_msg(ex, "k", ids[i]);
    }
    int rc = acemq_broker_publish(b, m, N, r);
    pthread_join(t, NULL);
    if (!w.cleared) (void)broker_alarm("unalarm");
    assert_true(w.saw_blocked);
    assert_true(w.still_blocked);
    assert_true(w.cleared);
    assert_int_equal(rc, 0);
    for (int i = 0; i < N; i++)
        if (r[i].outcome != ACEMQ_PUBLISH_CONFIRMED)
            fail_msg("message %d: outcome %d (%s), expected CONFIRMED", i, r[i].outcome,
                     r[i].reason ? r[i].reason : "");
    assert_int_equal(acemq_broker_blocked(b), 0);
    amqp_message_t got;
    assert_true(get_one(q, &got)); /* "before" */
    amqp_destroy_message(&got);
    for (int i = 0; i < N; i++) {
        assert_true(get_one(q, &got));
        assert_true(bytes_eq(got.properties.message_id, ids[i]));
        amqp_destroy_message(&got);
    }
    assert_false(get_one(q, &got));
    acemq_broker_close(b);
}

/* The same alarm, and acemq_broker_stop_waiting from another thread (as
 * the relay's SIGTERM does): the call gives up on the blocked connection,
 * the messages still waiting UNKNOWN with the broker's reason, and the
 * connection is dropped; once the alarm clears, the handle connects again
 * and publishes. */
void stop_waiting_ends_a_blocked_wait(void **state)
{
    (void)state;
    char ex[128], q[128];
    bound_route(ex, q, "stopblocked");
    acemq_broker *b = open_then_alarm(ex);
    alarm_watch w = {.b = b, .stop_instead = 1};
    pthread_t t;
    if (pthread_create(&t, NULL, watch_alarm, &w) != 0) {
        (void)broker_alarm("unalarm");
        fail_msg("pthread_create failed");
    }
    acemq_broker_msg m[3] = {make_msg(ex, "k", "s1"), make_msg(ex, "k", "s2"),
                             make_msg(ex, "k", "s3")};
    acemq_publish_result r[3];
    int rc = acemq_broker_publish(b, m, 3, r);
    pthread_join(t, NULL);
    int cleared = broker_alarm("unalarm") == 0;
    assert_true(w.saw_blocked);
    assert_true(cleared);
    assert_int_equal(rc, 0);
    /* RabbitMQ blocks the connection once it reads a publish during the
     * alarm, and takes that one; what follows it waits. */
    int unknown = 0;
    for (int i = 0; i < 3; i++) {
        if (r[i].outcome == ACEMQ_PUBLISH_CONFIRMED) continue;
        assert_int_equal(r[i].outcome, ACEMQ_PUBLISH_UNKNOWN);
        assert_non_null(r[i].reason);
        assert_non_null(strstr(r[i].reason, "broker blocked the connection ("));
        assert_non_null(strstr(r[i].reason, "stopped waiting"));
        unknown++;
    }
    assert_true(unknown > 0);
    assert_int_equal(acemq_broker_blocked(b), 0);
    acemq_broker_msg after = make_msg(ex, "k", "after");
    acemq_publish_result ar;
    assert_int_equal(acemq_broker_publish(b, &after, 1, &ar), 0);
    assert_int_equal(ar.outcome, ACEMQ_PUBLISH_CONFIRMED);
    acemq_broker_close(b);
}
