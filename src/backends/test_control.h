/* test_control.h — the one place for test-only controls of single backends
 * (SQLite's sqlite3_test_control is the model): what a backend's handle
 * holds inside, and levers a test pulls to set up a case. Internal: not
 * exported, not for callers; tests and benchmarks link the library's
 * objects and include this header. No contract header declares any of it.
 * Each control names its backend, and its handle must be one of that
 * backend's.
 */
#ifndef ACEMQ_BACKENDS_TEST_CONTROL_H
#define ACEMQ_BACKENDS_TEST_CONTROL_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "acemq/broker.h"
#include "acemq/idem.h"
#include "acemq/outbox.h"

/* Memory idempotency store (backends/memory/idem.c). */

/* The slots of all the tables of h (how far they grew). */
size_t acemq__memory_idem_slots(acemq_idem *h);
/* Waits until h's records are faulted in as far as its populator was asked
 * (backends/memory/records.h), and says how far: bytes of records, 0 when it
 * has no populator at work. */
size_t acemq__memory_idem_wait_ahead(acemq_idem *h);

/* PostgreSQL idempotency store: the connection h holds now (after a
 * reconnect, the new one); the caller's own for acemq_idem_open_pg, else
 * made by backends/postgres/connect.c. Not while another thread uses h. */
PGconn *acemq__pg_idem_conn(acemq_idem *h);

/* SQLite idempotency store: its in-process writer queue
 * (backends/sqlite/writer_queue.c; the controls are in backends/sqlite/idem.c).
 * Tests use them to see that handles on one file share one queue and that the
 * process-wide registry forgets a file when its last handle closes. */

/* The writer queue this handle's writes go through; NULL when it has none (an
 * in-memory or temporary database, or a file that could not be stat()ed).
 * Handles on the same file (same st_dev and st_ino) answer the same pointer. */
const void *acemq__sqlite_idem_queue(const acemq_idem *h);
/* Files with at least one open handle in this process: registry entries. */
size_t acemq__sqlite_idem_queue_files(void);
/* Threads waiting in h's queue right now (not counting the holder). */
int acemq__sqlite_idem_queue_waiters(const acemq_idem *h);
/* Takes (hold = 1) or gives back (hold = 0) h's queue as a writer would,
 * without a transaction, so a test can make other handles' writes queue up.
 * Returns 0, or -1 when h has no queue. */
int acemq__sqlite_idem_queue_hold(acemq_idem *h, int hold);

/* Outboxes: the connection a PostgreSQL handle holds, what a handle's own
 * database session holds for the setting that acemq_outbox_options.synchronous
 * controls, whether it listens for NOTIFY, and how its acemq_outbox_wait has
 * been waiting. */

/* PostgreSQL: the connection h holds now (after a reconnect, the new
 * one), made by backends/postgres/connect.c when h was opened by URL. */
PGconn *acemq__pg_outbox_conn(acemq_outbox *h);

/* PostgreSQL: SHOW synchronous_commit ("on", "off", ...) on h's session. */
int acemq__pg_outbox_sync_setting(acemq_outbox *h, char *buf, size_t cap);
/* PostgreSQL: how many channels h's session listens on (0 until its first
 * wait, then 1). */
int acemq__pg_outbox_listening(acemq_outbox *h, int *listening);
/* SQLite: PRAGMA synchronous on h's connection ("0" off, "1" normal, "2" full). */
int acemq__sqlite_outbox_sync_setting(acemq_outbox *h, char *buf, size_t cap);
/* SQLite: how many times h's waits have read PRAGMA data_version, and in
 * *watching (may be NULL) whether they wake on the file's writes (1) or
 * poll (0). */
uint64_t acemq__sqlite_outbox_wait_reads(acemq_outbox *h, int *watching);

/* Memory broker (backends/memory/broker.c). "memory:NAME" names a broker
 * that lives as long as a handle on it is open; every handle on the same NAME
 * shares its queue of accepted messages, so a test can open its own handle
 * beside the relay's, inject faults, and read what arrived. "memory:" alone
 * is a private broker. */

