/* test_outbox_conformance.c — the outbox contract, run against SQLite and
 * PostgreSQL alike: `test_outbox_conformance sqlite|postgres`.
 *
 * Time moves only through the fixture's manual clock: back-off, leases and
 * retention are tested by moving it, never by sleeping.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "conformance/outbox_fixture.h"
#include "outbox/outbox_backend.h"
#include "outbox/outbox_internal.h"
#include "backends/test_control.h"

static int use_pg;

static int setup(void **state)
{
    outbox_fixture *f = malloc(sizeof *f);
    if (!f) return -1;
    outbox_fixture_init(f, use_pg);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    outbox_fixture_free(*state);
    free(*state);
    return 0;
}

static acemq_outbox_record rec(const char *id, const char *key, const char *body)
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
static void add_committed(outbox_fixture *f, const char *const *ids, const char *const *keys,
                          size_t n)
{
    outbox_sql(f, NULL, "BEGIN");
    for (size_t i = 0; i < n; i++) {
        acemq_outbox_record r = rec(ids[i], keys ? keys[i] : NULL, ids[i]);
        int rc = outbox_add(f, NULL, &r, NULL);
        if (rc != 0)
            fail_msg("add %s: %s: %s", ids[i], acemq_err_name(rc), acemq_outbox_errmsg(NULL));
    }
    outbox_sql(f, NULL, "COMMIT");
}

static size_t claim(acemq_outbox *h, size_t max, int64_t lease, const acemq_outbox_msg **m)
{
    size_t n = 99999;
    int rc = acemq_outbox_claim_batch(h, max, lease, m, &n);
    if (rc != 0) fail_msg("claim_batch: %s: %s", acemq_err_name(rc), acemq_outbox_errmsg(h));
    return n;
}

static void advance(outbox_fixture *f, int64_t ms)
{
    acemq_manual_clock_advance(f->clock, ms);
}

/* ------------------------------------------------------------- the cases */

static void rollback_is_never_claimed(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    outbox_sql(f, NULL, "BEGIN");
    acemq_outbox_record r = rec("rolled-back", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);
    outbox_sql(f, NULL, "ROLLBACK");
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 10, 1000, &m), 0);
    assert_int_equal(outbox_rows(f), 0);
    acemq_outbox_close(h);
}

static void add_without_transaction_is_refused(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox_record r = rec("no-tx", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_ENOTX);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "no transaction"));
    assert_int_equal(outbox_rows(f), 0);
}

static void oldest_first(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *first[] = {"a1", "a2", "a3"}, *second[] = {"b1", "b2"};
    add_committed(f, first, NULL, 3);
    advance(f, 10);
    add_committed(f, second, NULL, 2);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 2, 60000, &m), 2);
    assert_string_equal(m[0].id, "a1");
    assert_string_equal(m[1].id, "a2");
    assert_int_equal(claim(h, 10, 60000, &m), 3);
    assert_string_equal(m[0].id, "a3");
    assert_string_equal(m[1].id, "b1");
    assert_string_equal(m[2].id, "b2");
    assert_true(m[1].created_ms == m[0].created_ms + 10);
    assert_int_equal(claim(h, 10, 60000, &m), 0);
    acemq_outbox_close(h);
}

static void fields_come_back_as_written(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    static const unsigned char body[] = {0, 1, 2, 'q', '"', 0xff, 0};
    acemq_outbox_header hd[] = {{"trace", "abc"}, {"quote", "say \"hi\"\n"}};
    acemq_outbox_record r = rec(NULL, "customer-7", NULL);
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
    assert_int_equal(claim(h, 10, 60000, &m), 1);
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

static void uuid7_ids_sort_in_order(void **state)
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

static void lease_expiry_hands_over_and_fences(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h1 = outbox_fixture_open(f), *h2 = outbox_fixture_open(f);
    const char *ids[] = {"r1", "r2"};
    add_committed(f, ids, NULL, 2);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h1, 10, 30000, &m), 2);
    uint64_t old_token = m[0].token;
    assert_int_equal(claim(h2, 10, 30000, &m), 0); /* held under lease */
    advance(f, 29999);
    assert_int_equal(claim(h2, 10, 30000, &m), 0);
    advance(f, 1); /* the lease has run out: the relay that held it is presumed dead */
    assert_int_equal(claim(h2, 10, 30000, &m), 2);
    assert_string_equal(m[0].id, "r1");
    assert_true(m[0].token > old_token);
    uint64_t new_token = m[0].token;

    /* The first relay wakes up: its marks change nothing. */
    assert_int_equal(acemq_outbox_mark_published(h1, "r1", old_token), ACEMQ_ESTALE);
    assert_non_null(strstr(acemq_outbox_errmsg(h1), "stale"));
    assert_int_equal(acemq_outbox_mark_failed(h1, "r1", old_token, "late"), ACEMQ_ESTALE);
    assert_int_equal(acemq_outbox_release(h1, "r1", old_token), ACEMQ_ESTALE);
    assert_int_equal(acemq_outbox_mark_published(h2, "r1", new_token), 0);
    /* Marked once: the same token again is stale too. */
    assert_int_equal(acemq_outbox_mark_published(h2, "r1", new_token), ACEMQ_ESTALE);
    assert_int_equal(acemq_outbox_mark_published(h2, "nope", 1), ACEMQ_ENOENT);
    acemq_outbox_close(h1);
    acemq_outbox_close(h2);
}

