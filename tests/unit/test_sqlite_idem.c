/* test_sqlite_idem.c — what only the SQLite backend does, in one cmocka group:
 * one file shared by processes and reopened (sqlite_idem_file.c), the caller's
 * connection and transaction (sqlite_idem_caller.c), schema versions, URL
 * parameters and SQLite's error text (sqlite_idem_open.c), ids, tokens and the
 * windowed purge of abandoned claims (sqlite_idem_ids.c), the in-process
 * writer queue (sqlite_idem_writer.c), and the token scheme: a rolled-back
 * claim's token is never issued again (sqlite_idem_tokens.c).
 *
 * Time moves only through a manual clock; nothing sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sqlite_idem_fixture.h"

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(two_processes_claim_each_id_once, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(reopen_keeps_state, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(caller_transaction, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(caller_open_inside_transaction, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(newer_schema_refused, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(url_parameters, sqlite_idem_setup, sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(unwritable_path, sqlite_idem_setup, sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(a_file_that_cannot_grow_fails_loudly_and_loses_nothing,
                                        sqlite_idem_setup, sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(busy_gives_up, sqlite_idem_setup, sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(binary_ids_verbatim, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(tokens_grow, sqlite_idem_setup, sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(fingerprints_and_abandoned, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(writer_queue_per_file, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(wal_bounded_with_two_writers, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(purge_walks_every_window, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(rolled_back_new_id, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(rolled_back_takeover, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(rolled_back_reclaim, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(rolled_back_across_processes, sqlite_idem_setup,
                                        sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(token_range_ends, sqlite_idem_setup, sqlite_idem_teardown),
        cmocka_unit_test_setup_teardown(processes_never_share_a_token, sqlite_idem_setup,
                                        sqlite_idem_teardown),
    };
    return cmocka_run_group_tests_name("sqlite idem", tests, NULL, NULL);
}
