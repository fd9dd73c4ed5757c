/* test_broker_amqp.c — the AMQP 0-9-1 broker against a real RabbitMQ on
 * loopback (ACEMQ_AMQP_URL; `scripts/services.sh start rabbitmq`): every
 * outcome, read back through a second, plain rabbitmq-c connection that
 * declares the exchanges and queues and reads what arrived.
 *
 * Without ACEMQ_AMQP_URL it prints SKIPPED and exits 77, which ctest reports
 * as Skipped, never Passed. Names carry the pid, and the queues are exclusive
 * to the admin connection, so runs never see each other's messages.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>

#include "acemq/broker.h"
#include "os/mono_time.h"

static const char *url;
static struct amqp_connection_info info;
static char *info_buf;
static amqp_connection_state_t admin;
static const char *vhost;

/* --- the admin connection ---------------------------------------------- */

static void must(amqp_rpc_reply_t r, const char *what)
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

static int admin_open(void **state)
{
    (void)state;
    info_buf = strdup(url);
    assert_non_null(info_buf);
    amqp_default_connection_info(&info);
    assert_int_equal(amqp_parse_url(info_buf, &info), AMQP_STATUS_OK);
    vhost = info.vhost && info.vhost[0] ? info.vhost : "/";
    admin = amqp_new_connection();
    assert_non_null(admin);
    amqp_socket_t *sock = amqp_tcp_socket_new(admin);
    assert_non_null(sock);
    assert_int_equal(amqp_socket_open(sock, info.host, info.port), AMQP_STATUS_OK);
    must(amqp_login(admin, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user, info.password),
         "admin login");
    assert_non_null(amqp_channel_open(admin, 1));
    must(amqp_get_rpc_reply(admin), "admin channel.open");
    return 0;
}

static int admin_close(void **state)
{
    (void)state;
    /* Exclusive queues go with the connection, and the auto-delete
     * exchanges with their last binding. */
    must(amqp_connection_close(admin, AMQP_REPLY_SUCCESS), "admin close");
    assert_int_equal(amqp_destroy_connection(admin), AMQP_STATUS_OK);
    free(info_buf);
    return 0;
}

static void name(char *buf, size_t len, const char *what)
{
    (void)snprintf(buf, len, "acemq.test.%ld.%s", (long)getpid(), what);
}

static void declare_exchange(const char *ex)
{
    amqp_exchange_declare(admin, 1, amqp_cstring_bytes(ex), amqp_cstring_bytes("direct"), 0, 0, 1,
                          0, amqp_empty_table);
    must(amqp_get_rpc_reply(admin), "exchange.declare");
}

static void declare_queue(const char *q, const char *ex, const char *key, amqp_table_t args)
{
    amqp_queue_declare(admin, 1, amqp_cstring_bytes(q), 0, 0, 1, 0, args);
    must(amqp_get_rpc_reply(admin), "queue.declare");
    amqp_queue_bind(admin, 1, amqp_cstring_bytes(q), amqp_cstring_bytes(ex),
                    amqp_cstring_bytes(key), amqp_empty_table);
    must(amqp_get_rpc_reply(admin), "queue.bind");
}

/* A fresh exchange and a durable queue bound to it with key "k", both named
 * after tag (the queue "<tag>.q"); ex and q need room for 128 bytes. */
static void bound_route(char *ex, char *q, const char *tag)
{
    char qtag[96];
    (void)snprintf(qtag, sizeof qtag, "%s.q", tag);
    name(ex, 128, tag);
    name(q, 128, qtag);
    declare_exchange(ex);
    declare_queue(q, ex, "k", amqp_empty_table);
}

/* basic.get: 1 and the message in *m (amqp_destroy_message it), or 0 when
 * the queue is empty. */
static int get_one(const char *q, amqp_message_t *m)
{
    memset(m, 0, sizeof *m); /* defined even where a failed check returns */
    amqp_maybe_release_buffers(admin);
    amqp_rpc_reply_t r = amqp_basic_get(admin, 1, amqp_cstring_bytes(q), 1);
    must(r, "basic.get");
    if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) return 0;
    assert_int_equal(r.reply.id, AMQP_BASIC_GET_OK_METHOD);
    must(amqp_read_message(admin, 1, m, 0), "read_message");
    return 1;
}

