/* test_fault_fiu.c — the library's main calls while libfiu fails malloc,
 * write, fsync, read (and send/recv) at random (fiu_faults.h), over SQLite
 * files and the in-process broker and store: no server is needed.
 *
 * Every call under faults must answer success or an error that a failed
 * system call may cause (ACEMQ_ENOMEM, ACEMQ_EIO, ACEMQ_EBACKEND) with a
 * message saying why; never crash, never leak (ASan's build checks), never
 * answer another error (a "duplicate", "stale token" or "no such table"
 * that is not true). Right after, with the faults off, the same call
 * succeeds, and the data agree with what the calls answered: a record is
 * whole or absent, an outbox add that failed inside the caller's transaction
 * leaves nothing after the caller's ROLLBACK, a confirmed id is never
 * claimed again, and whatever was committed is drained by the relay.
 *
 * Reproducible: the seed is printed (FIU_SEED reproduces a run) and each
 * test starts from its own seed derived from it; FIU_ITERATIONS sizes it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <unistd.h>

#include "acemq/acemq.h"
#include "acemq/relay.h"
#include "acemq/sqlite.h"
#include "backends/test_control.h"
#include "fault/fiu_faults.h"
#include "fault/fiu_world.h"

static uint64_t base_seed = 20240601;
static int iterations;

/* ------------------------------------------------------------ the caller */

/* Inserts the business row of order i on the caller's connection. */
static int insert_order(sqlite3 *db, int i)
{
    char sql[128];
    snprintf(sql, sizeof sql, "INSERT INTO orders(n, amount) VALUES(%d, %d)", i, i * 10);
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

static long count_where(sqlite3 *db, const char *table, const char *column, const char *value)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE %s = '%s'", table, column, value);
    return world_scalar(db, sql);
}

/* The caller's transaction: BEGIN, the order's row, its outbox record,
 * COMMIT (or ROLLBACK on purpose). *add_rc gets the add's answer. Returns
 * 1 when COMMIT succeeded. */
static int order_transaction(fiu_world *w, int i, int commit, int *add_rc)
{
    char id[32];
    world_record_id(id, sizeof id, i);
    acemq_outbox_header headers[2] = {{"trace", "abc-123"}, {"tenant", "eu"}};
    acemq_outbox_record r = {.id = id,
                             .destination = "orders",
                             .routing_key = "order.created",
                             .headers = headers,
                             .n_headers = 2,
                             .content_type = "application/json",
                             .body = "{\"amount\":10}",
                             .body_len = 13};
    *add_rc = 0;
    int rc = sqlite3_exec(w->caller, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK) rc = insert_order(w->caller, i);
    if (rc == SQLITE_OK) {
        *add_rc = acemq_outbox_add_sqlite(w->caller, &r, NULL, NULL);
        if (*add_rc != 0) rc = SQLITE_ERROR;
    }
    if (rc == SQLITE_OK && commit) rc = sqlite3_exec(w->caller, "COMMIT", NULL, NULL, NULL);
    return rc == SQLITE_OK && commit;
}

/* The caller rolls back whatever is still open; with the faults off that
 * must work. (SQLite itself may have rolled back already: after an I/O
 * error or out of memory it can end the transaction on its own.) */
static void caller_rollback(fiu_world *w)
{
    if (sqlite3_get_autocommit(w->caller)) return;
    int rc = sqlite3_exec(w->caller, "ROLLBACK", NULL, NULL, NULL);
    if (rc != SQLITE_OK) fail_msg("ROLLBACK: %s", sqlite3_errmsg(w->caller));
}

/* Order i's row and its outbox record: both there (want 1) or both absent. */
static void expect_order(fiu_world *w, int i, long want)
{
    char id[32], n[16];
    world_record_id(id, sizeof id, i);
    snprintf(n, sizeof n, "%d", i);
    long orders = count_where(w->caller, "orders", "n", n);
    long records = count_where(w->caller, "acemq_outbox", "id", id);
    if (orders != want || records != want)
        fail_msg("iteration %d: %ld order rows and %ld outbox records; expected %ld of each", i,
                 orders, records, want);
}

/* Orders written in the caller's transactions, a seventh of them rolled back
 * on purpose: each add that failed is retried with the faults off and
 * succeeds; each order's row and record are there together or not at all. */
