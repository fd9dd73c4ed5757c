# shellcheck shell=bash
# lib.sh — the driver every fault script sources (tests/fault/*.sh): a
# fresh outbox and effects database and a fresh queue per run, the pipeline's
# processes started, killed and stopped by label, a bounded wait until the
# run is done, and the one oracle (oracle.sh) for the verdict.
#
# The pipeline: fault_writer (orders and their outbox records, a share
# rolled back) -> `acemq relay` -> RabbitMQ queue -> fault_shipper processes
# (the inbox: effect and confirm in one transaction). Backends: `sqlite`
# (outbox in $FAULT_TMP/shop.db, effects and store in $FAULT_TMP/ship.db)
# or `postgres` (one fresh database per run holding both, named after the
# test, the pid and a random part, dropped at the end).
#
# Functions (a failure inside any of them ends the script through fault_fail):
#   fault_setup NAME BACKEND   checks servers and tools (exit 77 without the
#                              server URLs), makes the databases, declares
#                              the queue, sets the EXIT trap; sets
#                              FAULT_TMP FAULT_QUEUE OUTBOX_URL EFFECTS_URL
#   fault_fail MESSAGE...      prints it and the logs' tails, exits 1 (the
#                              data is then kept in $FAULT_TMP)
#   fault_skip MESSAGE...      exits 77
#   fault_spawn LABEL CMD...   runs CMD in the background, its output appended
#                              to $FAULT_TMP/LABEL.log; FAULT_PIDS[LABEL]
#   fault_alive LABEL          0 while that process runs (stopped counts)
#   fault_kill9 LABEL          SIGKILL and reap it (no "Killed" from bash)
#   fault_stop LABEL           SIGTERM (SIGCONT first), waits (bounded) and
#                              fails unless it exits 0
#   writer_start ORDERS [fault_writer options]
#                              the order service; returns once the outbox
#                              table exists
#   relay_start [--broker URL] [acemq relay options]
#                              `acemq relay` on OUTBOX_URL (short lease and
#                              confirm timeout, so a killed relay's claims
#                              pass on within seconds); the broker URL
#                              defaults to FAULT_RELAY_BROKER
#   shipper_start NAME [--broker URL] [fault_shipper options]
#                              a shipper labelled shipper-NAME; the broker
#                              URL defaults to FAULT_SHIPPER_BROKER. A
#                              shipper started with --crash-after that dies
#                              that way is restarted without it by
#                              fault_supervise (FAULT_CRASHED counts them)
#   fault_supervise            reaps the writer when done, restarts crashed
#                              shippers, fails when any other process died
#   db_outbox SQL / db_effects SQL
#                              one value from either database ("" on error)
#   fault_progress             prints "written committed pending effects
#                              deliveries ready" (-1 where unknown)
#   effects_now                orders with an effect so far (-1: unknown)
#   fault_await_progress N WHAT
#                              waits (3 minutes at most, supervising) until
#                              N more orders have their effect; WHAT names
#                              the moment in the failure message
#   fault_wait_done SECONDS    waits until the writer finished, nothing is
#                              pending in the outbox, every committed order
#                              has an effect, the queue holds nothing ready
#                              and deliveries stopped (3 s quiet); calls
#                              fault_supervise (and the script's fault_tick,
#                              if defined) on every round
#   fault_finish [NOTE...]     stops the relay and the shippers (each must
#                              exit 0), drains what a SIGTERM gave back, runs
#                              the oracle and prints the verdict line:
#                              "fault.NAME.BACKEND: counts: ... NOTE time=Ns";
#                              exits with the oracle's status
#   broker_kill                RabbitMQ killed with SIGKILL and started again
#                              on its data (scripts/services.sh kill rabbitmq)
#   pg_restart                 PostgreSQL restarted, data kept (services.sh)
#   shipper_events EVENT       how many event=EVENT lines the shippers logged
#   sleep_ms MS, rand_ms MIN MAX
#
# Environment: ACEMQ_AMQP_URL (and ACEMQ_PG_URL for postgres), from
# `eval "$(scripts/services.sh env all)"`; FAULT_BUILD (default build) or
# each tool: FAULT_ACEMQ, FAULT_WRITER, FAULT_SHIPPER, FAULT_AMQP_TOOL;
# FAULT_RELAY_BROKER and FAULT_SHIPPER_BROKER (default ACEMQ_AMQP_URL: a
# proxy in between goes here; the queue is always declared and read on
# ACEMQ_AMQP_URL directly); FAULT_KEEP=1 keeps $FAULT_TMP after a pass.

