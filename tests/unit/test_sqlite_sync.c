/* test_sqlite_sync.c — which of the SQLite backends' commits wait for the
 * disk. A claim is a lease, and one that a crash of the machine forgets
 * was held by a process that went down with it, so at synchronous=FULL
 * claims commit without an fsync; confirms, releases and the relay's marks
 * commit at the configured level, and a claim in between does not change
 * that. The fsyncs are counted by a VFS that wraps the default one and
 * counts xSync on every file SQLite opens.
 *
 * Time moves only through a manual clock; nothing sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "acemq/acemq.h"
#include "acemq/sqlite.h"
#include "scratch_db.h"

#define T0 INT64_C(1700000000000)

/* ---- a VFS that counts fsyncs ------------------------------------------------ */

/* Each file keeps the default VFS's own struct and methods, except that its
 * method table is a copy whose xSync counts before it hands on. */
enum { METHOD_TABLES = 4 };
static sqlite3_vfs counting_vfs;
static const sqlite3_io_methods *real_methods[METHOD_TABLES];
static sqlite3_io_methods counting_methods[METHOD_TABLES];
static int n_method_tables;
static long syncs;

static int counting_sync(sqlite3_file *f, int flags)
{
    syncs++;
    const sqlite3_io_methods *real = real_methods[f->pMethods - counting_methods];
    return real->xSync(f, flags);
}

static const sqlite3_io_methods *counting_for(const sqlite3_io_methods *real)
{
    for (int i = 0; i < n_method_tables; i++)
        if (real_methods[i] == real) return &counting_methods[i];
    if (n_method_tables == METHOD_TABLES) return NULL;
    int i = n_method_tables++;
    real_methods[i] = real;
    counting_methods[i] = *real;
    counting_methods[i].xSync = counting_sync;
    return &counting_methods[i];
}

static int counting_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags,
                         int *out_flags)
{
    sqlite3_vfs *real = vfs->pAppData;
    int rc = real->xOpen(real, name, f, flags, out_flags);
    if (rc != SQLITE_OK || !f->pMethods) return rc;
    const sqlite3_io_methods *m = counting_for(f->pMethods);
    if (!m) {
        f->pMethods->xClose(f);
        f->pMethods = NULL;
        return SQLITE_CANTOPEN;
    }
    f->pMethods = m;
    return SQLITE_OK;
}

static int group_setup(void **state)
{
    (void)state;
    sqlite3_vfs *real = sqlite3_vfs_find(NULL);
    if (!real) return -1;
    counting_vfs = *real;
    counting_vfs.zName = "acemq-counting";
    counting_vfs.pAppData = real;
    counting_vfs.xOpen = counting_open;
    counting_vfs.pNext = NULL;
    return sqlite3_vfs_register(&counting_vfs, 1) == SQLITE_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return sqlite3_vfs_unregister(&counting_vfs) == SQLITE_OK ? 0 : -1;
}

static int setup(void **state)
{
    return scratch_db_setup(state, "sync");
}

static int teardown(void **state)
{
    return scratch_db_teardown(state);
}

/* ---- the idempotency store ---------------------------------------------------- */

typedef struct store {
    acemq_manual_clock *clock;
    acemq_idem *h;
} store;

static void store_open(store *s, const scratch_db *f, const char *query)
{
    assert_int_equal(acemq_manual_clock_new(&s->clock, T0), 0);
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(s->clock);
    o.lease_ms = 1000;
    char url[160];
    snprintf(url, sizeof url, "sqlite:%s%s", f->path, query);
    assert_int_equal(acemq_idem_open(&s->h, url, &o), 0);
}

static void store_close(store *s)
{
    acemq_idem_close(s->h);
    acemq_manual_clock_free(s->clock);
}

static uint64_t claim(store *s, const char *id)
{
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(s->h, id, strlen(id), NULL, &c), ACEMQ_CLAIMED);
    return c.token;
}