static void outbox_add_in_callers_transaction(void **state)
{
    fiu_world *w = *state;
    fiu_faults_seed(base_seed + 1);
    world_counts counts = {0};
    long committed = 0;
    for (int i = 0; i < iterations; i++) {
        int on_purpose = i % 7 == 3, add_rc = 0;
        world_faults_on();
        int ok = order_transaction(w, i, !on_purpose, &add_rc);
        fiu_faults_off();
        world_expect_clean(&counts, "acemq_outbox_add_sqlite", i, add_rc,
                           acemq_outbox_errmsg(NULL));
        if (!ok) caller_rollback(w);
        expect_order(w, i, ok);
        if (!ok && !on_purpose) {
            /* The next call succeeds: the same transaction, faults off. */
            if (!order_transaction(w, i, 1, &add_rc))
                fail_msg("iteration %d: the retry failed: %s / %s", i, acemq_err_name(add_rc),
                         add_rc ? acemq_outbox_errmsg(NULL) : sqlite3_errmsg(w->caller));
            expect_order(w, i, 1);
            ok = 1;
        }
        committed += ok;
    }
    world_expect_integrity(w->caller);
    assert_int_equal(world_scalar(w->caller, "SELECT count(*) FROM orders"), committed);
    assert_int_equal(world_scalar(w->caller, "SELECT count(*) FROM acemq_outbox"), committed);
    world_report("outbox_add", iterations, &counts, committed);
}

/* ------------------------------------------------------- the relay's side */

typedef struct held {
    char id[ACEMQ_OUTBOX_ID_MAX + 1];
    uint64_t token;
} held;

/* op 0 mark_published, 1 mark_failed, 2 release. */
static int settle(acemq_outbox *h, const held *m, int op)
{
    acemq_outbox_mark mark = {m->id, m->token};
    int status = 0;
    switch (op) {
    case 0: {
        int rc = acemq_outbox_mark_published_batch(h, &mark, 1, &status);
        return rc != 0 ? rc : status;
    }
    case 1:
        return acemq_outbox_mark_failed(h, m->id, m->token, "injected failure");
    default:
        return acemq_outbox_release(h, m->id, m->token);
    }
}

/* Claims, marks (published, failed or released) under faults: a failed
 * claim or mark is retried with the faults off and succeeds (a mark that
 * failed had changed nothing, so its token still holds); drained at the
 * end, every record is published and none is left claimed or dead. */
static void outbox_claim_and_mark(void **state)
{
    fiu_world *w = *state;
    fiu_faults_seed(base_seed + 2);
    const int records = 200;
    world_add_records(w, 0, records);
    world_counts counts = {0};
    world_open_under_faults(w, &counts);

    acemq_outbox *h = world_outbox(w);
    static const char *const ops[] = {"mark_published", "mark_failed", "release"};
    for (int i = 0; i < iterations; i++) {
        world_add_records(w, records + i, records + i + 1); /* never short of work */
        acemq_manual_clock_advance(w->clock, 1000); /* back-offs run out; stray leases too */
        const acemq_outbox_msg *msgs = NULL;
        size_t n = 0;
        world_faults_on();
        int rc = acemq_outbox_claim_batch(h, 4, 30000, &msgs, &n);
        fiu_faults_off();
        world_expect_clean(&counts, "acemq_outbox_claim_batch", i, rc, acemq_outbox_errmsg(h));
        if (rc != 0) {
            rc = acemq_outbox_claim_batch(h, 4, 30000, &msgs, &n);
            if (rc != 0) fail_msg("iteration %d: claim retry: %s", i, acemq_outbox_errmsg(h));
        }
        held got[4];
        for (size_t k = 0; k < n; k++) {
            snprintf(got[k].id, sizeof got[k].id, "%s", msgs[k].id);
            got[k].token = msgs[k].token;
        }
        for (size_t k = 0; k < n; k++) {
            int op = (int)(fiu_faults_next() % 10);
            op = op < 6 ? 0 : op < 8 ? 1 : 2;
            world_faults_on();
            rc = settle(h, &got[k], op);
            fiu_faults_off();
            world_expect_clean(&counts, ops[op], i, rc, acemq_outbox_errmsg(h));
            if (rc != 0 && (rc = settle(h, &got[k], op)) != 0)
                fail_msg("iteration %d: %s retry of %s: %s: %s", i, ops[op], got[k].id,
                         acemq_err_name(rc), acemq_outbox_errmsg(h));
        }
        if (i % 10 == 0) {
            acemq_outbox_pending p;
            world_faults_on();
            rc = acemq_outbox_pending_count(h, &p);
            fiu_faults_off();
            world_expect_clean(&counts, "acemq_outbox_pending_count", i, rc,
                               acemq_outbox_errmsg(h));
        }
    }
    world_drain_outbox(w, h);
    world_expect_all_published(w, records + iterations);
    world_report("outbox_claim_mark", iterations, &counts, records + iterations);
}

/* The relay stepping to the in-process broker under faults: each step
 * answers cleanly, and once the faults stop every committed record reaches
 * the broker (some twice: lost confirms), nothing else does, and the outbox
 * is empty of work. */
