/* test_amqp_frames.c — basic.publish framed by hand (src/broker/amqp_frames.h):
 * the frames read back through rabbitmq-c's own decoders, bodies split at
 * frame_max, refusals that leave the run as it was, and the run's write
 * over a socket that takes it in parts, has lost its peer, or is never
 * read.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "backends/amqp/frames.h"

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

/* One frame at *at of buf: its type, channel and payload; *at moves past it.
 * Fails the test unless the frame is whole and ends with 0xCE. */
static const unsigned char *frame(const acemq__frame_buf *buf, size_t *at, int *type,
                                  unsigned *channel, size_t *len)
{
    assert_true(buf->len - *at >= 8);
    const unsigned char *f = buf->data + *at;
    *type = f[0];
    *channel = (unsigned)f[1] << 8 | f[2];
    *len = get32(f + 3);
    assert_true(buf->len - *at >= 8 + *len);
    assert_int_equal(f[7 + *len], AMQP_FRAME_END);
    *at += 8 + *len;
    return f + 7;
}

typedef struct sample {
    const char *exchange, *key, *id;
    int32_t attempts;
    size_t body_len;
} sample;

static void fill_body(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t k = 0; k < n; k++)
        b[k] = (unsigned char)(k * 131 + seed + k / 257);
}

/* Three messages into one run at frame_max 4,096: an empty body (no body
 * frame), a small one, and one of 10,000 bytes in three frames of at most
 * 4,088 bytes; each read back with rabbitmq-c's decoders. */
static void frames_read_back_through_rabbitmq_c(void **state)
{
    (void)state;
    const size_t frame_max = 4096;
    const sample s[] = {{"orders", "created", "id-0", 0, 0},
                        {"", "plain-queue", "id-1", 7, 10},
                        {"ex", "k", "id-2", -1, 10000}};
    acemq__frame_buf buf = {0};
    unsigned char body[10000];
    for (int i = 0; i < 3; i++) {
        amqp_basic_publish_t m = {.exchange = amqp_cstring_bytes(s[i].exchange),
                                  .routing_key = amqp_cstring_bytes(s[i].key),
                                  .mandatory = 1};
        amqp_table_entry_t e = {.key = amqp_cstring_bytes("x-acemq-attempts")};
        e.value.kind = AMQP_FIELD_KIND_I32;
        e.value.value.i32 = s[i].attempts;
        amqp_basic_properties_t p = {0};
        p._flags =
            AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_HEADERS_FLAG;
        p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
        p.message_id = amqp_cstring_bytes(s[i].id);
        p.headers.num_entries = 1;
        p.headers.entries = &e;
        fill_body(body, s[i].body_len, (unsigned)i);
        assert_int_equal(acemq__frames_add_publish(&buf, 5, frame_max, &m, &p,
                                                   (amqp_bytes_t){s[i].body_len, body}),
                         AMQP_STATUS_OK);
    }

    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        int type;
        unsigned ch;
        size_t len;
        const unsigned char *pl = frame(&buf, &at, &type, &ch, &len);
        assert_int_equal(type, AMQP_FRAME_METHOD);
        assert_int_equal(ch, 5);
        assert_int_equal(get32(pl), AMQP_BASIC_PUBLISH_METHOD);
        void *decoded = NULL;
        assert_int_equal(amqp_decode_method(AMQP_BASIC_PUBLISH_METHOD, &pool,
                                            (amqp_bytes_t){len - 4, (void *)(pl + 4)}, &decoded),
                         AMQP_STATUS_OK);
        const amqp_basic_publish_t *m = decoded;
        assert_memory_equal(m->exchange.bytes, s[i].exchange, strlen(s[i].exchange));
        assert_int_equal(m->exchange.len, strlen(s[i].exchange));
        assert_int_equal(m->routing_key.len, strlen(s[i].key));
        assert_memory_equal(m->routing_key.bytes, s[i].key, strlen(s[i].key));
        assert_int_equal(m->mandatory, 1);
        assert_int_equal(m->immediate, 0);

        pl = frame(&buf, &at, &type, &ch, &len);
        assert_int_equal(type, AMQP_FRAME_HEADER);
        assert_int_equal(ch, 5);
        assert_int_equal(pl[0] << 8 | pl[1], AMQP_BASIC_CLASS);
        assert_int_equal(pl[2] << 8 | pl[3], 0); /* weight */
        assert_int_equal(get64(pl + 4), s[i].body_len);
        assert_int_equal(amqp_decode_properties(AMQP_BASIC_CLASS, &pool,
                                                (amqp_bytes_t){len - 12, (void *)(pl + 12)},
                                                &decoded),
                         AMQP_STATUS_OK);
        const amqp_basic_properties_t *p = decoded;
        assert_int_equal(p->delivery_mode, AMQP_DELIVERY_PERSISTENT);
        assert_int_equal(p->message_id.len, strlen(s[i].id));
        assert_memory_equal(p->message_id.bytes, s[i].id, strlen(s[i].id));
        assert_int_equal(p->headers.num_entries, 1);
        assert_int_equal(p->headers.entries[0].value.kind, AMQP_FIELD_KIND_I32);
        assert_int_equal(p->headers.entries[0].value.value.i32, s[i].attempts);

        /* The body, in frames of at most frame_max - 8 bytes, none empty. */
        fill_body(body, s[i].body_len, (unsigned)i);
        size_t got = 0, frames = 0;
        while (got < s[i].body_len) {
            pl = frame(&buf, &at, &type, &ch, &len);
            assert_int_equal(type, AMQP_FRAME_BODY);
            assert_int_equal(ch, 5);
            assert_true(len > 0 && len <= frame_max - 8);
            assert_true(got + len <= s[i].body_len);
            assert_memory_equal(pl, body + got, len);
            got += len;
            frames++;
        }
        assert_int_equal(frames, (s[i].body_len + frame_max - 9) / (frame_max - 8));
    }
    assert_int_equal(at, buf.len); /* nothing after the last frame */
    empty_amqp_pool(&pool);
    acemq__frames_free(&buf);
}

