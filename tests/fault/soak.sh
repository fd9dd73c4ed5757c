#!/usr/bin/env bash
# soak.sh — `make soak`: the fault suite's long runs. Every fault script in
# this folder (each `NAME.sh sqlite|postgres`; the *lib.sh and oracle.sh aside)
# against both backends, sized for hundreds of kills: orders, relay and
# shipper kills, crashes, freezes, broker kills and PostgreSQL restarts
# from the environment when set, else the figures below. A script that
# does not apply to a backend exits 77 and is counted as skipped. Stops at
# the first failure; exit 0 when every run passed.
#
# Needs what each script needs (lib.sh): ACEMQ_AMQP_URL, ACEMQ_PG_URL and
# the tools (FAULT_BUILD, default build).
set -u
export FAULT_ORDERS=${FAULT_ORDERS:-10000}
export FAULT_KILLS=${FAULT_KILLS:-200}
export FAULT_CRASHES=${FAULT_CRASHES:-100}
export FAULT_STOPS=${FAULT_STOPS:-30}
export FAULT_BROKER_KILLS=${FAULT_BROKER_KILLS:-20}
export FAULT_RESTARTS=${FAULT_RESTARTS:-20}
dir=$(cd "$(dirname "$0")" && pwd)
passed=0 skipped=0
for script in "$dir"/*.sh; do
    case $(basename "$script") in *lib.sh | oracle.sh | soak.sh) continue ;; esac
    for backend in sqlite postgres; do
        "$script" "$backend"
        status=$?
        case $status in
        0) passed=$((passed + 1)) ;;
        77) skipped=$((skipped + 1)) ;;
        *)
            echo "soak: FAIL: $(basename "$script") $backend (status $status)"
            exit 1
            ;;
        esac
    done
done
echo "soak: $passed runs passed, $skipped skipped"
