#!/bin/bash
# pg_lease_cost.sh — what PostgreSQL would save per row if the relay's lease
# were held differently. Four ways to claim and mark a batch of 500:
#   row:       what acemq does (src/store/pg_outbox.c, Q_CLAIM then
#              Q_PUBLISH): the claim locks the rows and writes each one's
#              lease and token (a HOT update), and commits; the mark finds
#              each row by (id, token) and commits;
#   row/seq:   the same claim; the mark finds each row by (seq, token), as
#              it could if the mark carried the row's seq (an API change);
#   tx:        no lease written: the claim only locks the rows (FOR UPDATE
#              SKIP LOCKED) and the mark, by seq, runs in the same
#              transaction, so the lease is the transaction itself (a
#              redesign: one connection per batch in flight, and a lease
#              that ends with the session, not at a time);
#   batch:     one lease row per batch, in a table of leases: claims take
#              turns on an advisory lock, pass over rows under a live
#              lease, and write nothing into the rows; the mark, by seq,
#              checks the batch's lease and deletes it (a redesign that
#              keeps today's API: leases on the database's clock, claim and
#              mark on any handle).
#
#   scripts/services.sh start postgres && eval "$(scripts/services.sh env postgres)"
#   bench/pg_lease_cost.sh [ROUNDS]          # default 3; ACEMQ=path/to/acemq
#
# It makes a database acemq_lease_cost; each round has acemq make its
# outbox table there (`acemq outbox status`, so build it first) in four
# schemas, each with a table of leases beside it that only batch uses,
# fills each with 20,000 rows of 200-byte bodies, and has one procedure
# take the four tables' batches in turn (so all meet the same state of the
# machine). Nothing fails and no lease expires, so batch leaves out what
# those would cost it. It prints the median over the rounds of each way's
# claim, mark and total server time per row, and each total against row's.
# The database is dropped at the end. docs/performance.md, "An Intel
# machine", has figures, and why they overstate what the relay would save:
# a prototype of batch in the relay took a tenth off PostgreSQL's work per
# record, not half, and the throughput did not move.
set -euo pipefail