static void idem_claims_skip_the_fsync_and_confirms_take_it(void **state)
{
    store s;
    store_open(&s, *state, "");

    syncs = 0;
    uint64_t a = claim(&s, "a"), b = claim(&s, "b");
    assert_int_equal(syncs, 0);
    assert_int_equal(acemq_idem_confirm(s.h, "a", 1, a), 0);
    assert_true(syncs >= 1);

    /* A takeover of a lease that ran out is a claim too. */
    acemq_manual_clock_set(s.clock, T0 + 5000);
    syncs = 0;
    uint64_t b2 = claim(&s, "b");
    assert_true(b2 > b);
    assert_int_equal(syncs, 0);
    assert_int_equal(acemq_idem_release(s.h, "b", 1, b2), 0);
    assert_true(syncs >= 1);

    /* Batches: the claim's transaction without, the confirm's with. */
    acemq_idem_key keys[3] = {{"c", 1}, {"d", 1}, {"a", 1}};
    acemq_claim out[3];
    int status[3];
    syncs = 0;
    assert_int_equal(acemq_idem_try_claim_many(s.h, 3, keys, NULL, out, status), 2);
    assert_int_equal(status[2], ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(syncs, 0);
    acemq_idem_confirmation conf[2] = {{"c", 1, out[0].token, NULL, 0},
                                       {"d", 1, out[1].token, NULL, 0}};
    assert_int_equal(acemq_idem_confirm_many(s.h, 2, conf, status), 2);
    assert_true(syncs >= 1);
    store_close(&s);

    /* What the confirms wrote is there for the next handle. */
    store_open(&s, *state, "");
    assert_int_equal(acemq_idem_is_confirmed(s.h, "a", 1), 1);
    assert_int_equal(acemq_idem_is_confirmed(s.h, "d", 1), 1);
    assert_int_equal(acemq_idem_is_confirmed(s.h, "b", 1), 0);
    store_close(&s);
}

static void idem_below_full_nothing_waits(void **state)
{
    store s;
    store_open(&s, *state, "?synchronous=normal");
    syncs = 0;
    uint64_t a = claim(&s, "a");
    assert_int_equal(acemq_idem_confirm(s.h, "a", 1, a), 0);
    assert_int_equal(syncs, 0);
    store_close(&s);
}

/* ---- the relay's outbox handle ------------------------------------------------- */

static void add_records(const scratch_db *f, const char *const *ids, size_t n)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    for (size_t i = 0; i < n; i++) {
        acemq_outbox_record r = {.id = ids[i], .destination = "", .routing_key = "q"};
        assert_int_equal(acemq_outbox_add_sqlite(db, &r, NULL, NULL), 0);
    }
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static acemq_outbox *outbox_open(const scratch_db *f, int synchronous)
{
    acemq_outbox_options o;
    acemq_outbox_options_init(&o);
    o.synchronous = synchronous;
    char url[160];
    snprintf(url, sizeof url, "sqlite:%s", f->path);
    acemq_outbox *h = NULL;
    assert_int_equal(acemq_outbox_open(&h, url, &o), 0);
    return h;
}

/* Commits n records, then claims them all with syncs counted from zero. */
static const acemq_outbox_msg *add_and_claim(const scratch_db *f, acemq_outbox *h,
                                             const char *const *ids, size_t n)
{
    add_records(f, ids, n);
    const acemq_outbox_msg *m = NULL;
    size_t got = 0;
    syncs = 0;
    assert_int_equal(acemq_outbox_claim_batch(h, 10, 60000, &m, &got), 0);
    assert_int_equal(got, n);
    return m;
}

static void outbox_claims_skip_the_fsync_and_marks_take_it(void **state)
{
    const scratch_db *f = *state;
    acemq_outbox *h = outbox_open(f, ACEMQ_SYNC_FULL);
    const char *const ids[] = {"r1", "r2"};
    const acemq_outbox_msg *m = add_and_claim(f, h, ids, 2);
    assert_int_equal(syncs, 0);
    uint64_t t1 = m[0].token, t2 = m[1].token;
    assert_string_equal(m[0].id, "r1");
    assert_int_equal(acemq_outbox_mark_published(h, "r1", t1), 0);
    assert_true(syncs >= 1);
    syncs = 0;
    assert_int_equal(acemq_outbox_mark_failed(h, "r2", t2, "nack"), 0);
    assert_true(syncs >= 1);
    acemq_outbox_close(h);
}

static void outbox_below_full_nothing_waits(void **state)
{
    const scratch_db *f = *state;
    acemq_outbox *h = outbox_open(f, ACEMQ_SYNC_NORMAL);
    const char *const ids[] = {"r1"};
    const acemq_outbox_msg *m = add_and_claim(f, h, ids, 1);
    assert_int_equal(acemq_outbox_mark_published(h, m[0].id, m[0].token), 0);
    assert_int_equal(syncs, 0);
    acemq_outbox_close(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(idem_claims_skip_the_fsync_and_confirms_take_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(idem_below_full_nothing_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(outbox_claims_skip_the_fsync_and_marks_take_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(outbox_below_full_nothing_waits, setup, teardown),
    };
    return cmocka_run_group_tests_name("sqlite sync", tests, group_setup, group_teardown);
}
