/* fuzz_audit_id.c — libFuzzer target for the message audit's id parsing
 * (acemq_audit_parse_id) and for acemq_audit_check on arbitrary bytes.
 *
 * The parser has a word-at-a-time fast path (src/audit/id_parse.h) beside a
 * byte loop; both must agree with the plain reference below on every input,
 * and neither may read outside the id (libFuzzer hands over a buffer of
 * exactly `size` bytes, so ASan sees any over-read). A check must answer a
 * result for a well-formed id and ACEMQ_EINVAL for any other, and an id
 * answered NEW or DUPLICATE is a DUPLICATE when checked again at once.
 * The input cut at '\n' into ids is also checked as one batch
 * (acemq_audit_check_many) on one audit and one id at a time on its twin:
 * every answer and cause must be the same.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/audit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The reference: the header's contract, written as plainly as possible. */
static int reference(const char *id, size_t len, const char **producer, size_t *producer_len,
                     uint64_t *seq)
{
    if (len == 0 || len > ACEMQ_AUDIT_ID_MAX) return ACEMQ_EINVAL;
    size_t colon = len;
    while (colon > 0 && id[colon - 1] != ':')
        colon--;
    if (colon == 0) return ACEMQ_EINVAL;   /* no ':' */
    if (colon == 1) return ACEMQ_EINVAL;   /* empty producer */
    if (colon == len) return ACEMQ_EINVAL; /* empty sequence */
    uint64_t v = 0;
    for (size_t i = colon; i < len; i++) {
        if (id[i] < '0' || id[i] > '9') return ACEMQ_EINVAL;
        unsigned d = (unsigned)(id[i] - '0');
        if (v > UINT64_MAX / 10 || v * 10 > UINT64_MAX - d) return ACEMQ_EINVAL;
        v = v * 10 + d;
    }
    *producer = id;
    *producer_len = colon - 1;
    *seq = v;
    return 0;
}

/* Small audits, so that producers are evicted and windows slide often; one
 * of each policy and flavour, kept across inputs like a long-lived audit. */
static acemq_audit *g_audit[3];
/* The batch's audit and its one-id-at-a-time twin, thread-safe or not. */
static acemq_audit *g_many[2], *g_one[2];
enum { MAX_LINES = 256 };

static void make_audits(void)
{
    static const struct {
        int policy;
        unsigned flags;
    } kinds[3] = {{ACEMQ_AUDIT_FAIL_OPEN, 0},
                  {ACEMQ_AUDIT_FAIL_CLOSED, 0},
                  {ACEMQ_AUDIT_FAIL_CLOSED, ACEMQ_AUDIT_THREAD_SAFE}};
    for (int i = 0; i < 3; i++) {
        acemq_audit_options o;
        acemq_audit_options_init(&o);
        o.depth = 64;
        o.max_producers = 4;
        o.shards = 2;
        o.policy = kinds[i].policy;
        o.flags = kinds[i].flags;
        if (acemq_audit_new(&g_audit[i], &o) != 0) abort();
        if (i > 0) {
            if (acemq_audit_new(&g_many[i - 1], &o) != 0) abort();
            if (acemq_audit_new(&g_one[i - 1], &o) != 0) abort();
        }
    }
}

/* The input's lines through the batch entry point and one by one. */
static void check_lines(const char *data, size_t size)
{
    const char *ids[MAX_LINES];
    size_t lens[MAX_LINES];
    size_t n = 0;
    for (size_t at = 0; at <= size && n < MAX_LINES;) {
        const char *nl = memchr(data + at, '\n', size - at);
        size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
        ids[n] = data + at;
        lens[n] = len;
        n++;
        at += len + 1;
    }
    int results[MAX_LINES], causes[MAX_LINES];
    for (int f = 0; f < 2; f++) {
        if (acemq_audit_check_many(g_many[f], ids, lens, n, results, causes) != 0) abort();
        for (size_t i = 0; i < n; i++) {
            int cause = -1;
            int r = acemq_audit_check(g_one[f], ids[i], lens[i], &cause);
            if (r != results[i] || cause != causes[i]) abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_audit[0]) make_audits();
    const char *id = (const char *)data;
    check_lines(id, size);

    acemq_audit_id got;
    int rc = acemq_audit_parse_id(id, size, &got);
    const char *producer = NULL;
    size_t producer_len = 0;
    uint64_t seq = 0;
    int want = reference(id, size, &producer, &producer_len, &seq);
    if (rc != want) abort();
    if (rc == 0) {
        if (got.producer != producer || got.producer_len != producer_len || got.sequence != seq ||
            got.error != NULL)
            abort();
    } else {
        if (got.error == NULL || got.producer != NULL) abort();
    }

    for (int i = 0; i < 3; i++) {
        int cause = -1;
        int r = acemq_audit_check(g_audit[i], id, size, &cause);
        if (want != 0) {
            if (r != ACEMQ_EINVAL) abort();
            continue;
        }
        if (r != ACEMQ_AUDIT_NEW && r != ACEMQ_AUDIT_DUPLICATE && r != ACEMQ_AUDIT_UNKNOWN) abort();
        if (cause < ACEMQ_AUDIT_CAUSE_NONE || cause > ACEMQ_AUDIT_BEFORE_START) abort();
        /* Fail-closed answers NEW only when nothing was lost: the id is then
         * recorded, and so is one answered DUPLICATE. */
        if (i > 0 && r != ACEMQ_AUDIT_UNKNOWN) {
            if (acemq_audit_check(g_audit[i], id, size, NULL) != ACEMQ_AUDIT_DUPLICATE) abort();
            /* The pre-split entry point agrees with the text one. */
            if (acemq_audit_check_seq(g_audit[i], producer, producer_len, seq, NULL) !=
                ACEMQ_AUDIT_DUPLICATE)
                abort();
        }
    }
    return 0;
}
