/* mark_job.h — what a published batch leaves to be written back to the outbox:
 * each record's id, token and outcome, copied out of the claim's buffer so the
 * next claim can reuse that buffer while these marks are still being made
 * (on the relay's marker thread). */
#ifndef ACEMQ_RELAY_MARK_JOB_H
#define ACEMQ_RELAY_MARK_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "acemq/broker.h"
#include "acemq/outbox.h"

typedef struct acemq__mark_job {
    size_t n, cap;
    char *text; /* ids and reasons, NUL-terminated, back to back */
    size_t text_len, text_cap;
    size_t *id_at, *reason_at; /* offsets into text; SIZE_MAX: no reason */
    uint64_t *token;
    int *outcome;
    uint32_t *confirm_us; /* each record's, from the broker's result */
    /* Scratch for mark_published_batch. */
    acemq_outbox_mark *marks;
    int *status;
} acemq__mark_job;

/* Copies n claimed records and their outcomes: 0 or ACEMQ_ENOMEM. */
int acemq__mark_job_fill(acemq__mark_job *j, const acemq_outbox_msg *m,
                         const acemq_publish_result *res, size_t n);
const char *acemq__mark_job_id(const acemq__mark_job *j, size_t i);
const char *acemq__mark_job_reason(const acemq__mark_job *j, size_t i);
void acemq__mark_job_free(acemq__mark_job *j);

#endif
