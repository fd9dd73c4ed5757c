#!/usr/bin/env bash
# shipper_stop.sh sqlite|postgres — a consumer frozen (SIGSTOP) past its
# lease while the other takes over, then thawed (SIGCONT): still exactly
# once.
#
# Two shippers with a 1.5 s lease and a 1 s AMQP heartbeat, whose handlers
# work 50 ms before their transaction: with orders written about as fast
# as the two can ship them, a freeze mostly lands in a handler, its claim
# held. FAULT_STOPS times (default 4), alternately, one is frozen for
# FAULT_FREEZE_MS (default 6,000): its lease keeper stops renewing and its
# connection stops answering heartbeats, so RabbitMQ drops it and delivers what it held to
# the other shipper, which takes the claims over once their leases ran out
# and applies the effects. Thawed, the frozen one finds its confirm refused
# as stale (ACEMQ_ESTALE) and rolls its effect back with it (the inbox),
# and its acks go nowhere (a stale channel). On SQLite a shipper is frozen
# only at a moment it holds no write lock on the shared file (probed with
# BEGIN IMMEDIATE; else thawed and tried again a moment later): a frozen
# lock holder would stop the other shipper too, and no takeover could
# happen. FAULT_ORDERS orders (default 600). The verdict line counts the
# confirms refused as stale.
#
# Needs ACEMQ_AMQP_URL (ACEMQ_PG_URL for postgres).
# Exit status: 0 passed, 1 failed, 2 usage, 77 skipped.
set -u
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
fault_setup shipper_stop "${1:-}"
ORDERS=${FAULT_ORDERS:-600}
STOPS=${FAULT_STOPS:-4}
FREEZE_MS=${FAULT_FREEZE_MS:-6000}

# freeze NAME: SIGSTOP at a moment it holds no SQLite write lock.
freeze() {
    local pid=${FAULT_PIDS[shipper-$1]} i
    for ((i = 0; i < 200; i++)); do
        kill -STOP "$pid" || fault_fail "cannot stop shipper $1"
        [ "$FAULT_BACKEND" = postgres ] && return 0
        sqlite3 -batch -cmd '.timeout 0' "${EFFECTS_URL#sqlite:}" 'BEGIN IMMEDIATE; ROLLBACK' \
            >/dev/null 2>&1 && return 0
        kill -CONT "$pid"
        sleep_ms "$(rand_ms 5 50)"
    done
    fault_fail "shipper $1 always held the write lock"
}

writer_start "$ORDERS" --per-second $((ORDERS * 1000 / (STOPS * (FREEZE_MS + 1500) + 3000) + 1))
relay_start
shipper_start a --lease-ms 1500 --heartbeat 1 --work-ms 50
shipper_start b --lease-ms 1500 --heartbeat 1 --work-ms 50
for ((k = 1; k <= STOPS; k++)); do
    name=$([ $((k % 2)) = 1 ] && echo a || echo b)
    sleep_ms "$(rand_ms 300 1500)"
    fault_supervise
    freeze "$name"
    for ((t = 0; t < FREEZE_MS; t += 500)); do
        sleep 0.5
        fault_supervise
    done
    kill -CONT "${FAULT_PIDS[shipper-$name]}"
done
fault_say "$STOPS freezes of ${FREEZE_MS} ms"
fault_wait_done $((240 + ORDERS / 10))
fault_finish "freezes=$STOPS stale=$(shipper_events stale)"