static void mark_published_batch_answers_each(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"p1", "p2", "p3"};
    add_committed(f, ids, NULL, 3);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 10, 30000, &m), 3);
    acemq_outbox_mark marks[] = {
        {"p1", m[0].token}, {"p2", m[1].token + 7}, {"missing", 1}, {"p3", m[2].token}};
    int status[4] = {99, 99, 99, 99};
    assert_int_equal(acemq_outbox_mark_published_batch(h, marks, 4, status), 0);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[1], ACEMQ_ESTALE);
    assert_int_equal(status[2], ACEMQ_ENOENT);
    assert_int_equal(status[3], 0);
    acemq_outbox_pending p;
    assert_int_equal(acemq_outbox_pending_count(h, &p), 0);
    assert_int_equal(p.claimed, 1); /* p2 still held */
    assert_int_equal(p.unclaimed, 0);
    acemq_outbox_close(h);
}

static void release_makes_due_at_once(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"rel"};
    add_committed(f, ids, NULL, 1);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 10, 30000, &m), 1);
    uint64_t t = m[0].token;
    assert_int_equal(acemq_outbox_release(h, "rel", t + 1), ACEMQ_ESTALE);
    assert_int_equal(acemq_outbox_release(h, "rel", t), 0);
    assert_int_equal(acemq_outbox_release(h, "rel", t), ACEMQ_ESTALE);
    assert_int_equal(acemq_outbox_mark_published(h, "rel", t), ACEMQ_ESTALE);
    assert_int_equal(claim(h, 10, 30000, &m), 1);
    assert_int_equal(m[0].attempts, 0); /* a release is not a failure */
    assert_true(m[0].token > t);
    acemq_outbox_close(h);
}

static void backoff_attempt_limit_dead_retry(void **state)
{
    outbox_fixture *f = *state;
    f->opts.max_attempts = 3;
    f->opts.backoff_base_ms = 1000;
    f->opts.backoff_max_ms = 1500;
    f->opts.jitter_percent = 20;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"flaky"};
    add_committed(f, ids, NULL, 1);
    const acemq_outbox_msg *m;

    /* First failure: due again between 800 ms (20% jitter) and 1000 ms. */
    assert_int_equal(claim(h, 1, 30000, &m), 1);
    assert_int_equal(acemq_outbox_mark_failed(h, "flaky", m[0].token, "NOT_FOUND - no exchange"),
                     0);
    advance(f, 799);
    assert_int_equal(claim(h, 1, 30000, &m), 0);
    advance(f, 201);
    assert_int_equal(claim(h, 1, 30000, &m), 1);
    assert_int_equal(m[0].attempts, 1);
    assert_string_equal(m[0].last_error, "NOT_FOUND - no exchange");

    /* Second failure: the delay doubles to 2000 ms, capped at 1500. */
    assert_int_equal(acemq_outbox_mark_failed(h, "flaky", m[0].token, "nack"), 0);
    advance(f, 1199);
    assert_int_equal(claim(h, 1, 30000, &m), 0);
    advance(f, 301);
    assert_int_equal(claim(h, 1, 30000, &m), 1);
    assert_int_equal(m[0].attempts, 2);

    /* Third failure reaches max_attempts: dead, never claimed again. */
    assert_int_equal(acemq_outbox_mark_failed(h, "flaky", m[0].token, "returned: NO_ROUTE"), 0);
    advance(f, 86400000);
    assert_int_equal(claim(h, 1, 30000, &m), 0);
    acemq_outbox_pending p;
    assert_int_equal(acemq_outbox_pending_count(h, &p), 0);
    assert_int_equal(p.dead, 1);
    assert_int_equal(p.unclaimed, 0);
    assert_int_equal(p.oldest_age_ms, 0); /* dead records are not waiting */
    size_t n;
    assert_int_equal(acemq_outbox_list_dead(h, 10, &m, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(m[0].id, "flaky");
    assert_int_equal(m[0].attempts, 3);
    assert_string_equal(m[0].last_error, "returned: NO_ROUTE");
    assert_int_equal(outbox_rows(f), 1); /* kept for a person */

    /* A person mends the cause and retries it. */
    assert_int_equal(acemq_outbox_retry(h, "nope"), ACEMQ_ENOENT);
    assert_int_equal(acemq_outbox_retry(h, "flaky"), 0);
    assert_int_equal(acemq_outbox_retry(h, "flaky"), ACEMQ_ENOENT); /* no longer dead */
    assert_int_equal(claim(h, 1, 30000, &m), 1);
    assert_int_equal(m[0].attempts, 0);
    assert_int_equal(acemq_outbox_mark_published(h, "flaky", m[0].token), 0);
    acemq_outbox_close(h);
}

static void long_reason_is_cut(void **state)
{
    outbox_fixture *f = *state;
    f->opts.max_attempts = 1;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"wordy"};
    add_committed(f, ids, NULL, 1);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 1, 30000, &m), 1);
    char reason[3000];
    memset(reason, 'e', sizeof reason - 1);
    reason[sizeof reason - 1] = '\0';
    assert_int_equal(acemq_outbox_mark_failed(h, "wordy", m[0].token, reason), 0);
    size_t n;
    assert_int_equal(acemq_outbox_list_dead(h, 10, &m, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(strlen(m[0].last_error), ACEMQ_OUTBOX_ERROR_MAX);
    acemq_outbox_close(h);
}

static void purge_keeps_what_is_young(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"old", "young", "waiting"};
    add_committed(f, ids, NULL, 3);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 1, 30000, &m), 1);
    assert_int_equal(acemq_outbox_mark_published(h, "old", m[0].token), 0);
    advance(f, 3600000);
    assert_int_equal(claim(h, 1, 30000, &m), 1);
    assert_int_equal(acemq_outbox_mark_published(h, "young", m[0].token), 0);
    uint64_t purged = 99;
    assert_int_equal(acemq_outbox_purge(h, 3600000, &purged), 0);
    assert_int_equal(purged, 1); /* "old" only: published exactly an hour ago */
    assert_int_equal(acemq_outbox_purge(h, 3600000, &purged), 0);
    assert_int_equal(purged, 0);
    assert_int_equal(acemq_outbox_purge(h, 0, &purged), 0);
    assert_int_equal(purged, 1);         /* "young" */
    assert_int_equal(outbox_rows(f), 1); /* "waiting" is never purged */
    acemq_outbox_close(h);
}

