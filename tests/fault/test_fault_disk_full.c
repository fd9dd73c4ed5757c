/* test_fault_disk_full.c — the database's disk filling up under the outbox
 * and the inbox, without root: two ways to make an SQLite file unable to
 * grow.
 *
 *   size limit  RLIMIT_FSIZE lowered (SIGXFSZ ignored): every write past it
 *               fails with EFBIG, as on a file system or quota that refuses
 *               to grow the file; SQLite says "disk I/O error
 *               (SQLITE_IOERR_WRITE: File too large)";
 *   ENOSPC      libfiu fails every write, pwrite and writev with ENOSPC, as
 *               a full disk does; SQLite says "database or disk is full".
 *
 * Either way the call that meets it fails with ACEMQ_EIO and those words
 * (or, when it is the caller's own COMMIT that meets it, SQLite tells the
 * caller), the caller's transaction rolls back whole (the order's row and
 * its outbox record both absent; the effect and its confirm both absent),
 * the file passes PRAGMA integrity_check and holds only whole transactions,
 * and once space returns the same writes succeed and the relay drains them
 * to the broker, each record there, nothing else.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fiu-control.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acemq/acemq.h"
#include "acemq/relay.h"
#include "acemq/sqlite.h"
#include "backends/test_control.h"
#include "fault/fiu_faults.h"
#include "fault/fiu_world.h"

#define BODY 2000    /* bytes per record: the file fills in a few hundred */
#define ATTEMPTS 400 /* transactions tried while the disk is full */

enum { SIZE_LIMIT, ENOSPC_WRITES };
static int mode;

static const char *const write_points[] = {"posix/io/rw/write", "posix/io/rw/pwrite",
                                           "posix/io/rw/writev"};

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : 0;
}

/* Takes the space away: the files may not grow past where they are now by
 * more than a little (size limit), or no write succeeds at all (ENOSPC). */
static void disk_full(fiu_world *w)
{
    if (mode == SIZE_LIMIT) {
        char wal[160];
        snprintf(wal, sizeof wal, "%s-wal", w->path);
        off_t biggest = file_size(w->path) > file_size(wal) ? file_size(w->path) : file_size(wal);
        struct rlimit l;
        assert_int_equal(getrlimit(RLIMIT_FSIZE, &l), 0);
        l.rlim_cur = (rlim_t)biggest + (64 << 10);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &l), 0);
        return;
    }
    for (size_t i = 0; i < sizeof write_points / sizeof write_points[0]; i++)
        assert_int_equal(fiu_enable(write_points[i], 1, fiu_faults_errno(ENOSPC), 0), 0);
}

/* Gives the space back. */
static void space_returns(void)
{
    if (mode == SIZE_LIMIT) {
        struct rlimit l;
        assert_int_equal(getrlimit(RLIMIT_FSIZE, &l), 0);
        l.rlim_cur = l.rlim_max;
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &l), 0);
        return;
    }
    for (size_t i = 0; i < sizeof write_points / sizeof write_points[0]; i++)
        (void)fiu_disable(write_points[i]);
}

/* What an error said is about the disk: SQLite's words for either case
 * ("database or disk is full" for ENOSPC; for EFBIG "disk I/O error
 * (SQLITE_IOERR_WRITE...)", with the system's "File too large" where SQLite
 * kept the errno, which it does not for a write to the WAL). */
static void expect_disk_words(const char *call, int rc, const char *msg)
{
    if (rc != ACEMQ_EIO)
        fail_msg("%s: %s ('%s'), expected ACEMQ_EIO", call, acemq_err_name(rc), msg);
    if (!strstr(msg, "disk I/O error (SQLITE_IOERR_WRITE") && !strstr(msg, "disk is full") &&
        !strstr(msg, "No space left"))
        fail_msg("%s: '%s' does not say the disk is full", call, msg);
}

static long count_id(sqlite3 *db, const char *sql_fmt, const char *id)
{
    char sql[160];
    snprintf(sql, sizeof sql, sql_fmt, id);
    return world_scalar(db, sql);
}

/* Order i with its outbox record in one caller transaction: 1 committed,
 * 0 failed (rolled back, by SQLite or here), with the failing call's words
 * checked. */
