/* mark_job.c — see mark_job.h. Buffers grow and are kept: a relay fills the
 * same two jobs over and over. */
#include <stdlib.h>
#include <string.h>

#include "relay/mark_job.h"

static int grow(void **p, size_t elem, size_t n)
{
    void *q = realloc(*p, elem * n);
    if (!q) return ACEMQ_ENOMEM;
    *p = q;
    return 0;
}

static int put_text(acemq__mark_job *j, const char *s, size_t *at)
{
    size_t len = strlen(s) + 1;
    if (j->text_cap - j->text_len < len) {
        size_t cap = j->text_cap ? j->text_cap : 4096;
        while (cap - j->text_len < len)
            cap *= 2;
        char *t = realloc(j->text, cap);
        if (!t) return ACEMQ_ENOMEM;
        j->text = t;
        j->text_cap = cap;
    }
    memcpy(j->text + j->text_len, s, len);
    *at = j->text_len;
    j->text_len += len;
    return 0;
}

int acemq__mark_job_fill(acemq__mark_job *j, const acemq_outbox_msg *m,
                         const acemq_publish_result *res, size_t n)
{
    j->n = 0;
    j->text_len = 0;
    if (n > j->cap) {
        if (grow((void **)&j->id_at, sizeof *j->id_at, n) ||
            grow((void **)&j->reason_at, sizeof *j->reason_at, n) ||
            grow((void **)&j->token, sizeof *j->token, n) ||
            grow((void **)&j->outcome, sizeof *j->outcome, n) ||
            grow((void **)&j->confirm_us, sizeof *j->confirm_us, n) ||
            grow((void **)&j->marks, sizeof *j->marks, n) ||
            grow((void **)&j->status, sizeof *j->status, n))
            return ACEMQ_ENOMEM;
        j->cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        if (put_text(j, m[i].id, &j->id_at[i]) != 0) return ACEMQ_ENOMEM;
        j->reason_at[i] = SIZE_MAX;
        if (res[i].reason && put_text(j, res[i].reason, &j->reason_at[i]) != 0) return ACEMQ_ENOMEM;
        j->token[i] = m[i].token;
        j->outcome[i] = res[i].outcome;
        j->confirm_us[i] = res[i].confirm_us;
    }
    j->n = n;
    return 0;
}

const char *acemq__mark_job_id(const acemq__mark_job *j, size_t i)
{
    return j->text + j->id_at[i];
}

const char *acemq__mark_job_reason(const acemq__mark_job *j, size_t i)
{
    return j->reason_at[i] == SIZE_MAX ? NULL : j->text + j->reason_at[i];
}

void acemq__mark_job_free(acemq__mark_job *j)
{
    free(j->text);
    free(j->id_at);
    free(j->reason_at);
    free(j->token);
    free(j->outcome);
    free(j->confirm_us);
    free(j->marks);
    free(j->status);
    memset(j, 0, sizeof *j);
}
