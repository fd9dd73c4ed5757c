/* amqp_tool.c — what cli_consume.sh needs of RabbitMQ besides `acemq`
 * itself, on a plain rabbitmq-c connection to ACEMQ_AMQP_URL:
 *
 *   amqp_tool declare QUEUE [--dlx EX]     a queue (not exclusive, so acemq
 *                                          can consume it; it expires after
 *                                          ten unused minutes), with
 *                                          x-dead-letter-exchange EX
 *   amqp_tool declare-exchange EX          a direct exchange, auto-delete
 *   amqp_tool bind QUEUE EX KEY
 *   amqp_tool publish QUEUE ID [BODY] [--header NAME=VALUE]...
 *                                          one persistent message to QUEUE
 *                                          (default exchange), message_id ID,
 *                                          body BODY (default ID), confirmed
 *   amqp_tool publish-lines QUEUE [--header NAME=VALUE]...
 *                                          one such message per line of
 *                                          standard input, "ID BODY"
 *   amqp_tool count QUEUE                  prints the messages ready
 *   amqp_tool state QUEUE                  prints "READY CONSUMERS"
 *   amqp_tool get QUEUE                    takes one message (acknowledged)
 *                                          and prints it as one JSON line:
 *                                          {"message_id", "routing_key",
 *                                          "body", "headers": {...}}, the
 *                                          headers as acemq's consumer
 *                                          decodes them; exit 3
 *                                          when the queue is empty
 *   amqp_tool delete QUEUE...              deletes the queues (missing ones
 *                                          are no error)
 *
 * Exit status: 0 done, 1 RabbitMQ refused or failed (said on stderr), 2
 * usage, 3 `get` on an empty queue, 77 ACEMQ_AMQP_URL is not set.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <jansson.h>

#include "backends/amqp/amqp_self.h"

static amqp_connection_state_t conn;

static void die_reply(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL) return;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
        fprintf(stderr, "amqp_tool: %s: %s\n", what, amqp_error_string2(r.library_error));
    } else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
               r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const amqp_channel_close_t *m = r.reply.decoded;
        fprintf(stderr, "amqp_tool: %s: channel closed: %u %.*s\n", what, (unsigned)m->reply_code,
                (int)m->reply_text.len, (const char *)m->reply_text.bytes);
    } else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
               r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        const amqp_connection_close_t *m = r.reply.decoded;
        fprintf(stderr, "amqp_tool: %s: connection closed: %u %.*s\n", what,
                (unsigned)m->reply_code, (int)m->reply_text.len, (const char *)m->reply_text.bytes);
    } else {
        fprintf(stderr, "amqp_tool: %s: reply type %d\n", what, (int)r.reply_type);
    }
    exit(1);
}

static void connect_broker(void)
{
    const char *url = getenv("ACEMQ_AMQP_URL");
    if (!url || !*url) {
        fputs("amqp_tool: ACEMQ_AMQP_URL is not set\n", stderr);
        exit(77);
    }
    char *buf = strdup(url);
    struct amqp_connection_info info;
    amqp_default_connection_info(&info);
    if (!buf || amqp_parse_url(buf, &info) != AMQP_STATUS_OK) {
        fprintf(stderr, "amqp_tool: cannot parse ACEMQ_AMQP_URL '%s'\n", url);
        exit(1);
    }
    conn = amqp_new_connection();
    amqp_socket_t *sock = conn ? amqp_tcp_socket_new(conn) : NULL;
    if (!sock) {
        fputs("amqp_tool: out of memory\n", stderr);
        exit(1);
    }
    int st = amqp_socket_open(sock, info.host, info.port);
    if (st != AMQP_STATUS_OK) {
        fprintf(stderr, "amqp_tool: connecting to %s:%d: %s\n", info.host, info.port,
                amqp_error_string2(st));
        exit(1);
    }
    const char *vhost = info.vhost && info.vhost[0] ? info.vhost : "/";
    die_reply(
        amqp_login(conn, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user, info.password),
        "login");
    amqp_channel_open(conn, 1);
    die_reply(amqp_get_rpc_reply(conn), "channel.open");
    free(buf);
}

static void disconnect(void)
{
    (void)amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
    (void)amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    (void)amqp_destroy_connection(conn);
}

static int usage(void)
{
    fputs("usage: amqp_tool declare QUEUE [--dlx EX] | declare-exchange EX | bind QUEUE EX KEY\n"
          "     | publish QUEUE ID [BODY] [--header NAME=VALUE]...\n"
          "     | publish-lines QUEUE [--header NAME=VALUE]...\n"
          "     | count QUEUE | get QUEUE | delete QUEUE...\n",
          stderr);
    return 2;
}

static int declare(int argc, char **argv)
{
    if (argc != 3 && !(argc == 5 && strcmp(argv[3], "--dlx") == 0)) return usage();
    amqp_table_entry_t e[2];
    int n = 0;
    /* Left behind by a run that was killed, it goes by itself. */
    e[n].key = amqp_cstring_bytes("x-expires");
    e[n].value.kind = AMQP_FIELD_KIND_I32;
    e[n++].value.value.i32 = 600000;
    if (argc == 5) {
        e[n].key = amqp_cstring_bytes("x-dead-letter-exchange");
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n++].value.value.bytes = amqp_cstring_bytes(argv[4]);
    }
    amqp_table_t args = {n, e};
    connect_broker();
    amqp_queue_declare(conn, 1, amqp_cstring_bytes(argv[2]), 0, 1, 0, 0, args);
    die_reply(amqp_get_rpc_reply(conn), "queue.declare");
    disconnect();
    return 0;
}

