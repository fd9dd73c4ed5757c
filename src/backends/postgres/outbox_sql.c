/* outbox_sql.c — the PostgreSQL outbox's table and statements; see
 * outbox_sql.h. The statements read the time from NOW_CTE, so that a
 * handle with a clock of its own and one on the database's clock run the
 * same text. */
#include "backends/postgres/outbox_sql.h"

/* The time every statement works with: the handle's clock when it has one
 * ($1), else the database's. */
#define NOW_CTE                                                                                    \
    "WITH t AS (SELECT COALESCE($1::bigint,"                                                       \
    " (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) "

/* fillfactor 50: inserts leave half of each page free, so a claim, which
 * changes only token and lease_until (no indexed column), writes its new
 * row version on the same page as a HOT update, with no new index entries
 * (else three: the primary key, id and the due index). A page fills at 11
 * to 13 rows of 200-byte bodies, and a claim of them all needs room for as
 * many new versions, which a fillfactor of 70 does not leave. Outbox rows
 * are short-lived, so the table's size is the backlog's, doubled, and a
 * claim and a mark write no index. Set at creation only: a table made by an
 * earlier version keeps its fillfactor, which an operator may have chosen
 * (docs/schema.md says how to change it).
 *
 * id and ordering_key are COLLATE "C": acemq only asks whether two of them
 * are equal, which every deterministic collation answers byte for byte, but
 * an index ordered by a language's collation compares through it at every
 * step of every lookup and insert. A mark finds each row by id and adds an
 * entry to the id index (its new version is not HOT), so under a language
 * collation every mark pays for those comparisons, twice with the index
 * below.
 *
 * No index on published_at: the PostgreSQL purge walks seq ranges
 * (Q_PURGE), and every mark would add an entry to it. SQLite's purge uses
 * one and keeps it. */
const char acemq__pg_schema_sql[] =
    "CREATE TABLE IF NOT EXISTS acemq_schema_version("
    " component text PRIMARY KEY, version integer NOT NULL);"
    "CREATE TABLE IF NOT EXISTS acemq_outbox("
    " seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " id text COLLATE \"C\" NOT NULL UNIQUE DEFAULT gen_random_uuid()::text,"
    " destination text NOT NULL,"
    " routing_key text NOT NULL DEFAULT '',"
    " ordering_key text COLLATE \"C\","
    " headers text,"
    " content_type text,"
    " body bytea NOT NULL DEFAULT ''::bytea,"
    " created_at bigint NOT NULL"
    "  DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,"
    " state smallint NOT NULL DEFAULT 0,"
    " attempts integer NOT NULL DEFAULT 0,"
    " token bigint NOT NULL DEFAULT 0,"
    " lease_until bigint,"
    " next_attempt_at bigint NOT NULL DEFAULT 0,"
    " last_error text,"
    " published_at bigint) WITH (fillfactor = 50);"
    "CREATE INDEX IF NOT EXISTS acemq_outbox_due ON acemq_outbox(seq) WHERE state = 0;"
    "CREATE INDEX IF NOT EXISTS acemq_outbox_key ON acemq_outbox(ordering_key, seq)"
    " WHERE state <> 1 AND ordering_key IS NOT NULL;"
    "CREATE INDEX IF NOT EXISTS acemq_outbox_dead ON acemq_outbox(seq) WHERE state = 2;"
    "CREATE OR REPLACE FUNCTION acemq_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS"
    " $$BEGIN PERFORM pg_notify('acemq_outbox', ''); RETURN NULL; END$$;"
    "CREATE OR REPLACE TRIGGER acemq_outbox_notify AFTER INSERT ON acemq_outbox"
    " FOR EACH STATEMENT EXECUTE FUNCTION acemq_outbox_notify();";

#define COLUMNS                                                                                    \
    "o.seq, o.id, o.destination, o.routing_key, o.ordering_key, o.headers, o.content_type, "       \
    "o.body, o.created_at, o.attempts, o.token, o.last_error"

