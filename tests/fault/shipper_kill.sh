#!/usr/bin/env bash
# shipper_kill.sh sqlite|postgres — consumers killed: by themselves right
# between an effect's COMMIT and the message's acknowledgement
# (fault_shipper --crash-after), and with kill -9 at random points.
#
# Two shippers on one queue. Shipper a is armed with --crash-after N (N 1
# to 20): it SIGKILLs itself after its Nth effect committed, before the ack;
# the broker redelivers that message and the inbox answers it as a
# duplicate (its confirm committed with the effect). lib.sh restarts it;
# the script arms it again (a kill -9 of the running one, then a start with
# a new N) until FAULT_CRASHES crashes (default 3) happened. Meanwhile
# shipper b is killed with kill -9, 100 ms to 1.2 s after each start: while
# it connects, in a claim, in its effect's transaction, between COMMIT and
# ack; FAULT_KILLS kill -9 in all (default 6, those re-arming a included). A claim a dead shipper held runs out
# with its lease (3 s) and the other takes it over. FAULT_ORDERS orders
# (default 1,500).
#
# Needs ACEMQ_AMQP_URL (ACEMQ_PG_URL for postgres).
# Exit status: 0 passed, 1 failed, 2 usage, 77 skipped.
set -u
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
fault_setup shipper_kill "${1:-}"
ORDERS=${FAULT_ORDERS:-1500}
KILLS=${FAULT_KILLS:-6}
CRASHES=${FAULT_CRASHES:-3}

# Paced so that work is left for every kill and crash.
rounds=$((KILLS > CRASHES ? KILLS : CRASHES))
writer_start "$ORDERS" --per-second $((ORDERS / (rounds * 2 + 5) + 1))
relay_start
shipper_start a --crash-after "$(rand_ms 1 20)"
shipper_start b
armed=1 kills=0
work_left() {
    local p
    read -r -a p <<<"$(fault_progress)"
    [ "$FAULT_WRITER_DONE" = 0 ] || [ "${p[3]}" -lt "${p[1]}" ]
}
end=$((SECONDS + 300 + ORDERS / 10))
while [ "$kills" -lt "$KILLS" ] || [ "$FAULT_CRASHED" -lt "$CRASHES" ]; do
    sleep_ms "$(rand_ms 100 1200)"
    fault_supervise # restarts a after its crash, unarmed
    work_left || break
    [ "$SECONDS" -lt "$end" ] || fault_fail "kills and crashes not done in time"
    if [ "$kills" -lt "$KILLS" ]; then
        fault_kill9 shipper-b
        shipper_start b
        kills=$((kills + 1))
    fi
    # The armed crash happened: arm the next one.
    if [ "$FAULT_CRASHED" -ge "$armed" ] && [ "$FAULT_CRASHED" -lt "$CRASHES" ]; then
        fault_kill9 shipper-a
        shipper_start a --crash-after "$(rand_ms 1 20)"
        armed=$((armed + 1)) kills=$((kills + 1))
    fi
done
[ "$FAULT_CRASHED" -gt 0 ] || fault_fail "shipper a never reached its crash: the work ran out"
fault_say "$kills kill -9, $FAULT_CRASHED crashes between effect and ack"
fault_wait_done $((240 + ORDERS / 10))
fault_finish "kill9=$kills crashes=$FAULT_CRASHED"
