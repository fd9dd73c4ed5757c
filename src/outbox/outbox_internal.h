/* outbox_internal.h — what the outbox contract offers the runtimes above it
 * (the relay) and tests beyond the public API. Not a backend's header: a
 * runtime includes this, never outbox_backend.h.
 */
#ifndef ACEMQ_OUTBOX_INTERNAL_H
#define ACEMQ_OUTBOX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "acemq/outbox.h"

/* acemq_outbox_claim_batch with the backend's claim_runs where it has one
 * (outbox_backend.h): for a publisher that keeps one record per ordering key
 * unconfirmed at a time itself. */
int acemq__outbox_claim_runs(acemq_outbox *h, size_t max, int64_t lease_ms,
                             const acemq_outbox_msg **msgs, size_t *n);

/* acemq_outbox_purge with a batch of its own (tests use a small one): adds
 * what it deletes to *purged, which also counts the batches that committed
 * before an error. */
int acemq__outbox_purge_batched(acemq_outbox *h, int64_t older_than_ms, uint64_t batch,
                                uint64_t *purged);

#endif
