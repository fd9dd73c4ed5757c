/* outbox_add_claim.c — what goes in and what a claim hands out: nothing rolled
 * back, nothing outside a transaction, oldest first, every field as written,
 * UUIDv7 ids in order; ordering keys holding back only their own records,
 * a key's records claimed together, a dead record holding back its key, and
 * the pending counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "conformance/outbox_fixture.h"
#include "outbox/outbox_internal.h"
#include "conformance/outbox_cases.h"

void rollback_is_never_claimed(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    outbox_sql(f, NULL, "BEGIN");
    acemq_outbox_record r = outbox_rec("rolled-back", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);
    outbox_sql(f, NULL, "ROLLBACK");
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 10, 1000, &m), 0);
    assert_int_equal(outbox_rows(f), 0);
    acemq_outbox_close(h);
}

void add_without_transaction_is_refused(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox_record r = outbox_rec("no-tx", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_ENOTX);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "no transaction"));
    assert_int_equal(outbox_rows(f), 0);
}

void oldest_first(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *first[] = {"a1", "a2", "a3"}, *second[] = {"b1", "b2"};
    outbox_add_committed(f, first, NULL, 3);
    outbox_advance(f, 10);
    outbox_add_committed(f, second, NULL, 2);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 2, 60000, &m), 2);
    assert_string_equal(m[0].id, "a1");
    assert_string_equal(m[1].id, "a2");
    assert_int_equal(outbox_claim(h, 10, 60000, &m), 3);
    assert_string_equal(m[0].id, "a3");
    assert_string_equal(m[1].id, "b1");
    assert_string_equal(m[2].id, "b2");
    assert_true(m[1].created_ms == m[0].created_ms + 10);
    assert_int_equal(outbox_claim(h, 10, 60000, &m), 0);
    acemq_outbox_close(h);
}

void fields_come_back_as_written(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    static const unsigned char body[] = {0, 1, 2, 'q', '"', 0xff, 0};
    acemq_outbox_header hd[] = {{"trace", "abc"}, {"quote", "say \"hi\"\n"}};
    acemq_outbox_record r = outbox_rec(NULL, "customer-7", NULL);
    r.body = body;
    r.body_len = sizeof body;
    r.headers = hd;
    r.n_headers = 2;
    r.content_type = "application/octet-stream";
    char id[ACEMQ_OUTBOX_ID_MAX + 1];
    outbox_sql(f, NULL, "BEGIN");
    assert_int_equal(outbox_add(f, NULL, &r, id), 0);
    outbox_sql(f, NULL, "COMMIT");
    /* A generated id is a UUIDv7: 8-4-4-4-12 hex, version 7, RFC variant. */
    assert_int_equal(strlen(id), ACEMQ_OUTBOX_UUID_LEN);
    assert_int_equal(id[8], '-');
    assert_int_equal(id[14], '7');
    assert_non_null(strchr("89ab", id[19]));

    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 10, 60000, &m), 1);
    assert_string_equal(m[0].id, id);
    assert_string_equal(m[0].destination, "orders");
    assert_string_equal(m[0].routing_key, "order.created");
    assert_string_equal(m[0].ordering_key, "customer-7");
    assert_string_equal(m[0].content_type, "application/octet-stream");
    assert_string_equal(m[0].headers_json, "{\"trace\":\"abc\",\"quote\":\"say \\\"hi\\\"\\n\"}");
    assert_int_equal(m[0].body_len, sizeof body);
    assert_memory_equal(m[0].body, body, sizeof body);
    assert_int_equal(m[0].created_ms, 1000000000);
    assert_int_equal(m[0].attempts, 0);
    assert_null(m[0].last_error);
    assert_true(m[0].token > 0);
    acemq_outbox_close(h);
}

void uuid7_ids_sort_in_order(void **state)
{
    (void)state;
    char prev[ACEMQ_OUTBOX_UUID_LEN + 1] = "";
    for (int i = 0; i < 10000; i++) {
        char id[ACEMQ_OUTBOX_UUID_LEN + 1];
        assert_int_equal(acemq_uuid7(id), 0);
        assert_true(strcmp(prev, id) < 0);
        memcpy(prev, id, sizeof id);
    }
}

void ordering_keys_hold_back_only_their_own(void **state)
{
    outbox_fixture *f = *state;
    f->opts.jitter_percent = 0;
    f->opts.backoff_base_ms = 1000;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"A1", "B1", "A2", "B2", "A3", "free"};
    const char *keys[] = {"A", "B", "A", "B", "A", NULL};
    outbox_add_committed(f, ids, keys, 6);
    const acemq_outbox_msg *m;

    /* One in flight per key. */
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 3);
    assert_string_equal(m[0].id, "A1");
    assert_string_equal(m[1].id, "B1");
    assert_string_equal(m[2].id, "free");
    uint64_t a1 = m[0].token, b1 = m[1].token;
    assert_int_equal(acemq_outbox_mark_published(h, "free", m[2].token), 0);

    /* A1 fails: A waits for it; B goes on. */
    assert_int_equal(acemq_outbox_mark_failed(h, "A1", a1, "nack"), 0);
    assert_int_equal(acemq_outbox_mark_published(h, "B1", b1), 0);
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 1);
    assert_string_equal(m[0].id, "B2");
    assert_int_equal(acemq_outbox_mark_published(h, "B2", m[0].token), 0);
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 0); /* A2 does not overtake A1 */

    /* After the back-off, A's records go out one by one, in order. */
    outbox_advance(f, 1000);
    const char *expect[] = {"A1", "A2", "A3"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(outbox_claim(h, 10, 30000, &m), 1);
        assert_string_equal(m[0].id, expect[i]);
        assert_int_equal(acemq_outbox_mark_published(h, m[0].id, m[0].token), 0);
    }
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 0);
    acemq_outbox_close(h);
}