static int declare_exchange(int argc, char **argv)
{
    if (argc != 3) return usage();
    connect_broker();
    amqp_exchange_declare(conn, 1, amqp_cstring_bytes(argv[2]), amqp_cstring_bytes("direct"), 0, 0,
                          1, 0, amqp_empty_table);
    die_reply(amqp_get_rpc_reply(conn), "exchange.declare");
    disconnect();
    return 0;
}

static int bind_queue(int argc, char **argv)
{
    if (argc != 5) return usage();
    connect_broker();
    amqp_queue_bind(conn, 1, amqp_cstring_bytes(argv[2]), amqp_cstring_bytes(argv[3]),
                    amqp_cstring_bytes(argv[4]), amqp_empty_table);
    die_reply(amqp_get_rpc_reply(conn), "queue.bind");
    disconnect();
    return 0;
}

/* The --header NAME=VALUE options from argv[from...] into *t (string
 * values); the other arguments are left in place, their count returned
 * through *rest (argv compacted). -1 on a malformed option. */
static int headers_of(int argc, char **argv, int from, amqp_table_t *t, int *rest)
{
    static amqp_table_entry_t e[32];
    int n = 0, kept = from;
    for (int i = from; i < argc; i++) {
        if (strcmp(argv[i], "--header") != 0) {
            argv[kept++] = argv[i];
            continue;
        }
        char *eq = i + 1 < argc ? strchr(argv[i + 1], '=') : NULL;
        if (!eq || n == 32) return -1;
        *eq = '\0';
        e[n].key = amqp_cstring_bytes(argv[i + 1]);
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n++].value.value.bytes = amqp_cstring_bytes(eq + 1);
        i++;
    }
    t->num_entries = n;
    t->entries = e;
    *rest = kept;
    return 0;
}

static void publish_one(const char *queue, const char *id, const char *body, amqp_table_t headers)
{
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags =
        AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
    p.delivery_mode = 2;
    p.message_id = amqp_cstring_bytes(id);
    p.content_type = amqp_cstring_bytes("text/plain");
    if (headers.num_entries > 0) {
        p._flags |= AMQP_BASIC_HEADERS_FLAG;
        p.headers = headers;
    }
    int st = amqp_basic_publish(conn, 1, amqp_cstring_bytes(""), amqp_cstring_bytes(queue), 1, 0,
                                &p, amqp_cstring_bytes(body));
    if (st != AMQP_STATUS_OK) {
        fprintf(stderr, "amqp_tool: publish %s: %s\n", id, amqp_error_string2(st));
        exit(1);
    }
}

/* Waits for the confirm of every message published so far (n of them);
 * a nack or a return fails the tool. */
static void await_confirms(uint64_t n)
{
    uint64_t confirmed = 0;
    while (confirmed < n) {
        amqp_frame_t f;
        amqp_maybe_release_buffers(conn);
        int st = amqp_simple_wait_frame(conn, &f);
        if (st != AMQP_STATUS_OK) {
            fprintf(stderr, "amqp_tool: waiting for confirms: %s\n", amqp_error_string2(st));
            exit(1);
        }
        if (f.frame_type != AMQP_FRAME_METHOD) continue;
        if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
            const amqp_basic_ack_t *a = f.payload.method.decoded;
            confirmed = a->multiple ? a->delivery_tag : confirmed + 1;
        } else if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD) {
            fputs("amqp_tool: a message was returned: no such queue?\n", stderr);
            exit(1);
        } else if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
            fputs("amqp_tool: the broker nacked a message\n", stderr);
            exit(1);
        } else if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
            const amqp_channel_close_t *m = f.payload.method.decoded;
            fprintf(stderr, "amqp_tool: channel closed: %u %.*s\n", (unsigned)m->reply_code,
                    (int)m->reply_text.len, (const char *)m->reply_text.bytes);
            exit(1);
        }
    }
}

static void confirm_select(void)
{
    amqp_confirm_select(conn, 1);
    die_reply(amqp_get_rpc_reply(conn), "confirm.select");
}