/* A purge goes in batches (here of 4, so that there are many), each its own
 * transaction, and still deletes every record published long enough ago
 * and nothing else: not the pending, dead or young ones between them, nor
 * any across a gap in seq. 40 records, in seq order by tens: 3 pending
 * (i % 10 == 3), dead (7), published young (9), the rest published long
 * ago; then p12..p17 deleted, a gap. */
static void purge_in_batches_misses_nothing(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    char names[40][8];
    const char *ids[40];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "p%02d", i);
        ids[i] = names[i];
    }
    add_committed(f, ids, NULL, 40);
    outbox_sql(f, NULL,
               "UPDATE acemq_outbox SET state = 1, published_at = 1000"
               " WHERE id NOT LIKE '%3' AND id NOT LIKE '%7' AND id NOT LIKE '%9'");
    outbox_sql(f, NULL, "UPDATE acemq_outbox SET state = 2 WHERE id LIKE '%7'");
    /* The fixture's clock reads 1,000,000,000: published just now. */
    outbox_sql(f, NULL,
               "UPDATE acemq_outbox SET state = 1, published_at = 1000000000 WHERE id LIKE '%9'");
    outbox_sql(f, NULL, "DELETE FROM acemq_outbox WHERE id BETWEEN 'p12' AND 'p17'");
    long old = outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE published_at = 1000");
    assert_int_equal(old, 40 - 12 - 4); /* 12 of the 40 not old, 4 of the gap's 6 old */
    /* One batch stays within its limit (one DELETE of them all would not). */
    int64_t cursor = 0;
    uint64_t first = 0;
    int64_t now = acemq_manual_clock_get(f->clock)->now_ms(acemq_manual_clock_get(f->clock)->ctx);
    assert_int_equal(h->methods->purge_batch(h, now, 3600000, 4, &cursor, &first), 0);
    assert_true(first >= 1 && first <= 4);
    uint64_t purged = 0;
    assert_int_equal(acemq__outbox_purge_batched(h, 3600000, 0, &purged), ACEMQ_EINVAL);
    assert_int_equal(acemq__outbox_purge_batched(h, 3600000, 4, &purged), 0);
    assert_int_equal(first + purged, old);
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE state = 1"), 4);
    /* p13 and p17 went with the gap. */
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE state = 0"), 3);
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE state = 2"), 3);
    assert_int_equal(outbox_rows(f), 10);
    acemq_outbox_close(h);
}

static void delete_on_publish(void **state)
{
    outbox_fixture *f = *state;
    f->opts.delete_on_publish = 1;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"d1", "d2"};
    add_committed(f, ids, NULL, 2);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 10, 30000, &m), 2);
    uint64_t t1 = m[0].token, t2 = m[1].token;
    assert_int_equal(acemq_outbox_mark_published(h, "d1", t1), 0);
    assert_int_equal(outbox_rows(f), 1);
    assert_int_equal(acemq_outbox_mark_published(h, "d1", t1), ACEMQ_ENOENT);
    assert_int_equal(acemq_outbox_mark_published(h, "d2", t2 + 1), ACEMQ_ESTALE);
    assert_int_equal(outbox_rows(f), 1);
    acemq_outbox_close(h);
}

static void ordering_keys_hold_back_only_their_own(void **state)
{
    outbox_fixture *f = *state;
    f->opts.jitter_percent = 0;
    f->opts.backoff_base_ms = 1000;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"A1", "B1", "A2", "B2", "A3", "free"};
    const char *keys[] = {"A", "B", "A", "B", "A", NULL};
    add_committed(f, ids, keys, 6);
    const acemq_outbox_msg *m;

    /* One in flight per key. */
    assert_int_equal(claim(h, 10, 30000, &m), 3);
    assert_string_equal(m[0].id, "A1");
    assert_string_equal(m[1].id, "B1");
    assert_string_equal(m[2].id, "free");
    uint64_t a1 = m[0].token, b1 = m[1].token;
    assert_int_equal(acemq_outbox_mark_published(h, "free", m[2].token), 0);

    /* A1 fails: A waits for it; B goes on. */
    assert_int_equal(acemq_outbox_mark_failed(h, "A1", a1, "nack"), 0);
    assert_int_equal(acemq_outbox_mark_published(h, "B1", b1), 0);
    assert_int_equal(claim(h, 10, 30000, &m), 1);
    assert_string_equal(m[0].id, "B2");
    assert_int_equal(acemq_outbox_mark_published(h, "B2", m[0].token), 0);
    assert_int_equal(claim(h, 10, 30000, &m), 0); /* A2 does not overtake A1 */

    /* After the back-off, A's records go out one by one, in order. */
    advance(f, 1000);
    const char *expect[] = {"A1", "A2", "A3"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(claim(h, 10, 30000, &m), 1);
        assert_string_equal(m[0].id, expect[i]);
        assert_int_equal(acemq_outbox_mark_published(h, m[0].id, m[0].token), 0);
    }
    assert_int_equal(claim(h, 10, 30000, &m), 0);
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
static void claim_runs_takes_a_keys_records_together(void **state)
{
    outbox_fixture *f = *state;
    f->opts.jitter_percent = 0;
    f->opts.backoff_base_ms = 1000;
    f->opts.max_attempts = 2;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"A1", "B1", "A2", "C1", "B2", "A3", "free", "C2"};
    const char *keys[] = {"A", "B", "A", "C", "B", "A", NULL, "C"};
    add_committed(f, ids, keys, 8);
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
    advance(f, 1000);
    assert_int_equal(claim_runs(h, 10, 30000, &m), 3);
    expect_ids(m, 3, (const char *const[]){"A1", "A2", "A3"});
    /* A1 fails for good: dead, it holds back A2 and A3 for a person. */
    assert_int_equal(acemq_outbox_mark_failed(h, "A1", m[0].token, "poison"), 0);
    assert_int_equal(acemq_outbox_release(h, "A2", m[1].token), 0);
    assert_int_equal(acemq_outbox_release(h, "A3", m[2].token), 0);
    advance(f, 86400000);
    size_t n = claim_runs(h, 10, 30000, &m); /* the others' leases ran out meanwhile */
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++)
        assert_true(m[i].id[0] != 'A');
    acemq_outbox_close(h);
}

