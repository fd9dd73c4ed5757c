#!/usr/bin/env bash
# net_reset.sh sqlite|postgres — the broker connection reset mid-stream:
# every connection through a proxy closed with an RST, many times in one run.
#
# The relay and the two shippers reach RabbitMQ through fault_proxy (one
# proxy for the relay, one for the shippers). While fault_writer writes
# FAULT_ORDERS orders (default 1,000), FAULT_RESETS times (default 6),
# 0.3 to 1.5 s apart, the relay's proxy, the shippers' or both reset every
# connection they carry (SO_LINGER 0): the relay loses its unconfirmed
# publishes (unknown: published again once their lease runs out), the
# shippers their unacknowledged deliveries (the broker delivers them again,
# the inbox absorbs what was already applied). Each reconnects through the
# same proxy. The oracle then proves nothing lost, nothing unexpected, no
# effect applied twice; the run also fails when no reset hit a connection.
#
# Needs ACEMQ_AMQP_URL on loopback (ACEMQ_PG_URL for postgres); tools as
# lib.sh and net_lib.sh say. Exit status: 0 passed, 1 failed, 2 usage,
# 77 skipped.
set -u
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=SCRIPTDIR/net_lib.sh
. "$(dirname "$0")/net_lib.sh"
net_setup net_reset "${1:-}"
ORDERS=${FAULT_ORDERS:-1000}
RESETS=${FAULT_RESETS:-6}

# Paced so that the writing lasts as long as the resets do.
writer_start "$ORDERS" --per-second $((ORDERS * 1000 / (RESETS * 900 + 1000) + 1))
relay_start
shipper_start a
shipper_start b
declare -A hit=([relay]=0 [ship]=0)
for ((r = 1; r <= RESETS; r++)); do
    sleep_ms "$(rand_ms 300 1500)"
    fault_supervise
    case $((RANDOM % 3)) in
    0) sides=relay ;;
    1) sides=ship ;;
    *) sides="relay ship" ;;
    esac
    for side in $sides; do
        read -r -a st <<<"$(proxy_ctl "$side" reset)" # MODE accepted A open O cut K ...
        hit[$side]=${st[6]}
    done
done
fault_say "$RESETS resets; connections reset: relay ${hit[relay]}, shippers ${hit[ship]}"
[ $((hit[relay] + hit[ship])) -gt 0 ] || fault_fail "no reset hit a connection"
fault_wait_done $((120 + ORDERS / 20))
fault_finish "resets=$RESETS reset_conns=$((hit[relay] + hit[ship]))"
