/* waves.c — one record per ordering key unconfirmed at a time, over a batch
 * that holds several of a key (see waves.h). */
#include "relay/waves.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Not yet sent, and not yet known to be held back. */
#define WAITING (-1)

static int grow(void **p, size_t size, size_t n)
{
    void *np = realloc(*p, size * n);
    if (!np) return -1;
    *p = np;
    return 0;
}

static int reserve(acemq__waves *w, size_t n)
{
    if (n <= w->cap) return 0;
    if (grow((void **)&w->prev, sizeof *w->prev, n) || grow((void **)&w->at, sizeof *w->at, n) ||
        grow((void **)&w->reason_at, sizeof *w->reason_at, n) ||
        grow((void **)&w->msgs, sizeof *w->msgs, n) ||
        grow((void **)&w->results, sizeof *w->results, n))
        return ACEMQ_ENOMEM;
    w->cap = n;
    return 0;
}

int acemq__waves_plan(acemq__waves *w, const acemq_outbox_msg *m, size_t n)
{
    if (reserve(w, n) != 0) return ACEMQ_ENOMEM;
    int repeats = 0;
    for (size_t i = 0; i < n; i++) {
        w->prev[i] = SIZE_MAX;
        if (!m[i].ordering_key) continue;
        /* Backwards to the nearest record of the same key: a batch of a few
         * keys finds it within a few records. */
        for (size_t j = i; j-- > 0;) {
            if (m[j].ordering_key && strcmp(m[j].ordering_key, m[i].ordering_key) == 0) {
                w->prev[i] = j;
                repeats = 1;
                break;
            }
        }
    }
    return repeats;
}

/* Copies a reason the broker owns only until its next publish. */
static size_t keep_reason(acemq__waves *w, const char *why)
{
    if (!why) return SIZE_MAX;
    size_t len = strlen(why) + 1;
    if (w->text_cap - w->text_len < len) {
        size_t cap = w->text_cap ? w->text_cap : 256;
        while (cap - w->text_len < len)
            cap *= 2;
        char *np = realloc(w->text, cap);
        if (!np) return SIZE_MAX; /* the record keeps its outcome, without its words */
        w->text = np;
        w->text_cap = cap;
    }
    memcpy(w->text + w->text_len, why, len);
    w->text_len += len;
    return w->text_len - len;
}

int acemq__waves_publish(acemq__waves *w, acemq_broker *b, const acemq_broker_msg *msgs, size_t n,
                         acemq_publish_result *results)
{
    w->text_len = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = (acemq_publish_result){.outcome = WAITING};
        w->reason_at[i] = SIZE_MAX;
    }
    int rc = 0;
    for (;;) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (results[i].outcome != WAITING) continue;
            size_t p = w->prev[i];
            if (p == SIZE_MAX || results[p].outcome == ACEMQ_PUBLISH_CONFIRMED) {
                w->at[k] = i;
                w->msgs[k++] = msgs[i];
            } else if (results[p].outcome != WAITING || rc != 0) {
                results[i].outcome = ACEMQ__PUBLISH_HELD;
            }
        }
        if (k == 0) break;
        if (rc == 0) rc = acemq_broker_publish(b, w->msgs, k, w->results);
        for (size_t j = 0; j < k; j++) {
            size_t i = w->at[j];
            if (rc != 0) { /* nothing of this wave was sent */
                results[i].outcome = ACEMQ__PUBLISH_HELD;
                continue;
            }
            results[i].outcome = w->results[j].outcome;
            results[i].confirm_us = w->results[j].confirm_us;
            w->reason_at[i] = keep_reason(w, w->results[j].reason);
        }
    }
    for (size_t i = 0; i < n; i++)
        results[i].reason = w->reason_at[i] == SIZE_MAX ? NULL : w->text + w->reason_at[i];
    return rc;
}

void acemq__waves_free(acemq__waves *w)
{
    if (!w) return;
    free(w->prev);
    free(w->at);
    free(w->reason_at);
    free(w->msgs);
    free(w->results);
    free(w->text);
    memset(w, 0, sizeof *w);
}