/* A frame_max too small for any frame, and a content header larger than a
 * frame: BAD_AMQP_DATA, and the run holds what it held before. */
static void refusals_leave_the_run_as_it_was(void **state)
{
    (void)state;
    acemq__frame_buf buf = {0};
    amqp_basic_publish_t m = {.exchange = amqp_cstring_bytes("ex"),
                              .routing_key = amqp_cstring_bytes("k"),
                              .mandatory = 1};
    amqp_basic_properties_t p = {0};
    p._flags = AMQP_BASIC_MESSAGE_ID_FLAG;
    p.message_id = amqp_cstring_bytes("first");
    assert_int_equal(acemq__frames_add_publish(&buf, 1, 4096, &m, &p, (amqp_bytes_t){3, "abc"}),
                     AMQP_STATUS_OK);
    size_t len = buf.len;
    unsigned char *before = malloc(len);
    assert_non_null(before);
    memcpy(before, buf.data, len);

    assert_int_equal(acemq__frames_add_publish(&buf, 1, 20, &m, &p, (amqp_bytes_t){3, "abc"}),
                     AMQP_STATUS_BAD_AMQP_DATA);
    assert_int_equal(buf.len, len);

    /* A header value of 5,000 bytes: the method frame fits, the header not. */
    char *big = malloc(5001);
    assert_non_null(big);
    memset(big, 'v', 5000);
    big[5000] = '\0';
    amqp_table_entry_t e = {.key = amqp_cstring_bytes("big")};
    e.value.kind = AMQP_FIELD_KIND_UTF8;
    e.value.value.bytes = amqp_cstring_bytes(big);
    p._flags |= AMQP_BASIC_HEADERS_FLAG;
    p.headers.num_entries = 1;
    p.headers.entries = &e;
    assert_int_equal(acemq__frames_add_publish(&buf, 1, 4096, &m, &p, (amqp_bytes_t){3, "abc"}),
                     AMQP_STATUS_BAD_AMQP_DATA);
    assert_int_equal(buf.len, len);
    assert_memory_equal(buf.data, before, len);
    /* With room for it, the same message frames. */
    assert_int_equal(acemq__frames_add_publish(&buf, 1, 131072, &m, &p, (amqp_bytes_t){3, "abc"}),
                     AMQP_STATUS_OK);
    assert_true(buf.len > len + 5000);
    free(big);
    free(before);
    acemq__frames_free(&buf);
}

