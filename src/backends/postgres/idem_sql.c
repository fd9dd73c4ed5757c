/* idem_sql.c — the PostgreSQL idempotency store's schema and statements,
 * written out for one table (its name checked by idem_open.c: letters,
 * digits and '_' only). docs/schema.md describes the table.
 *
 * Columns by state: claimed (1) has lease_until and no expires_at;
 * confirmed (2) and released (0) have expires_at and no lease_until.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/postgres/idem_pg.h"

#define INT8 20u
#define BYTEA 17u

/* Now in ms: the caller's $n when it sent one (an injected clock), else
 * the database's clock. */
#define NOW(n) "coalesce($" #n "::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)"

const int acemq__pg_idem_nparams[PGQ_COUNT] = {
    [PGQ_CLAIM] = 4,        [PGQ_CONFIRM] = 5,    [PGQ_RELEASE] = 4,         [PGQ_RENEW] = 4,
    [PGQ_IS_CONFIRMED] = 2, [PGQ_PURGE_DONE] = 2, [PGQ_PURGE_ABANDONED] = 3, [PGQ_COUNTS] = 1,
    [PGQ_NEXT_LEASE] = 1,   [PGQ_INSPECT] = 2,    [PGQ_FORGET] = 1,          [PGQ_CLAIM_MANY] = 4,
    [PGQ_CONFIRM_MANY] = 5,
};

const unsigned acemq__pg_idem_types[PGQ_COUNT][5] = {
    [PGQ_CLAIM] = {BYTEA, INT8, INT8, BYTEA},
    [PGQ_CONFIRM] = {BYTEA, INT8, INT8, INT8, BYTEA},
    [PGQ_RELEASE] = {BYTEA, INT8, INT8, INT8},
    [PGQ_RENEW] = {BYTEA, INT8, INT8, INT8},
    [PGQ_IS_CONFIRMED] = {BYTEA, INT8},
    [PGQ_PURGE_DONE] = {INT8, INT8},
    [PGQ_PURGE_ABANDONED] = {INT8, INT8, INT8},
    [PGQ_COUNTS] = {INT8},
    [PGQ_NEXT_LEASE] = {INT8},
    [PGQ_INSPECT] = {BYTEA, INT8},
    [PGQ_FORGET] = {BYTEA},
    [PGQ_CLAIM_MANY] = {1001u, 1016u, 1001u, INT8}, /* bytea[], bigint[] */
    [PGQ_CONFIRM_MANY] = {1001u, 1016u, 1001u, INT8, INT8},
};

/* A claim may take the row: released, confirmed past retention, or claimed
 * with the lease run out and no other payload's fingerprint (fp). */
#define TAKE_WITH(now, fp)                                                                         \
    "(r.state = 0 OR (r.state = 2 AND r.expires_at <= " now ") OR (r.state = 1 AND "               \
    "r.lease_until <= " now " AND NOT (" fp " IS NOT NULL AND r.fingerprint IS NOT NULL AND "      \
    "r.fingerprint <> " fp ")))"
/* The single claim's now is its new lease end less its lease. */
#define TAKE TAKE_WITH("(EXCLUDED.lease_until - $3)", "$4")
#define TAKE_MANY TAKE_WITH(NOW(4), "EXCLUDED.fingerprint")

/* The SET of a claim that finds the row: the new claim where TAKE says the
 * row may be taken, else the row rewritten as it was. Every SET reads the
 * row as it was. */
#define CLAIM_SET(take, fp)                                                                        \
    "state = CASE WHEN " take " THEN 1 ELSE r.state END, "                                         \
    "token = CASE WHEN " take " THEN EXCLUDED.token ELSE r.token END, "                            \
    "lease_until = CASE WHEN " take " THEN EXCLUDED.lease_until ELSE r.lease_until END, "          \
    "expires_at = CASE WHEN " take " THEN NULL ELSE r.expires_at END, "                            \
    "fingerprint = CASE WHEN " take " AND r.state = 2 THEN " fp " WHEN " take " THEN coalesce(" fp \
    ", r.fingerprint) ELSE r.fingerprint END, "                                                    \
    "result = CASE WHEN " take " THEN NULL ELSE r.result END, "                                    \
    "takeover = CASE WHEN " take " THEN r.state = 1 ELSE r.takeover END"

