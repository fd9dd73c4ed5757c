/* sqlite_idem_ids.c — what the rows hold: binary ids kept verbatim, tokens
 * growing past their first width, fingerprints, and abandoned claims purged
 * only after retention, by a purge that walks every window of the key. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "acemq/acemq.h"
#include "sqlite_idem_fixture.h"

/* ---- ids and tokens ------------------------------------------------------- */

void binary_ids_verbatim(void **state)
{
    fixture *f = *state;
    acemq_idem *h = sqlite_idem_open_url(f, f->url);
    static const char id[] = "a\0'b\"c\0;--\\\0";
    const size_t len = sizeof id - 1;
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(h, id, len, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(h, id, len, c.token), 0);
    assert_int_equal(acemq_idem_is_confirmed(h, id, len), 1);
    /* Prefixes up to a NUL are other ids. */
    assert_int_equal(acemq_idem_is_confirmed(h, id, 1), 0);
    assert_int_equal(acemq_idem_is_confirmed(h, "a", 1), 0);
    assert_int_equal(acemq_idem_try_claim(h, id, len - 1, NULL, &c), ACEMQ_CLAIMED);
    acemq_idem_close(h);

    sqlite3 *db = sqlite_idem_raw_open(f->path);
    sqlite3_stmt *st = NULL;
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT id, typeof(id) FROM acemq_idem ORDER BY id", -1, &st, NULL),
        SQLITE_OK);
    int found = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        assert_string_equal((const char *)sqlite3_column_text(st, 1), "blob");
        if ((size_t)sqlite3_column_bytes(st, 0) == len &&
            memcmp(sqlite3_column_blob(st, 0), id, len) == 0)
            found++;
    }
    sqlite3_finalize(st);
    assert_int_equal(found, 1);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

void tokens_grow(void **state)
{
    fixture *f = *state;
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    o.retention_ms = 1000;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open(&h, f->url, &o), 0);
    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(h, "t", &c), ACEMQ_CLAIMED);
    uint64_t t1 = c.token;
    assert_int_equal(acemq_idem_release(h, "t", 1, t1), 0);
    assert_int_equal(sqlite_idem_claim(h, "t", &c), ACEMQ_CLAIMED);
    uint64_t t2 = c.token;
    assert_true(t2 > t1);
    assert_int_equal(c.takeover, 0);
    /* The released token stays dead. */
    assert_int_equal(acemq_idem_release(h, "t", 1, t1), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_renew(h, "t", 1, t1, 0), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_release(h, "t", 1, t2), 0);

    /* Purge forgets the released row only after retention; a later claim
     * still gets a larger token. */
    uint64_t purged = 99;
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 0);
    acemq_manual_clock_advance(f->clock, 1000);
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 1);
    assert_int_equal(sqlite_idem_claim(h, "t", &c), ACEMQ_CLAIMED);
    uint64_t t3 = c.token;
    assert_true(t3 > t2);
    assert_int_equal(acemq_idem_confirm(h, "t", 1, t2), ACEMQ_ESTALE);

    /* An expired confirmation is a new claim with a larger token, as is a
     * takeover. */
    assert_int_equal(acemq_idem_confirm(h, "t", 1, t3), 0);
    acemq_manual_clock_advance(f->clock, 1000);
    assert_int_equal(sqlite_idem_claim(h, "t", &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 0);
    uint64_t t4 = c.token;
    acemq_idem_stats st;
    assert_int_equal(acemq_idem_stats_get(h, &st), 0);
    assert_int_equal(st.expirations, 2); /* one purged, one forgotten on reclaim */
    assert_true(t4 > t3);
    acemq_manual_clock_advance(f->clock, LEASE);
    assert_int_equal(sqlite_idem_claim(h, "t", &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 1);
    assert_true(c.token > t4);
    acemq_idem_close(h);
}

/* Fingerprints persist, and the abandoned-claim purge waits for retention. */
void fingerprints_and_abandoned(void **state)
{
    fixture *f = *state;
    acemq_idem *h = sqlite_idem_open_url(f, f->url);
    acemq_claim_opts a = {0}, b = {0};
    a.fingerprint = "AAAA";
    a.fingerprint_len = 4;
    b.fingerprint = "BBBB";
    b.fingerprint_len = 4;
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &a, &c), ACEMQ_CLAIMED);
    acemq_idem_close(h);
    h = sqlite_idem_open_url(f, f->url);
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &b, &c), ACEMQ_EMISMATCH);
    acemq_manual_clock_advance(f->clock, LEASE);
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &b, &c), ACEMQ_EMISMATCH);
    /* No fingerprint given: the stored one is kept for the next claimer. */
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, NULL, &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 1);
    acemq_manual_clock_advance(f->clock, LEASE);
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &b, &c), ACEMQ_EMISMATCH);
    /* Abandoned claims go once idle for the retention period. */
    uint64_t purged = 99;
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 0);
    acemq_manual_clock_advance(f->clock, RETENTION);
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 1);
    assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &b, &c), ACEMQ_CLAIMED);
    acemq_idem_close(h);
}