FAULT_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FAULT_BUILD=${FAULT_BUILD:-build}
FAULT_ACEMQ=${FAULT_ACEMQ:-$FAULT_BUILD/acemq}
FAULT_WRITER=${FAULT_WRITER:-$FAULT_BUILD/tests/fault/fault_writer}
FAULT_SHIPPER=${FAULT_SHIPPER:-$FAULT_BUILD/tests/fault/fault_shipper}
FAULT_AMQP_TOOL=${FAULT_AMQP_TOOL:-$FAULT_BUILD/tests/amqp_tool}
FAULT_ORACLE=$FAULT_LIB_DIR/oracle.sh
FAULT_SERVICES=${FAULT_SERVICES:-$FAULT_LIB_DIR/../../scripts/services.sh}

declare -A FAULT_PIDS=()         # label -> pid of what runs now
declare -A FAULT_WRAPPERS=()     # label -> pid of the subshell waiting for it
declare -A FAULT_SHIPPER_OPTS=() # shipper name -> its options, for a restart
declare -A FAULT_CRASHES_SEEN=() # shipper name -> crash lines already handled
FAULT_CRASHED=0
FAULT_WRITER_DONE=0
FAULT_FAILED=0
FAULT_TMP='' FAULT_QUEUE='' FAULT_PG_DB='' OUTBOX_URL='' EFFECTS_URL=''

sleep_ms() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }
rand_ms() { echo $(($1 + (RANDOM * 32768 + RANDOM) % ($2 - $1 + 1))); }

fault_say() { echo "fault.$FAULT_NAME.$FAULT_BACKEND: $*"; }

fault_skip() {
    echo "fault: SKIPPED: $*"
    exit 77
}