static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    (void)vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

int acemq__pg_idem_sql(const char *t, char **sql, char **schema)
{
    /* The claim: one statement. A new id is inserted; an id the claim may
     * take is updated into the new claim; any other row is rewritten as it
     * was, which locks its latest version so the answer read back (held,
     * confirmed, another fingerprint) is that version's. The first column
     * says which: the row holds the token this statement's nextval drew
     * (currval, this session's). Every SET reads the row as it was. */
    sql[PGQ_CLAIM] = format(
        "INSERT INTO \"%s\" AS r (id, state, token, lease_until, expires_at, fingerprint, result,"
        " takeover) VALUES ($1, 1, nextval('\"%s_token\"'), " NOW(
            2) " + $3, NULL, $4, NULL, false)"
               " ON CONFLICT (id) DO UPDATE SET " CLAIM_SET(
                   TAKE,
                   "$4") ", batch = CASE WHEN " TAKE
                         " THEN NULL ELSE r.batch END RETURNING r.token = currval('\"%s_token\"'),"
                         " r.state, r.token, r.lease_until, r.expires_at, r.fingerprint, r.result, "
                         "r.takeover",
        t, t, t);
    /* A batch: one statement over arrays of distinct ids (the caller
     * answers a repeated id from its first one's row), taken in id order
     * so that batches which share ids lock them in the same order. A row
     * this statement claimed holds its batch number, a value of the token
     * sequence, so no other statement's. */
    sql[PGQ_CLAIM_MANY] = format(
        "WITH b AS MATERIALIZED (SELECT nextval('\"%s_token\"') AS v) INSERT INTO \"%s\" AS r (id, "
        "state, token, lease_until, expires_at, fingerprint, result,"
        " takeover, batch) SELECT u.id, 1, nextval('\"%s_token\"'), " NOW(
            4) " + u.lease, NULL,"
               " u.fp, NULL, false, (SELECT v FROM b) FROM unnest($1::bytea[], $2::bigint[], "
               "$3::bytea[]) AS u(id,"
               " lease, fp) ORDER BY u.id ON CONFLICT (id) DO UPDATE SET " CLAIM_SET(
                   TAKE_MANY, "EXCLUDED.fingerprint") ", batch = CASE WHEN " TAKE_MANY
                                                      " THEN (SELECT v FROM b) ELSE r.batch END"
                                                      " RETURNING r.batch = (SELECT v FROM b), "
                                                      "r.state, r.token, "
                                                      "r.lease_until, r.expires_at, r.fingerprint,"
                                                      " r.result, r.takeover, r.id",
        t, t, t);
    /* A repeated confirm is fine while the confirmation is remembered. */
    sql[PGQ_CONFIRM] =
        format("WITH p AS (SELECT " NOW(
                   3) " AS now) UPDATE \"%s\" SET state = 2,"
                      " expires_at = (SELECT now FROM p) + $4, result = $5, lease_until = NULL"
                      " WHERE id = $1 AND token = $2 AND (state = 1 OR (state = 2 AND expires_at >"
                      " (SELECT now FROM p))) RETURNING 1",
               t);
    /* A batch of confirms: one statement over arrays, each element
     * confirmed as the single confirm above would confirm it. A confirm
     * keeps the row's token and leaves a confirmation that the same token
     * confirms again, so n confirms in a row answer each element from the
     * row as it was, and the last of the elements naming one row with its
     * token leaves its result. l keeps that last one of each (id, token),
     * so the UPDATE meets each row once; it returns their ordinalities
     * and the caller answers the elements that share each one's id and
     * token alike. l comes in id order: walked by a nested loop over the
     * primary key, the plan for any table past a few pages, it locks the
     * rows in the order the batch claim does. The arrays come through a
     * sub-select, so that no plan depends on their length and every run
     * reuses the one generic plan: a custom plan per run costs more to
     * make than the run itself. */
    sql[PGQ_CONFIRM_MANY] = format(
        "WITH p AS MATERIALIZED (SELECT " NOW(
            4) " AS now) UPDATE \"%s\" AS r SET state = 2, expires_at = (SELECT now FROM p) + $5,"
               " result = l.result, lease_until = NULL FROM (SELECT DISTINCT ON (id, token) id,"
               " token, result, o FROM unnest((SELECT $1::bytea[]), (SELECT $2::bigint[]),"
               " (SELECT $3::bytea[])) WITH ORDINALITY AS u(id, token, result, o)"
               " ORDER BY id, token, o DESC) AS l WHERE r.id = l.id AND r.token = l.token AND"
               " (r.state = 1 OR (r.state = 2 AND r.expires_at > (SELECT now FROM p)))"
               " RETURNING l.o",
        t);
    sql[PGQ_RELEASE] = format("UPDATE \"%s\" SET state = 0, lease_until = NULL, expires_at = " NOW(
                                  3) " + $4 WHERE id = $1 AND token = $2 AND state = 1 RETURNING 1",
                              t);
    sql[PGQ_RENEW] = format("UPDATE \"%s\" SET lease_until = " NOW(
                                3) " + $4 WHERE id = $1 AND token = $2 AND state = 1 RETURNING 1",
                            t);
    sql[PGQ_IS_CONFIRMED] =
        format("SELECT 1 FROM \"%s\" WHERE id = $1 AND state = 2 AND expires_at > " NOW(2), t);
    /* Purges go in batches, each its own short transaction; SKIP LOCKED
     * leaves rows a claim is working on to the next purge. */
    sql[PGQ_PURGE_DONE] =
        format("DELETE FROM \"%s\" WHERE id IN (SELECT id FROM \"%s\" WHERE"
               " state <> 1 AND expires_at <= " NOW(1) " LIMIT $2 FOR UPDATE SKIP LOCKED)",
               t, t);
    sql[PGQ_PURGE_ABANDONED] =
        format("DELETE FROM \"%s\" WHERE id IN (SELECT id FROM \"%s\" WHERE"
               " state = 1 AND lease_until <= " NOW(1) " - $2 LIMIT $3 FOR UPDATE SKIP LOCKED)",
               t, t);
    /* acemq_idem_state: 1 held, 2 abandoned, 3 confirmed, 4 expired. */
#define STATE_OF(n)                                                                                \
    "CASE WHEN state = 1 AND lease_until > " NOW(                                                  \
        n) " THEN 1 WHEN state = 2 AND expires_at > " NOW(n) " THEN 3 WHEN state = 2 THEN 4 ELSE " \
                                                             "2 END"
    sql[PGQ_COUNTS] = format("SELECT " STATE_OF(1) ", count(*) FROM \"%s\" GROUP BY 1", t);
    sql[PGQ_NEXT_LEASE] = format("SELECT id, token, lease_until FROM \"%s\" WHERE state = 1 AND"
                                 " lease_until > " NOW(1) " ORDER BY lease_until LIMIT 1",
                                 t);
    sql[PGQ_INSPECT] = format("SELECT " STATE_OF(2) ", token, coalesce(lease_until, 0),"
                                                    " coalesce(expires_at, 0), result IS NOT NULL,"
                                                    " coalesce(length(result), 0),"
                                                    " coalesce(length(fingerprint), 0) FROM \"%s\""
                                                    " WHERE id = $1",
                              t);
    sql[PGQ_FORGET] = format("DELETE FROM \"%s\" WHERE id = $1", t);
    *schema =
        format("CREATE TABLE IF NOT EXISTS \"%s\" (id bytea PRIMARY KEY,"
               " state smallint NOT NULL, token bigint NOT NULL, lease_until bigint,"
               " expires_at bigint, fingerprint bytea, result bytea,"
               " takeover boolean NOT NULL DEFAULT false, batch bigint) WITH (fillfactor = 80);"
               " CREATE SEQUENCE IF NOT EXISTS \"%s_token\";"
               " CREATE INDEX IF NOT EXISTS \"%s_expires\" ON \"%s\" (expires_at)"
               " WHERE state <> 1",
               t, t, t, t);
    int ok = *schema != NULL;
    for (int i = 0; i < PGQ_COUNT; i++)
        ok = ok && sql[i] != NULL;
    if (ok) return 0;
    for (int i = 0; i < PGQ_COUNT; i++) {
        free(sql[i]);
        sql[i] = NULL;
    }
    free(*schema);
    *schema = NULL;
    return ACEMQ_ENOMEM;
}
