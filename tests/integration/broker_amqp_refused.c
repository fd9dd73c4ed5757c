/* broker_amqp_refused.c — what the broker refuses, whole and with a reason:
 * headers that are not a JSON object of strings, bad URLs, a wrong password
 * and a virtual host that does not exist. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <unistd.h>

#include <cmocka.h>

#include <amqp.h>

#include "acemq/broker.h"
#include "integration/broker_amqp_fixture.h"

/* Headers that are not a JSON object of strings fail the whole call before
 * a byte is sent; the handle goes on working. */
void bad_headers_fail_the_call_whole(void **state)
{
    (void)state;
    char ex[128], q[128];
    bound_route(ex, q, "hdr");

    acemq_broker *b = open_broker(256);
    acemq_broker_msg m[2] = {make_msg(ex, "k", "h1"), make_msg(ex, "k", "h2")};
    m[1].headers_json = "{\"n\": 1}";
    acemq_publish_result r[2];
    assert_int_equal(acemq_broker_publish(b, m, 2, r), ACEMQ_EINVAL);
    assert_int_equal(r[0].outcome, ACEMQ_PUBLISH_UNKNOWN);
    assert_int_equal(r[1].outcome, ACEMQ_PUBLISH_UNKNOWN);
    assert_non_null(strstr(acemq_broker_errmsg(b), "message 1"));
    m[1].headers_json = "not json";
    assert_int_equal(acemq_broker_publish(b, m, 2, r), ACEMQ_EINVAL);

    m[1].headers_json = "{\"n\": \"1\"}";
    assert_int_equal(acemq_broker_publish(b, m, 2, r), 0);
    assert_int_equal(r[0].outcome, ACEMQ_PUBLISH_CONFIRMED);
    assert_int_equal(r[1].outcome, ACEMQ_PUBLISH_CONFIRMED);
    acemq_broker_close(b);

    /* Only the good call's two arrived. */
    amqp_message_t got;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(get_one(q, &got), 1);
        assert_true(bytes_eq(got.properties.message_id, i ? "h2" : "h1"));
        amqp_destroy_message(&got);
    }
    assert_int_equal(get_one(q, &got), 0);
}

void bad_urls(void **state)
{
    (void)state;
    acemq_broker *b = (acemq_broker *)&b; /* must be reset to NULL */
    int rc = acemq_broker_open(&b, "amqp://guest:guest@127.0.0.1:notaport/", NULL);
    assert_int_equal(rc, ACEMQ_EURL);
    assert_null(b);
    assert_non_null(strstr(acemq_broker_errmsg(NULL), "URL"));

    /* Nothing listens on port 1 of loopback. */
    rc = acemq_broker_open(&b, "amqp://guest:guest@127.0.0.1:1/", NULL);
    assert_int_equal(rc, ACEMQ_EIO);
    assert_null(b);
    if (!strstr(acemq_broker_errmsg(NULL), "127.0.0.1:1") ||
        !strstr(acemq_broker_errmsg(NULL), "refused or unreachable") ||
        strstr(acemq_broker_errmsg(NULL), "in progress"))
        fail_msg("errmsg: %s", acemq_broker_errmsg(NULL));
}

void wrong_password(void **state)
{
    (void)state;
    char bad[512];
    (void)snprintf(bad, sizeof bad, "amqp://%s:wrong-%ld@%s:%d/", broker_info.user, (long)getpid(),
                   broker_info.host, broker_info.port);
    acemq_broker *b = NULL;
    int rc = acemq_broker_open(&b, bad, NULL);
    assert_int_equal(rc, ACEMQ_EAUTH);
    assert_null(b);
    const char *e = acemq_broker_errmsg(NULL);
    print_message("wrong password: %s\n", e);
    if (!strstr(e, "ACCESS_REFUSED")) fail_msg("errmsg: %s", e);
    assert_null(strstr(e, "wrong-")); /* the password is not echoed */

    /* A virtual host that does not exist is refused the same way. */
    (void)snprintf(bad, sizeof bad, "amqp://%s:%s@%s:%d/no-such-vhost-%ld", broker_info.user,
                   broker_info.password, broker_info.host, broker_info.port, (long)getpid());
    assert_int_equal(acemq_broker_open(&b, bad, NULL), ACEMQ_EAUTH);
    assert_null(b);
    print_message("missing vhost: %s\n", acemq_broker_errmsg(NULL));
}
