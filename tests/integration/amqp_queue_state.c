/* amqp_queue_state.c — what inbox_kill.sh asks of RabbitMQ that amqp_tool
 * does not say: a queue's consumers beside its messages ready, from one
 * passive queue.declare on a plain rabbitmq-c connection to ACEMQ_AMQP_URL.
 *
 *   amqp_queue_state QUEUE     prints "READY CONSUMERS" (two numbers)
 *
 * Exit status: 0 done, 1 RabbitMQ refused or failed (said on stderr; a
 * missing queue is 404 NOT_FOUND), 2 usage, 77 ACEMQ_AMQP_URL is not set.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>

static int failed(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL) return 0;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
        fprintf(stderr, "amqp_queue_state: %s: %s\n", what, amqp_error_string2(r.library_error));
    } else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
               r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const amqp_channel_close_t *m = r.reply.decoded;
        fprintf(stderr, "amqp_queue_state: %s: channel closed: %u %.*s\n", what,
                (unsigned)m->reply_code, (int)m->reply_text.len, (const char *)m->reply_text.bytes);
    } else {
        fprintf(stderr, "amqp_queue_state: %s: reply type %d\n", what, (int)r.reply_type);
    }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fputs("usage: amqp_queue_state QUEUE\n", stderr);
        return 2;
    }
    const char *url = getenv("ACEMQ_AMQP_URL");
    if (!url || !*url) {
        fputs("amqp_queue_state: ACEMQ_AMQP_URL is not set\n", stderr);
        return 77;
    }
    static char buf[4096]; /* amqp_parse_url cuts it up in place */
    struct amqp_connection_info info;
    amqp_default_connection_info(&info);
    if ((size_t)snprintf(buf, sizeof buf, "%s", url) >= sizeof buf ||
        amqp_parse_url(buf, &info) != AMQP_STATUS_OK) {
        fprintf(stderr, "amqp_queue_state: cannot parse ACEMQ_AMQP_URL '%s'\n", url);
        return 1;
    }
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = conn ? amqp_tcp_socket_new(conn) : NULL;
    if (!sock) {
        fputs("amqp_queue_state: out of memory\n", stderr);
        return 1;
    }
    int st = amqp_socket_open(sock, info.host, info.port);
    if (st != AMQP_STATUS_OK) {
        fprintf(stderr, "amqp_queue_state: connecting to %s:%d: %s\n", info.host, info.port,
                amqp_error_string2(st));
        return 1;
    }
    const char *vhost = info.vhost && info.vhost[0] ? info.vhost : "/";
    if (failed(
            amqp_login(conn, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user, info.password),
            "login"))
        return 1;
    amqp_channel_open(conn, 1);
    if (failed(amqp_get_rpc_reply(conn), "channel.open")) return 1;
    amqp_queue_declare_ok_t *ok =
        amqp_queue_declare(conn, 1, amqp_cstring_bytes(argv[1]), 1, 0, 0, 0, amqp_empty_table);
    if (failed(amqp_get_rpc_reply(conn), "queue.declare (passive)")) return 1;
    printf("%u %u\n", (unsigned)ok->message_count, (unsigned)ok->consumer_count);
    (void)amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
    (void)amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    (void)amqp_destroy_connection(conn);
    return 0;
}