typedef enum acemq__broker_fault {
    ACEMQ__FAULT_NONE = 0,
    ACEMQ__FAULT_REFUSE,     /* the connection is refused: publish returns ACEMQ_EIO */
    ACEMQ__FAULT_NACK,       /* messages are refused with basic.nack */
    ACEMQ__FAULT_DROP,       /* the connection drops after `after` more messages are
                                sent: every confirm not yet told is lost, in this send
                                and in earlier ones still outstanding */
    ACEMQ__FAULT_NO_CONFIRM, /* messages are kept, confirms never come (timeout) */
} acemq__broker_fault;

/* Arms fault: REFUSE and NO_CONFIRM for the next `times` send (or publish)
 * calls; NACK for `times` messages once `after` more have passed normally;
 * DROP once, after `after` more messages. ACEMQ__FAULT_NONE clears it. A
 * handle tells its confirms (oldest first) when its window is full or when
 * a send is collected, so they can be in flight across sends. */
void acemq__memory_broker_fault(acemq_broker *b, int fault, int times, size_t after);
/* Messages to this exchange are unroutable: RETURNED with "NO_ROUTE". */
void acemq__memory_broker_unroutable(acemq_broker *b, const char *exchange);

/* A copy of one message the broker took. */
typedef struct acemq__stored_msg {
    char message_id[256];
    char exchange[256];
    char routing_key[256];
    int attempts;
    size_t body_len;
} acemq__stored_msg;

size_t acemq__memory_broker_count(acemq_broker *b);
/* Copies message i (0 = first taken) into *out: 0, or ACEMQ_ENOENT. */
int acemq__memory_broker_get(acemq_broker *b, size_t i, acemq__stored_msg *out);

/* Consuming from the memory broker (backends/memory/consume.c). Queues
 * exist once a test declares them; a message published to an exchange and
 * routing key that a queue is bound to (or to the default exchange "" with
 * the queue's name as the key) is copied into it, with headers_json as the
 * AMQP adapter delivers it (the published headers and "x-acemq-attempts" as
 * a number; headers that are not a JSON object are left out). Exchanges are
 * direct: the key matches exactly. A rejected message (requeue 0) goes to
 * the queue's dead-letter exchange under its own routing key, or is
 * dropped; x-death is not added. */

/* Declares queue on b's broker (an existing one is kept as it is), with
 * dead_letter_exchange (NULL: none). 0, or ACEMQ_ENOMEM. */
int acemq__memory_broker_declare(acemq_broker *b, const char *queue,
                                 const char *dead_letter_exchange);
/* Binds queue to exchange with routing_key: 0, ACEMQ_ENOENT (no such
 * queue) or ACEMQ_ENOMEM. */
int acemq__memory_broker_bind(acemq_broker *b, const char *queue, const char *exchange,
                              const char *routing_key);
/* Deletes queue and its messages, those delivered and not settled too; its
 * consumers are cancelled (their next acemq_broker_next answers
 * ACEMQ_EBACKEND). 0 or ACEMQ_ENOENT. */
int acemq__memory_broker_delete(acemq_broker *b, const char *queue);
/* Messages ready in queue (not delivered, or given back) into *ready, and
 * delivered and not settled into *unacked (either may be NULL): 0 or
 * ACEMQ_ENOENT. */
int acemq__memory_broker_depth(acemq_broker *b, const char *queue, size_t *ready, size_t *unacked);
/* Cuts consuming handle b's connection now: what it holds goes back to its
 * queue marked redelivered, at once, as RabbitMQ does when it sees the
 * connection end. b notices on its next call: acemq_broker_next or a
 * settle answers ACEMQ_EIO, and the call after that connects again (an
 * armed ACEMQ__FAULT_REFUSE refuses that too, once per call). */
void acemq__memory_broker_cut(acemq_broker *b);

/* The SQLite idempotency store's open on a parsed URL, for tests that make
 * the handle themselves (acemq__idem_new) to see what a failed open leaves. */
struct acemq__url;
int acemq__idem_open_sqlite_url(acemq_idem *h, const struct acemq__url *url);

#endif
