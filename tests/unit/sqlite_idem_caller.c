/* sqlite_idem_caller.c — the store on the caller's own connection: claims and
 * confirms inside the caller's transaction, and the schema created in a
 * savepoint when the store opens inside one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "acemq/acemq.h"
#include "acemq/sqlite.h"
#include "sqlite_idem_fixture.h"

/* ---- the caller's connection ---------------------------------------------- */

void caller_transaction(void **state)
{
    fixture *f = *state;
    sqlite3 *db = sqlite_idem_raw_open(f->path);
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&h, db, &o), 0);
    assert_string_equal(acemq_idem_backend(h), "sqlite");
    /* The caller's connection keeps its own journal mode. */
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "delete");
    sqlite3_finalize(st);

    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(h, "order-1", &c), ACEMQ_CLAIMED);
    /* No transaction open: refused, nothing written. */
    assert_int_equal(acemq_idem_confirm(h, "order-1", 7, c.token), ACEMQ_ENOTX);
    assert_non_null(strstr(acemq_idem_errmsg(h), "transaction"));
    assert_int_equal(acemq_idem_is_confirmed(h, "order-1", 7), 0);

    /* Rolled back with the caller's work: unconfirmed, and still held. */
    sqlite_idem_exec(db, "BEGIN");
    assert_int_equal(acemq_idem_confirm(h, "order-1", 7, c.token), 0);
    sqlite_idem_exec(db, "ROLLBACK");
    assert_int_equal(acemq_idem_is_confirmed(h, "order-1", 7), 0);
    acemq_claim again;
    assert_int_equal(sqlite_idem_claim(h, "order-1", &again), ACEMQ_IN_PROGRESS);

    /* Committed with the caller's work. */
    sqlite_idem_exec(db, "BEGIN");
    sqlite_idem_exec(db, "CREATE TABLE orders(id TEXT)");
    assert_int_equal(acemq_idem_confirm(h, "order-1", 7, c.token), 0);
    sqlite_idem_exec(db, "COMMIT");
    assert_int_equal(acemq_idem_is_confirmed(h, "order-1", 7), 1);
    assert_int_equal(sqlite_idem_claim(h, "order-1", &again), ACEMQ_ALREADY_CONFIRMED);

    /* A claim that needs several statements runs in a savepoint inside the
     * caller's transaction and rolls back with it. */
    assert_int_equal(sqlite_idem_claim(h, "order-2", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_release(h, "order-2", 7, c.token), 0);
    sqlite_idem_exec(db, "BEGIN");
    assert_int_equal(sqlite_idem_claim(h, "order-2", &again), ACEMQ_CLAIMED);
    assert_true(again.token > c.token);
    sqlite_idem_exec(db, "ROLLBACK");
    assert_int_equal(acemq_idem_confirm(h, "order-2", 7, again.token), ACEMQ_ENOTX);
    sqlite_idem_exec(db, "BEGIN");
    assert_int_equal(acemq_idem_confirm(h, "order-2", 7, again.token), ACEMQ_ESTALE);
    sqlite_idem_exec(db, "COMMIT");

    acemq_idem_close(h);
    /* The library never closed db, and left no statement behind on it. */
    assert_null(sqlite3_next_stmt(db, NULL));
    assert_int_equal(sqlite_idem_query_int(db, "SELECT count(*) FROM orders"), 0);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* Opening inside the caller's transaction creates the schema in a savepoint. */
void caller_open_inside_transaction(void **state)
{
    fixture *f = *state;
    sqlite3 *db = sqlite_idem_raw_open(f->path);
    sqlite_idem_exec(db, "BEGIN");
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&h, db, &o), 0);
    assert_int_equal(sqlite3_get_autocommit(db), 0);
    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(h, "x", &c), ACEMQ_CLAIMED);
    sqlite_idem_exec(db, "COMMIT");
    assert_int_equal(sqlite_idem_claim(h, "x", &c), ACEMQ_IN_PROGRESS);
    acemq_idem_close(h);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);

    assert_int_equal(acemq_idem_open_sqlite(&h, NULL, &o), ACEMQ_EINVAL);
    assert_null(h);
}