static const amqp_field_value_t *header(const amqp_basic_properties_t *p, const char *key)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG)) return NULL;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len == strlen(key) && memcmp(e->key.bytes, key, e->key.len) == 0)
            return &e->value;
    }
    return NULL;
}

static int bytes_eq(amqp_bytes_t b, const char *z)
{
    return b.len == strlen(z) && memcmp(b.bytes, z, b.len) == 0;
}

static acemq_broker *open_broker(int window)
{
    acemq_broker_options o;
    acemq_broker_options_init(&o);
    o.window = window;
    acemq_broker *b = NULL;
    int rc = acemq_broker_open(&b, url, &o);
    if (rc != 0)
        fail_msg("acemq_broker_open: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(NULL));
    return b;
}

static acemq_broker_msg msg(const char *ex, const char *key, const char *id)
{
    acemq_broker_msg m = {.exchange = ex, .routing_key = key, .message_id = id};
    return m;
}

/* --- cases ---------------------------------------------------------------- */

#define N_MANY 10000

/* 10,000 messages, window 256: all confirmed, and in the queue each once, in
 * order, persistent, with content type, headers and body intact. */
static void many_confirmed_and_intact(void **state)
{
    (void)state;
    char ex[128], q[128];
    bound_route(ex, q, "many");

    acemq_broker_msg *msgs = calloc(N_MANY, sizeof *msgs);
    acemq_publish_result *res = calloc(N_MANY, sizeof *res);
    char(*ids)[32] = calloc(N_MANY, sizeof *ids);
    char(*hdrs)[64] = calloc(N_MANY, sizeof *hdrs);
    char(*bodies)[32] = calloc(N_MANY, sizeof *bodies);
    assert_true(msgs && res && ids && hdrs && bodies);
    for (int i = 0; i < N_MANY; i++) {
        (void)snprintf(ids[i], sizeof ids[i], "m-%05d", i);
        (void)snprintf(hdrs[i], sizeof hdrs[i], "{\"tenant\":\"t%d\",\"kind\":\"order\"}", i % 13);
        (void)snprintf(bodies[i], sizeof bodies[i], "body %d", i);
        msgs[i] = msg(ex, "k", ids[i]);
        msgs[i].content_type = "text/plain";
        msgs[i].headers_json = hdrs[i];
        msgs[i].attempts = i % 7 - 1; /* -1 too: a signed 32-bit header */
        msgs[i].body = bodies[i];
        msgs[i].body_len = strlen(bodies[i]);
    }
    acemq_broker *b = open_broker(256);
    struct timespec t0, t1;
    assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &t0), 0);
    assert_int_equal(acemq_broker_publish(b, msgs, N_MANY, res), 0);
    assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &t1), 0);
    long long whole_us =
        (long long)(t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000 + 1;
    for (int i = 0; i < N_MANY; i++) {
        if (res[i].outcome != ACEMQ_PUBLISH_CONFIRMED)
            fail_msg("message %d: outcome %d (%s)", i, res[i].outcome,
                     res[i].reason ? res[i].reason : "");
        /* Each its own publish-to-ack time: some, and within the call. */
        if (res[i].confirm_us == 0 || res[i].confirm_us > whole_us)
            fail_msg("message %d: confirm_us %u, not within 1..%lld", i, res[i].confirm_us,
                     whole_us);
    }
    acemq_broker_close(b);

    for (int i = 0; i < N_MANY; i++) {
        amqp_message_t m;
        if (!get_one(q, &m)) fail_msg("queue ran dry at %d of %d", i, N_MANY);
        const amqp_basic_properties_t *p = &m.properties;
        assert_true(p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG);
        if (!bytes_eq(p->message_id, ids[i]))
            fail_msg("position %d: message_id %.*s, expected %s", i, (int)p->message_id.len,
                     (const char *)p->message_id.bytes, ids[i]);
        assert_true(p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG);
        assert_int_equal(p->delivery_mode, AMQP_DELIVERY_PERSISTENT);
        assert_true(p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG);
        assert_true(bytes_eq(p->content_type, "text/plain"));
        const amqp_field_value_t *v = header(p, "x-acemq-attempts");
        assert_non_null(v);
        assert_int_equal(v->kind, AMQP_FIELD_KIND_I32);
        assert_int_equal(v->value.i32, i % 7 - 1);
        char tenant[16];
        (void)snprintf(tenant, sizeof tenant, "t%d", i % 13);
        v = header(p, "tenant");
        assert_non_null(v);
        assert_int_equal(v->kind, AMQP_FIELD_KIND_UTF8);
        assert_true(bytes_eq(v->value.bytes, tenant));
        v = header(p, "kind");
        assert_non_null(v);
        assert_true(bytes_eq(v->value.bytes, "order"));
        assert_int_equal(p->headers.num_entries, 3);
        assert_true(bytes_eq(m.body, bodies[i]));
        amqp_destroy_message(&m);
    }
    amqp_message_t extra;
    if (get_one(q, &extra)) {
        amqp_destroy_message(&extra);
        fail_msg("more than %d messages in the queue: a duplicate", N_MANY);
    }
    free(msgs);
    free(res);
    free(ids);
    free(hdrs);
    free(bodies);
}