/* ---- purge ---------------------------------------------------------------- */

/* Abandoned claims have no index; purge walks the primary key in windows.
 * Several windows' worth of rows, of every kind, interleaved in key order:
 * exactly the abandoned claims (and expired records) go. */
void purge_walks_every_window(void **state)
{
    fixture *f = *state;
    acemq_idem *h = sqlite_idem_open_url(f, f->url);
    sqlite3 *db = sqlite_idem_raw_open(f->path);
    /* The schema has the expires_at index and no other. */
    assert_int_equal(sqlite_idem_query_int(db,
                                           "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                                           " AND tbl_name = 'acemq_idem' AND sql IS NOT NULL"),
                     1);
    assert_int_equal(sqlite_idem_query_int(db, "SELECT count(*) FROM sqlite_master"
                                               " WHERE name = 'acemq_idem_expires'"),
                     1);
    /* i % 4: 0 abandoned past retention, 1 lease ran out within retention,
     * 2 live claim, 3 confirmed and not expired. Ids are blobs with a NUL
     * and a 0xff byte, so the walk's order is memcmp's. */
    char sql[1024];
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 9999)"
             " INSERT INTO acemq_idem(id, state, token, lease_until, expires_at)"
             " SELECT CAST(printf('w%%05d', (i * 7919) %% 10000) || x'00ff' AS BLOB),"
             " CASE i %% 4 WHEN 3 THEN 2 ELSE 1 END, 1,"
             " CASE i %% 4 WHEN 0 THEN %lld WHEN 1 THEN %lld WHEN 2 THEN %lld END,"
             " CASE i %% 4 WHEN 3 THEN %lld END FROM n",
             (long long)(T0 - RETENTION - 1), (long long)(T0 - 1), (long long)(T0 + LEASE),
             (long long)(T0 + 1));
    sqlite_idem_exec(db, sql);
    /* Expired records go by the index, the same call. */
    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(h, "done", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(h, "done", 4, c.token), 0);
    acemq_manual_clock_advance(f->clock, RETENTION);

    uint64_t purged = 0;
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    /* Now is T0 + RETENTION: kinds 0 and 1 are past retention, kind 3
     * expired, kind 2 a claim abandoned only RETENTION - LEASE ago. */
    assert_int_equal(purged, 2500 + 2500 + 2500 + 1);
    assert_int_equal(sqlite_idem_query_int(db, "SELECT count(*) FROM acemq_idem"), 2500);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM acemq_idem WHERE lease_until <> %lld",
             (long long)(T0 + LEASE));
    assert_int_equal(sqlite_idem_query_int(db, sql), 0);
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 0);
    acemq_manual_clock_advance(f->clock, LEASE);
    assert_int_equal(acemq_idem_purge(h, &purged), 0);
    assert_int_equal(purged, 2500);
    assert_int_equal(sqlite_idem_query_int(db, "SELECT count(*) FROM acemq_idem"), 0);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    acemq_idem_close(h);
}
