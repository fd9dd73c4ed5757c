#!/bin/bash
# pg_mark_cost.sh — what a claim and a mark of the outbox cost PostgreSQL,
# per row, under a database's collation, for two shapes of the table:
#   before: id and ordering_key in the database's collation, and an index on
#           published_at (acemq's PostgreSQL table until 2026-12-01);
#   now:    id and ordering_key COLLATE "C", no index on published_at.
#
#   scripts/services.sh start postgres && eval "$(scripts/services.sh env postgres)"
#   bench/pg_mark_cost.sh [ROUNDS]          # default 3; ACEMQ=path/to/acemq
#
# For each collation below that the server accepts (C, C.UTF-8, ICU en-US,
# and en_US.UTF-8 where that locale is installed) it makes a database
# acemq_mark_<name> with the outbox table acemq makes (`acemq outbox
# status`, so build it first) in two schemas, puts one back as it was
# before, fills each with 20,000 rows of 200-byte bodies, and claims and marks them in batches of 500, one
# procedure taking the two tables' batches in turn (so both meet the same
# state of the machine), each claim and each mark its own transaction. It
# prints the median over the rounds of each shape's claim and mark time per
# row, and the mark's ratio now / before. The databases are dropped at the
# end. docs/performance.md, "Seventeenth round", has figures.
set -euo pipefail

