# shellcheck shell=bash
# net_lib.sh — what the network fault scripts (net_*.sh) add to lib.sh:
# fault_proxy processes in front of RabbitMQ, steered through their control
# ports, and one query over both databases. Sourced after lib.sh.
#
# Two proxies: "relay" carries the relay's connection, "ship" the
# shippers'; so a fault can hit one side of the queue, or both.
#
#   net_setup NAME BACKEND lib.sh's fault_setup, then both proxies started
#                          and FAULT_RELAY_BROKER / FAULT_SHIPPER_BROKER
#                          pointed at them
#   proxy_start NAME       fault_proxy labelled proxy-NAME (lib.sh's
#                          fault_spawn: a proxy that dies fails the run),
#                          once it printed its ports
#   proxy_url NAME         ACEMQ_AMQP_URL with the proxy's port
#   proxy_ctl NAME CMD     sends CMD (pass, stall, hold, reset, cut, status);
#                          prints the answer "MODE accepted A open O cut K
#                          up B down B"; a refused command fails the run
#   both_db SQL            one answer over the outbox and the effects
#                          databases together (SQLite: the outbox attached
#                          to the effects file; PostgreSQL: one database)
#   record_order           SQL for an outbox record's order number
#
# Environment: FAULT_PROXY (default $FAULT_BUILD/tests/fault/fault_proxy).

FAULT_PROXY=${FAULT_PROXY:-$FAULT_BUILD/tests/fault/fault_proxy}
declare -A PROXY_PORT=() PROXY_CTL=()

# The broker's port, from ACEMQ_AMQP_URL; the proxy forwards to 127.0.0.1.
amqp_port() {
    local hostport=${ACEMQ_AMQP_URL#*://}
    hostport=${hostport#*@}
    hostport=${hostport%%/*}
    case ${hostport%:*} in
    127.0.0.1 | localhost) ;;
    *) fault_skip "the proxy forwards to loopback only, and ACEMQ_AMQP_URL is not there" ;;
    esac
    [[ $hostport == *:* ]] && echo "${hostport##*:}" || echo 5672
}

proxy_start() {
    local name=$1 i line
    [ -x "$FAULT_PROXY" ] || fault_fail "$FAULT_PROXY is not built (set FAULT_BUILD or FAULT_PROXY)"
    fault_spawn "proxy-$name" "$FAULT_PROXY" "$(amqp_port)"
    for ((i = 0; i < 300; i++)); do
        line=$(grep -m1 '^fault_proxy: port ' "$FAULT_TMP/proxy-$name.log")
        [ -n "$line" ] && break
        fault_alive "proxy-$name" || fault_fail "fault_proxy $name did not start"
        sleep 0.1
    done
    [ -n "$line" ] || fault_fail "fault_proxy $name said no port"
    # "fault_proxy: port P control C upstream U"
    local f
    read -r -a f <<<"$line"
    PROXY_PORT[$name]=${f[2]}
    PROXY_CTL[$name]=${f[4]}
}

proxy_url() {
    local rest=${ACEMQ_AMQP_URL#*://} scheme=${ACEMQ_AMQP_URL%%://*} auth='' path=''
    [[ $rest == *@* ]] && auth=${rest%%@*}@ && rest=${rest#*@}
    [[ $rest == */* ]] && path=/${rest#*/}
    echo "$scheme://${auth}127.0.0.1:${PROXY_PORT[$1]}$path"
}

proxy_ctl() {
    local name=$1 cmd=$2 fd answer=''
    exec {fd}<>"/dev/tcp/127.0.0.1/${PROXY_CTL[$name]}" || fault_fail "proxy $name: no control port"
    echo "$cmd" >&"$fd"
    read -r -t 30 answer <&"$fd"
    exec {fd}>&-
    [[ $answer == ok\ * ]] || fault_fail "proxy $name refused '$cmd': ${answer:-no answer}"
    echo "${answer#ok }" >>"$FAULT_TMP/proxy-$name.log"
    echo "${answer#ok }"
}

both_db() {
    if [ "$FAULT_BACKEND" = postgres ]; then
        db_query "$OUTBOX_URL" "$1"
    else
        sqlite3 -batch -noheader -separator ' ' -cmd '.timeout 30000' "${EFFECTS_URL#sqlite:}" \
            "ATTACH '${OUTBOX_URL#sqlite:}' AS o; $1" 2>/dev/null
    fi
}

record_order() { echo "CAST(substr(id, 13) AS BIGINT)"; }

net_setup() {
    fault_setup "$1" "$2"
    proxy_start relay
    proxy_start ship
    # shellcheck disable=SC2034 # read by lib.sh's relay_start and shipper_start
    FAULT_RELAY_BROKER=$(proxy_url relay)
    # shellcheck disable=SC2034
    FAULT_SHIPPER_BROKER=$(proxy_url ship)
}