rounds=${1:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [ROUNDS]" >&2; exit 2; }
base=${ACEMQ_PG_URL:?set ACEMQ_PG_URL (scripts/services.sh env postgres)}
server=${base%/*}
db=acemq_lease_cost
acemq=${ACEMQ:-build-release/acemq}
[ -x "$acemq" ] || { echo "$0: no $acemq; build it, or set ACEMQ to the acemq binary" >&2; exit 2; }
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
# shellcheck source=bench/pg_cost_rounds.sh
. "$(dirname "$0")/pg_cost_rounds.sh"

ways=(row row_seq tx batch)

# acemq makes each table (opening the outbox creates it), so that all four
# are what acemq makes now; then prints the SQL that adds a table of leases
# beside each (batch's) and fills them.
make_tables() {
    for way in "${ways[@]}"; do
        psql -q -X -v ON_ERROR_STOP=1 "$1" -c "CREATE SCHEMA lease_$way" >/dev/null
        "$acemq" outbox status --outbox "$1?options=-csearch_path%3Dlease_$way" >/dev/null
        cat <<SQL
CREATE TABLE lease_$way.acemq_outbox_lease(token bigint GENERATED ALWAYS AS IDENTITY
 PRIMARY KEY, lo bigint NOT NULL, hi bigint NOT NULL, seqs bigint[] NOT NULL,
 lease_until bigint NOT NULL);
INSERT INTO lease_$way.acemq_outbox(destination, body)
 SELECT 'q', convert_to(repeat('x', 200), 'UTF8') FROM generate_series(1, 20000);
VACUUM ANALYZE lease_$way.acemq_outbox;
SQL
    done
}

# The claim both row ways share: Q_CLAIM with a fixed clock (1) and lease.
# $1 is the table, filled in by format().
claim_row="'WITH c AS (UPDATE %1\$s o SET token = o.token + 1, lease_until = 30001'
    ' WHERE o.seq IN (SELECT d.seq FROM %1\$s d WHERE d.state = 0 AND d.next_attempt_at <= 1'
    ' AND (d.lease_until IS NULL OR d.lease_until <= 1) AND (d.ordering_key IS NULL OR NOT EXISTS ('
    ' SELECT 1 FROM %1\$s p WHERE p.ordering_key = d.ordering_key AND p.state <> 1 AND p.seq < d.seq))'
    ' ORDER BY d.seq LIMIT 500 FOR UPDATE OF d SKIP LOCKED)'
    ' RETURNING o.seq, o.id, o.destination, o.routing_key, o.ordering_key, o.headers,'
    ' o.content_type, o.body, o.created_at, o.attempts, o.token, o.last_error)'
    ' SELECT array_agg(c.seq), array_agg(c.id), array_agg(c.token) FROM c'"

# The pick of due rows oldest first, as Q_CLAIM makes it, without the lease
# test; tx and batch add theirs and close the CTE c. $1 is the table.
due_rows="'WITH c AS (SELECT d.seq, d.id, d.destination, d.routing_key, d.ordering_key,'
      ' d.headers, d.content_type, d.body, d.created_at, d.attempts, d.token, d.last_error'
      ' FROM %1\$s d WHERE d.state = 0 AND d.next_attempt_at <= 1'
      ' AND (d.ordering_key IS NULL OR NOT EXISTS ('
      ' SELECT 1 FROM %1\$s p WHERE p.ordering_key = d.ordering_key AND p.state <> 1 AND p.seq < d.seq))'"

run_sql() {
    cat <<SQL
CHECKPOINT;
CREATE OR REPLACE PROCEDURE batch(way text, INOUT claim_s float8, INOUT mark_s float8)
LANGUAGE plpgsql AS \$\$
DECLARE seqs bigint[]; ids text[]; tokens bigint[]; t0 timestamptz; t1 timestamptz; n int;
  tbl text := format('lease_%s.acemq_outbox', way); token bigint;
BEGIN
  t0 := clock_timestamp();
  IF way = 'batch' THEN
    PERFORM pg_advisory_xact_lock(7263540913);
    EXECUTE format($due_rows
      ' AND NOT EXISTS (SELECT 1 FROM %1\$s_lease l WHERE l.lease_until > 1'
      ' AND d.seq BETWEEN l.lo AND l.hi AND d.seq = ANY(l.seqs))'
      ' ORDER BY d.seq LIMIT 500),'
      ' l AS (INSERT INTO %1\$s_lease(lo, hi, seqs, lease_until)'
      ' SELECT min(c.seq), max(c.seq), array_agg(c.seq), 30001 FROM c RETURNING token, seqs)'
      ' SELECT l.seqs, l.token FROM l', tbl) INTO seqs, token;
    COMMIT;
    t1 := clock_timestamp();
    EXECUTE format('UPDATE %1\$s o SET state = 1, published_at = 2'
      ' WHERE o.seq = ANY(\$1) AND o.state = 0'
      ' AND EXISTS (SELECT 1 FROM %1\$s_lease l WHERE l.token = \$2)', tbl) USING seqs, token;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE format('DELETE FROM %1\$s_lease WHERE token = \$1', tbl) USING token;
  ELSIF way = 'tx' THEN
    EXECUTE format($due_rows
      ' ORDER BY d.seq LIMIT 500 FOR UPDATE OF d SKIP LOCKED)'
      ' SELECT array_agg(c.seq) FROM c', tbl) INTO seqs;
    t1 := clock_timestamp();
    EXECUTE format('UPDATE %1\$s o SET state = 1, published_at = 2'
      ' WHERE o.seq = ANY(\$1) AND o.state = 0', tbl) USING seqs;
  ELSE
    EXECUTE format($claim_row, tbl) INTO seqs, ids, tokens;
    COMMIT;
    t1 := clock_timestamp();
    IF way = 'row' THEN
      EXECUTE format('UPDATE %1\$s o SET state = 1, published_at = 2, lease_until = NULL'
        ' WHERE (o.id, o.token) IN (SELECT m.id, m.token FROM unnest(\$1, \$2) AS m(id, token))'
        ' AND o.state = 0 AND o.lease_until IS NOT NULL', tbl) USING ids, tokens;
    ELSE
      EXECUTE format('UPDATE %1\$s o SET state = 1, published_at = 2, lease_until = NULL'
        ' WHERE (o.seq, o.token) IN (SELECT m.seq, m.token FROM unnest(\$1, \$2) AS m(seq, token))'
        ' AND o.state = 0 AND o.lease_until IS NOT NULL', tbl) USING seqs, tokens;
    END IF;
  END IF;
  IF way <> 'batch' THEN GET DIAGNOSTICS n = ROW_COUNT; END IF;
  IF n <> 500 THEN RAISE EXCEPTION '%: marked % rows of 500', way, n; END IF;
  COMMIT;
  claim_s := claim_s + extract(epoch FROM t1 - t0);
  mark_s := mark_s + extract(epoch FROM clock_timestamp() - t1);
END \$\$;
-- Seconds of claim and of mark, by way in the order of ways[]; prints
-- them as claim|mark pairs, way after way.
CREATE OR REPLACE PROCEDURE all_ways(INOUT figures text DEFAULT '')
LANGUAGE plpgsql AS \$\$
DECLARE ways text[] := '{$(IFS=,; echo "${ways[*]}")}'; n int := ${#ways[@]};
  claim_s float8[] := array_fill(0::float8, ARRAY[n]); mark_s float8[] := claim_s;
  c float8; m float8; j int;
BEGIN
  -- The order rotates, so that no way always follows the same one.
  FOR i IN 1..40 LOOP
    FOR k IN 0..n - 1 LOOP
      j := (i + k) % n + 1;
      c := claim_s[j]; m := mark_s[j];
      CALL batch(ways[j], c, m);
      claim_s[j] := c; mark_s[j] := m;
    END LOOP;
  END LOOP;
  SELECT string_agg(claim_s[w] || '|' || mark_s[w], '|' ORDER BY w) INTO figures FROM generate_series(1, n) w;
END \$\$;
CALL all_ways();
SQL
}

psql -q -X "$base" -c "DROP DATABASE IF EXISTS $db" >/dev/null
psql -q -X -v ON_ERROR_STOP=1 "$base" -c "CREATE DATABASE $db" >/dev/null
run_rounds "$server/$db" "$rounds" "lease_row, lease_row_seq, lease_tx, lease_batch"
psql -q -X "$base" -c "DROP DATABASE $db" >/dev/null
printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split("|"))) for l in sys.stdin if l.strip()]
us = [statistics.median(r[i] for r in rows) / 20000 * 1e6 for i in range(8)]
print("%-8s %10s %10s %10s %10s" % ("way", "claim", "mark", "total", "vs row"))
for k, name in enumerate(["row", "row/seq", "tx", "batch"]):
    c, m = us[2 * k], us[2 * k + 1]
    print("%-8s %7.2f us %7.2f us %7.2f us %10.2f" % (name, c, m, c + m, (c + m) / (us[0] + us[1])))
print("(server time per row, median of %d rounds of 40 batches of 500 each way)" % len(rows))
'
