/* frames.c — basic.publish frames encoded into our own buffer and
 * written in one go (backends/amqp/frames.h says why).
 *
 * A frame (AMQP 0-9-1, section 4.2.3): type (1 byte), channel (2), payload
 * size (4), the payload, and the frame-end octet 0xCE; numbers big-endian.
 * The method payload is the class and method ids (2 + 2) and the arguments;
 * the content header's is the class id, a zero weight (2 + 2), the body's
 * size (8) and the properties. rabbitmq-c encodes the arguments and the
 * properties; the framing around them is ours.
 */
#include "backends/amqp/frames.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "os/mono_time.h"

#define FRAME_HEAD 7 /* type, channel, size */
#define FRAME_TAIL 1 /* frame-end */
/* AMQP's frame-min-size: every connection takes frames this long, whatever
 * frame_max it agreed. */
#define METHOD_FRAME_MAX 4096

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static void put32(unsigned char *p, uint32_t v)
{
    put16(p, (uint16_t)(v >> 16));
    put16(p + 2, (uint16_t)v);
}

static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* Room for `more` bytes past buf->len. */
static int reserve(acemq__frame_buf *buf, size_t more)
{
    if (more <= buf->cap - buf->len) return 0;
    size_t cap = buf->cap ? buf->cap : 4096;
    while (cap - buf->len < more) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    unsigned char *p = realloc(buf->data, cap);
    if (!p) return -1;
    buf->data = p;
    buf->cap = cap;
    return 0;
}

/* Closes the frame that starts at `at` around the payload_len bytes after
 * its head, and moves buf->len past it. */
static void close_frame(acemq__frame_buf *buf, size_t at, int type, amqp_channel_t ch,
                        size_t payload_len)
{
    unsigned char *f = buf->data + at;
    f[0] = (unsigned char)type;
    put16(f + 1, ch);
    put32(f + 3, (uint32_t)payload_len);
    f[FRAME_HEAD + payload_len] = AMQP_FRAME_END;
    buf->len = at + FRAME_HEAD + payload_len + FRAME_TAIL;
}

int acemq__frames_add_publish(acemq__frame_buf *buf, amqp_channel_t ch, size_t frame_max,
                              amqp_basic_publish_t *method, amqp_basic_properties_t *props,
                              amqp_bytes_t body)
{
    if (frame_max <= FRAME_HEAD + 12 + FRAME_TAIL) return AMQP_STATUS_BAD_AMQP_DATA;
    size_t start = buf->len, payload_max = frame_max - FRAME_HEAD - FRAME_TAIL;
    if (reserve(buf, frame_max)) return AMQP_STATUS_NO_MEMORY;

    /* basic.publish */
    unsigned char *p = buf->data + start + FRAME_HEAD;
    put32(p, AMQP_BASIC_PUBLISH_METHOD);
    int n = amqp_encode_method(AMQP_BASIC_PUBLISH_METHOD, method,
                               (amqp_bytes_t){.len = payload_max - 4, .bytes = p + 4});
    /* The arguments are never empty (a ticket, two strings, the bits), so
     * 0 is no length: a library that answered 0 for success would be
     * caught here, not on the wire. */
    if (n <= 0) goto bad;
    close_frame(buf, start, AMQP_FRAME_METHOD, ch, 4 + (size_t)n);

    /* the content header */
    size_t at = buf->len;
    if (reserve(buf, frame_max)) goto no_memory;
    p = buf->data + at + FRAME_HEAD;
    put16(p, AMQP_BASIC_CLASS);
    put16(p + 2, 0);
    put64(p + 4, body.len);
    n = amqp_encode_properties(AMQP_BASIC_CLASS, props,
                               (amqp_bytes_t){.len = payload_max - 12, .bytes = p + 12});
    if (n < 0) goto bad;
    close_frame(buf, at, AMQP_FRAME_HEADER, ch, 12 + (size_t)n);

    /* the body */
    for (size_t off = 0; off < body.len;) {
        size_t take = body.len - off < payload_max ? body.len - off : payload_max;
        at = buf->len;
        if (reserve(buf, FRAME_HEAD + take + FRAME_TAIL)) goto no_memory;
        memcpy(buf->data + at + FRAME_HEAD, (const unsigned char *)body.bytes + off, take);
        close_frame(buf, at, AMQP_FRAME_BODY, ch, take);
        off += take;
    }
    return AMQP_STATUS_OK;
bad:
    buf->len = start;
    return AMQP_STATUS_BAD_AMQP_DATA;
no_memory:
    buf->len = start;
    return AMQP_STATUS_NO_MEMORY;
}

int acemq__frames_add_method(acemq__frame_buf *buf, amqp_channel_t ch, amqp_method_number_t id,
                             void *args)
{
    size_t start = buf->len;
    if (reserve(buf, METHOD_FRAME_MAX)) return AMQP_STATUS_NO_MEMORY;
    unsigned char *p = buf->data + start + FRAME_HEAD;
    put32(p, id);
    int n = amqp_encode_method(
        id, args,
        (amqp_bytes_t){.len = METHOD_FRAME_MAX - FRAME_HEAD - FRAME_TAIL - 4, .bytes = p + 4});
    if (n < 0) return AMQP_STATUS_BAD_AMQP_DATA;
    close_frame(buf, start, AMQP_FRAME_METHOD, ch, 4 + (size_t)n);
    return AMQP_STATUS_OK;
}

int acemq__frames_write(acemq__frame_buf *buf, int fd, int stall_ms)
{
    const unsigned char *p = buf->data;
    size_t left = buf->len;
    buf->len = 0;
    int64_t stall_until = acemq__mono_ms() + stall_ms; /* moved on by every byte taken */
    while (left > 0) {
        /* MSG_NOSIGNAL: a closed peer is an error to report, not SIGPIPE. */
        ssize_t w = send(fd, p, left, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            left -= (size_t)w;
            stall_until = acemq__mono_ms() + stall_ms;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* rabbitmq-c keeps its socket non-blocking: wait for room. */
            int64_t wait_ms = stall_until - acemq__mono_ms();
            if (wait_ms <= 0) {
                errno = ETIMEDOUT;
                return -1;
            }
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, wait_ms > INT32_MAX ? INT32_MAX : (int)wait_ms) < 0 && errno != EINTR)
                return -1;
            continue; /* room, a timeout or an error: send() says which */
        }
        if (w == 0) errno = EPIPE; /* send() wrote nothing and said nothing */
        return -1;
    }
    return 0;
}

void acemq__frames_free(acemq__frame_buf *buf)
{
    free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}