/* Bodies of every size the framing treats apart: empty (no body frame),
 * one byte, exactly one frame's room, one byte more, and several frames
 * (frame_max is 131,072), in one run beside small neighbours: all
 * confirmed, and read back byte for byte, in order. */
static void bodies_across_frames_arrive_intact(void **state)
{
    (void)state;
    char ex[128], q[128];
    bound_route(ex, q, "bodies");
    const size_t room = 131072 - 8; /* a body frame's payload at most */
    const size_t sizes[] = {0, 1, room - 1, room, room + 1, 3 * room + 17, 5, 0, 700000};
    enum { N = sizeof sizes / sizeof sizes[0] };
    acemq_broker_msg msgs[N];
    acemq_publish_result res[N];
    char ids[N][16];
    unsigned char *bodies[N];
    for (int i = 0; i < N; i++) {
        bodies[i] = malloc(sizes[i] ? sizes[i] : 1);
        assert_non_null(bodies[i]);
        for (size_t k = 0; k < sizes[i]; k++)
            bodies[i][k] = (unsigned char)(k * 31 + (size_t)i * 7 + k / 251);
        (void)snprintf(ids[i], sizeof ids[i], "b-%d", i);
        msgs[i] = msg(ex, "k", ids[i]);
        msgs[i].body = bodies[i];
        msgs[i].body_len = sizes[i];
    }
    acemq_broker *b = open_broker(256);
    assert_int_equal(acemq_broker_publish(b, msgs, N, res), 0);
    for (int i = 0; i < N; i++)
        if (res[i].outcome != ACEMQ_PUBLISH_CONFIRMED)
            fail_msg("message %d (%zu bytes): outcome %d (%s)", i, sizes[i], res[i].outcome,
                     res[i].reason ? res[i].reason : "");
    acemq_broker_close(b);
    for (int i = 0; i < N; i++) {
        amqp_message_t m;
        if (!get_one(q, &m)) fail_msg("queue ran dry at %d of %d", i, N);
        if (!bytes_eq(m.properties.message_id, ids[i]))
            fail_msg("position %d: message_id %.*s, expected %s", i,
                     (int)m.properties.message_id.len, (const char *)m.properties.message_id.bytes,
                     ids[i]);
        if (m.body.len != sizes[i] || (sizes[i] && memcmp(m.body.bytes, bodies[i], sizes[i]) != 0))
            fail_msg("message %d: %zu bytes back of %zu, or other bytes", i, m.body.len, sizes[i]);
        amqp_destroy_message(&m);
        free(bodies[i]);
    }
}

/* No binding for the key: basic.return, then RabbitMQ's ack. RETURNED with
 * the reply text, never CONFIRMED; routable neighbours stay CONFIRMED. */
