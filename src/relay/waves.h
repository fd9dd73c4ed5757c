/* waves.h — publishing a claimed batch that holds several records of one
 * ordering key, so that at most one record per key is unconfirmed at a time.
 *
 * The relay claims a key's pending records together (claim_runs). It sends
 * them in waves: a wave holds every record whose predecessor of the same key
 * in the batch was confirmed by an earlier wave, and the next wave goes once
 * the broker answered each record of this one. A record whose predecessor
 * was not confirmed (nacked, returned, unknown, or itself held back) is not
 * sent: it is held back, and the relay releases it, so the key waits for
 * its failed record as it would had the records been claimed one by one.
 */
#ifndef ACEMQ_RELAY_WAVES_H
#define ACEMQ_RELAY_WAVES_H

#include <stddef.h>

#include "acemq/broker.h"
#include "acemq/outbox.h"

/* An outcome beside acemq_publish_outcome's: not sent, because an earlier
 * record of its key in the batch was not confirmed. */
#define ACEMQ__PUBLISH_HELD 16

typedef struct acemq__waves {
    size_t cap;
    size_t *prev;      /* the batch's previous record of the same key; SIZE_MAX: none */
    size_t *at;        /* the records the current wave holds */
    size_t *reason_at; /* offsets into text; SIZE_MAX: none */
    acemq_broker_msg *msgs;
    acemq_publish_result *results;
    char *text; /* the reasons, copied: the broker's last only until its next publish */
    size_t text_len, text_cap;
} acemq__waves;

/* Finds each record's predecessor of the same key among m[0..n): 1 when
 * some key appears twice (publish in waves), 0 when none does (the batch can
 * go out in one send), ACEMQ_ENOMEM. */
int acemq__waves_plan(acemq__waves *w, const acemq_outbox_msg *m, size_t n);

/* Publishes msgs[0..n), the records plan() last saw, in waves, each with
 * acemq_broker_publish (so nothing may be outstanding on b), and writes each
 * record's outcome to results[i]: the broker's, or ACEMQ__PUBLISH_HELD. The
 * reasons stay valid until the next call. Returns 0, or the broker's error
 * for a wave it could not send: that wave and every record not yet sent are
 * then HELD, the earlier waves' outcomes stand. */
int acemq__waves_publish(acemq__waves *w, acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                         acemq_publish_result *results);

void acemq__waves_free(acemq__waves *w);

#endif
