/* mq.c — what the demo needs of RabbitMQ besides acemq itself, on a plain
 * rabbitmq-c connection to ACEMQ_AMQP_URL:
 *
 *   acemq-demo-mq setup QUEUE EXCHANGE KEY   a durable direct exchange and a
 *                                            fresh durable queue bound to it
 *   acemq-demo-mq state QUEUE                prints "READY CONSUMERS"
 *   acemq-demo-mq delete QUEUE               removes the queue
 *
 * Exit status: 0 done, 1 RabbitMQ refused or failed (said on stderr), 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

static int ok(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL) return 1;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        fprintf(stderr, "demo-mq: %s: %s\n", what, amqp_error_string2(r.library_error));
    else
        fprintf(stderr, "demo-mq: %s: refused by the broker\n", what);
    return 0;
}

/* Connects and opens channel 1; NULL (said why) on failure. */
static amqp_connection_state_t connect_url(const char *url)
{
    static char buf[512];
    struct amqp_connection_info info;
    snprintf(buf, sizeof buf, "%s", url);
    amqp_default_connection_info(&info);
    if (amqp_parse_url(buf, &info) != AMQP_STATUS_OK) {
        fprintf(stderr, "demo-mq: bad AMQP URL %s\n", url);
        return NULL;
    }
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = c ? amqp_tcp_socket_new(c) : NULL;
    if (!s || amqp_socket_open(s, info.host, info.port) != AMQP_STATUS_OK) {
        fprintf(stderr, "demo-mq: cannot connect to %s:%d\n", info.host, info.port);
        if (c) amqp_destroy_connection(c);
        return NULL;
    }
    const char *vhost = info.vhost && info.vhost[0] ? info.vhost : "/";
    if (!ok(amqp_login(c, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user, info.password),
            "login") ||
        (amqp_channel_open(c, 1), !ok(amqp_get_rpc_reply(c), "channel.open"))) {
        amqp_destroy_connection(c);
        return NULL;
    }
    return c;
}

static int setup(amqp_connection_state_t c, const char *q, const char *ex, const char *key)
{
    amqp_exchange_declare(c, 1, amqp_cstring_bytes(ex), amqp_cstring_bytes("direct"), 0, 1, 0, 0,
                          amqp_empty_table);
    if (!ok(amqp_get_rpc_reply(c), "exchange.declare")) return 1;
    /* A fresh queue: what an earlier run left must not count in this one. */
    amqp_queue_delete(c, 1, amqp_cstring_bytes(q), 0, 0);
    if (!ok(amqp_get_rpc_reply(c), "queue.delete")) return 1;
    amqp_queue_declare(c, 1, amqp_cstring_bytes(q), 0, 1, 0, 0, amqp_empty_table);
    if (!ok(amqp_get_rpc_reply(c), "queue.declare")) return 1;
    amqp_queue_bind(c, 1, amqp_cstring_bytes(q), amqp_cstring_bytes(ex), amqp_cstring_bytes(key),
                    amqp_empty_table);
    return ok(amqp_get_rpc_reply(c), "queue.bind") ? 0 : 1;
}

static int state(amqp_connection_state_t c, const char *q)
{
    /* A passive declare answers with the counts and changes nothing. */
    amqp_queue_declare_ok_t *r =
        amqp_queue_declare(c, 1, amqp_cstring_bytes(q), 1, 0, 0, 0, amqp_empty_table);
    if (!r || !ok(amqp_get_rpc_reply(c), "queue.declare (passive)")) return 1;
    printf("%u %u\n", (unsigned)r->message_count, (unsigned)r->consumer_count);
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = getenv("ACEMQ_AMQP_URL");
    int setup_cmd = argc == 5 && strcmp(argv[1], "setup") == 0;
    int state_cmd = argc == 3 && strcmp(argv[1], "state") == 0;
    int delete_cmd = argc == 3 && strcmp(argv[1], "delete") == 0;
    if (!url || !(setup_cmd || state_cmd || delete_cmd)) {
        fprintf(stderr,
                "usage: %s setup QUEUE EXCHANGE KEY | state QUEUE | delete QUEUE\n"
                "(ACEMQ_AMQP_URL names the broker)\n",
                argv[0]);
        return 2;
    }
    amqp_connection_state_t c = connect_url(url);
    if (!c) return 1;
    int status;
    if (setup_cmd) {
        status = setup(c, argv[2], argv[3], argv[4]);
    } else if (state_cmd) {
        status = state(c, argv[2]);
    } else {
        amqp_queue_delete(c, 1, amqp_cstring_bytes(argv[2]), 0, 0);
        status = ok(amqp_get_rpc_reply(c), "queue.delete") ? 0 : 1;
    }
    /* Closing errors change nothing the command did. */
    (void)amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    (void)amqp_destroy_connection(c);
    return status;
}