static void unroutable_is_returned(void **state)
{
    (void)state;
    char ex[128], lonely[128], q[128];
    bound_route(ex, q, "routed");
    name(lonely, sizeof lonely, "lonely");
    declare_exchange(lonely); /* no binding at all */

    acemq_broker_msg m[6] = {msg(ex, "k", "a"),       msg(lonely, "nowhere", "b"),
                             msg(ex, "k", "c"),       msg(lonely, "nowhere", "d"),
                             msg(ex, "nowhere", "a"), msg(ex, "k", "e")};
    acemq_publish_result r[6];
    acemq_broker *b = open_broker(4);
    assert_int_equal(acemq_broker_publish(b, m, 6, r), 0);
    const int want[6] = {ACEMQ_PUBLISH_CONFIRMED, ACEMQ_PUBLISH_RETURNED, ACEMQ_PUBLISH_CONFIRMED,
                         ACEMQ_PUBLISH_RETURNED,  ACEMQ_PUBLISH_RETURNED, ACEMQ_PUBLISH_CONFIRMED};
    for (int i = 0; i < 6; i++) {
        if (r[i].outcome != want[i])
            fail_msg("message %d: outcome %d, expected %d (%s)", i, r[i].outcome, want[i],
                     r[i].reason ? r[i].reason : "");
        if (want[i] == ACEMQ_PUBLISH_RETURNED) {
            assert_non_null(r[i].reason);
            assert_non_null(strstr(r[i].reason, "NO_ROUTE"));
        }
    }
    /* The same again on the same handle: nothing is left over. */
    assert_int_equal(acemq_broker_publish(b, m, 6, r), 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(r[i].outcome, want[i]);
    acemq_broker_close(b);
}

/* x-max-length 1 with reject-publish: the second message is nacked. */
static void full_queue_nacks(void **state)
{
    (void)state;
    char ex[128], q[128];
    name(ex, sizeof ex, "full");
    name(q, sizeof q, "full.q");
    declare_exchange(ex);
    amqp_table_entry_t args[2];
    args[0].key = amqp_cstring_bytes("x-max-length");
    args[0].value.kind = AMQP_FIELD_KIND_I32;
    args[0].value.value.i32 = 1;
    args[1].key = amqp_cstring_bytes("x-overflow");
    args[1].value.kind = AMQP_FIELD_KIND_UTF8;
    args[1].value.value.bytes = amqp_cstring_bytes("reject-publish");
    amqp_table_t t = {.num_entries = 2, .entries = args};
    declare_queue(q, ex, "k", t);

    acemq_broker_msg m[2] = {msg(ex, "k", "first"), msg(ex, "k", "second")};
    acemq_publish_result r[2];
    acemq_broker *b = open_broker(256);
    assert_int_equal(acemq_broker_publish(b, m, 2, r), 0);
    assert_int_equal(r[0].outcome, ACEMQ_PUBLISH_CONFIRMED);
    assert_int_equal(r[1].outcome, ACEMQ_PUBLISH_NACKED);
    assert_non_null(r[1].reason);
    assert_non_null(strstr(r[1].reason, "nack"));
    acemq_broker_close(b);
}

/* A missing exchange: the broker closes the channel (404). Those messages
 * stay UNKNOWN with the broker's words, and the next publish reopens the
 * channel and works. */
static void missing_exchange_closes_channel_then_recovers(void **state)
{
    (void)state;
    char ex[128], q[128], nope[128];
    bound_route(ex, q, "good");
    name(nope, sizeof nope, "no-such-exchange");

    acemq_broker *b = open_broker(256);
    acemq_broker_msg bad[3] = {msg(nope, "k", "x1"), msg(nope, "k", "x2"), msg(nope, "k", "x3")};
    acemq_publish_result r[3];
    assert_int_equal(acemq_broker_publish(b, bad, 3, r), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i].outcome, ACEMQ_PUBLISH_UNKNOWN);
        assert_non_null(r[i].reason);
        if (!strstr(r[i].reason, "404") || !strstr(r[i].reason, "NOT_FOUND"))
            fail_msg("reason: %s", r[i].reason);
    }
    assert_non_null(strstr(acemq_broker_errmsg(b), "404"));
    print_message("missing exchange: %s\n", r[0].reason);

    /* Good, bad, good in one call: the bad one is never confirmed, nor the
     * one after it (the broker ignores the channel once it closed it). */
    acemq_broker_msg mixed[3] = {msg(ex, "k", "g1"), msg(nope, "k", "x4"), msg(ex, "k", "g2")};
    assert_int_equal(acemq_broker_publish(b, mixed, 3, r), 0);
    assert_true(r[0].outcome == ACEMQ_PUBLISH_CONFIRMED || r[0].outcome == ACEMQ_PUBLISH_UNKNOWN);
    assert_int_equal(r[1].outcome, ACEMQ_PUBLISH_UNKNOWN);
    assert_int_equal(r[2].outcome, ACEMQ_PUBLISH_UNKNOWN);

    acemq_broker_msg good[2] = {msg(ex, "k", "g3"), msg(ex, "k", "g4")};
    assert_int_equal(acemq_broker_publish(b, good, 2, r), 0);
    assert_int_equal(r[0].outcome, ACEMQ_PUBLISH_CONFIRMED);
    assert_int_equal(r[1].outcome, ACEMQ_PUBLISH_CONFIRMED);
    acemq_broker_close(b);

    /* g1 may or may not have made it; g3 and g4 did, last and in order. */
    amqp_message_t m;
    char got[4][8];
    int n = 0;
    while (n < 4 && get_one(q, &m)) {
        (void)snprintf(got[n++], sizeof got[0], "%.*s", (int)m.properties.message_id.len,
                       (const char *)m.properties.message_id.bytes);
        amqp_destroy_message(&m);
    }
    assert_true(n >= 2);
    assert_string_equal(got[n - 2], "g3");
    assert_string_equal(got[n - 1], "g4");
}

