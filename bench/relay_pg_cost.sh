#!/bin/bash
# relay_pg_cost.sh — what `acemq relay` costs PostgreSQL per record, by
# connection (claims, marks, the gauges' counts), with the broker out of the
# picture: the relay publishes to acemq's in-process memory broker, which
# confirms at once, so the relay runs as fast as the outbox lets it.
#
#   scripts/services.sh start postgres && eval "$(scripts/services.sh env postgres)"
#   bench/relay_pg_cost.sh [RECORDS] [ROUNDS]   # default 60000 and 3; ACEMQ=path/to/acemq
#
# Each round has acemq make its outbox table in a schema of its own
# (acemq_relay_cost, dropped first), fills it with RECORDS rows of 200-byte
# bodies, vacuums and checkpoints, then runs `acemq relay --batch 500
# --window 256` until no row is pending (a psql poll every 0.1 s, on
# connections of its own). It then reads each of the relay's server
# processes' CPU time from /proc, so the server must run on this machine
# and its processes be readable. A connection is named by the last statement
# it ran (pg_stat_activity.query). It prints, per round, the records per
# second and each connection's microseconds of CPU per record.
# docs/performance.md, "An Intel machine", has figures.
set -euo pipefail

records=${1:-60000}
rounds=${2:-3}
[[ $records =~ ^[1-9][0-9]*$ && $rounds =~ ^[1-9][0-9]*$ ]] ||
    { echo "usage: $0 [RECORDS] [ROUNDS]" >&2; exit 2; }
base=${ACEMQ_PG_URL:?set ACEMQ_PG_URL (scripts/services.sh env postgres)}
acemq=${ACEMQ:-build-release/acemq}
[ -x "$acemq" ] || { echo "$0: no $acemq; build it, or set ACEMQ to the acemq binary" >&2; exit 2; }
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
schema=acemq_relay_cost
url="$base?options=-csearch_path%3D$schema"
ticks_per_s=$(getconf CLK_TCK)

sql() { psql -q -X -t -A -v ON_ERROR_STOP=1 "$url" "$@"; }

# pid and name of each of the relay's server processes, one per line.
relay_backends() {
    sql -c "SELECT pid, CASE
          WHEN query LIKE '%SKIP LOCKED%' THEN 'claim'
          WHEN query LIKE '%SET state = 1%' THEN 'mark'
          WHEN query LIKE '%count(*) FILTER%' THEN 'gauges'
          ELSE 'other' END
        FROM pg_stat_activity WHERE datname = current_database()
        AND backend_type = 'client backend' AND pid <> pg_backend_pid()
        AND application_name <> 'psql' ORDER BY 2"
}

cpu_ticks() { # utime + stime of a process, in clock ticks
    local f
    read -r -a f <"/proc/$1/stat"
    echo $((f[13] + f[14]))
}

for round in $(seq "$rounds"); do
    psql -q -X "$base" -c "DROP SCHEMA IF EXISTS $schema CASCADE" -c "CREATE SCHEMA $schema" >/dev/null
    "$acemq" outbox status --outbox "$url" >/dev/null
    sql -c "INSERT INTO acemq_outbox(destination, routing_key, body)
              SELECT '', 'relay-cost', convert_to(repeat('x', 200), 'UTF8')
              FROM generate_series(1, $records)" \
        -c "VACUUM ANALYZE acemq_outbox" -c "CHECKPOINT" >/dev/null
    t0=$(date +%s%N)
    "$acemq" relay --outbox "$url" --broker memory:relay-cost --batch 500 --window 256 \
        >/dev/null 2>&1 &
    relay=$!
    while [ "$(sql -c "SELECT count(*) FROM acemq_outbox WHERE state = 0")" != 0 ]; do
        kill -0 "$relay" 2>/dev/null || { echo "$0: the relay exited early" >&2; exit 1; }
        sleep 0.1
    done
    t1=$(date +%s%N)
    line="round $round: $((records * 1000000000 / (t1 - t0))) records/s;"
    while read -r pid name; do
        [ -n "$pid" ] || continue
        us=$(($(cpu_ticks "$pid") * 1000000 * 100 / ticks_per_s / records))
        line+=" $name $((us / 100)).$(printf '%02d' $((us % 100))) us"
    done < <(relay_backends | tr '|' ' ')
    kill -TERM "$relay"
    wait "$relay" || true
    echo "$line (CPU per record)"
done
psql -q -X "$base" -c "DROP SCHEMA $schema CASCADE" >/dev/null