/* A connected pair of sockets, sv[0] non-blocking as rabbitmq-c keeps its
 * own: the side the runs are written to. */
static void writer_pair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int fl = fcntl(sv[0], F_GETFL);
    assert_true(fl >= 0);
    assert_int_equal(fcntl(sv[0], F_SETFL, fl | O_NONBLOCK), 0);
}

typedef struct reader {
    int fd;
    unsigned char *got;
    size_t cap, len;
} reader;

static void *read_all(void *arg)
{
    reader *r = arg;
    for (;;) {
        ssize_t n = read(r->fd, r->got + r->len, r->cap - r->len);
        if (n > 0) r->len += (size_t)n;
        if (n == 0 || r->len == r->cap) break;
        if (n < 0 && errno != EINTR) break;
    }
    return NULL;
}

/* Four MiB through a non-blocking socket with a small send buffer, so that
 * the write meets a full socket again and again: every byte arrives, in
 * order, and the run is empty afterwards. */
static void a_run_larger_than_the_socket_takes_arrives_whole(void **state)
{
    (void)state;
    int sv[2];
    writer_pair(sv);
    int small = 4096;
    assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);

    const size_t n = 4u << 20;
    acemq__frame_buf buf = {.data = malloc(n), .len = n, .cap = n};
    assert_non_null(buf.data);
    fill_body(buf.data, n, 3);
    reader r = {.fd = sv[1], .got = malloc(n), .cap = n};
    assert_non_null(r.got);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_all, &r), 0);
    assert_int_equal(acemq__frames_write(&buf, sv[0], 60000), 0);
    assert_int_equal(buf.len, 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(r.len, n);
    assert_memory_equal(r.got, buf.data, n);
    free(r.got);
    acemq__frames_free(&buf);
    close(sv[0]);
    close(sv[1]);
}

/* The peer gone: -1 with EPIPE, and no SIGPIPE (which would end this
 * process, and the test with it). */
static void a_lost_peer_is_an_error_not_a_signal(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(close(sv[1]), 0);
    acemq__frame_buf buf = {.data = malloc(64), .len = 64, .cap = 64};
    assert_non_null(buf.data);
    memset(buf.data, 1, 64);
    errno = 0;
    assert_int_equal(acemq__frames_write(&buf, sv[0], 60000), -1);
    assert_int_equal(errno, EPIPE);
    acemq__frames_free(&buf);
    close(sv[0]);
}

/* A peer that reads nothing: once the socket is full, the write gives up
 * after stall_ms without a byte taken (-1, ETIMEDOUT) instead of waiting
 * for ever, and the run is empty. */
static void a_peer_that_reads_nothing_times_the_write_out(void **state)
{
    (void)state;
    int sv[2];
    writer_pair(sv);
    const size_t n = 16u << 20; /* more than any socket buffer holds */
    acemq__frame_buf buf = {.data = calloc(1, n), .len = n, .cap = n};
    assert_non_null(buf.data);
    errno = 0;
    assert_int_equal(acemq__frames_write(&buf, sv[0], 50), -1);
    assert_int_equal(errno, ETIMEDOUT);
    assert_int_equal(buf.len, 0);
    acemq__frames_free(&buf);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(frames_read_back_through_rabbitmq_c),
        cmocka_unit_test(refusals_leave_the_run_as_it_was),
        cmocka_unit_test(a_run_larger_than_the_socket_takes_arrives_whole),
        cmocka_unit_test(a_lost_peer_is_an_error_not_a_signal),
        cmocka_unit_test(a_peer_that_reads_nothing_times_the_write_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
