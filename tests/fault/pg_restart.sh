#!/usr/bin/env bash
# pg_restart.sh postgres — PostgreSQL restarted (a fast shutdown and a
# start, data kept) under the writer, the relay and the shippers, all on one
# PostgreSQL database: outbox, effects and the consumers' store.
#
# Every session is cut. The writer connects again and writes the order it
# was on once more (a COMMIT whose answer was lost is found committed by its
# row); the relay's claims and marks reconnect; a shipper whose connection
# died stops consuming (its deliveries go back to the queue), connects
# again and opens a new inbox store on the new session; an effect whose
# COMMIT answer was lost is either confirmed (its redelivery a duplicate)
# or runs again. FAULT_ORDERS orders (default 1,200), FAULT_RESTARTS
# restarts (default 2). Runs alone (ctest RUN_SERIAL): the server is shared.
#
# PostgreSQL only (the SQLite outbox has no server to restart): `sqlite`
# exits 77. Needs ACEMQ_AMQP_URL and ACEMQ_PG_URL, and the server
# scripts/services.sh started (its `restart postgres`).
# Exit status: 0 passed, 1 failed, 2 usage, 77 skipped.
set -u
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
[ "${1:-}" = sqlite ] && fault_skip "pg_restart: PostgreSQL only"
fault_setup pg_restart "${1:-}"
ORDERS=${FAULT_ORDERS:-1200}
RESTARTS=${FAULT_RESTARTS:-2}

writer_start "$ORDERS" --per-second $((ORDERS / (RESTARTS * 6 + 4) + 1))
relay_start
shipper_start a
shipper_start b
for ((k = 1; k <= RESTARTS; k++)); do
    # Shipping under way again since the last one.
    fault_await_progress $((ORDERS / (RESTARTS * 4) + 1)) "before restart $k"
    sleep_ms "$(rand_ms 0 1000)"
    fault_say "restart $k: $(fault_progress | awk '{print $4}') orders shipped; PostgreSQL restarted"
    pg_restart
done
fault_wait_done $((300 + ORDERS / 10))
fault_finish "pg_restarts=$RESTARTS reconnects=$(cat "$FAULT_TMP"/shipper-*.log |
    grep -c 'connection lost; connecting again')"
