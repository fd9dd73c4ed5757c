/* test_broker_pipeline.c — acemq_broker_send / _collect on the in-process
 * broker, whose confirms are held until its window is full or a send is
 * collected: confirms of two sends in flight at once, and what a nack or a
 * dropped connection does to each of them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "acemq/broker.h"
#include "backends/test_control.h"

static acemq_broker *open_window(int window)
{
    acemq_broker_options o;
    acemq_broker_options_init(&o);
    o.window = window;
    acemq_broker *b = NULL;
    assert_int_equal(acemq_broker_open(&b, "memory:", &o), 0);
    return b;
}

static void fill(acemq_broker_msg *m, char (*ids)[32], size_t n, const char *prefix)
{
    for (size_t i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "%s%zu", prefix, i);
        m[i] = (acemq_broker_msg){.exchange = "x", .routing_key = "k", .message_id = ids[i]};
    }
}

static void assert_outcomes(const acemq_publish_result *r, const int *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].outcome != want[i])
            fail_msg("message %zu: outcome %d, expected %d (%s)", i, r[i].outcome, want[i],
                     r[i].reason ? r[i].reason : "");
}

/* A full window tells the oldest confirms first, reaching back into the
 * earlier send; collect tells the rest of the oldest send only. */
static void window_tells_oldest_first(void **state)
{
    (void)state;
    acemq_broker *b = open_window(4);
    acemq_broker_msg a[3], c[3];
    char ia[3][32], ic[3][32];
    acemq_publish_result ra[3], rc[3];
    fill(a, ia, 3, "a");
    fill(c, ic, 3, "c");
    assert_int_equal(acemq_broker_send(b, a, 3, ra), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ra[i].outcome, ACEMQ_PUBLISH_UNKNOWN); /* in flight */
    assert_int_equal(acemq_broker_send(b, c, 3, rc), 0);
    const int u = ACEMQ_PUBLISH_UNKNOWN, ok = ACEMQ_PUBLISH_CONFIRMED;
    assert_outcomes(ra, (const int[]){ok, ok, u}, 3); /* 6 sent, 4 in flight */
    assert_outcomes(rc, (const int[]){u, u, u}, 3);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_outcomes(ra, (const int[]){ok, ok, ok}, 3);
    assert_outcomes(rc, (const int[]){u, u, u}, 3);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_outcomes(rc, (const int[]){ok, ok, ok}, 3);
    assert_int_equal(acemq_broker_collect(b), ACEMQ_ENOENT);
    assert_int_equal(acemq__memory_broker_count(b), 6);
    acemq_broker_close(b);
}

static int64_t now_us(void)
{
    struct timespec ts;
    assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* confirm_us is each message's own time from publish to answer: the held
 * confirms, told at collect after at least `spin` microseconds, say at
 * least that and no more than the whole; a message that got no answer
 * says 0, whatever the array held before. */
static void confirm_us_is_measured_per_message(void **state)
{
    (void)state;
    acemq_broker *b = open_window(256);
    acemq_broker_msg a[3];
    char ia[3][32];
    acemq_publish_result ra[3];
    fill(a, ia, 3, "a");
    for (int i = 0; i < 3; i++)
        ra[i].confirm_us = UINT32_MAX;
    const int64_t spin = 200;
    int64_t t0 = now_us();
    assert_int_equal(acemq_broker_send(b, a, 3, ra), 0);
    int64_t sent = now_us();
    while (now_us() - sent < spin) {
    }
    assert_int_equal(acemq_broker_collect(b), 0);
    int64_t whole = now_us() - t0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ra[i].outcome, ACEMQ_PUBLISH_CONFIRMED);
        if (ra[i].confirm_us < spin || ra[i].confirm_us > whole)
            fail_msg("message %d: confirm_us %u, not within %lld..%lld", i, ra[i].confirm_us,
                     (long long)spin, (long long)whole);
    }
    acemq__memory_broker_fault(b, ACEMQ__FAULT_NO_CONFIRM, 1, 0);
    for (int i = 0; i < 3; i++)
        ra[i].confirm_us = UINT32_MAX;
    assert_int_equal(acemq_broker_publish(b, a, 3, ra), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ra[i].outcome, ACEMQ_PUBLISH_UNKNOWN);
        assert_int_equal(ra[i].confirm_us, 0);
    }
    acemq_broker_close(b);
}

/* The connection drops in the second send: the first send's confirms were
 * still in flight, so all of it is UNKNOWN too (taken, but nobody can
 * tell), and the second's unsent rest is UNKNOWN; nothing is confirmed. */
