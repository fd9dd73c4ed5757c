#!/bin/bash
# pg_cost_rounds.sh — sourced by pg_mark_cost.sh and pg_lease_cost.sh: the
# rounds both run on one database.
#
#   run_rounds URL ROUNDS "SCHEMA..."
#
# Each round drops the schemas named (CASCADE), then pipes the caller's
# make_tables URL and run_sql into psql on URL, and keeps psql's last line
# of output (the caller's figures) in the array `results`.
run_rounds() {
    local url=$1 rounds=$2 schemas=$3 out
    results=()
    for _ in $(seq "$rounds"); do
        psql -q -X "$url" -c "DROP SCHEMA IF EXISTS $schemas CASCADE" >/dev/null
        out=$({
            make_tables "$url"
            run_sql
        } | psql -q -X -t -A -v ON_ERROR_STOP=1 "$url" | tail -n 1)
        results+=("$out")
    done
}