/* The socket under the broker's connection: the one to the broker's port
 * that is not the admin connection's. */
static int broker_fd(void)
{
    int admin_fd = amqp_socket_get_sockfd(amqp_get_socket(admin));
    for (int fd = 3; fd < 1024; fd++) {
        struct sockaddr_in peer;
        socklen_t len = sizeof peer;
        if (fd == admin_fd || getpeername(fd, (struct sockaddr *)&peer, &len) != 0) continue;
        if (peer.sin_family == AF_INET && ntohs(peer.sin_port) == info.port) return fd;
    }
    return -1;
}

/* A connection cut under the handle: the unanswered are UNKNOWN ("lost
 * connection"), and the next publish reconnects and is confirmed. */
static void lost_connection_then_reconnects(void **state)
{
    (void)state;
    char ex[128], q[128];
    bound_route(ex, q, "cut");

    acemq_broker *b = open_broker(256);
    acemq_broker_msg m[2] = {msg(ex, "k", "c1"), msg(ex, "k", "c2")};
    acemq_publish_result r[2];
    assert_int_equal(acemq_broker_publish(b, m, 2, r), 0);
    assert_int_equal(r[0].outcome, ACEMQ_PUBLISH_CONFIRMED);

    int fd = broker_fd();
    assert_true(fd >= 0);
    assert_int_equal(shutdown(fd, SHUT_RDWR), 0);
    assert_int_equal(acemq_broker_publish(b, m, 2, r), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].outcome, ACEMQ_PUBLISH_UNKNOWN);
        if (!strstr(r[i].reason, "lost connection")) fail_msg("reason: %s", r[i].reason);
    }
    print_message("cut connection: %s\n", r[0].reason);
    assert_int_equal(acemq_broker_publish(b, m, 2, r), 0);
    assert_int_equal(r[0].outcome, ACEMQ_PUBLISH_CONFIRMED);
    assert_int_equal(r[1].outcome, ACEMQ_PUBLISH_CONFIRMED);
    acemq_broker_close(b);
}

/* The broker's process, from the pid file scripts/services.sh names in
 * ACEMQ_RABBITMQ_PIDFILE; 0 when there is none to read. */