static void relay_to_memory_broker(void **state)
{
    fiu_world *w = *state;
    fiu_faults_seed(base_seed + 3);
    const int records = 50;
    world_add_records(w, 0, records);
    world_counts counts = {0};
    acemq_outbox *ob = world_outbox(w);

    char url[64];
    snprintf(url, sizeof url, "memory:fiu-relay-%d", (int)getpid());
    acemq_broker *probe = NULL;
    assert_int_equal(acemq_broker_open(&probe, url, NULL), 0);
    acemq_relay_options o;
    acemq_relay_options_init(&o);
    o.batch = 8;
    o.lease_ms = 30000;
    acemq_broker *b = NULL;
    acemq_relay *r = NULL;
    for (int i = 0; i < 20; i++) { /* opening under faults: clean, and nothing kept */
        world_faults_on();
        int rc = acemq_broker_open(&b, url, NULL);
        if (rc == 0) rc = acemq_relay_new(&r, ob, b, &o);
        fiu_faults_off();
        world_expect_clean(&counts, "acemq_broker_open/acemq_relay_new", i, rc,
                           b ? acemq_relay_errmsg(NULL) : acemq_broker_errmsg(NULL));
        acemq_relay_free(r);
        acemq_broker_close(b);
        r = NULL;
        b = NULL;
    }
    assert_int_equal(acemq_broker_open(&b, url, NULL), 0);
    assert_int_equal(acemq_relay_new(&r, ob, b, &o), 0);

    for (int i = 0; i < iterations; i++) {
        world_add_records(w, records + i, records + i + 1); /* never short of work */
        size_t claimed = 0;
        world_faults_on();
        int rc = acemq_relay_step(r, &claimed);
        fiu_faults_off();
        world_expect_clean(&counts, "acemq_relay_step", i, rc, acemq_relay_errmsg(r));
        acemq_manual_clock_advance(w->clock, 1000);
    }
    /* Faults off: leases and back-offs run out, and the relay drains. */
    for (int round = 0; round < 1000; round++) {
        acemq_manual_clock_advance(w->clock, 600000);
        size_t claimed = 0, total = 0;
        do {
            int rc = acemq_relay_step(r, &claimed);
            if (rc != 0) fail_msg("drain: %s", acemq_relay_errmsg(r));
            total += claimed;
        } while (claimed > 0);
        acemq_outbox_pending p;
        assert_int_equal(acemq_outbox_pending_count(ob, &p), 0);
        if (total == 0 && p.unclaimed + p.claimed + p.dead == 0) break;
    }
    long duplicates = world_expect_broker_holds(w, probe, records + iterations);
    world_expect_all_published(w, records + iterations);
    acemq_relay_free(r);
    acemq_broker_close(b);
    acemq_broker_close(probe);
    printf("relay: %d records, each at the broker, %ld duplicates (lost confirms)\n",
           records + iterations, duplicates);
    world_report("relay_step", iterations, &counts, records + iterations);
}

/* ------------------------------------------------------------------ idem */

/* The idempotency store at url under faults (fiu_world.c, idem_model). */
static void idem_sqlite_store(void **state)
{
    fiu_world *w = *state;
    fiu_faults_seed(base_seed + 4);
    world_idem_model(w, w->url, iterations);
    world_expect_integrity(w->caller);
}

static void idem_memory_store(void **state)
{
    fiu_world *w = *state;
    fiu_faults_seed(base_seed + 5);
    world_idem_model(w, "memory:", iterations);
}

static void idem_confirm_in_callers_transaction(void **state)
{
    fiu_world *w = *state;
    fiu_faults_seed(base_seed + 6);
    world_inbox_model(w, iterations);
    world_expect_integrity(w->caller);
}

int main(int argc, char **argv)
{
    (void)argc;
    fiu_faults_start(argv, base_seed);
    const char *s = getenv("FIU_SEED");
    if (s && *s) base_seed = strtoull(s, NULL, 0);
    iterations = fiu_faults_iterations(2000);
    printf("fiu: %d iterations per test\n", iterations);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(outbox_add_in_callers_transaction, world_setup,
                                        world_teardown),
        cmocka_unit_test_setup_teardown(outbox_claim_and_mark, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(relay_to_memory_broker, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(idem_sqlite_store, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(idem_memory_store, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(idem_confirm_in_callers_transaction, world_setup,
                                        world_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    char summary[512];
    fiu_faults_summary(summary, sizeof summary);
    printf("fiu: injected %llu failures: %s\n", (unsigned long long)fiu_faults_injected(), summary);
    return failed;
}
