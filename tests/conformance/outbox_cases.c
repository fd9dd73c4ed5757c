/* outbox_cases.c — the helpers every part of test_outbox_conformance shares:
 * a record to add, records added in one committed transaction, a claim, and
 * the clock moved; each fails the test when the outbox refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "conformance/outbox_fixture.h"
#include "conformance/outbox_cases.h"

acemq_outbox_record outbox_rec(const char *id, const char *key, const char *body)
{
    acemq_outbox_record r;
    memset(&r, 0, sizeof r);
    r.id = id;
    r.destination = "orders";
    r.routing_key = "order.created";
    r.ordering_key = key;
    r.body = body;
    r.body_len = body ? strlen(body) : 0;
    return r;
}

/* Adds records id[0..n) with ordering keys keys[i] (may be NULL) in one
 * committed transaction. */
void outbox_add_committed(outbox_fixture *f, const char *const *ids, const char *const *keys,
                          size_t n)
{
    outbox_sql(f, NULL, "BEGIN");
    for (size_t i = 0; i < n; i++) {
        acemq_outbox_record r = outbox_rec(ids[i], keys ? keys[i] : NULL, ids[i]);
        int rc = outbox_add(f, NULL, &r, NULL);
        if (rc != 0)
            fail_msg("add %s: %s: %s", ids[i], acemq_err_name(rc), acemq_outbox_errmsg(NULL));
    }
    outbox_sql(f, NULL, "COMMIT");
}

size_t outbox_claim(acemq_outbox *h, size_t max, int64_t lease, const acemq_outbox_msg **m)
{
    size_t n = 99999;
    int rc = acemq_outbox_claim_batch(h, max, lease, m, &n);
    if (rc != 0) fail_msg("claim_batch: %s: %s", acemq_err_name(rc), acemq_outbox_errmsg(h));
    return n;
}

void outbox_advance(outbox_fixture *f, int64_t ms)
{
    acemq_manual_clock_advance(f->clock, ms);
}
