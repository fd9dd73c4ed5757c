#!/usr/bin/env bash
# broker_kill.sh sqlite|postgres — RabbitMQ killed with kill -9 and started
# again on its data, while orders are written, relayed and shipped.
#
# The queue is durable and every message persistent, so what the broker
# confirmed is on its disk when it dies: it comes back with the node. What
# it had not confirmed is UNKNOWN to the relay, which leaves the records to
# their lease and publishes them again; deliveries the shippers had not
# acknowledged come back redelivered, and the inbox absorbs those already
# applied. FAULT_ORDERS orders (default 1,200), FAULT_BROKER_KILLS broker
# kills (default 2), each once shipping is under way again after the last.
# Two shippers. Runs alone (ctest RUN_SERIAL): the node is shared.
#
# Needs ACEMQ_AMQP_URL (ACEMQ_PG_URL for postgres) and the node that
# scripts/services.sh started (the kill goes through its `kill rabbitmq`).
# Exit status: 0 passed, 1 failed, 2 usage, 77 skipped.
set -u
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
fault_setup broker_kill "${1:-}"
ORDERS=${FAULT_ORDERS:-1200}
KILLS=${FAULT_BROKER_KILLS:-2}

# Paced so that orders are still being written across every kill and
# restart (a node takes seconds to start).
writer_start "$ORDERS" --per-second $((ORDERS / (KILLS * 10 + 5) + 1))
relay_start
shipper_start a
shipper_start b
for ((k = 1; k <= KILLS; k++)); do
    # Shipping under way again since the last one.
    fault_await_progress $((ORDERS / (KILLS * 4) + 1)) "before kill $k"
    sleep_ms "$(rand_ms 0 1000)"
    fault_say "kill $k: $(fault_progress | awk '{print $4}') orders shipped; RabbitMQ killed"
    broker_kill
done
fault_wait_done $((300 + ORDERS / 10))
fault_finish "broker_kills=$KILLS"