static void dead_record_holds_back_its_key(void **state)
{
    outbox_fixture *f = *state;
    f->opts.max_attempts = 1;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"K1", "K2", "L1"};
    const char *keys[] = {"K", "K", "L"};
    add_committed(f, ids, keys, 3);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 10, 30000, &m), 2); /* K1, L1 */
    assert_string_equal(m[0].id, "K1");
    assert_int_equal(acemq_outbox_mark_failed(h, "K1", m[0].token, "poison"), 0);
    assert_int_equal(acemq_outbox_mark_published(h, "L1", m[1].token), 0);
    advance(f, 86400000);
    assert_int_equal(claim(h, 10, 30000, &m), 0); /* K2 waits behind dead K1 */
    assert_int_equal(acemq_outbox_retry(h, "K1"), 0);
    assert_int_equal(claim(h, 10, 30000, &m), 1);
    assert_string_equal(m[0].id, "K1");
    acemq_outbox_close(h);
}

static void pending_counts_and_oldest_age(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    acemq_outbox_pending p;
    assert_int_equal(acemq_outbox_pending_count(h, &p), 0);
    assert_int_equal(p.unclaimed + p.claimed + p.dead, 0);
    assert_int_equal(p.oldest_age_ms, 0);
    const char *ids[] = {"w1", "w2", "w3"};
    add_committed(f, ids, NULL, 3);
    advance(f, 5000);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 1, 10000, &m), 1);
    assert_int_equal(acemq_outbox_pending_count(h, &p), 0);
    assert_int_equal(p.unclaimed, 2);
    assert_int_equal(p.claimed, 1);
    assert_int_equal(p.dead, 0);
    assert_int_equal(p.oldest_age_ms, 5000);
    advance(f, 10000); /* the lease ran out: waiting, unclaimed again */
    assert_int_equal(acemq_outbox_pending_count(h, &p), 0);
    assert_int_equal(p.unclaimed, 3);
    assert_int_equal(p.claimed, 0);
    acemq_outbox_close(h);
}

static void bad_records_are_refused_and_write_nothing(void **state)
{
    outbox_fixture *f = *state;
    f->add_opts.max_body = 16;
    char long_text[ACEMQ_OUTBOX_ID_MAX + 2];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    char body[17] = "0123456789abcdef";
    acemq_outbox_header dup[] = {{"a", "1"}, {"a", "2"}};
    acemq_outbox_header noname[] = {{NULL, "1"}};

    outbox_sql(f, NULL, "BEGIN");
    acemq_outbox_record r = rec("ok", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);

    assert_int_equal(outbox_add(f, NULL, NULL, NULL), ACEMQ_EINVAL);
    r = rec("a", NULL, "x");
    r.destination = NULL;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "destination"));
    r = rec("a", NULL, "x");
    r.routing_key = NULL;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r = rec(long_text, NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "longer than"));
    r = rec("", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r = rec("a", NULL, "x");
    r.destination = long_text;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r = rec("a", "", "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r = rec("a", NULL, NULL);
    r.body = body;
    r.body_len = 17;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_ERANGE);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "over the maximum of 16"));
    r.body = NULL;
    r.body_len = 3;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r = rec("a\xff\xfe", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "UTF-8"));
    r = rec("a", NULL, "x");
    r.headers = dup;
    r.n_headers = 2;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r.headers = noname;
    r.n_headers = 1;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r.headers = NULL;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);
    r.n_headers = ACEMQ_OUTBOX_HEADERS_MAX + 1;
    r.headers = dup;
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EINVAL);

    /* A duplicate id is refused, and the transaction is still good. */
    r = rec("ok", NULL, "again");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_EEXIST);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "'ok' exists"));
    r = rec("ok2", NULL, "y");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);
    outbox_sql(f, NULL, "COMMIT");
    assert_int_equal(outbox_rows(f), 2);
}

static void bad_calls_get_einval(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    const acemq_outbox_msg *m;
    size_t n;
    assert_int_equal(acemq_outbox_claim_batch(h, 0, 1000, &m, &n), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_claim_batch(h, 10, 0, &m, &n), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_claim_batch(h, 10, 1000, NULL, &n), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_claim_batch(NULL, 10, 1000, &m, &n), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_mark_published(h, NULL, 1), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_mark_published(h, "", 1), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_mark_failed(h, NULL, 1, "x"), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_purge(h, -1, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_wait(h, -1), ACEMQ_EINVAL);
    assert_int_equal(acemq_outbox_pending_count(h, NULL), ACEMQ_EINVAL);
    acemq_outbox_close(h);

    acemq_outbox_options o = f->opts;
    o.max_attempts = 0;
    assert_int_equal(acemq_outbox_open(&h, f->url, &o), ACEMQ_EINVAL);
    assert_null(h);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "max_attempts"));
    assert_int_equal(acemq_outbox_open(&h, "kafka://x", &f->opts), ACEMQ_EURL);
    acemq_outbox_close(NULL);
}

