/* fiu_world.h — what test_fault_fiu's cases share: an SQLite file with the
 * outbox's schema, the caller's own connection to it with an `orders` and
 * an `effects` table, a manual clock, and the checks every case makes.
 *
 * The checks judge a call made under faults: it succeeded, or it failed
 * with an error a failed system call may cause and a message saying so.
 * Another error is a finding (the library took a failed malloc or write for
 * something else); so is a crash, a leak, or data that disagree with what
 * the calls answered.
 */
#ifndef FIU_WORLD_H
#define FIU_WORLD_H

#include <sqlite3.h>

#include "acemq/acemq.h"

typedef struct fiu_world {
    char dir[64];
    char path[128];
    char url[160]; /* "sqlite:" path */
    sqlite3 *caller;
    acemq_manual_clock *clock;
    acemq_outbox *outbox; /* world_outbox's, closed at teardown */
    /* 1: the stores under test are servers, whose reply to a call that took
     * effect can be lost (world_faults_network): a retry may then find the
     * release done, and a claim held by the call that failed. */
    int replies_can_be_lost;
} fiu_world;

/* Errors seen, by code, and how many calls were judged. */
typedef struct world_counts {
    long calls, ok, enomem, eio, ebackend;
} world_counts;

int world_setup(void **state);
int world_teardown(void **state);

/* "order-000042" for record i. */
void world_record_id(char *buf, size_t cap, int i);
/* The one integer sql answers on db; fails the test on error. */
long world_scalar(sqlite3 *db, const char *sql);
/* PRAGMA integrity_check answers "ok". */
void world_expect_integrity(sqlite3 *db);

/* Turns faults on for the next call: which kinds and how likely, drawn
 * from the seeded generator. */
void world_faults_on(void);
/* From now on world_faults_on draws from the network mix: sockets (send,
 * recv; and write, read, which hiredis uses on its socket) often, memory
 * rarely, or (memory 0) never. */
void world_faults_network(int memory);

/* rc (the call's answer, made at iteration i) is success or ENOMEM, EIO or
 * EBACKEND with a non-empty message; counted in c. */
void world_expect_clean(world_counts *c, const char *call, int i, int rc, const char *msg);
/* One line: the case, its iterations, the calls judged and their errors. */
void world_report(const char *name, int iterations, const world_counts *c, long items);

/* Commits records from..to-1 (one transaction each, faults off). */
void world_add_records(fiu_world *w, int from, int to);
/* The relay-side handle (faults off), with the world's clock, no jitter,
 * short back-offs and attempts enough never to die here. */
acemq_outbox *world_outbox(fiu_world *w);
/* acemq_outbox_open under faults, twenty times: clean, and closed. */
void world_open_under_faults(fiu_world *w, world_counts *c);
/* Faults off: leases and back-offs run out, every due record is claimed and
 * marked published. */
void world_drain_outbox(fiu_world *w, acemq_outbox *h);
/* Records 0..n-1 are all published, nothing else is in the outbox, and
 * nothing waits, claimed or dead. */
void world_expect_all_published(fiu_world *w, int n);
/* What reached a broker, message id by message id: each must be one of
 * records 0..n-1 ("order-%06d"), and each of those must come at least once. */
typedef struct world_tally {
    unsigned *seen; /* copies of record k */
    int n;
    char stranger[ACEMQ_OUTBOX_ID_MAX + 1]; /* the first id that is no record's */
} world_tally;
void world_tally_start(world_tally *t, int n);
/* Counts one message id (len bytes); 0, or -1 once a stranger came (stop). */
int world_tally_add(world_tally *t, const char *id, size_t len);
/* Fails the test on a stranger or a record that never came; prints where
 * ("relay amqp") with the ids that came more than once, frees t and returns
 * how many copies were extra. */
long world_tally_end(world_tally *t, const char *where);
/* The in-process broker holds each of records 0..n-1 at least once and
 * nothing else (world_tally); returns how many copies were duplicates. */
long world_expect_broker_holds(fiu_world *w, acemq_broker *probe, int n);

/* The idempotency store at url driven through try_claim, confirm, release
 * and is_confirmed under faults over 64 ids, against a model of what the
 * answers promised: a confirmed id is never claimed again, an id is
 * ALREADY_CONFIRMED only once confirmed, a failed call retried with the
 * faults off succeeds, and at the end each id is confirmed exactly when
 * the model says. */
void world_idem_model(fiu_world *w, const char *url, int iterations);
/* The inbox: the store on the caller's connection, confirm inside the
 * caller's transaction with an effect row; the effect is there exactly
 * when the id is confirmed, after every failure and at the end. */
void world_inbox_model(fiu_world *w, int iterations);

#endif
