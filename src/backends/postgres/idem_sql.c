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
    [PGQ_NEXT_LEASE] = 1,   [PGQ_INSPECT] = 2,    [PGQ_FORGET] = 1,
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
};

/* A claim may take the row: released, confirmed past retention, or claimed
 * with the lease run out and no other payload's fingerprint. */
#define TAKE                                                                                       \
    "(r.state = 0 OR (r.state = 2 AND r.expires_at <= (SELECT now FROM p)) OR (r.state = 1 AND "   \
    "r.lease_until <= (SELECT now FROM p) AND NOT ($4 IS NOT NULL AND r.fingerprint IS NOT NULL "  \
    "AND r.fingerprint <> $4)))"

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
     * confirmed, another fingerprint) is that version's. claimed says
     * which: the row holds this statement's token. Every SET reads the row
     * as it was. */
    sql[PGQ_CLAIM] = format(
        "WITH p AS (SELECT " NOW(
            2) " AS now, nextval('\"%s_token\"') AS tok) "
               "INSERT INTO \"%s\" AS r (id, state, token, lease_until, expires_at, fingerprint, "
               "result,"
               " takeover) SELECT $1, 1, p.tok, p.now + $3, NULL, $4, NULL, false FROM p "
               "ON CONFLICT (id) DO UPDATE SET "
               "state = CASE WHEN " TAKE " THEN 1 ELSE r.state END, "
               "token = CASE WHEN " TAKE " THEN EXCLUDED.token ELSE r.token END, "
               "lease_until = CASE WHEN " TAKE " THEN EXCLUDED.lease_until ELSE r.lease_until END, "
               "expires_at = CASE WHEN " TAKE " THEN NULL ELSE r.expires_at END, "
               "fingerprint = CASE WHEN " TAKE " AND r.state = 2 THEN $4 WHEN " TAKE
               " THEN coalesce($4, r.fingerprint) ELSE r.fingerprint END, "
               "result = CASE WHEN " TAKE " THEN NULL ELSE r.result END, "
               "takeover = CASE WHEN " TAKE " THEN r.state = 1 ELSE r.takeover END "
               "RETURNING r.token = (SELECT tok FROM p), r.state, r.token, r.lease_until, "
               "r.expires_at,"
               " r.fingerprint, r.result, r.takeover, (SELECT now FROM p)",
        t, t);
    /* A repeated confirm is fine while the confirmation is remembered. */
    sql[PGQ_CONFIRM] =
        format("WITH p AS (SELECT " NOW(
                   3) " AS now) UPDATE \"%s\" SET state = 2,"
                      " expires_at = (SELECT now FROM p) + $4, result = $5, lease_until = NULL"
                      " WHERE id = $1 AND token = $2 AND (state = 1 OR (state = 2 AND expires_at >"
                      " (SELECT now FROM p))) RETURNING 1",
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
    *schema = format("CREATE TABLE IF NOT EXISTS \"%s\" (id bytea PRIMARY KEY,"
                     " state smallint NOT NULL, token bigint NOT NULL, lease_until bigint,"
                     " expires_at bigint, fingerprint bytea, result bytea,"
                     " takeover boolean NOT NULL DEFAULT false) WITH (fillfactor = 80);"
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