/* An outbox that cannot be opened says why, and hands back no handle:
 * SQLite without a file, with a parameter it does not know, in a directory
 * that does not exist; PostgreSQL where no server listens. */
static void unopenable_urls_say_why(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = NULL;
    if (f->pg) {
        assert_int_equal(acemq_outbox_open(&h, "postgres://acemq@127.0.0.1:1/acemq", &f->opts),
                         ACEMQ_EIO);
        assert_null(h);
        assert_non_null(strstr(acemq_outbox_errmsg(NULL), "postgres: connecting"));
        return;
    }
    assert_int_equal(acemq_outbox_open(&h, "sqlite:", &f->opts), ACEMQ_EURL);
    assert_null(h);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "names no file"));
    char url[1100];
    snprintf(url, sizeof url, "%s?journal=off", f->url);
    assert_int_equal(acemq_outbox_open(&h, url, &f->opts), ACEMQ_EURL);
    assert_null(h);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "'journal'"));
    const char *missing = "sqlite:/nonexistent-acemq-dir/sub/outbox.db";
    assert_int_equal(acemq_outbox_open(&h, missing, &f->opts), ACEMQ_EIO);
    assert_null(h);
    assert_non_null(
        strstr(acemq_outbox_errmsg(NULL), "opening /nonexistent-acemq-dir/sub/outbox.db"));
    /* with the system's reason, which SQLite kept */
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), strerror(ENOENT)));
}

static void a_slow_writer_is_not_skipped(void **state)
{
    /* The hazard of draining by "everything after the last id seen": a
     * transaction that took its sequence number early and commits late would
     * be passed over for good. PostgreSQL commits transactions in any order;
     * SQLite has one writer at a time, so there the late commit cannot
     * happen, and the case shows the same rows in its own order. */
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    void *slow = outbox_fixture_connect(f);
    const acemq_outbox_msg *m;
    if (f->pg) {
        outbox_sql(f, slow, "BEGIN");
        acemq_outbox_record r = rec("slow", NULL, "x");
        assert_int_equal(outbox_add(f, slow, &r, NULL), 0); /* takes the lower seq */
        const char *ids[] = {"fast1", "fast2"};
        add_committed(f, ids, NULL, 2);
        advance(f, 2000);
        assert_int_equal(claim(h, 10, 30000, &m), 2);
        assert_string_equal(m[0].id, "fast1");
        assert_int_equal(acemq_outbox_mark_published(h, "fast1", m[0].token), 0);
        assert_int_equal(acemq_outbox_mark_published(h, "fast2", m[1].token), 0);
        outbox_sql(f, slow, "COMMIT"); /* two seconds later */
    } else {
        const char *ids[] = {"fast1", "fast2"};
        add_committed(f, ids, NULL, 2);
        assert_int_equal(claim(h, 10, 30000, &m), 2);
        assert_int_equal(acemq_outbox_mark_published(h, "fast1", m[0].token), 0);
        outbox_sql(f, slow, "BEGIN IMMEDIATE");
        acemq_outbox_record r = rec("slow", NULL, "x");
        assert_int_equal(outbox_add(f, slow, &r, NULL), 0);
        advance(f, 2000);
        outbox_sql(f, slow, "COMMIT");
    }
    assert_int_equal(claim(h, 10, 30000, &m), 1);
    assert_string_equal(m[0].id, "slow");
    outbox_fixture_disconnect(f, slow);
    acemq_outbox_close(h);
}

/* Holds SQLite's write lock on a connection of its own for a moment, then
 * lets it go: `held` is set while it has it. */
typedef struct lock_holder {
    const char *path;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int held;
} lock_holder;

static void *hold_write_lock(void *arg)
{
    lock_holder *l = arg;
    sqlite3 *db = NULL;
    if (sqlite3_open(l->path, &db) != SQLITE_OK ||
        sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        abort();
    pthread_mutex_lock(&l->mu);
    l->held = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    struct timespec ts = {0, 30000000L};
    nanosleep(&ts, NULL);
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) abort();
    sqlite3_close(db);
    return NULL;
}

/* A lock another connection holds costs a relay no more than its budget,
 * and leaves nothing half-done. SQLite: the caller's transaction holds the
 * one write lock; a claim or a mark waits busy_timeout_ms (0: not at all),
 * then fails with EBUSY and SQLite's words, the record as it was, and both
 * go through once the lock is let go. PostgreSQL: a row the caller holds
 * locked is passed over at once (SKIP LOCKED), the others are claimed. */