rounds=${1:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [ROUNDS]" >&2; exit 2; }
base=${ACEMQ_PG_URL:?set ACEMQ_PG_URL (scripts/services.sh env postgres)}
server=${base%/*}
acemq=${ACEMQ:-build-release/acemq}
[ -x "$acemq" ] || { echo "$0: no $acemq; build it, or set ACEMQ to the acemq binary" >&2; exit 2; }
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
# shellcheck source=bench/pg_cost_rounds.sh
. "$(dirname "$0")/pg_cost_rounds.sh"

# Makes both tables with acemq (opening the outbox creates it), each in a
# schema of its own, so that "now" is always what acemq makes; then prints
# the SQL that puts "before" back as it was and fills both. $1 database URL.
make_tables() {
    for shape in shape_now shape_before; do
        psql -q -X -v ON_ERROR_STOP=1 "$1" -c "CREATE SCHEMA $shape" >/dev/null
        "$acemq" outbox status --outbox "$1?options=-csearch_path%3D$shape" >/dev/null
    done
    # An acemq built before the change makes the old table: both shapes
    # would then be "before".
    local collation
    collation=$(psql -q -X -t -A "$1" -c "SELECT c.collname FROM pg_attribute a
        JOIN pg_collation c ON c.oid = a.attcollation
        WHERE a.attrelid = 'shape_now.acemq_outbox'::regclass AND a.attname = 'id'")
    if [ "$collation" != C ]; then
        echo "$0: $acemq made an outbox whose id is not COLLATE \"C\"; rebuild it from this tree" >&2
        exit 1
    fi
    cat <<'SQL'
ALTER TABLE shape_before.acemq_outbox
 ALTER COLUMN id TYPE text COLLATE "default",
 ALTER COLUMN ordering_key TYPE text COLLATE "default";
CREATE INDEX ON shape_before.acemq_outbox(published_at) WHERE state = 1;
SQL
    for shape in shape_now shape_before; do
        cat <<SQL
INSERT INTO $shape.acemq_outbox(destination, body)
 SELECT 'q', convert_to(repeat('x', 200), 'UTF8') FROM generate_series(1, 20000);
VACUUM ANALYZE $shape.acemq_outbox;
SQL
    done
}

# The relay's claim and mark (src/store/pg_outbox.c, Q_CLAIM and
# Q_PUBLISH), on a table named at run time; prints claim and mark seconds
# for each table over 40 batches.
run_sql() {
    cat <<'SQL'
CHECKPOINT;
CREATE OR REPLACE PROCEDURE batch(tbl text, INOUT claim_s float8, INOUT mark_s float8)
LANGUAGE plpgsql AS $$
DECLARE ids text[]; tokens bigint[]; t0 timestamptz; n int;
BEGIN
  t0 := clock_timestamp();
  EXECUTE format('WITH c AS (UPDATE %1$s o SET token = o.token + 1, lease_until = 30001'
    ' WHERE o.seq IN (SELECT d.seq FROM %1$s d WHERE d.state = 0 AND d.next_attempt_at <= 1'
    ' AND (d.lease_until IS NULL OR d.lease_until <= 1) AND (d.ordering_key IS NULL OR NOT EXISTS ('
    ' SELECT 1 FROM %1$s p WHERE p.ordering_key = d.ordering_key AND p.state <> 1 AND p.seq < d.seq))'
    ' ORDER BY d.seq LIMIT 500 FOR UPDATE OF d SKIP LOCKED)'
    ' RETURNING o.seq, o.id, o.destination, o.body, o.token)'
    ' SELECT array_agg(c.id), array_agg(c.token) FROM c', tbl) INTO ids, tokens;
  COMMIT;
  claim_s := claim_s + extract(epoch FROM clock_timestamp() - t0);
  t0 := clock_timestamp();
  EXECUTE format('UPDATE %1$s o SET state = 1, published_at = 2, lease_until = NULL'
    ' WHERE (o.id, o.token) IN (SELECT m.id, m.token FROM unnest($1, $2) AS m(id, token))'
    ' AND o.state = 0 AND o.lease_until IS NOT NULL', tbl) USING ids, tokens;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n <> 500 THEN RAISE EXCEPTION 'marked % rows of 500', n; END IF;
  COMMIT;
  mark_s := mark_s + extract(epoch FROM clock_timestamp() - t0);
END $$;
CREATE OR REPLACE PROCEDURE both_shapes(INOUT bc float8 DEFAULT 0, INOUT bm float8 DEFAULT 0,
                                        INOUT nc float8 DEFAULT 0, INOUT nm float8 DEFAULT 0)
LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..40 LOOP
    IF i % 2 = 0 THEN CALL batch('shape_before.acemq_outbox', bc, bm); CALL batch('shape_now.acemq_outbox', nc, nm);
    ELSE CALL batch('shape_now.acemq_outbox', nc, nm); CALL batch('shape_before.acemq_outbox', bc, bm); END IF;
  END LOOP;
END $$;
CALL both_shapes();
SQL
}

# name|CREATE DATABASE options
collations=(
    "c|LOCALE 'C'"
    "c_utf8|LOCALE 'C.UTF-8'"
    "icu_en_us|LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
    "en_us_utf8|LOCALE 'en_US.UTF-8'"
)

printf '%-12s %12s %12s %12s %12s %10s\n' collation "claim before" "claim now" \
    "mark before" "mark now" "mark ratio"
for entry in "${collations[@]}"; do
    name=${entry%%|*}
    db=acemq_mark_$name
    psql -q -X "$base" -c "DROP DATABASE IF EXISTS $db" >/dev/null
    if ! psql -q -X "$base" -c "CREATE DATABASE $db TEMPLATE template0 ENCODING 'UTF8' ${entry#*|}" \
        >/dev/null 2>&1; then
        printf '%-12s (the server has no such locale; skipped)\n' "$name"
        continue
    fi
    run_rounds "$server/$db" "$rounds" "shape_now, shape_before"
    psql -q -X "$base" -c "DROP DATABASE $db" >/dev/null
    printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
name = sys.argv[1]
rows = [list(map(float, l.split("|"))) for l in sys.stdin if l.strip()]
us = [statistics.median(r[i] for r in rows) / 20000 * 1e6 for i in range(4)]
print("%-12s %9.2f us %9.2f us %9.2f us %9.2f us %10.2f" % (name, us[0], us[2], us[1], us[3], us[3] / us[1]))
' "$name"
done
