#!/usr/bin/env bash
# net_stall.sh sqlite|postgres — the broker connection gone silent: packets
# dropped without a word, so that only heartbeats and timeouts can notice.
#
# The relay and the two shippers reach RabbitMQ through fault_proxy (one
# proxy for the relay, one for the shippers). While fault_writer writes
# FAULT_ORDERS orders (default 1,000), FAULT_STALLS times (default 2) both
# proxies stall for FAULT_STALL_MS (default 5,000): nothing is forwarded
# either way and no connection is closed, new ones included. The shippers,
# waiting for deliveries, notice only by the broker's missing heartbeats
# (--heartbeat 1: about 2 s); the relay by its confirm timeout (2 s), as
# the writer keeps writing. Each drops its connection and connects again,
# into the stall until it ends. What was unconfirmed goes out again after
# its lease; what was delivered and unacknowledged is delivered again. The
# oracle then proves nothing lost, nothing unexpected, no effect applied
# twice; the run also fails unless a shipper noticed a stall by heartbeats.
#
# Needs ACEMQ_AMQP_URL on loopback (ACEMQ_PG_URL for postgres); tools as
# lib.sh and net_lib.sh say. Exit status: 0 passed, 1 failed, 2 usage,
# 77 skipped.
set -u
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=SCRIPTDIR/net_lib.sh
. "$(dirname "$0")/net_lib.sh"
net_setup net_stall "${1:-}"
ORDERS=${FAULT_ORDERS:-1000}
STALLS=${FAULT_STALLS:-2}
STALL_MS=${FAULT_STALL_MS:-5000}

# Paced so that records are written during every stall and after the last.
writer_start "$ORDERS" --per-second $((ORDERS * 1000 / (STALLS * (STALL_MS + 1500) + 2000) + 1))
relay_start
shipper_start a --heartbeat 1
shipper_start b --heartbeat 1
for ((s = 1; s <= STALLS; s++)); do
    sleep_ms "$(rand_ms 500 1500)"
    fault_supervise
    proxy_ctl relay stall >/dev/null
    proxy_ctl ship stall >/dev/null
    sleep_ms "$STALL_MS"
    proxy_ctl relay pass >/dev/null
    proxy_ctl ship pass >/dev/null
done
fault_wait_done $((120 + ORDERS / 20))
by_heartbeat=$(cat "$FAULT_TMP"/shipper-*.log | grep -c 'event=broker_lost.*heartbeat')
relay_unknown=$(grep -c 'event=outcome_unknown' "$FAULT_TMP/relay.log")
fault_say "$STALLS stalls of $STALL_MS ms: shippers lost the broker by heartbeat $by_heartbeat times," \
    "the relay had $relay_unknown unknown outcomes"
[ "$by_heartbeat" -gt 0 ] || fault_fail "no shipper noticed a stall by its heartbeats"
fault_finish "stalls=$STALLS heartbeat_losses=$by_heartbeat relay_unknown=$relay_unknown"