static int publish(int argc, char **argv)
{
    amqp_table_t h;
    int rest;
    if (headers_of(argc, argv, 2, &h, &rest) != 0 || rest < 4 || rest > 5) return usage();
    connect_broker();
    confirm_select();
    publish_one(argv[2], argv[3], rest == 5 ? argv[4] : argv[3], h);
    await_confirms(1);
    disconnect();
    return 0;
}

static int publish_lines(int argc, char **argv)
{
    amqp_table_t h;
    int rest;
    if (headers_of(argc, argv, 2, &h, &rest) != 0 || rest != 3) return usage();
    connect_broker();
    confirm_select();
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    uint64_t n = 0;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        if (line[len - 1] == '\n') line[--len] = '\0';
        if (len == 0) continue;
        char *sp = strchr(line, ' ');
        if (sp) *sp = '\0';
        publish_one(argv[2], line, sp ? sp + 1 : line, h);
        n++;
    }
    free(line);
    await_confirms(n);
    disconnect();
    return 0;
}

/* count: the messages ready; state: "READY CONSUMERS". */
static int count(int argc, char **argv, int with_consumers)
{
    if (argc != 3) return usage();
    connect_broker();
    amqp_queue_declare_ok_t *ok =
        amqp_queue_declare(conn, 1, amqp_cstring_bytes(argv[2]), 1, 0, 0, 0, amqp_empty_table);
    die_reply(amqp_get_rpc_reply(conn), "queue.declare (passive)");
    if (with_consumers)
        printf("%u %u\n", (unsigned)ok->message_count, (unsigned)ok->consumer_count);
    else
        printf("%u\n", (unsigned)ok->message_count);
    disconnect();
    return 0;
}

/* The headers as acemq's consumer decodes them (backends/amqp/headers.c). */
static json_t *headers_json(const amqp_basic_properties_t *p)
{
    char *text = NULL;
    int attempts;
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG) ||
        acemq__amqp_headers_json(&p->headers, &text, &attempts) != 0)
        return json_object();
    json_t *h = json_loads(text, 0, NULL);
    free(text);
    return h ? h : json_object();
}

static int get(int argc, char **argv)
{
    if (argc != 3) return usage();
    connect_broker();
    amqp_rpc_reply_t r = amqp_basic_get(conn, 1, amqp_cstring_bytes(argv[2]), 0);
    die_reply(r, "basic.get");
    if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) {
        disconnect();
        return 3;
    }
    const amqp_basic_get_ok_t *ok = r.reply.decoded;
    uint64_t tag = ok->delivery_tag;
    json_t *out = json_object();
    json_object_set_new(out, "routing_key",
                        json_stringn_nocheck(ok->routing_key.bytes, ok->routing_key.len));
    amqp_message_t m;
    die_reply(amqp_read_message(conn, 1, &m, 0), "reading the message");
    const amqp_basic_properties_t *p = &m.properties;
    if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        json_object_set_new(out, "message_id",
                            json_stringn_nocheck(p->message_id.bytes, p->message_id.len));
    json_object_set_new(out, "body", json_stringn_nocheck(m.body.bytes, m.body.len));
    json_object_set_new(out, "headers", headers_json(p));
    char *text = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
    puts(text ? text : "{}");
    free(text);
    json_decref(out);
    amqp_destroy_message(&m);
    if (amqp_basic_ack(conn, 1, tag, 0) != AMQP_STATUS_OK) {
        fputs("amqp_tool: basic.ack failed\n", stderr);
        return 1;
    }
    disconnect();
    return 0;
}

static int delete_queues(int argc, char **argv)
{
    if (argc < 3) return usage();
    connect_broker();
    for (int i = 2; i < argc; i++) {
        amqp_queue_delete(conn, 1, amqp_cstring_bytes(argv[i]), 0, 0);
        die_reply(amqp_get_rpc_reply(conn), "queue.delete");
    }
    disconnect();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) return usage();
    const char *cmd = argv[1];
    if (strcmp(cmd, "declare") == 0) return declare(argc, argv);
    if (strcmp(cmd, "declare-exchange") == 0) return declare_exchange(argc, argv);
    if (strcmp(cmd, "bind") == 0) return bind_queue(argc, argv);
    if (strcmp(cmd, "publish") == 0) return publish(argc, argv);
    if (strcmp(cmd, "publish-lines") == 0) return publish_lines(argc, argv);
    if (strcmp(cmd, "count") == 0) return count(argc, argv, 0);
    if (strcmp(cmd, "state") == 0) return count(argc, argv, 1);
    if (strcmp(cmd, "get") == 0) return get(argc, argv);
    if (strcmp(cmd, "delete") == 0) return delete_queues(argc, argv);
    return usage();
}