static void drop_loses_both_sends_confirms(void **state)
{
    (void)state;
    acemq_broker *b = open_window(256);
    acemq_broker_msg a[3], c[4];
    char ia[3][32], ic[4][32];
    acemq_publish_result ra[3], rc[4];
    fill(a, ia, 3, "a");
    fill(c, ic, 4, "c");
    acemq__memory_broker_fault(b, ACEMQ__FAULT_DROP, 1, 5);
    assert_int_equal(acemq_broker_send(b, a, 3, ra), 0);
    assert_int_equal(acemq_broker_send(b, c, 4, rc), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ra[i].outcome, ACEMQ_PUBLISH_UNKNOWN);
        assert_non_null(strstr(ra[i].reason, "lost connection"));
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(rc[i].outcome, ACEMQ_PUBLISH_UNKNOWN);
        assert_non_null(strstr(rc[i].reason, "lost connection"));
    }
    assert_int_equal(acemq__memory_broker_count(b), 5); /* a0-a2, c0-c1 taken */
    /* The next send goes through. */
    assert_int_equal(acemq_broker_publish(b, a, 3, ra), 0);
    assert_outcomes(ra, (const int[]){0, 0, 0}, 3);
    acemq_broker_close(b);
}

/* Nacks decided while the first send is unconfirmed land on exactly the
 * messages they were for, in the second send. */
static void nack_in_second_send_only(void **state)
{
    (void)state;
    acemq_broker *b = open_window(256);
    acemq_broker_msg a[3], c[3];
    char ia[3][32], ic[3][32];
    acemq_publish_result ra[3], rc[3];
    fill(a, ia, 3, "a");
    fill(c, ic, 3, "c");
    acemq__memory_broker_fault(b, ACEMQ__FAULT_NACK, 2, 4);
    assert_int_equal(acemq_broker_send(b, a, 3, ra), 0);
    assert_int_equal(acemq_broker_send(b, c, 3, rc), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    const int ok = ACEMQ_PUBLISH_CONFIRMED, no = ACEMQ_PUBLISH_NACKED;
    assert_outcomes(ra, (const int[]){ok, ok, ok}, 3);
    assert_outcomes(rc, (const int[]){ok, no, no}, 3);
    acemq_broker_close(b);
}

/* The core's bookkeeping: publish waits for no one else's confirms, so it is
 * refused while sends are outstanding; at most ACEMQ_BROKER_MAX_SENDS. */
static void outstanding_sends_are_bounded(void **state)
{
    (void)state;
    acemq_broker *b = open_window(256);
    acemq_broker_msg m[1];
    char id[1][32];
    acemq_publish_result r[ACEMQ_BROKER_MAX_SENDS + 1][1];
    fill(m, id, 1, "m");
    assert_int_equal(acemq_broker_collect(b), ACEMQ_ENOENT);
    for (int i = 0; i < ACEMQ_BROKER_MAX_SENDS; i++)
        assert_int_equal(acemq_broker_send(b, m, 1, r[i]), 0);
    assert_int_equal(acemq_broker_send(b, m, 1, r[ACEMQ_BROKER_MAX_SENDS]), ACEMQ_EINVAL);
    assert_int_equal(acemq_broker_publish(b, m, 1, r[0]), ACEMQ_EINVAL);
    for (int i = 0; i < ACEMQ_BROKER_MAX_SENDS; i++) {
        assert_int_equal(acemq_broker_collect(b), 0);
        assert_int_equal(r[i][0].outcome, ACEMQ_PUBLISH_CONFIRMED);
    }
    assert_int_equal(acemq_broker_publish(b, m, 1, r[0]), 0);
    /* A refused connection: nothing sent, nothing outstanding. */
    acemq__memory_broker_fault(b, ACEMQ__FAULT_REFUSE, 1, 0);
    assert_int_equal(acemq_broker_send(b, m, 1, r[0]), ACEMQ_EIO);
    assert_int_equal(r[0][0].outcome, ACEMQ_PUBLISH_UNKNOWN);
    assert_int_equal(acemq_broker_collect(b), ACEMQ_ENOENT);
    acemq_broker_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(window_tells_oldest_first),
        cmocka_unit_test(confirm_us_is_measured_per_message),
        cmocka_unit_test(drop_loses_both_sends_confirms),
        cmocka_unit_test(nack_in_second_send_only),
        cmocka_unit_test(outstanding_sends_are_bounded),
    };
    return cmocka_run_group_tests_name("broker pipeline (memory broker)", tests, NULL, NULL);
}