static void a_held_lock_costs_only_the_budget(void **state)
{
    outbox_fixture *f = *state;
    const char *ids[] = {"first", "second"};
    add_committed(f, ids, NULL, 2);
    void *other = outbox_fixture_connect(f);
    const acemq_outbox_msg *m;
    if (f->pg) {
        acemq_outbox *h = outbox_fixture_open(f);
        outbox_sql(f, other, "BEGIN");
        outbox_sql(f, other, "SELECT 1 FROM acemq_outbox WHERE id = 'first' FOR UPDATE");
        assert_int_equal(claim(h, 10, 30000, &m), 1);
        assert_string_equal(m[0].id, "second");
        outbox_sql(f, other, "COMMIT");
        assert_int_equal(claim(h, 10, 30000, &m), 1);
        assert_string_equal(m[0].id, "first");
        acemq_outbox_close(h);
        outbox_fixture_disconnect(f, other);
        return;
    }
    f->opts.busy_timeout_ms = 0;
    acemq_outbox *hasty = outbox_fixture_open(f);
    f->opts.busy_timeout_ms = 20;
    acemq_outbox *patient = outbox_fixture_open(f);
    assert_int_equal(claim(patient, 1, 30000, &m), 1);
    assert_string_equal(m[0].id, "first");
    uint64_t token = m[0].token;
    outbox_sql(f, other, "BEGIN IMMEDIATE");
    const acemq_outbox_msg *none = NULL;
    size_t n = 99;
    assert_int_equal(acemq_outbox_claim_batch(hasty, 10, 30000, &none, &n), ACEMQ_EBUSY);
    assert_non_null(strstr(acemq_outbox_errmsg(hasty), "database is locked"));
    assert_int_equal(n, 0);
    assert_int_equal(acemq_outbox_claim_batch(patient, 10, 30000, &none, &n), ACEMQ_EBUSY);
    assert_int_equal(acemq_outbox_mark_published(patient, "first", token), ACEMQ_EBUSY);
    outbox_sql(f, other, "COMMIT");
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE state = 0"), 2);
    assert_int_equal(acemq_outbox_mark_published(patient, "first", token), 0);
    /* Within the budget the wait ends in success: a lock let go while the
     * new handle's open and first claim wait for it. With SQLite's default,
     * no busy handler, the open fails at once with EBUSY. */
    lock_holder l = {.path = f->url + strlen("sqlite:"), .held = 0};
    pthread_mutex_init(&l.mu, NULL);
    pthread_cond_init(&l.cv, NULL);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, hold_write_lock, &l), 0);
    pthread_mutex_lock(&l.mu);
    while (!l.held)
        pthread_cond_wait(&l.cv, &l.mu);
    pthread_mutex_unlock(&l.mu);
    f->opts.busy_timeout_ms = 60000;
    acemq_outbox *waiting = outbox_fixture_open(f);
    assert_int_equal(claim(waiting, 10, 30000, &m), 1);
    assert_string_equal(m[0].id, "second");
    pthread_join(t, NULL);
    pthread_cond_destroy(&l.cv);
    pthread_mutex_destroy(&l.mu);
    acemq_outbox_close(waiting);
    acemq_outbox_close(patient);
    acemq_outbox_close(hasty);
    outbox_fixture_disconnect(f, other);
}

static void wait_wakes_on_a_commit(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    /* PostgreSQL's NOTIFY channel is shared by the whole database, and other
     * suites may be inserting at once: only SQLite can promise silence. A
     * PostgreSQL handle's first wait starts it listening and answers 1 at
     * once ("look again": a commit before it sent nothing it could hear). */
    assert_int_equal(acemq_outbox_wait(h, 0), f->pg ? 1 : 0);
    const char *ids[] = {"wake"};
    add_committed(f, ids, NULL, 1);
    /* A generous bound, not a timing assertion: the wake-up comes at once. */
    assert_int_equal(acemq_outbox_wait(h, 10000), 1);
    if (!f->pg) assert_int_equal(acemq_outbox_wait(h, 0), 0);
    acemq_outbox_close(h);
}

/* SQLite only. An idle wait sleeps on the file's writes (file_watch.h) and
 * reads PRAGMA data_version every 100 ms as a safety net, where it used to
 * read it every 5 ms: a wait of 500 ms that nothing interrupts reads it a
 * handful of times, not a hundred (a slow machine reads it less often, never
 * more). A commit from another connection then still wakes it. */
static void an_idle_wait_sleeps_until_a_write(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    assert_int_equal(acemq_outbox_wait(h, 0), 0);
    int watching = 0;
    uint64_t before = acemq__sqlite_outbox_wait_reads(h, &watching);
    assert_int_equal(watching, 1);
    assert_int_equal(acemq_outbox_wait(h, 500), 0);
    uint64_t reads = acemq__sqlite_outbox_wait_reads(h, &watching) - before;
    assert_int_equal(watching, 1);
    assert_true(reads >= 1);
    assert_true(reads <= 10);
    const char *ids[] = {"after-the-sleep"};
    add_committed(f, ids, NULL, 1);
    assert_int_equal(acemq_outbox_wait(h, 10000), 1);
    acemq_outbox_close(h);
}

static void add_before_the_schema_exists(void **state)
{
    outbox_fixture *f = *state;
    outbox_sql(f, NULL, "DROP TABLE acemq_outbox");
    outbox_sql(f, NULL, "BEGIN");
    acemq_outbox_record r = rec("early", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), ACEMQ_ESCHEMA);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "acemq_outbox_open"));
    outbox_sql(f, NULL, "ROLLBACK");
}

static void newer_schema_is_refused(void **state)
{
    outbox_fixture *f = *state;
    outbox_sql(f, NULL, "UPDATE acemq_schema_version SET version = 99 WHERE component = 'outbox'");
    acemq_outbox *h = NULL;
    assert_int_equal(acemq_outbox_open(&h, f->url, &f->opts), ACEMQ_ESCHEMA);
    assert_null(h);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "newer"));
}

static void default_clock_is_the_database_s(void **state)
{
    /* Without an injected clock, PostgreSQL leases run on clock_timestamp()
     * and SQLite's on the machine's clock: a claim's lease must end between
     * now and now + lease as the database sees it. Bounds, not timings. */
    outbox_fixture *f = *state;
    f->opts.clock = NULL;
    f->add_opts.clock = NULL;
    acemq_outbox *h1 = outbox_fixture_open(f), *h2 = outbox_fixture_open(f);
    const char *ids[] = {"real-time"};
    add_committed(f, ids, NULL, 1);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h1, 10, 600000, &m), 1);
    uint64_t token = m[0].token;
    assert_int_equal(claim(h2, 10, 600000, &m), 0); /* held: the lease is in the future */
    const char *now_sql = f->pg ? "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
                                : "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT lease_until - %s FROM acemq_outbox", now_sql);
    long long left = outbox_scalar(f, sql);
    assert_true(left > 0 && left <= 600000);
    snprintf(sql, sizeof sql, "SELECT %s - created_at FROM acemq_outbox", now_sql);
    long long age = outbox_scalar(f, sql);
    assert_true(age >= -5 && age < 3600000);
    assert_int_equal(acemq_outbox_mark_failed(h1, "real-time", token, "nack"), 0);
    snprintf(sql, sizeof sql, "SELECT next_attempt_at - %s FROM acemq_outbox", now_sql);
    long long backoff = outbox_scalar(f, sql);
    assert_true(backoff > 0 && backoff <= 1000); /* the first delay: base 1 s less jitter */
    assert_int_equal(claim(h2, 10, 600000, &m), 0);
    acemq_outbox_close(h1);
    acemq_outbox_close(h2);
}

