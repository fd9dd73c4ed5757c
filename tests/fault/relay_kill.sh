#!/usr/bin/env bash
# relay_kill.sh sqlite|postgres — the relay killed with kill -9 at random
# points, many times in one run, and started again each time.
#
# While fault_writer writes FAULT_ORDERS orders (default 1,500, a tenth
# rolled back) and two shippers consume, `acemq relay` is killed with
# SIGKILL FAULT_KILLS times (default 8), each 50 ms to 1.5 s after its
# start: while it opens the outbox and connects, between a claim and its
# publish, between a confirm and its mark. Whatever a killed relay held
# comes back after its lease (3 s) and goes out again under the same id,
# which the shippers' inbox absorbs. The oracle then proves that nothing
# was lost, nothing unexpected delivered, and no effect applied twice.
#
# Needs ACEMQ_AMQP_URL (ACEMQ_PG_URL for postgres); tools as lib.sh says.
# Exit status: 0 passed, 1 failed, 2 usage, 77 skipped.
set -u
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
fault_setup relay_kill "${1:-}"
ORDERS=${FAULT_ORDERS:-1500}
KILLS=${FAULT_KILLS:-8}

# Paced so that the writing lasts about as long as the kills do.
writer_start "$ORDERS" --per-second $((ORDERS * 1000 / (KILLS * 800 + 1000) + 1))
relay_start
shipper_start a
shipper_start b
for ((k = 1; k <= KILLS; k++)); do
    sleep_ms "$(rand_ms 50 1500)"
    fault_supervise
    fault_kill9 relay
    relay_start
done
fault_say "relay killed $KILLS times; $(fault_progress | awk '{print $2}') orders committed so far"
fault_wait_done $((240 + ORDERS / 20))
fault_finish "relay_kills=$KILLS"