static pid_t broker_pid(void)
{
    const char *path = getenv("ACEMQ_RABBITMQ_PIDFILE");
    if (!path || !*path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    long pid = 0;
    if (fscanf(f, "%ld", &pid) != 1) pid = 0;
    fclose(f);
    return (pid_t)pid;
}

/* The node's pid, for the tests that stop it; skips the test without one. */
static pid_t stoppable_broker_pid(void)
{
    pid_t pid = broker_pid();
    if (pid <= 0) {
        print_message("no ACEMQ_RABBITMQ_PIDFILE to stop the broker by\n");
        skip();
    }
    return pid;
}

static acemq_broker *open_broker_with_timeout(int window, int confirm_timeout_ms)
{
    acemq_broker_options o;
    acemq_broker_options_init(&o);
    o.window = window;
    o.confirm_timeout_ms = confirm_timeout_ms;
    acemq_broker *b = NULL;
    assert_int_equal(acemq_broker_open(&b, url, &o), 0);
    return b;
}

/* Stops the node with SIGSTOP, and forks a watchdog that wakes it in 20 s
 * whatever happens here: a call that never returned would otherwise keep
 * it stopped for every test after this one (and, woken, be answered, and
 * fail its test). The watchdog's pid, or -1 when the node cannot be
 * stopped or watched (said, and the node left running; the test then
 * skips). */
static pid_t stop_broker(pid_t pid)
{
    if (kill(pid, SIGSTOP) != 0) {
        print_message("cannot stop the broker (pid %ld): %s\n", (long)pid, strerror(errno));
        return -1;
    }
    pid_t watchdog = fork();
    if (watchdog == 0) {
        struct timespec ts = {20, 0};
        nanosleep(&ts, NULL);
        kill(pid, SIGCONT);
        _exit(0);
    }
    if (watchdog < 0) { /* no watchdog, no stopped node */
        print_message("cannot fork the broker's watchdog: %s\n", strerror(errno));
        kill(pid, SIGCONT);
    }
    return watchdog;
}

/* Wakes the node and ends the watchdog (stop_broker's, so a real one);
 * called before any assertion, so that a failure does not leave the node
 * stopped. */
static void resume_broker(pid_t pid, pid_t watchdog)
{
    int resumed = kill(pid, SIGCONT);
    kill(watchdog, SIGKILL);
    waitpid(watchdog, NULL, 0);
    assert_int_equal(resumed, 0);
}

/* A broker that takes the messages and never answers: once
 * confirm_timeout_ms has passed they are UNKNOWN ("timeout"), the call
 * returns, the connection is dropped (its delivery tags mean nothing on
 * another), and the next publish connects again and is confirmed. The
 * broker is stopped with SIGSTOP while the messages are out, so no confirm
 * can come however long the call waits. */
static void silent_broker_times_out_then_recovers(void **state)
{
    (void)state;
    pid_t pid = stoppable_broker_pid();
    char ex[128], q[128];
    bound_route(ex, q, "silent");
    acemq_broker *b = open_broker_with_timeout(256, 300);
    acemq_broker_msg m[2] = {msg(ex, "k", "s1"), msg(ex, "k", "s2")};
    acemq_publish_result r[2];
    assert_int_equal(acemq_broker_publish(b, m, 2, r), 0); /* connected */
    assert_int_equal(r[0].outcome, ACEMQ_PUBLISH_CONFIRMED);
    pid_t watchdog = stop_broker(pid);
    if (watchdog < 0) {
        acemq_broker_close(b);
        skip();
    }
    int rc = acemq_broker_publish(b, m, 2, r);
    resume_broker(pid, watchdog);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].outcome, ACEMQ_PUBLISH_UNKNOWN);
        assert_string_equal(r[i].reason, "timeout");
    }
    assert_non_null(strstr(acemq_broker_errmsg(b), "no confirm within 300 ms"));
    assert_int_equal(acemq_broker_publish(b, m, 2, r), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(r[i].outcome, ACEMQ_PUBLISH_CONFIRMED);
    acemq_broker_close(b);
}

/* A broker that stops reading while a send is still writing: 64 messages
 * of 1 MiB, far more than the sockets' buffers hold, go out to a node
 * stopped with SIGSTOP, and the window (256) never fills, so no confirm
 * is waited for. Once the socket has taken nothing for confirm_timeout_ms
 * the connection counts as lost: every message UNKNOWN, the call returns
 * instead of waiting for ever, and the next publish connects again. */
static void stalled_write_times_out_then_recovers(void **state)
{
    (void)state;
    pid_t pid = stoppable_broker_pid();
    char ex[128], q[128];
    bound_route(ex, q, "stalled");
    enum { N = 64, BODY = 1 << 20 };
    unsigned char *body = calloc(1, BODY);
    acemq_broker_msg *m = calloc(N, sizeof *m);
    acemq_publish_result *r = calloc(N, sizeof *r);
    assert_true(body && m && r);
    for (int i = 0; i < N; i++) {
        m[i] = msg(ex, "k", "big");
        m[i].body = body;
        m[i].body_len = BODY;
    }
    acemq_broker *b = open_broker_with_timeout(256, 300);
    acemq_broker_msg small = msg(ex, "k", "small");
    acemq_publish_result sr;
    assert_int_equal(acemq_broker_publish(b, &small, 1, &sr), 0); /* connected */
    assert_int_equal(sr.outcome, ACEMQ_PUBLISH_CONFIRMED);
    pid_t watchdog = stop_broker(pid);
    if (watchdog < 0) {
        acemq_broker_close(b);
        skip();
    }
    int rc = acemq_broker_publish(b, m, N, r);
    resume_broker(pid, watchdog);
    assert_int_equal(rc, 0);
    for (int i = 0; i < N; i++) {
        if (r[i].outcome != ACEMQ_PUBLISH_UNKNOWN)
            fail_msg("message %d: outcome %d, expected UNKNOWN", i, r[i].outcome);
        assert_non_null(r[i].reason);
        assert_non_null(strstr(r[i].reason, "the broker read nothing for 300 ms"));
    }
    assert_non_null(strstr(acemq_broker_errmsg(b), "read nothing for 300 ms"));
    assert_int_equal(acemq_broker_publish(b, &small, 1, &sr), 0);
    assert_int_equal(sr.outcome, ACEMQ_PUBLISH_CONFIRMED);
    acemq_broker_close(b);
    free(body);
    free(m);
    free(r);
}