/* opts.synchronous reaches the handle's own session: SQLite's PRAGMA
 * synchronous; on PostgreSQL synchronous_commit stays as the server has it
 * (on) for FULL and is off below it. The handle still claims and marks. */
static void synchronous_reaches_the_session(void **state)
{
    outbox_fixture *f = *state;
    static const char *const sqlite_want[] = {"0", "1", "2"};
    static const char *const pg_want[] = {"off", "off", "on"};
    for (int mode = ACEMQ_SYNC_OFF; mode <= ACEMQ_SYNC_FULL; mode++) {
        f->opts.synchronous = mode;
        acemq_outbox *h = outbox_fixture_open(f);
        char got[32] = "";
        int rc = use_pg ? acemq__pg_outbox_sync_setting(h, got, sizeof got)
                        : acemq__sqlite_outbox_sync_setting(h, got, sizeof got);
        assert_int_equal(rc, 0);
        assert_string_equal(got, use_pg ? pg_want[mode] : sqlite_want[mode]);
        acemq_outbox_close(h);
    }
    outbox_sql(f, NULL, "BEGIN");
    acemq_outbox_record r = rec("relaxed", NULL, "x");
    assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);
    outbox_sql(f, NULL, "COMMIT");
    f->opts.synchronous = ACEMQ_SYNC_NORMAL;
    acemq_outbox *h = outbox_fixture_open(f);
    const acemq_outbox_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(acemq_outbox_claim_batch(h, 10, 60000, &m, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(m[0].id, "relaxed");
    assert_int_equal(acemq_outbox_mark_published(h, m[0].id, m[0].token), 0);
    acemq_outbox_close(h);
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE state = 1"), 1);
}

/* PostgreSQL only. A claim changes no indexed column, and the table is made
 * with fillfactor 50, so every claimed row's new version stays on its page
 * (a HOT update, no new index entries: half the claim's cost). With the
 * default fillfactor of 100 the pages are full and the claimed rows move. */
static void claims_stay_on_their_page(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f); /* makes the table */
    char body[201];
    memset(body, 'x', 200);
    body[200] = '\0';
    outbox_sql(f, NULL, "BEGIN");
    for (int i = 0; i < 40; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%02d", i);
        acemq_outbox_record r = rec(id, NULL, body);
        assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);
    }
    outbox_sql(f, NULL, "COMMIT");
    outbox_sql(f, NULL,
               "CREATE TABLE pages AS SELECT id, (ctid::text::point)[0]::int AS page"
               " FROM acemq_outbox");
    assert_true(outbox_scalar(f, "SELECT count(DISTINCT page) FROM pages") >= 3);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 40, 60000, &m), 40);
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM acemq_outbox o JOIN pages p USING (id)"
                                      " WHERE (o.ctid::text::point)[0]::int <> p.page"),
                     0);
    acemq_outbox_close(h);
}

/* PostgreSQL only. A mark's new version is not HOT, so it pays for an entry
 * in every index that holds the row, and for the comparisons on the way in.
 * id and ordering_key are COLLATE "C" whatever the database's collation
 * (under en_US.UTF-8 a mark cost an eighth more), and there is no index on
 * published_at, which none of acemq's PostgreSQL queries reads. A mark's
 * lookup by plain text values still goes through the id index. */
static void marks_pay_for_no_index_they_do_not_need(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f); /* makes the table */
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM pg_attribute a"
                                      " JOIN pg_collation c ON c.oid = a.attcollation"
                                      " WHERE a.attrelid = 'acemq_outbox'::regclass"
                                      " AND a.attname IN ('id', 'ordering_key')"
                                      " AND c.collname = 'C'"),
                     2);
    /* The primary key, id's unique index, due, key and dead. */
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM pg_index"
                                      " WHERE indrelid = 'acemq_outbox'::regclass"),
                     5);
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM pg_index i JOIN pg_attribute a"
                                      " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
                                      " WHERE i.indrelid = 'acemq_outbox'::regclass"
                                      " AND a.attname = 'published_at'"),
                     0);
    outbox_sql(f, NULL,
               "CREATE FUNCTION pg_temp.mark_uses_id_index() RETURNS bigint LANGUAGE plpgsql AS $$"
               "DECLARE l text; n bigint := 0; BEGIN SET LOCAL enable_seqscan = off;"
               " FOR l IN EXPLAIN (COSTS OFF) SELECT o.seq FROM acemq_outbox o"
               "  WHERE (o.id, o.token) IN (SELECT m.id, m.token"
               "  FROM unnest('{a,b}'::text[], '{1,2}'::bigint[]) AS m(id, token)) LOOP"
               "  IF l LIKE '%acemq_outbox_id_key%' THEN n := n + 1; END IF;"
               " END LOOP; RETURN n; END$$");
    assert_int_equal(outbox_scalar(f, "SELECT pg_temp.mark_uses_id_index()"), 1);
    acemq_outbox_close(h);
}

/* PostgreSQL only. A handle listens for NOTIFY only once it waits: every
 * commit wakes each listening session, and libpq keeps the notifications of
 * a session that never asks for them. The relay's marking, claiming and
 * counting handles never wait; before, each was woken once per commit and
 * held every notification it had been sent. */
