/* bench_amqp.c — see bench_amqp.h. */
#include "bench_amqp.h"

#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <stdio.h>

#include "bench_common.h"

amqp_connection_state_t mq_connect(const char *url)
{
    char buf[512]; /* amqp_parse_url splits it in place; used only here */
    snprintf(buf, sizeof buf, "%s", url);
    struct amqp_connection_info info;
    amqp_default_connection_info(&info);
    if (amqp_parse_url(buf, &info) != AMQP_STATUS_OK) die("bad AMQP URL");
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (!s || amqp_socket_open(s, info.host, info.port) != AMQP_STATUS_OK)
        die("cannot connect to RabbitMQ at %s:%d", info.host, info.port);
    const char *vhost = info.vhost && info.vhost[0] ? info.vhost : "/";
    if (amqp_login(c, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user, info.password)
            .reply_type != AMQP_RESPONSE_NORMAL)
        die("RabbitMQ login failed");
    amqp_channel_open(c, 1);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("channel.open failed");
    return c;
}

void mq_close(amqp_connection_state_t c)
{
    amqp_channel_close(c, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}
