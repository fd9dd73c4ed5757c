/* frames.h — basic.publish and basic.ack as wire frames in a buffer of our
 * own, and the buffer written to the connection's socket in one go
 * (backends/amqp/broker.c publishes, backends/amqp/consume.c acknowledges
 * a consumer's batch).
 *
 * Why: rabbitmq-c's amqp_basic_publish writes each of a message's three
 * frames (method, content header, body) with a send() of its own. On
 * loopback every send runs the kernel's TCP path for both ends, and on a
 * virtual machine a system call is dear: three per message would be most
 * of what the relay's publishing thread spends. The frames of a run of messages, encoded here with
 * rabbitmq-c's own encoders for the method and the properties, go out in
 * one write instead, and so do a batch's acknowledgements, one frame each
 * with a send() each through amqp_basic_ack. rabbitmq-c writes nothing of
 * its own between our runs
 * but heartbeats, whole frames from the same thread, so the stream stays a
 * sequence of whole frames.
 */
#ifndef ACEMQ_BACKENDS_AMQP_FRAMES_H
#define ACEMQ_BACKENDS_AMQP_FRAMES_H

#include <stddef.h>

#include <amqp.h>
#include <amqp_framing.h>

/* A growable run of encoded frames. */
typedef struct acemq__frame_buf {
    unsigned char *data;
    size_t len, cap;
} acemq__frame_buf;

/* Appends one message's frames on channel ch: basic.publish with its
 * arguments, the content header with props and the body's size, and the
 * body in frames of at most frame_max bytes each (none for an empty body).
 * AMQP_STATUS_OK, or a negative AMQP_STATUS_* with buf as it was: NO_MEMORY,
 * or BAD_AMQP_DATA when the method or the header does not fit a frame. */
int acemq__frames_add_publish(acemq__frame_buf *buf, amqp_channel_t ch, size_t frame_max,
                              amqp_basic_publish_t *method, amqp_basic_properties_t *props,
                              amqp_bytes_t body);

/* Appends one method frame without content on channel ch: the method id
 * and args (rabbitmq-c's struct for it, e.g. amqp_basic_ack_t) encoded.
 * AMQP_STATUS_OK, or a negative AMQP_STATUS_* with buf as it was: NO_MEMORY,
 * or BAD_AMQP_DATA when the arguments do not fit the smallest frame AMQP
 * allows (4,096 bytes). */
int acemq__frames_add_method(acemq__frame_buf *buf, amqp_channel_t ch, amqp_method_number_t id,
                             void *args);

/* Writes buf's frames to fd whole, waiting while the socket is full, and
 * empties buf. 0, or -1 with errno set when the socket failed, or with
 * ETIMEDOUT when it took nothing for stall_ms (a peer that reads nothing
 * that long is as good as gone; rabbitmq-c's own sends wait forever, and a
 * stopped broker held them so): any part of the run may then have gone
 * out. */
int acemq__frames_write(acemq__frame_buf *buf, int fd, int stall_ms);

void acemq__frames_free(acemq__frame_buf *buf);

#endif
