/* broker_amqp_fixture.c — what every part of test_broker_amqp shares: the
 * admin connection (plain rabbitmq-c) that declares exchanges and queues and
 * reads back what arrived, and the broker handles the tests open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include <cmocka.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>

#include "acemq/broker.h"
#include "integration/broker_amqp_fixture.h"

const char *services_sh;
const char *broker_url;
struct amqp_connection_info broker_info;
static char *info_buf;
amqp_connection_state_t admin_conn;
const char *broker_vhost;

/* --- the admin connection ---------------------------------------------- */

void must_ok(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL) return;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        fail_msg("%s: %s", what, amqp_error_string2(r.library_error));
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const amqp_channel_close_t *m = r.reply.decoded;
        fail_msg("%s: channel closed: %u %.*s", what, (unsigned)m->reply_code,
                 (int)m->reply_text.len, (const char *)m->reply_text.bytes);
    }
    fail_msg("%s: reply type %d, method 0x%08X", what, (int)r.reply_type, (unsigned)r.reply.id);
}

int admin_open(void **state)
{
    (void)state;
    info_buf = strdup(broker_url);
    assert_non_null(info_buf);
    amqp_default_connection_info(&broker_info);
    assert_int_equal(amqp_parse_url(info_buf, &broker_info), AMQP_STATUS_OK);
    broker_vhost = broker_info.vhost && broker_info.vhost[0] ? broker_info.vhost : "/";
    admin_conn = amqp_new_connection();
    assert_non_null(admin_conn);
    amqp_socket_t *sock = amqp_tcp_socket_new(admin_conn);
    assert_non_null(sock);
    assert_int_equal(amqp_socket_open(sock, broker_info.host, broker_info.port), AMQP_STATUS_OK);
    must_ok(amqp_login(admin_conn, broker_vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN,
                       broker_info.user, broker_info.password),
            "admin login");
    assert_non_null(amqp_channel_open(admin_conn, 1));
    must_ok(amqp_get_rpc_reply(admin_conn), "admin channel.open");
    return 0;
}

int admin_close(void **state)
{
    (void)state;
    /* Exclusive queues go with the connection, and the auto-delete
     * exchanges with their last binding. */
    must_ok(amqp_connection_close(admin_conn, AMQP_REPLY_SUCCESS), "admin close");
    assert_int_equal(amqp_destroy_connection(admin_conn), AMQP_STATUS_OK);
    free(info_buf);
    return 0;
}

void test_name(char *buf, size_t len, const char *what)
{
    (void)snprintf(buf, len, "acemq.test.%ld.%s", (long)getpid(), what);
}

void declare_exchange(const char *ex)
{
    amqp_exchange_declare(admin_conn, 1, amqp_cstring_bytes(ex), amqp_cstring_bytes("direct"), 0, 0,
                          1, 0, amqp_empty_table);
    must_ok(amqp_get_rpc_reply(admin_conn), "exchange.declare");
}

void declare_queue(const char *q, const char *ex, const char *key, amqp_table_t args)
{
    amqp_queue_declare(admin_conn, 1, amqp_cstring_bytes(q), 0, 0, 1, 0, args);
    must_ok(amqp_get_rpc_reply(admin_conn), "queue.declare");
    amqp_queue_bind(admin_conn, 1, amqp_cstring_bytes(q), amqp_cstring_bytes(ex),
                    amqp_cstring_bytes(key), amqp_empty_table);
    must_ok(amqp_get_rpc_reply(admin_conn), "queue.bind");
}

/* A fresh exchange and a durable queue bound to it with key "k", both named
 * after tag (the queue "<tag>.q"); ex and q need room for 128 bytes. */
void bound_route(char *ex, char *q, const char *tag)
{
    char qtag[96];
    (void)snprintf(qtag, sizeof qtag, "%s.q", tag);
    test_name(ex, 128, tag);
    test_name(q, 128, qtag);
    declare_exchange(ex);
    declare_queue(q, ex, "k", amqp_empty_table);
}

/* basic.get: 1 and the message in *m (amqp_destroy_message it), or 0 when
 * the queue is empty. */
int get_one(const char *q, amqp_message_t *m)
{
    memset(m, 0, sizeof *m); /* defined even where a failed check returns */
    amqp_maybe_release_buffers(admin_conn);
    amqp_rpc_reply_t r = amqp_basic_get(admin_conn, 1, amqp_cstring_bytes(q), 1);
    must_ok(r, "basic.get");
    if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) return 0;
    assert_int_equal(r.reply.id, AMQP_BASIC_GET_OK_METHOD);
    must_ok(amqp_read_message(admin_conn, 1, m, 0), "read_message");
    return 1;
}

int bytes_eq(amqp_bytes_t b, const char *z)
{
    return b.len == strlen(z) && memcmp(b.bytes, z, b.len) == 0;
}

acemq_broker *open_broker(int window)
{
    acemq_broker_options o;
    acemq_broker_options_init(&o);
    o.window = window;
    acemq_broker *b = NULL;
    int rc = acemq_broker_open(&b, broker_url, &o);
    if (rc != 0)
        fail_msg("acemq_broker_open: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(NULL));
    return b;
}

acemq_broker_msg make_msg(const char *ex, const char *key, const char *id)
{
    acemq_broker_msg m = {.exchange = ex, .routing_key = key, .message_id = id};
    return m;
}

acemq_broker *open_broker_with_timeout(int window, int confirm_timeout_ms)
{
    acemq_broker_options o;
    acemq_broker_options_init(&o);
    o.window = window;
    o.confirm_timeout_ms = confirm_timeout_ms;
    acemq_broker *b = NULL;
    assert_int_equal(acemq_broker_open(&b, broker_url, &o), 0);
    return b;
}