static int order(fiu_world *w, int i)
{
    static char body[BODY];
    memset(body, 'o', sizeof body);
    char id[32], sql[96];
    world_record_id(id, sizeof id, i);
    snprintf(sql, sizeof sql, "INSERT INTO orders(n, amount) VALUES(%d, %d)", i, i);
    acemq_outbox_record r = {.id = id,
                             .destination = "orders",
                             .routing_key = "order.created",
                             .body = body,
                             .body_len = sizeof body};
    int rc = sqlite3_exec(w->caller, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_exec(w->caller, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        int add = acemq_outbox_add_sqlite(w->caller, &r, NULL, NULL);
        if (add != 0) {
            expect_disk_words("acemq_outbox_add_sqlite", add, acemq_outbox_errmsg(NULL));
            rc = SQLITE_ERROR;
        }
    }
    if (rc == SQLITE_OK) rc = sqlite3_exec(w->caller, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_ERROR && (rc & 0xff) != SQLITE_FULL &&
        (rc & 0xff) != SQLITE_IOERR)
        fail_msg("order %d: the caller's SQL failed with %s", i, sqlite3_errstr(rc));
    if (rc != SQLITE_OK && !sqlite3_get_autocommit(w->caller))
        assert_int_equal(sqlite3_exec(w->caller, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    char n[16];
    snprintf(n, sizeof n, "%d", i);
    long rows = count_id(w->caller, "SELECT count(*) FROM orders WHERE n = %s", n);
    long records = count_id(w->caller, "SELECT count(*) FROM acemq_outbox WHERE id = '%s'", id);
    long want = rc == SQLITE_OK;
    if (rows != want || records != want)
        fail_msg("order %d: %ld order rows and %ld outbox records after %s", i, rows, records,
                 rc == SQLITE_OK ? "COMMIT" : "a failure");
    return rc == SQLITE_OK;
}

/* Every committed record reaches the in-process broker through the relay. */
static void relay_drains(fiu_world *w, int n)
{
    char url[64];
    snprintf(url, sizeof url, "memory:disk-full-%d", (int)getpid());
    acemq_broker *b = NULL, *probe = NULL;
    acemq_relay *r = NULL;
    assert_int_equal(acemq_broker_open(&b, url, NULL), 0);
    assert_int_equal(acemq_broker_open(&probe, url, NULL), 0);
    assert_int_equal(acemq_relay_new(&r, world_outbox(w), b, NULL), 0);
    size_t claimed = 0;
    do {
        if (acemq_relay_step(r, &claimed) != 0) fail_msg("relay: %s", acemq_relay_errmsg(r));
    } while (claimed > 0);
    long duplicates = world_expect_broker_holds(w, probe, n);
    assert_int_equal(duplicates, 0);
    world_expect_all_published(w, n);
    acemq_relay_free(r);
    acemq_broker_close(b);
    acemq_broker_close(probe);
}

/* Orders written until the disk is full and ATTEMPTS more: each whole or
 * absent, the file sound; then the space returns, every failed order is
 * written again, and the relay drains them all. */
static void outbox_on_a_full_disk(void **state)
{
    fiu_world *w = *state;
    int before = 40, committed = 0, failed = 0, first_failure = -1;
    for (int i = 0; i < before; i++)
        assert_true(order(w, i));
    disk_full(w);
    for (int i = before; i < before + ATTEMPTS; i++) {
        if (order(w, i)) {
            committed++;
        } else {
            failed++;
            if (first_failure < 0) first_failure = i;
        }
    }
    world_expect_integrity(w->caller);
    space_returns();
    if (failed == 0) fail_msg("the disk never filled up");
    int total = before + ATTEMPTS;
    assert_int_equal(world_scalar(w->caller, "SELECT count(*) FROM orders"), before + committed);
    for (int i = before; i < total; i++) {
        char n[16];
        snprintf(n, sizeof n, "%d", i);
        if (count_id(w->caller, "SELECT count(*) FROM orders WHERE n = %s", n) == 0 && !order(w, i))
            fail_msg("order %d failed again with space back", i);
    }
    world_expect_integrity(w->caller);
    relay_drains(w, total);
    printf("outbox, %s: %d committed before, %d committed and %d refused while full (first at "
           "%d), all %d written and relayed once space returned\n",
           mode == SIZE_LIMIT ? "size limit" : "ENOSPC", before, committed, failed, first_failure,
           total);
}

/* The inbox on a full disk: each delivery's claim, effect and confirm; a
 * claim or a confirm the disk refuses fails with ACEMQ_EIO and the disk's
 * words, the effect rolls back with the confirm, and once space returns
 * every message is applied exactly once. */
static void inbox_on_a_full_disk(void **state)
{
    fiu_world *w = *state;
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(w->clock);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&h, w->caller, &o), 0);
    static char pad[BODY];
    memset(pad, 'e', sizeof pad - 1);
    const int messages = 300;
    int applied_full = 0, refused = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0) disk_full(w);
        for (int i = 0; i < messages; i++) {
            char id[32];
            int len = snprintf(id, sizeof id, "msg-%05d", i);
            acemq_claim c;
            int rc = acemq_idem_try_claim(h, id, (size_t)len, NULL, &c);
            if (rc == ACEMQ_ALREADY_CONFIRMED) continue;
            if (rc == ACEMQ_IN_PROGRESS && pass == 1) {
                /* A claim written before the disk refused its confirm. */
                acemq_manual_clock_advance(w->clock, 31000);
                rc = acemq_idem_try_claim(h, id, (size_t)len, NULL, &c);
            }
            if (rc < 0) {
                if (pass == 1) fail_msg("%s: claim with space back: %s", id, acemq_idem_errmsg(h));
                expect_disk_words("acemq_idem_try_claim", rc, acemq_idem_errmsg(h));
                refused++;
                continue;
            }
            assert_int_equal(rc, ACEMQ_CLAIMED);
            char sql[BODY + 96];
            snprintf(sql, sizeof sql, "INSERT INTO effects(id) VALUES('%s-%s')", id, pad);
            int done = sqlite3_exec(w->caller, "BEGIN IMMEDIATE", NULL, NULL, NULL);
            if (done == SQLITE_OK) done = sqlite3_exec(w->caller, sql, NULL, NULL, NULL);
            int confirm = 0;
            if (done == SQLITE_OK) {
                confirm = acemq_idem_confirm(h, id, (size_t)len, c.token);
                if (confirm != 0 && pass == 0) {
                    expect_disk_words("acemq_idem_confirm", confirm, acemq_idem_errmsg(h));
                }
                if (confirm != 0) done = SQLITE_ERROR;
            }
            if (done == SQLITE_OK) done = sqlite3_exec(w->caller, "COMMIT", NULL, NULL, NULL);
            if (done != SQLITE_OK && !sqlite3_get_autocommit(w->caller))
                assert_int_equal(sqlite3_exec(w->caller, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
            if (done != SQLITE_OK && pass == 1)
                fail_msg("%s: applying with space back failed: %s: %s / %s", id,
                         acemq_err_name(confirm), confirm ? acemq_idem_errmsg(h) : "",
                         sqlite3_errmsg(w->caller));
            long effects =
                count_id(w->caller, "SELECT count(*) FROM effects WHERE id LIKE '%s-%%'", id);
            int confirmed = acemq_idem_is_confirmed(h, id, (size_t)len);
            if (effects != (done == SQLITE_OK) || confirmed != (done == SQLITE_OK))
                fail_msg("%s: %ld effects, confirmed %d, after %s", id, effects, confirmed,
                         done == SQLITE_OK ? "COMMIT" : "a failure");
            if (done == SQLITE_OK && pass == 0) applied_full++;
            if (done != SQLITE_OK) {
                refused++;
                /* Give the claim back for the next pass (it may fail too;
                 * then its lease runs out). */
                (void)acemq_idem_release(h, id, (size_t)len, c.token);
            }
        }
        world_expect_integrity(w->caller);
        if (pass == 0) space_returns();
    }
    if (refused == 0) fail_msg("the disk never filled up");
    assert_int_equal(world_scalar(w->caller, "SELECT count(*) FROM effects"), messages);
    acemq_idem_close(h);
    printf("inbox, %s: %d applied and %d refused while full, all %d applied once after\n",
           mode == SIZE_LIMIT ? "size limit" : "ENOSPC", applied_full, refused, messages);
}

/* Gives the space back whatever a failed test left, then the world's teardown. */
static int teardown(void **state)
{
    mode = SIZE_LIMIT;
    space_returns();
    mode = ENOSPC_WRITES;
    space_returns();
    return world_teardown(state);
}

static void outbox_size_limit(void **state)
{
    mode = SIZE_LIMIT;
    outbox_on_a_full_disk(state);
}

static void outbox_enospc(void **state)
{
    mode = ENOSPC_WRITES;
    outbox_on_a_full_disk(state);
}

static void inbox_size_limit(void **state)
{
    mode = SIZE_LIMIT;
    inbox_on_a_full_disk(state);
}

static void inbox_enospc(void **state)
{
    mode = ENOSPC_WRITES;
    inbox_on_a_full_disk(state);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* A write past the size limit must fail with EFBIG, not kill us. */
    if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR) return 1;
    fiu_faults_start(argv, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(outbox_size_limit, world_setup, teardown),
        cmocka_unit_test_setup_teardown(outbox_enospc, world_setup, teardown),
        cmocka_unit_test_setup_teardown(inbox_size_limit, world_setup, teardown),
        cmocka_unit_test_setup_teardown(inbox_enospc, world_setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
