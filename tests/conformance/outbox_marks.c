/* outbox_marks.c — after a claim: leases that run out hand the record over
 * and fence the old holder, marks answered one by one, release, back-off up
 * to the attempt limit (then dead, then retried), a long reason cut, and the
 * purge of what was published, in batches, keeping what is young. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "conformance/outbox_fixture.h"
#include "outbox/outbox_backend.h"
#include "outbox/outbox_internal.h"
#include "conformance/outbox_cases.h"

void lease_expiry_hands_over_and_fences(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h1 = outbox_fixture_open(f), *h2 = outbox_fixture_open(f);
    const char *ids[] = {"r1", "r2"};
    outbox_add_committed(f, ids, NULL, 2);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h1, 10, 30000, &m), 2);
    uint64_t old_token = m[0].token;
    assert_int_equal(outbox_claim(h2, 10, 30000, &m), 0); /* held under lease */
    outbox_advance(f, 29999);
    assert_int_equal(outbox_claim(h2, 10, 30000, &m), 0);
    outbox_advance(f, 1); /* the lease has run out: the relay that held it is presumed dead */
    assert_int_equal(outbox_claim(h2, 10, 30000, &m), 2);
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

void mark_published_batch_answers_each(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"p1", "p2", "p3"};
    outbox_add_committed(f, ids, NULL, 3);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 3);
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

void release_makes_due_at_once(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"rel"};
    outbox_add_committed(f, ids, NULL, 1);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 1);
    uint64_t t = m[0].token;
    assert_int_equal(acemq_outbox_release(h, "rel", t + 1), ACEMQ_ESTALE);
    assert_int_equal(acemq_outbox_release(h, "rel", t), 0);
    assert_int_equal(acemq_outbox_release(h, "rel", t), ACEMQ_ESTALE);
    assert_int_equal(acemq_outbox_mark_published(h, "rel", t), ACEMQ_ESTALE);
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 1);
    assert_int_equal(m[0].attempts, 0); /* a release is not a failure */
    assert_true(m[0].token > t);
    acemq_outbox_close(h);
}

void backoff_attempt_limit_dead_retry(void **state)
{
    outbox_fixture *f = *state;
    f->opts.max_attempts = 3;
    f->opts.backoff_base_ms = 1000;
    f->opts.backoff_max_ms = 1500;
    f->opts.jitter_percent = 20;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"flaky"};
    outbox_add_committed(f, ids, NULL, 1);
    const acemq_outbox_msg *m;

    /* First failure: due again between 800 ms (20% jitter) and 1000 ms. */
    assert_int_equal(outbox_claim(h, 1, 30000, &m), 1);
    assert_int_equal(acemq_outbox_mark_failed(h, "flaky", m[0].token, "NOT_FOUND - no exchange"),
                     0);
    outbox_advance(f, 799);
    assert_int_equal(outbox_claim(h, 1, 30000, &m), 0);
    outbox_advance(f, 201);
    assert_int_equal(outbox_claim(h, 1, 30000, &m), 1);
    assert_int_equal(m[0].attempts, 1);
    assert_string_equal(m[0].last_error, "NOT_FOUND - no exchange");

    /* Second failure: the delay doubles to 2000 ms, capped at 1500. */
    assert_int_equal(acemq_outbox_mark_failed(h, "flaky", m[0].token, "nack"), 0);
    outbox_advance(f, 1199);
    assert_int_equal(outbox_claim(h, 1, 30000, &m), 0);
    outbox_advance(f, 301);
    assert_int_equal(outbox_claim(h, 1, 30000, &m), 1);
    assert_int_equal(m[0].attempts, 2);

    /* Third failure reaches max_attempts: dead, never claimed again. */
    assert_int_equal(acemq_outbox_mark_failed(h, "flaky", m[0].token, "returned: NO_ROUTE"), 0);
    outbox_advance(f, 86400000);
    assert_int_equal(outbox_claim(h, 1, 30000, &m), 0);
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
    assert_int_equal(outbox_claim(h, 1, 30000, &m), 1);
    assert_int_equal(m[0].attempts, 0);
    assert_int_equal(acemq_outbox_mark_published(h, "flaky", m[0].token), 0);
    acemq_outbox_close(h);
}

void long_reason_is_cut(void **state)
{
    outbox_fixture *f = *state;
    f->opts.max_attempts = 1;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"wordy"};
    outbox_add_committed(f, ids, NULL, 1);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 1, 30000, &m), 1);
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

void purge_keeps_what_is_young(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"old", "young", "waiting"};
    outbox_add_committed(f, ids, NULL, 3);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 1, 30000, &m), 1);
    assert_int_equal(acemq_outbox_mark_published(h, "old", m[0].token), 0);
    outbox_advance(f, 3600000);
    assert_int_equal(outbox_claim(h, 1, 30000, &m), 1);
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
void purge_in_batches_misses_nothing(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    char names[40][8];
    const char *ids[40];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "p%02d", i);
        ids[i] = names[i];
    }
    outbox_add_committed(f, ids, NULL, 40);
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

void delete_on_publish(void **state)
{
    outbox_fixture *f = *state;
    f->opts.delete_on_publish = 1;
    acemq_outbox *h = outbox_fixture_open(f);
    const char *ids[] = {"d1", "d2"};
    outbox_add_committed(f, ids, NULL, 2);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 10, 30000, &m), 2);
    uint64_t t1 = m[0].token, t2 = m[1].token;
    assert_int_equal(acemq_outbox_mark_published(h, "d1", t1), 0);
    assert_int_equal(outbox_rows(f), 1);
    assert_int_equal(acemq_outbox_mark_published(h, "d1", t1), ACEMQ_ENOENT);
    assert_int_equal(acemq_outbox_mark_published(h, "d2", t2 + 1), ACEMQ_ESTALE);
    assert_int_equal(outbox_rows(f), 1);
    acemq_outbox_close(h);
}