/* --- a resource alarm: connection.blocked ------------------------------- */

/* scripts/services.sh, from the command line; NULL skips the alarm tests. */
static const char *services_sh;

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
    acemq_broker_msg first = msg(ex, "k", "before");
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
static void blocked_connection_waits_for_the_alarm(void **state)
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
        m[i] = msg(ex, "k", ids[i]);
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
static void stop_waiting_ends_a_blocked_wait(void **state)
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
    acemq_broker_msg m[3] = {msg(ex, "k", "s1"), msg(ex, "k", "s2"), msg(ex, "k", "s3")};
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
    acemq_broker_msg after = msg(ex, "k", "after");
    acemq_publish_result ar;
    assert_int_equal(acemq_broker_publish(b, &after, 1, &ar), 0);
    assert_int_equal(ar.outcome, ACEMQ_PUBLISH_CONFIRMED);
    acemq_broker_close(b);
}

/* Pipelined sends, window 8: three sends of 100 with two outstanding at a
 * time, the second holding messages that come back unroutable under the
 * same ids as routed ones of the first. Every outcome lands on its own
 * message, and the queue holds the routed ones once each, in order. */
static void pipelined_sends_keep_outcomes_apart(void **state)
{
    (void)state;
    char ex[128], lonely[128], q[128];
    bound_route(ex, q, "pipe");
    name(lonely, sizeof lonely, "pipe.lonely");
    declare_exchange(lonely); /* no binding at all */
    enum { N = 100 };
    static char ids[3][N][16];
    static acemq_broker_msg m[3][N];
    static acemq_publish_result r[3][N];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < N; i++) {
            snprintf(ids[s][i], sizeof ids[s][i], "p%d", s == 1 ? i : s * N + i);
            int unroutable = s == 1 && i % 10 == 3;
            m[s][i] = msg(unroutable ? lonely : ex, "k", ids[s][i]);
        }
    acemq_broker *b = open_broker(8);
    assert_int_equal(acemq_broker_send(b, m[0], N, r[0]), 0);
    assert_int_equal(acemq_broker_send(b, m[1], N, r[1]), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_int_equal(acemq_broker_send(b, m[2], N, r[2]), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_int_equal(acemq_broker_collect(b), ACEMQ_ENOENT);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < N; i++) {
            int want = s == 1 && i % 10 == 3 ? ACEMQ_PUBLISH_RETURNED : ACEMQ_PUBLISH_CONFIRMED;
            if (r[s][i].outcome != want)
                fail_msg("send %d message %d: outcome %d, expected %d (%s)", s, i, r[s][i].outcome,
                         want, r[s][i].reason ? r[s][i].reason : "");
        }
    int got = 0;
    amqp_message_t am;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < N; i++) {
            if (s == 1 && i % 10 == 3) continue;
            if (!get_one(q, &am)) fail_msg("the queue ran dry at send %d message %d", s, i);
            if (!bytes_eq(am.properties.message_id, ids[s][i]))
                fail_msg("send %d message %d: got '%.*s'", s, i, (int)am.properties.message_id.len,
                         (const char *)am.properties.message_id.bytes);
            got++;
            amqp_destroy_message(&am);
        }
    assert_int_equal(get_one(q, &am), 0);
    assert_int_equal(got, 3 * N - 10);
    acemq_broker_close(b);
}

/* The connection is cut with a send outstanding, before its confirms were
 * read: that send and the next one are UNKNOWN ("lost connection"), and
 * after both are collected the handle reconnects. */