const acemq__pg_query acemq__pg_queries[Q_COUNT] = {
    /* $1 now, $2 lease ms, $3 batch size. */
    [Q_CLAIM] = {"acemq_claim",
                 /* "seq IN (subquery)", not a join with a CTE: the planner then
                  * updates the picked rows through the primary key instead of
                  * hashing a scan of the whole table (3x faster at 1,000). */
                 NOW_CTE "UPDATE acemq_outbox o SET token = o.token + 1,"
                         " lease_until = t.now + $2::bigint FROM t WHERE o.seq IN ("
                         "SELECT d.seq FROM acemq_outbox d, t"
                         " WHERE d.state = 0 AND d.next_attempt_at <= t.now"
                         " AND (d.lease_until IS NULL OR d.lease_until <= t.now)"
                         " AND (d.ordering_key IS NULL OR NOT EXISTS ("
                         "  SELECT 1 FROM acemq_outbox p WHERE p.ordering_key = d.ordering_key"
                         "  AND p.state <> 1 AND p.seq < d.seq))"
                         " ORDER BY d.seq LIMIT $3 FOR UPDATE OF d SKIP LOCKED)"
                         " RETURNING " COLUMNS,
                 3},
    /* The relay's claim (claim_runs): a keyed record is due when its key's
     * oldest unpublished record (its head) is due and unleased, so a key's
     * pending records are claimed together, oldest first. A key is claimed
     * only with its head locked by this claim: a relay that skips a head
     * another claim holds locked takes nothing of that key, so two relays
     * never split one key's records between them. $1 now, $2 lease ms,
     * $3 batch size. */
    [Q_CLAIM_RUNS] = {"acemq_claim_runs",
                      /* The head is joined LATERAL, not a subquery per row:
                       * the planner then memoizes it per key. */
                      NOW_CTE ", c AS (SELECT d.seq, d.ordering_key, h.seq AS head"
                              " FROM t, acemq_outbox d LEFT JOIN LATERAL (SELECT p.seq,"
                              "  p.state = 0 AND p.next_attempt_at <= t.now"
                              "  AND (p.lease_until IS NULL OR p.lease_until <= t.now) AS free"
                              "  FROM acemq_outbox p WHERE p.ordering_key = d.ordering_key"
                              "  AND p.state <> 1 ORDER BY p.seq LIMIT 1) h ON true"
                              " WHERE d.state = 0 AND d.next_attempt_at <= t.now"
                              " AND (d.lease_until IS NULL OR d.lease_until <= t.now)"
                              " AND (d.ordering_key IS NULL OR h.free)"
                              " ORDER BY d.seq LIMIT $3 FOR UPDATE OF d SKIP LOCKED)"
                              " UPDATE acemq_outbox o SET token = o.token + 1,"
                              " lease_until = t.now + $2::bigint FROM t WHERE o.seq IN ("
                              "SELECT c.seq FROM c"
                              " WHERE c.ordering_key IS NULL OR c.head IN (SELECT seq FROM c))"
                              " RETURNING " COLUMNS,
                      3},
    /* $1 now, $2 ids, $3 tokens. */
    /* "(id, token) IN (SELECT ... unnest)", not a join with unnest(): the
     * join could be planned as a nested loop over the whole array for every
     * row (900 ms at 1,000 marks); IN hashes the pairs once and looks each
     * row up through the id index (25 ms). */
    [Q_PUBLISH] = {"acemq_publish",
                   NOW_CTE "UPDATE acemq_outbox o SET state = 1, published_at = t.now,"
                           " lease_until = NULL FROM t"
                           " WHERE (o.id, o.token) IN (SELECT m.id, m.token"
                           " FROM unnest($2::text[], $3::bigint[]) AS m(id, token))"
                           " AND o.state = 0 AND o.lease_until IS NOT NULL RETURNING o.id",
                   3},
    [Q_PUBLISH_DELETE] = {"acemq_publish_delete",
                          NOW_CTE "DELETE FROM acemq_outbox o USING t"
                                  " WHERE (o.id, o.token) IN (SELECT m.id, m.token"
                                  " FROM unnest($2::text[], $3::bigint[]) AS m(id, token))"
                                  " AND o.state = 0 AND o.lease_until IS NOT NULL"
                                  " AND t.now IS NOT NULL RETURNING o.id",
                          3},
    /* One record (a relay with batch 1): a plain primary-key-like lookup,
     * cheaper to plan than the array form. $1 now, $2 id, $3 token. */
    [Q_PUBLISH_ONE] = {"acemq_publish_one",
                       NOW_CTE "UPDATE acemq_outbox o SET state = 1, published_at = t.now,"
                               " lease_until = NULL FROM t WHERE o.id = $2 AND o.token = $3::bigint"
                               " AND o.state = 0 AND o.lease_until IS NOT NULL RETURNING o.id",
                       3},
    /* $1 now, $2 id, $3 token, $4 reason, $5 max attempts, $6 base, $7 max
     * delay, $8 jitter cut; right-hand sides read the row before the update. */
    [Q_FAIL] = {"acemq_fail",
                NOW_CTE "UPDATE acemq_outbox o SET attempts = o.attempts + 1, last_error = $4,"
                        " lease_until = NULL,"
                        " state = CASE WHEN o.attempts + 1 >= $5::int THEN 2 ELSE 0 END,"
                        " next_attempt_at = t.now + LEAST($6::bigint << LEAST(o.attempts, 30),"
                        " $7::bigint) * (100 - $8::int) / 100"
                        " FROM t WHERE o.id = $2 AND o.token = $3::bigint AND o.state = 0"
                        " AND o.lease_until IS NOT NULL RETURNING o.state",
                8},
    [Q_RELEASE] = {"acemq_release",
                   NOW_CTE "UPDATE acemq_outbox o SET lease_until = NULL, next_attempt_at = t.now"
                           " FROM t WHERE o.id = $2 AND o.token = $3::bigint AND o.state = 0"
                           " AND o.lease_until IS NOT NULL RETURNING o.seq",
                   3},
    [Q_EXISTS] = {"acemq_exists", "SELECT id FROM acemq_outbox WHERE id = ANY($1::text[])", 1},
    [Q_PENDING] = {"acemq_pending",
                   NOW_CTE "SELECT count(*) FILTER (WHERE o.lease_until IS NULL"
                           " OR o.lease_until <= (SELECT now FROM t)),"
                           " count(*) FILTER (WHERE o.lease_until > (SELECT now FROM t)),"
                           " (SELECT count(*) FROM acemq_outbox WHERE state = 2),"
                           " COALESCE((SELECT now FROM t) - min(o.created_at), 0)"
                           " FROM acemq_outbox o WHERE o.state = 0",
                   1},
    [Q_LIST_DEAD] = {"acemq_list_dead",
                     "SELECT " COLUMNS " FROM acemq_outbox o WHERE o.state = 2"
                     " ORDER BY o.seq LIMIT $1",
                     1},
    [Q_RETRY] = {"acemq_retry",
                 NOW_CTE "UPDATE acemq_outbox o SET state = 0, attempts = 0,"
                         " next_attempt_at = t.now, lease_until = NULL FROM t"
                         " WHERE o.id = $2 AND o.state = 2 RETURNING o.seq",
                 2},
    /* $1 now, $2 age, $3 first seq to look at, $4 batch: deletes what is
     * old enough among the $4 seq values from the first row at or after $3
     * (found through the primary key, so gaps cost nothing), and answers how
     * many and from where. Walking seq ranges, each batch reads its own rows
     * only; a batch through an index on published_at instead stepped again
     * over the index entries of every earlier batch's dead rows, and a purge
     * of 1,000,000 took 68 s where one DELETE took 1.8 s. */
    [Q_PURGE] = {"acemq_purge",
                 NOW_CTE ", r AS (SELECT min(seq) AS lo FROM acemq_outbox WHERE seq >= $3::bigint),"
                         " del AS (DELETE FROM acemq_outbox o USING t, r"
                         " WHERE o.seq >= r.lo AND o.seq < r.lo + $4::bigint AND o.state = 1"
                         " AND o.published_at <= t.now - $2::bigint RETURNING 1)"
                         " SELECT (SELECT count(*) FROM del), (SELECT lo FROM r)",
                 4},
    [Q_PURGE_END] = {"acemq_purge_end", "SELECT COALESCE(max(seq), 0) FROM acemq_outbox", 0},
};
