#!/usr/bin/env bash
# net_hold.sh sqlite|postgres — publishes whose confirms never come: the
# relay's proxy forwards its publishes to RabbitMQ and holds every reply.
#
# The relay and the two shippers reach RabbitMQ through fault_proxy (one
# proxy for the relay, one for the shippers). While fault_writer writes
# FAULT_ORDERS orders (default 800), FAULT_HOLDS times (default 2) the
# relay's proxy holds the broker's replies for FAULT_HOLD_MS (default
# 6,000: past the relay's confirm timeout, 2 s, and its lease, 3 s). The
# broker takes the publishes and the shippers apply them, but no confirm
# reaches the relay: it times out, drops the connection, and cannot log in
# again while the hold lasts. The relay is paused (SIGSTOP) for a second
# before each hold, so that a backlog of records goes out into it. Asserted, for each hold:
#   - no record is marked published while the replies are held (the count
#     of published records is the same 1 s into the hold and at its end);
#   - some records were held: delivered and applied, yet not marked.
# And once the run is done: every held record is marked published and was
# delivered at least twice, because the relay published it again after its
# lease (the inbox absorbed the second copy). Then the oracle: nothing
# lost, nothing unexpected, no effect applied twice.
#
# Needs ACEMQ_AMQP_URL on loopback (ACEMQ_PG_URL for postgres); tools as
# lib.sh and net_lib.sh say. Exit status: 0 passed, 1 failed, 2 usage,
# 77 skipped.
set -u
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=SCRIPTDIR/net_lib.sh
. "$(dirname "$0")/net_lib.sh"
net_setup net_hold "${1:-}"
ORDERS=${FAULT_ORDERS:-800}
HOLDS=${FAULT_HOLDS:-2}
HOLD_MS=${FAULT_HOLD_MS:-6000}
[ "$HOLD_MS" -ge 5000 ] || fault_fail "FAULT_HOLD_MS must outlast the confirm timeout and the lease (5000 or more)"

# Paced so that records are written during every hold and after the last.
writer_start "$ORDERS" --per-second $((ORDERS * 1000 / (HOLDS * (HOLD_MS + 1500) + 2000) + 1))
relay_start
shipper_start a
shipper_start b

published() { num "$(db_outbox 'SELECT count(*) FROM acemq_outbox WHERE state = 1')"; }
# Orders applied whose outbox record is not marked published, as "1,2,3".
applied_unmarked() {
    both_db "SELECT $(record_order) FROM acemq_outbox WHERE state <> 1
             AND id LIKE 'fault-order-%' AND $(record_order) IN (SELECT order_id FROM fault_effects)" |
        paste -sd, -
}

held_all=''
for ((h = 1; h <= HOLDS; h++)); do
    sleep_ms "$(rand_ms 800 1500)"
    fault_supervise
    # The relay paused for a second first, so that it meets the hold with a
    # backlog: whole batches go out into it, not a record or two.
    kill -STOP "${FAULT_PIDS[relay]}"
    sleep 1
    proxy_ctl relay hold >/dev/null
    kill -CONT "${FAULT_PIDS[relay]}"
    # Replies that reached the relay before the hold are marked within this second.
    sleep 1
    before=$(published)
    sleep_ms $((HOLD_MS - 1000))
    after=$(published)
    held=$(applied_unmarked)
    proxy_ctl relay pass >/dev/null
    if [ "$before" -lt 0 ] || [ "$before" != "$after" ]; then
        fault_fail "hold $h: records were marked published while no confirm could come ($before, then $after)"
    fi
    [ -n "$held" ] || fault_fail "hold $h: no record was delivered and left unmarked: nothing held"
    fault_say "hold $h: $(tr ',' '\n' <<<"$held" | wc -l) records applied and not marked; $after published, unchanged"
    held_all=$held_all${held_all:+,}$held
done
fault_wait_done $((120 + ORDERS / 20))

n_held=$(tr ',' '\n' <<<"$held_all" | sort -u | wc -l)
unmarked=$(num "$(db_outbox "SELECT count(*) FROM acemq_outbox WHERE id LIKE 'fault-order-%'
                             AND $(record_order) IN ($held_all) AND state <> 1")")
[ "$unmarked" = 0 ] || fault_fail "$unmarked held records are still not marked published"
once=$(num "$(db_effects "SELECT count(*) FROM (SELECT order_id FROM fault_deliveries
                          WHERE order_id IN ($held_all) GROUP BY order_id HAVING count(*) < 2) AS d")")
[ "$once" = 0 ] || fault_fail "$once held records were delivered only once: not published again"
fault_say "all $n_held held records marked published after the holds, each delivered again"
fault_finish "holds=$HOLDS held=$n_held"