fault_fail() {
    FAULT_FAILED=1
    fault_say "FAIL: $*"
    local f
    for f in "$FAULT_TMP"/*.log; do
        [ -s "$f" ] || continue
        echo "--- $(basename "$f") (last 15 lines)"
        tail -n 15 "$f"
    done
    exit 1
}

# shellcheck disable=SC2317 # the EXIT trap
fault_cleanup() {
    local label pid
    for label in "${!FAULT_PIDS[@]}"; do
        pid=${FAULT_PIDS[$label]}
        kill -CONT "$pid" 2>/dev/null
        kill -9 "$pid" 2>/dev/null
        wait "${FAULT_WRAPPERS[$label]}" 2>/dev/null
    done
    [ -n "$FAULT_QUEUE" ] && "$FAULT_AMQP_TOOL" delete "$FAULT_QUEUE" >/dev/null 2>&1
    if [ -n "$FAULT_PG_DB" ]; then
        psql -X -q -d "$ACEMQ_PG_URL" -c "DROP DATABASE IF EXISTS \"$FAULT_PG_DB\" WITH (FORCE)" \
            >/dev/null 2>&1 || echo "fault: could not drop database $FAULT_PG_DB"
    fi
    [ -n "$FAULT_TMP" ] || return
    if [ "$FAULT_FAILED" = 1 ] || [ "${FAULT_KEEP:-0}" = 1 ]; then
        echo "fault: data and logs kept in $FAULT_TMP"
    else
        rm -rf "$FAULT_TMP"
    fi
}

fault_setup() {
    FAULT_NAME=$1 FAULT_BACKEND=$2
    case $FAULT_BACKEND in
    sqlite | postgres) ;;
    *)
        echo "usage: $0 sqlite|postgres" >&2
        exit 2
        ;;
    esac
    [ -n "${ACEMQ_AMQP_URL:-}" ] || fault_skip "ACEMQ_AMQP_URL is not set (scripts/services.sh start rabbitmq)"
    if [ "$FAULT_BACKEND" = postgres ]; then
        [ -n "${ACEMQ_PG_URL:-}" ] || fault_skip "ACEMQ_PG_URL is not set (scripts/services.sh start postgres)"
        command -v psql >/dev/null || fault_fail "the psql command is missing (scripts/deps.sh)"
    else
        command -v sqlite3 >/dev/null || fault_fail "the sqlite3 command is missing (scripts/deps.sh)"
    fi
    local t
    for t in "$FAULT_ACEMQ" "$FAULT_WRITER" "$FAULT_SHIPPER" "$FAULT_AMQP_TOOL"; do
        [ -x "$t" ] || fault_fail "$t is not built (set FAULT_BUILD or the tool's variable)"
    done
    FAULT_RELAY_BROKER=${FAULT_RELAY_BROKER:-$ACEMQ_AMQP_URL}
    FAULT_SHIPPER_BROKER=${FAULT_SHIPPER_BROKER:-$ACEMQ_AMQP_URL}
    FAULT_TMP=$(mktemp -d "${TMPDIR:-/tmp}/acemq-fault-$FAULT_NAME-XXXXXX") || exit 1
    trap fault_cleanup EXIT
    trap 'exit 1' INT TERM
    FAULT_QUEUE=acemq.fault.$FAULT_NAME.$$.$RANDOM
    "$FAULT_AMQP_TOOL" declare "$FAULT_QUEUE" >"$FAULT_TMP/setup.log" 2>&1 ||
        fault_fail "cannot declare queue $FAULT_QUEUE"
    if [ "$FAULT_BACKEND" = postgres ]; then
        FAULT_PG_DB=fault_${FAULT_NAME//[^a-z0-9]/_}_$$_$RANDOM
        psql -X -q -v ON_ERROR_STOP=1 -d "$ACEMQ_PG_URL" -c "CREATE DATABASE \"$FAULT_PG_DB\"" \
            >>"$FAULT_TMP/setup.log" 2>&1 || fault_fail "cannot create database $FAULT_PG_DB"
        local base=${ACEMQ_PG_URL%%\?*} query=''
        [ "$base" = "$ACEMQ_PG_URL" ] || query="?${ACEMQ_PG_URL#*\?}"
        OUTBOX_URL=${base%/*}/$FAULT_PG_DB$query
        EFFECTS_URL=$OUTBOX_URL
    else
        OUTBOX_URL=sqlite:$FAULT_TMP/shop.db
        EFFECTS_URL=sqlite:$FAULT_TMP/ship.db
    fi
    FAULT_T0=$SECONDS
    fault_say "queue $FAULT_QUEUE, data in $FAULT_TMP${FAULT_PG_DB:+, database $FAULT_PG_DB}"
}

# ---- databases -----------------------------------------------------------------

# db_query URL SQL: one value, "" when the database cannot answer (a server
# restarting, a table not made yet).
db_query() {
    if [ "$FAULT_BACKEND" = postgres ]; then
        psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "$2" 2>/dev/null
    else
        sqlite3 -batch -noheader -cmd '.timeout 30000' "${1#sqlite:}" "$2" 2>/dev/null
    fi
}
db_outbox() { db_query "$OUTBOX_URL" "$1"; }
db_effects() { db_query "$EFFECTS_URL" "$1"; }

# A number or -1.
num() { [[ $1 =~ ^[0-9]+$ ]] && echo "$1" || echo -1; }

# The queue's messages ready, -1 when RabbitMQ cannot say (it may be down).
queue_ready() {
    local s
    s=$("$FAULT_AMQP_TOOL" state "$FAULT_QUEUE" 2>/dev/null) || { echo -1; return; }
    num "${s% *}"
}
queue_consumers() {
    local s
    s=$("$FAULT_AMQP_TOOL" state "$FAULT_QUEUE" 2>/dev/null) || { echo -1; return; }
    num "${s#* }"
}

fault_progress() {
    local written committed pending effects deliveries
    written=$(num "$(db_outbox 'SELECT (SELECT count(*) FROM fault_orders) + (SELECT count(*) FROM fault_rolled_back)')")
    committed=$(num "$(db_outbox 'SELECT count(*) FROM fault_orders')")
    pending=$(num "$(db_outbox 'SELECT count(*) FROM acemq_outbox WHERE state <> 1')")
    effects=$(num "$(db_effects 'SELECT count(DISTINCT order_id) FROM fault_effects')")
    deliveries=$(num "$(db_effects 'SELECT count(*) FROM fault_deliveries')")
    echo "$written $committed $pending $effects $deliveries $(queue_ready)"
}

# ---- processes -----------------------------------------------------------------

# The tool runs under a wrapper subshell that waits for it and exits with
# its status: a tool killed by a signal is then reported by the wrapper
# (to /dev/null), never as "Killed" on the script's output.
fault_spawn() {
    local label=$1 pidfile=$FAULT_TMP/$1.pid i
    shift
    echo "--- start $(date +%T.%N) $*" >>"$FAULT_TMP/$label.log"
    rm -f "$pidfile"
    (
        exec 2>/dev/null
        # shellcheck disable=SC2016 # $0 and $$ belong to the inner sh
        sh -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidfile" "$@" \
            >>"$FAULT_TMP/$label.log" 2>&1
        exit $?
    ) &
    FAULT_WRAPPERS[$label]=$!
    for ((i = 0; i < 1000; i++)); do
        [ -s "$pidfile" ] && break
        sleep 0.01
    done
    [ -s "$pidfile" ] || fault_fail "$label did not start"
    FAULT_PIDS[$label]=$(cat "$pidfile")
}

fault_alive() {
    local pid=${FAULT_PIDS[$1]:-}
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]
}

# fault_reap LABEL: the status of a process that has ended; forgets it.
fault_reap() {
    local status
    wait "${FAULT_WRAPPERS[$1]}"
    status=$?
    unset "FAULT_PIDS[$1]" "FAULT_WRAPPERS[$1]"
    return "$status"
}

fault_kill9() {
    local pid=${FAULT_PIDS[$1]:-}
    [ -n "$pid" ] || fault_fail "fault_kill9: nothing runs as $1"
    kill -9 "$pid" 2>/dev/null
    fault_reap "$1"
    return 0
}

fault_stop() {
    local label=$1 pid=${FAULT_PIDS[$1]:-} i status
    [ -n "$pid" ] || fault_fail "fault_stop: nothing runs as $label"
    kill -CONT "$pid" 2>/dev/null
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 1200; i++)); do
        fault_alive "$label" || break
        sleep 0.1
    done
    fault_alive "$label" && fault_fail "$label still runs 2 minutes after SIGTERM"
    fault_reap "$label"
    status=$?
    [ "$status" = 0 ] || fault_fail "$label ended with status $status after SIGTERM, not 0"
}

writer_start() {
    local orders=$1 i
    shift
    FAULT_WRITER_DONE=0
    fault_spawn writer "$FAULT_WRITER" "$OUTBOX_URL" "$orders" "$FAULT_QUEUE" "$@"
    # The writer makes the outbox table before its first order; the relay
    # and the monitor's queries want it there.
    for ((i = 0; i < 600; i++)); do
        [ -n "$(db_outbox 'SELECT count(*) FROM acemq_outbox')" ] && return 0
        fault_alive writer || break
        sleep 0.1
    done
    [ -n "$(db_outbox 'SELECT count(*) FROM acemq_outbox')" ] || fault_fail "no outbox table"
}

# shellcheck disable=SC2120 # every argument is optional
relay_start() {
    local broker=$FAULT_RELAY_BROKER
    if [ "${1:-}" = --broker ]; then
        broker=$2
        shift 2
    fi
    fault_spawn relay "$FAULT_ACEMQ" relay --outbox "$OUTBOX_URL" --broker "$broker" \
        --batch 50 --poll 0.05 --lease 3 --confirm-timeout 2 "$@"
}

shipper_start() {
    local name=$1 broker=$FAULT_SHIPPER_BROKER
    shift
    if [ "${1:-}" = --broker ]; then
        broker=$2
        shift 2
    fi
    local all=("$@") keep=() i
    for ((i = 0; i < ${#all[@]}; i++)); do
        # A restart after the crash is a plain shipper: the crash is once.
        if [ "${all[i]}" = --crash-after ]; then i=$((i + 1)); else keep+=("${all[i]}"); fi
    done
    FAULT_SHIPPER_OPTS[$name]="--broker $broker ${keep[*]}"
    FAULT_CRASHES_SEEN[$name]=${FAULT_CRASHES_SEEN[$name]:-0}
    fault_spawn "shipper-$name" "$FAULT_SHIPPER" "$EFFECTS_URL" "$broker" "$FAULT_QUEUE" "$name" \
        --lease-ms 3000 "${all[@]}"
}

# The options of the last start of shipper NAME, crash removed, as
# arguments to shipper_start (none hold spaces).
shipper_restart() {
    local name=$1
    # shellcheck disable=SC2086 # options are words without spaces
    shipper_start "$name" ${FAULT_SHIPPER_OPTS[$name]}
}

fault_supervise() {
    local label status name seen
    for label in "${!FAULT_PIDS[@]}"; do
        fault_alive "$label" && continue
        fault_reap "$label"
        status=$?
        case $label in
        writer)
            [ "$status" = 0 ] || fault_fail "the writer failed (status $status)"
            FAULT_WRITER_DONE=1
            ;;
        shipper-*)
            name=${label#shipper-}
            seen=$(grep -c 'not yet acknowledged: SIGKILL' "$FAULT_TMP/$label.log")
            if [ "$status" = 137 ] && [ "$seen" -gt "${FAULT_CRASHES_SEEN[$name]}" ]; then
                FAULT_CRASHES_SEEN[$name]=$seen
                FAULT_CRASHED=$((FAULT_CRASHED + 1))
                shipper_restart "$name"
            else
                fault_fail "$label exited by itself (status $status)"
            fi
            ;;
        *) fault_fail "$label exited by itself (status $status)" ;;
        esac
    done
}

# ---- shared servers: brought back at once, by services.sh's own verbs ---------

broker_kill() {
    "$FAULT_SERVICES" kill rabbitmq >>"$FAULT_TMP/services.log" 2>&1 ||
        fault_fail "scripts/services.sh kill rabbitmq failed"
}

pg_restart() {
    "$FAULT_SERVICES" restart postgres >>"$FAULT_TMP/services.log" 2>&1 ||
        fault_fail "scripts/services.sh restart postgres failed"
}

shipper_events() { cat "$FAULT_TMP"/shipper-*.log 2>/dev/null | grep -c "event=$1\b"; }

# ---- waiting and the verdict ---------------------------------------------------

effects_now() { num "$(db_effects 'SELECT count(DISTINCT order_id) FROM fault_effects')"; }

fault_await_progress() {
    local want end=$((SECONDS + 180))
    want=$(($(effects_now) + $1))
    until [ "$(effects_now)" -ge "$want" ]; do
        [ "$SECONDS" -ge "$end" ] && fault_fail "no progress within 3 minutes $2"
        fault_supervise
        sleep 0.2
    done
}

fault_wait_done() {
    local end=$((SECONDS + $1)) quiet=0 last=-2 p
    local written committed pending effects deliveries ready
    while :; do
        fault_supervise
        declare -F fault_tick >/dev/null && fault_tick
        p=$(fault_progress)
        read -r written committed pending effects deliveries ready <<<"$p"
        if [ "$FAULT_WRITER_DONE" = 1 ] && [ "$pending" = 0 ] && [ "$committed" -gt 0 ] &&
            [ "$effects" -ge "$committed" ] && [ "$ready" = 0 ] && [ "$deliveries" = "$last" ]; then
            quiet=$((quiet + 1))
            [ "$quiet" -ge 3 ] && return 0
        else
            quiet=0
        fi
        last=$deliveries
        [ "$SECONDS" -ge "$end" ] &&
            fault_fail "not done within $1 s: written $written, committed $committed," \
                "pending $pending, effects $effects, deliveries $deliveries, ready $ready," \
                "writer done $FAULT_WRITER_DONE"
        sleep 1
    done
}

fault_finish() {
    local label round ready i line status
    fault_stop relay
    for label in "${!FAULT_PIDS[@]}"; do
        case $label in shipper-*) fault_stop "$label" ;; esac
    done
    # A SIGTERM gives back what a shipper held (a duplicate waiting for
    # another claim's lease); a shipper started again acknowledges it.
    for ((round = 1; ; round++)); do
        ready=$(queue_ready)
        [ "$ready" = 0 ] && break
        [ "$round" -le 3 ] || fault_fail "$ready messages still ready after $round rounds"
        shipper_start drain
        for ((i = 0; i < 600; i++)); do
            [ "$(queue_ready)" = 0 ] && break
            sleep 0.2
        done
        sleep 3
        fault_stop shipper-drain
    done
    for ((i = 0; i < 600; i++)); do
        [ "$(queue_consumers)" = 0 ] && break
        sleep 0.2
    done
    [ "$(queue_consumers)" = 0 ] || fault_fail "the queue still has a consumer"
    line=$("$FAULT_ORACLE" "$OUTBOX_URL" "$EFFECTS_URL" 2>&1)
    status=$?
    echo "$line" | sed -n '2,$p'
    fault_say "$(echo "$line" | head -n 1)${*:+ $*} time=$((SECONDS - FAULT_T0))s"
    [ "$status" = 0 ] || fault_fail "the oracle found the run wrong (status $status)"
    fault_say PASS
    exit 0
}