static size_t claim_runs(acemq_outbox *h, size_t max, int64_t lease, const acemq_outbox_msg **m)
{
    size_t n = 99999;
    int rc = acemq__outbox_claim_runs(h, max, lease, m, &n);
    if (rc != 0) fail_msg("claim_runs: %s: %s", acemq_err_name(rc), acemq_outbox_errmsg(h));
    return n;
}

static void expect_ids(const acemq_outbox_msg *m, size_t n, const char *const *ids)
{
    for (size_t i = 0; i < n; i++)
        assert_string_equal(m[i].id, ids[i]);
}

/* The relay's claim: a key's due records together, oldest first, only when
 * the key's oldest unpublished record is due and unleased; a key whose
 * oldest record is leased, backing off or dead gives nothing. */
void claim_runs_takes_a_keys_records_together(void **state)
{
    outbox_fixture *f = *state;
    f->opts.jitter_percent = 0;
    f->opts.backoff_base_ms = 1000;
    f->opts.max_attempts = 2;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"A1", "B1", "A2", "C1", "B2", "A3", "free", "C2"};
    const char *keys[] = {"A", "B", "A", "C", "B", "A", NULL, "C"};
    outbox_add_committed(f, ids, keys, 8);
    const acemq_outbox_msg *m;

    /* The limit cuts a key's run after its oldest records, never before. */
    assert_int_equal(claim_runs(h, 3, 30000, &m), 3);
    expect_ids(m, 3, (const char *const[]){"A1", "B1", "A2"});
    uint64_t a1 = m[0].token, a2 = m[2].token, b1 = m[1].token;
    /* A and B are held by their leased oldest records: C and the keyless go. */
    assert_int_equal(claim_runs(h, 10, 30000, &m), 3);
    expect_ids(m, 3, (const char *const[]){"C1", "free", "C2"});

    /* A1 fails; A2 is given back unsent, as the relay does: A waits for A1. */
    assert_int_equal(acemq_outbox_mark_failed(h, "A1", a1, "nack"), 0);
    assert_int_equal(acemq_outbox_release(h, "A2", a2), 0);
    assert_int_equal(acemq_outbox_mark_published(h, "B1", b1), 0);
    assert_int_equal(claim_runs(h, 10, 30000, &m), 1);
    assert_string_equal(m[0].id, "B2");

    /* After the back-off A's three go together, in order. */
    outbox_advance(f, 1000);
    assert_int_equal(claim_runs(h, 10, 30000, &m), 3);
    expect_ids(m, 3, (const char *const[]){"A1", "A2", "A3"});
    /* A1 fails for good: dead, it holds back A2 and A3 for a person. */
    assert_int_equal(acemq_outbox_mark_failed(h, "A1", m[0].token, "poison"), 0);
    assert_int_equal(acemq_outbox_release(h, "A2", m[1].token), 0);
    assert_int_equal(acemq_outbox_release(h, "A3", m[2].token), 0);
    outbox_advance(f, 86400000);
    size_t n = claim_runs(h, 10, 30000, &m); /* the others' leases ran out meanwhile */
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++)
        assert_true(m[i].id[0] != 'A');
    acemq_outbox_close(h);
}

void dead_record_holds_back_its_key(void **state)
{
    outbox_fixture *f = *state;
    f->opts.max_attempts = 1;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"K1", "K2", "L1"};
    const char *keys[] = {"K", "K", "L"};
    outbox_add_committed(f, ids, keys, 3);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 2); /* K1, L1 */
    assert_string_equal(m[0].id, "K1");
    assert_int_equal(acemq_outbox_mark_failed(h, "K1", m[0].token, "poison"), 0);
    assert_int_equal(acemq_outbox_mark_published(h, "L1", m[1].token), 0);
    outbox_advance(f, 86400000);
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 0); /* K2 waits behind dead K1 */
    assert_int_equal(acemq_outbox_retry(h, "K1"), 0);
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 1);
    assert_string_equal(m[0].id, "K1");
    acemq_outbox_close(h);
}

void pending_counts_and_oldest_age(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    acemq_outbox_pending p;
    assert_int_equal(acemq_outbox_pending_count(h, &p), 0);
    assert_int_equal(p.unclaimed + p.claimed + p.dead, 0);
    assert_int_equal(p.oldest_age_ms, 0);
    const char *ids[] = {"w1", "w2", "w3"};
    outbox_add_committed(f, ids, NULL, 3);
    outbox_advance(f, 5000);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 1, 10000, &m), 1);
    assert_int_equal(acemq_outbox_pending_count(h, &p), 0);
    assert_int_equal(p.unclaimed, 2);
    assert_int_equal(p.claimed, 1);
    assert_int_equal(p.dead, 0);
    assert_int_equal(p.oldest_age_ms, 5000);
    outbox_advance(f, 10000); /* the lease ran out: waiting, unclaimed again */
    assert_int_equal(acemq_outbox_pending_count(h, &p), 0);
    assert_int_equal(p.unclaimed, 3);
    assert_int_equal(p.claimed, 0);
    acemq_outbox_close(h);
}
