/* sqlite_idem_fixture.h — what the parts of test_sqlite_idem share: the
 * fixture (a fresh database file and a manual clock standing at T0), helpers
 * that fail the test when the store or SQLite refuses a call, and the tests
 * each part defines, which test_sqlite_idem.c runs as one cmocka group.
 *
 * Time moves only through the manual clock; nothing sleeps. */
#ifndef ACEMQ_TESTS_SQLITE_IDEM_FIXTURE_H
#define ACEMQ_TESTS_SQLITE_IDEM_FIXTURE_H

#include <stdint.h>

#include <sqlite3.h>

#include "acemq/acemq.h"

/* The manual clock's start, and the lease and retention of every store (ms). */
#define T0 1700000000000LL
#define LEASE 30000
#define RETENTION 3600000

typedef struct fixture {
    acemq_manual_clock *clock;
    char url[512];
    const char *path; /* inside url */
    char link[600];   /* a symlink a test made; removed in teardown, pass or fail */
} fixture;

/* *state becomes a fixture on a fresh database file; teardown removes it. */
int sqlite_idem_setup(void **state);
int sqlite_idem_teardown(void **state);
/* Options with the fixture's clock, LEASE, RETENTION and synchronous NORMAL. */
void sqlite_idem_options(fixture *f, acemq_idem_options *o);
/* The store on url; the test fails unless it opens as the sqlite backend. */
acemq_idem *sqlite_idem_open_url(fixture *f, const char *url);
/* A raw connection, a statement run, and the first column of the first row;
 * the test fails unless SQLite does each. */
sqlite3 *sqlite_idem_raw_open(const char *path);
void sqlite_idem_exec(sqlite3 *db, const char *sql);
int64_t sqlite_idem_query_int(sqlite3 *db, const char *sql);
/* acemq_idem_try_claim on a text id. */
int sqlite_idem_claim(acemq_idem *h, const char *id, acemq_claim *c);

/* sqlite_idem_file.c */
void two_processes_claim_each_id_once(void **state);
void reopen_keeps_state(void **state);

/* sqlite_idem_caller.c */
void caller_transaction(void **state);
void caller_open_inside_transaction(void **state);

/* sqlite_idem_open.c */
void newer_schema_refused(void **state);
void url_parameters(void **state);
void unwritable_path(void **state);
void a_file_that_cannot_grow_fails_loudly_and_loses_nothing(void **state);
void busy_gives_up(void **state);

/* sqlite_idem_ids.c */
void binary_ids_verbatim(void **state);
void tokens_grow(void **state);
void fingerprints_and_abandoned(void **state);
void purge_walks_every_window(void **state);

/* sqlite_idem_writer.c */
void writer_queue_per_file(void **state);
void wal_bounded_with_two_writers(void **state);

/* sqlite_idem_tokens.c */
void rolled_back_new_id(void **state);
void rolled_back_takeover(void **state);
void rolled_back_reclaim(void **state);
void rolled_back_across_processes(void **state);
void processes_never_share_a_token(void **state);
void token_range_ends(void **state);

#endif
