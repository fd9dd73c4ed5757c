/* outbox_postgres.c — PostgreSQL only: claims stay on their page, marks pay
 * for no index they do not need, only a waiting handle listens for NOTIFY,
 * and a lost connection comes back, with the limits that make a cut
 * network an error rather than a hang. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "conformance/outbox_fixture.h"
#include "backends/test_control.h"
#include "conformance/outbox_cases.h"
#include "conformance/pg_limits.h"

/* PostgreSQL only. A claim changes no indexed column, and the table is made
 * with fillfactor 50, so every claimed row's new version stays on its page
 * (a HOT update, no new index entries: half the claim's cost). With the
 * default fillfactor of 100 the pages are full and the claimed rows move. */
void claims_stay_on_their_page(void **state)
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
        acemq_outbox_record r = outbox_rec(id, NULL, body);
        assert_int_equal(outbox_add(f, NULL, &r, NULL), 0);
    }
    outbox_sql(f, NULL, "COMMIT");
    outbox_sql(f, NULL,
               "CREATE TABLE pages AS SELECT id, (ctid::text::point)[0]::int AS page"
               " FROM acemq_outbox");
    assert_true(outbox_scalar(f, "SELECT count(DISTINCT page) FROM pages") >= 3);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 40, 60000, &m), 40);
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
void marks_pay_for_no_index_they_do_not_need(void **state)
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
void only_a_waiting_handle_listens(void **state)
{
    outbox_fixture *f = *state;
    acemq_outbox *h = outbox_fixture_open(f);
    int listening = -1;
    assert_int_equal(acemq__pg_outbox_listening(h, &listening), 0);
    assert_int_equal(listening, 0);
    const char *ids[] = {"unheard"};
    outbox_add_committed(f, ids, NULL, 1);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 10, 60000, &m), 1);
    assert_int_equal(acemq_outbox_mark_published(h, m[0].id, m[0].token), 0);
    assert_int_equal(acemq__pg_outbox_listening(h, &listening), 0);
    assert_int_equal(listening, 0);
    assert_int_equal(acemq_outbox_wait(h, 0), 1); /* starts listening: "look again" */
    assert_int_equal(acemq__pg_outbox_listening(h, &listening), 0);
    assert_int_equal(listening, 1);
    const char *later[] = {"heard"};
    outbox_add_committed(f, later, NULL, 1);
    assert_int_equal(acemq_outbox_wait(h, 10000), 1);
    acemq_outbox_close(h);
}

/* PostgreSQL only. The server ends a handle's connection (as a restart, a
 * failover or a network cut would). The call that finds it gone answers
 * ACEMQ_EIO, the next one connects again: its statements prepared anew, so
 * claims and marks work, and its LISTEN renewed, so a commit still wakes
 * acemq_outbox_wait (else it would sleep out its 10 s and answer 0). The
 * connection keeps connect.c's limits, before the cut and after; a limit
 * the URL sets wins. */
void a_lost_connection_comes_back(void **state)
{
    outbox_fixture *f = *state;
    char url[1200];
    outbox_fixture_tagged_url(f, "victim", url, sizeof url);
    acemq_outbox *h = NULL;
    assert_int_equal(acemq_outbox_open(&h, url, &f->opts), 0);
    assert_pg_limits(acemq__pg_outbox_conn(h), &pg_default_limits);
    assert_int_equal(acemq_outbox_wait(h, 0), 1); /* listening from here on */
    const char *first[] = {"before"};
    outbox_add_committed(f, first, NULL, 1);
    const acemq_outbox_msg *m;
    assert_int_equal(outbox_claim(h, 10, 60000, &m), 1);
    char id[64];
    snprintf(id, sizeof id, "%s", m[0].id);
    uint64_t token = m[0].token;

    assert_int_equal(outbox_fixture_cut(f, "victim"), 1);
    acemq_outbox_pending p;
    assert_int_equal(acemq_outbox_pending_count(h, &p), ACEMQ_EIO);
    assert_non_null(strstr(acemq_outbox_errmsg(h), "postgres"));
    assert_int_equal(acemq_outbox_pending_count(h, &p), 0);
    assert_pg_limits(acemq__pg_outbox_conn(h), &pg_default_limits);
    assert_int_equal(p.claimed, 1);
    assert_int_equal(acemq_outbox_mark_published(h, id, token), 0);

    const char *later[] = {"after"};
    outbox_add_committed(f, later, NULL, 1);
    assert_int_equal(acemq_outbox_wait(h, 10000), 1);
    assert_int_equal(outbox_claim(h, 10, 60000, &m), 1);
    assert_string_equal(m[0].id, "after");
    acemq_outbox_close(h);

    size_t n = strlen(url);
    snprintf(url + n, sizeof url - n, "%skeepalives_idle=7&tcp_user_timeout=5000",
             strchr(url, '?') ? "&" : "?");
    assert_int_equal(acemq_outbox_open(&h, url, &f->opts), 0);
    const pg_limits own = {7, 10, 3, 5000, "10"};
    assert_pg_limits(acemq__pg_outbox_conn(h), &own);
    acemq_outbox_close(h);
}