static void cut_with_sends_outstanding(void **state)
{
    (void)state;
    char ex[128], q[128];
    bound_route(ex, q, "pipecut");
    acemq_broker *b = open_broker(256);
    acemq_broker_msg m[3] = {msg(ex, "k", "d1"), msg(ex, "k", "d2"), msg(ex, "k", "d3")};
    acemq_publish_result ra[3], rb[3];
    assert_int_equal(acemq_broker_publish(b, m, 3, ra), 0); /* connected, all confirmed */
    assert_int_equal(acemq_broker_send(b, m, 3, ra), 0);    /* window 256: no confirm read */
    int fd = broker_fd();
    assert_true(fd >= 0);
    assert_int_equal(shutdown(fd, SHUT_RDWR), 0);
    assert_int_equal(acemq_broker_send(b, m, 3, rb), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    assert_int_equal(acemq_broker_collect(b), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ra[i].outcome, ACEMQ_PUBLISH_UNKNOWN);
        assert_int_equal(rb[i].outcome, ACEMQ_PUBLISH_UNKNOWN);
        if (!strstr(ra[i].reason, "lost connection")) fail_msg("reason: %s", ra[i].reason);
        if (!strstr(rb[i].reason, "lost connection")) fail_msg("reason: %s", rb[i].reason);
    }
    assert_int_equal(acemq_broker_publish(b, m, 3, ra), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ra[i].outcome, ACEMQ_PUBLISH_CONFIRMED);
    acemq_broker_close(b);
}

/* Headers that are not a JSON object of strings fail the whole call before
 * a byte is sent; the handle goes on working. */
static void bad_headers_fail_the_call_whole(void **state)
{
    (void)state;
    char ex[128], q[128];
    bound_route(ex, q, "hdr");

    acemq_broker *b = open_broker(256);
    acemq_broker_msg m[2] = {msg(ex, "k", "h1"), msg(ex, "k", "h2")};
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

static void bad_urls(void **state)
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

static void wrong_password(void **state)
{
    (void)state;
    char bad[512];
    (void)snprintf(bad, sizeof bad, "amqp://%s:wrong-%ld@%s:%d/", info.user, (long)getpid(),
                   info.host, info.port);
    acemq_broker *b = NULL;
    int rc = acemq_broker_open(&b, bad, NULL);
    assert_int_equal(rc, ACEMQ_EAUTH);
    assert_null(b);
    const char *e = acemq_broker_errmsg(NULL);
    print_message("wrong password: %s\n", e);
    if (!strstr(e, "ACCESS_REFUSED")) fail_msg("errmsg: %s", e);
    assert_null(strstr(e, "wrong-")); /* the password is not echoed */

    /* A virtual host that does not exist is refused the same way. */
    (void)snprintf(bad, sizeof bad, "amqp://%s:%s@%s:%d/no-such-vhost-%ld", info.user,
                   info.password, info.host, info.port, (long)getpid());
    assert_int_equal(acemq_broker_open(&b, bad, NULL), ACEMQ_EAUTH);
    assert_null(b);
    print_message("missing vhost: %s\n", acemq_broker_errmsg(NULL));
}

int main(int argc, char **argv)
{
    services_sh = argc > 1 ? argv[1] : NULL;
    url = getenv("ACEMQ_AMQP_URL");
    if (!url || !*url) {
        printf("SKIPPED: ACEMQ_AMQP_URL is not set (scripts/services.sh start rabbitmq)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(many_confirmed_and_intact),
        cmocka_unit_test(bodies_across_frames_arrive_intact),
        cmocka_unit_test(unroutable_is_returned),
        cmocka_unit_test(full_queue_nacks),
        cmocka_unit_test(missing_exchange_closes_channel_then_recovers),
        cmocka_unit_test(lost_connection_then_reconnects),
        cmocka_unit_test(silent_broker_times_out_then_recovers),
        cmocka_unit_test(stalled_write_times_out_then_recovers),
        cmocka_unit_test(blocked_connection_waits_for_the_alarm),
        cmocka_unit_test(stop_waiting_ends_a_blocked_wait),
        cmocka_unit_test(pipelined_sends_keep_outcomes_apart),
        cmocka_unit_test(cut_with_sends_outstanding),
        cmocka_unit_test(bad_headers_fail_the_call_whole),
        cmocka_unit_test(bad_urls),
        cmocka_unit_test(wrong_password),
    };
    return cmocka_run_group_tests(tests, admin_open, admin_close);
}