static void only_a_waiting_handle_listens(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    int listening = -1;
    assert_int_equal(acemq__pg_outbox_listening(h, &listening), 0);
    assert_int_equal(listening, 0);
    const char *ids[] = {"unheard"};
    add_committed(f, ids, NULL, 1);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 10, 60000, &m), 1);
    assert_int_equal(acemq_outbox_mark_published(h, m[0].id, m[0].token), 0);
    assert_int_equal(acemq__pg_outbox_listening(h, &listening), 0);
    assert_int_equal(listening, 0);
    assert_int_equal(acemq_outbox_wait(h, 0), 1); /* starts listening: "look again" */
    assert_int_equal(acemq__pg_outbox_listening(h, &listening), 0);
    assert_int_equal(listening, 1);
    const char *later[] = {"heard"};
    add_committed(f, later, NULL, 1);
    assert_int_equal(acemq_outbox_wait(h, 10000), 1);
    acemq_outbox_close(h);
}

/* PostgreSQL only. The server ends a handle's connection (as a restart, a
 * failover or a network cut would). The call that finds it gone answers
 * ACEMQ_EIO, the next one connects again: its statements prepared anew, so
 * claims and marks work, and its LISTEN renewed, so a commit still wakes
 * acemq_outbox_wait (else it would sleep out its 10 s and answer 0). */
static void a_lost_connection_comes_back(void **state)
{
    outbox_fixture *f = *state;
    char url[1200];
    outbox_fixture_tagged_url(f, "victim", url, sizeof url);
    acemq_outbox *h = NULL;
    assert_int_equal(acemq_outbox_open(&h, url, &f->opts), 0);
    assert_int_equal(acemq_outbox_wait(h, 0), 1); /* listening from here on */
    const char *first[] = {"before"};
    add_committed(f, first, NULL, 1);
    const acemq_outbox_msg *m;
    assert_int_equal(claim(h, 10, 60000, &m), 1);
    char id[64];
    snprintf(id, sizeof id, "%s", m[0].id);
    uint64_t token = m[0].token;

    assert_int_equal(outbox_fixture_cut(f, "victim"), 1);
    acemq_outbox_pending p;
    assert_int_equal(acemq_outbox_pending_count(h, &p), ACEMQ_EIO);
    assert_non_null(strstr(acemq_outbox_errmsg(h), "postgres"));
    assert_int_equal(acemq_outbox_pending_count(h, &p), 0);
    assert_int_equal(p.claimed, 1);
    assert_int_equal(acemq_outbox_mark_published(h, id, token), 0);

    const char *later[] = {"after"};
    add_committed(f, later, NULL, 1);
    assert_int_equal(acemq_outbox_wait(h, 10000), 1);
    assert_int_equal(claim(h, 10, 60000, &m), 1);
    assert_string_equal(m[0].id, "after");
    acemq_outbox_close(h);
}

int main(int argc, char **argv)
{
    use_pg = outbox_backend_from_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(rollback_is_never_claimed, setup, teardown),
        cmocka_unit_test_setup_teardown(add_without_transaction_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(oldest_first, setup, teardown),
        cmocka_unit_test_setup_teardown(fields_come_back_as_written, setup, teardown),
        cmocka_unit_test(uuid7_ids_sort_in_order),
        cmocka_unit_test_setup_teardown(lease_expiry_hands_over_and_fences, setup, teardown),
        cmocka_unit_test_setup_teardown(mark_published_batch_answers_each, setup, teardown),
        cmocka_unit_test_setup_teardown(release_makes_due_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(backoff_attempt_limit_dead_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(long_reason_is_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(purge_keeps_what_is_young, setup, teardown),
        cmocka_unit_test_setup_teardown(purge_in_batches_misses_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(delete_on_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(ordering_keys_hold_back_only_their_own, setup, teardown),
        cmocka_unit_test_setup_teardown(claim_runs_takes_a_keys_records_together, setup, teardown),
        cmocka_unit_test_setup_teardown(dead_record_holds_back_its_key, setup, teardown),
        cmocka_unit_test_setup_teardown(pending_counts_and_oldest_age, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_records_are_refused_and_write_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_calls_get_einval, setup, teardown),
        cmocka_unit_test_setup_teardown(unopenable_urls_say_why, setup, teardown),
        cmocka_unit_test_setup_teardown(a_slow_writer_is_not_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(a_held_lock_costs_only_the_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(wait_wakes_on_a_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(add_before_the_schema_exists, setup, teardown),
        cmocka_unit_test_setup_teardown(newer_schema_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(default_clock_is_the_database_s, setup, teardown),
        cmocka_unit_test_setup_teardown(synchronous_reaches_the_session, setup, teardown),
    };
    const struct CMUnitTest sqlite_tests[] = {
        cmocka_unit_test_setup_teardown(an_idle_wait_sleeps_until_a_write, setup, teardown),
    };
    const struct CMUnitTest postgres_tests[] = {
        cmocka_unit_test_setup_teardown(claims_stay_on_their_page, setup, teardown),
        cmocka_unit_test_setup_teardown(marks_pay_for_no_index_they_do_not_need, setup, teardown),
        cmocka_unit_test_setup_teardown(a_lost_connection_comes_back, setup, teardown),
        cmocka_unit_test_setup_teardown(only_a_waiting_handle_listens, setup, teardown),
    };
    int failed = cmocka_run_group_tests_name(use_pg ? "outbox conformance (postgres)"
                                                    : "outbox conformance (sqlite)",
                                             tests, NULL, NULL);
    if (use_pg)
        failed += cmocka_run_group_tests_name("outbox on postgres", postgres_tests, NULL, NULL);
    else
        failed += cmocka_run_group_tests_name("outbox on sqlite", sqlite_tests, NULL, NULL);
    return failed;
}
