#!/usr/bin/env bash
# services.sh — starts and stops the real servers that integration tests and
# benchmarks talk to, each on loopback, on its own port, with its own data under
# $ACEMQ_SERVICES_DIR, so nothing here touches a system-wide instance.
#
#   scripts/services.sh start  redis|postgres|rabbitmq|all
#   scripts/services.sh stop   redis|postgres|rabbitmq|all
#   scripts/services.sh status redis|postgres|rabbitmq|all
#   scripts/services.sh env    [redis|postgres|rabbitmq|all]   (prints export lines)
#   scripts/services.sh pause|resume rabbitmq   (stop_app / start_app: the broker
#                                                goes away and comes back, data kept)
#   scripts/services.sh restart postgres        (a fast shutdown and a start, data
#                                                kept: every client loses its session)
#   scripts/services.sh alarm|unalarm rabbitmq  (a memory alarm raised / cleared:
#                                                publishers blocked meanwhile)
#   scripts/services.sh kill rabbitmq           (SIGKILL to the node's Erlang VM, then
#                                                a start on the same data)
#
# Environment: ACEMQ_SERVICES_DIR (default /tmp/acemq-services),
# ACEMQ_REDIS_PORT (default 6390), ACEMQ_PG_PORT (default 5440),
# ACEMQ_PG_BIN (default the newest /usr/lib/postgresql/*/bin),
# ACEMQ_AMQP_PORT (default 5680; the RabbitMQ node is acemq@localhost, its
# Erlang distribution port 25680).
#
# Exit codes: 0 done; 1 failed; 2 usage, or a service not supported yet;
# 3 the server's binary is not installed (scripts/deps.sh installs it).
#
# A service NAME is supported when svc_NAME_start, svc_NAME_stop,
# svc_NAME_status and svc_NAME_env are defined below: adding postgres or
# rabbitmq means writing those four functions and nothing else. `all` goes
# over SERVICES and skips, with a note, those not written yet, so CI can say
# `start all` today and keep saying it as services are added.
set -euo pipefail

SERVICES="redis postgres rabbitmq"
SERVICES_DIR="${ACEMQ_SERVICES_DIR:-/tmp/acemq-services}"
REDIS_PORT="${ACEMQ_REDIS_PORT:-6390}"
# How long a server gets to answer after it was started, in tenths of a second.
WAIT_TENTHS=100
# rabbitmqctl's own limit, for wait and stop: 60 s (a loaded CI machine has
# been seen to take 20 to start the node).
RMQ_CTL_TIMEOUT_S=$((WAIT_TENTHS * 6 / 10))

say() { printf 'services: %s\n' "$*"; }
die() {
    printf 'services: %s\n' "$*" >&2
    exit 1
}

# A pid from a pidfile, if that process is still alive.
live_pid() {
    local pidfile=$1 pid
    [ -s "$pidfile" ] || return 1
    pid=$(cat "$pidfile")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    printf '%s\n' "$pid"
}

# Waits up to WAIT_TENTHS tenths of a second for pid to exit after it was
# asked to; then kills it. $1 service name, $2 pid, $3 what it was asked.
wait_gone_or_kill() {
    local i
    for ((i = 0; i < WAIT_TENTHS; i++)); do
        kill -0 "$2" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -0 "$2" 2>/dev/null || return 0
    say "$1: pid $2 ignored $3; sending SIGKILL"
    kill -9 "$2" 2>/dev/null || true
}

# The status line every service prints; 0 when the check answers.
report_status() {
    local name=$1 port=$2
    shift 2
    if "$@"; then
        say "$name: running on 127.0.0.1:$port"
    else
        say "$name: not running"
        return 1
    fi
}

# A stopped service leaves nothing behind.
remove_data() {
    if [ -d "$2" ]; then
        say "$1: removing $2"
        rm -rf -- "$2"
    fi
}

# --- redis ---------------------------------------------------------------

REDIS_DIR="$SERVICES_DIR/redis"

redis_ping() {
    [ "$(timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]
}

svc_redis_start() {
    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
        say "redis: redis-server/redis-cli not installed (scripts/deps.sh installs them)" >&2
        exit 3
    fi
    if redis_ping; then
        say "redis: already running on 127.0.0.1:$REDIS_PORT"
        return 0
    fi
    mkdir -p "$REDIS_DIR"
    say "redis: starting on 127.0.0.1:$REDIS_PORT, data in $REDIS_DIR"
    # No persistence: these instances are thrown away, and an fsync-ing
    # server would make the benchmark's peer slower than the real thing
    # callers run in production with their own settings.
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes \
        --dir "$REDIS_DIR" --daemonize yes \
        --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" \
        --save '' --appendonly no >/dev/null ||
        die "redis: redis-server failed to start; see $REDIS_DIR/redis.log"
    local i
    for ((i = 0; i < WAIT_TENTHS; i++)); do
        if redis_ping; then
            say "redis: up (pid $(cat "$REDIS_DIR/redis.pid" 2>/dev/null || echo '?'))"
            return 0
        fi
        sleep 0.1
    done
    tail -n 20 "$REDIS_DIR/redis.log" >&2 2>/dev/null || true
    die "redis: no PONG on 127.0.0.1:$REDIS_PORT after $((WAIT_TENTHS / 10)) s"
}

svc_redis_stop() {
    local pid
    if pid=$(live_pid "$REDIS_DIR/redis.pid"); then
        say "redis: stopping pid $pid on 127.0.0.1:$REDIS_PORT"
        # redis-cli waits for an answer with no limit of its own: a server
        # that hangs would hang the stop (and CI) with it.
        timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
        wait_gone_or_kill redis "$pid" shutdown
    elif redis_ping; then
        # Something answers on our port but it is not ours (no pidfile):
        # leave it alone rather than shut down somebody else's server.
        say "redis: 127.0.0.1:$REDIS_PORT answers but was not started from $REDIS_DIR; left running"
    else
        say "redis: not running"
    fi
    remove_data redis "$REDIS_DIR"
}

svc_redis_status() { report_status redis "$REDIS_PORT" redis_ping; }

svc_redis_env() {
    printf 'export ACEMQ_REDIS_PORT=%s\n' "$REDIS_PORT"
    printf 'export ACEMQ_REDIS_URL=redis://127.0.0.1:%s\n' "$REDIS_PORT"
}

# --- postgres ------------------------------------------------------------

PG_PORT="${ACEMQ_PG_PORT:-5440}"
PG_DIR="$SERVICES_DIR/postgres"
# Debian's server binaries are not on PATH; the newest installed major wins.
PG_BIN="${ACEMQ_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"

# Runs a command as the user that owns the cluster. initdb refuses to run as
# root, so under root (CI, make test on a fresh machine) that is `postgres`,
# which Debian's package creates; otherwise it is whoever we are.
as_pg_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_ready() {
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" 2>/dev/null
}

svc_postgres_start() {
    if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/pg_ctl" ]; then
        say "postgres: initdb/pg_ctl not found under /usr/lib/postgresql/*/bin (scripts/deps.sh installs postgresql)" >&2
        exit 3
    fi
    if pg_ready; then
        say "postgres: already running on 127.0.0.1:$PG_PORT"
        return 0
    fi
    mkdir -p "$PG_DIR"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$SERVICES_DIR" "$PG_DIR"
    if [ ! -s "$PG_DIR/data/PG_VERSION" ]; then
        # trust on loopback only: a throwaway cluster for tests, reachable
        # from this machine alone, with the superuser `acemq`.
        as_pg_owner "$PG_BIN/initdb" -D "$PG_DIR/data" -U acemq --auth=trust \
            --encoding=UTF8 --locale=C >"$PG_DIR/initdb.log" 2>&1 ||
            { tail -n 20 "$PG_DIR/initdb.log" >&2; die "postgres: initdb failed"; }
    fi
    say "postgres: starting on 127.0.0.1:$PG_PORT, data in $PG_DIR/data"
    # fsync off: the cluster is thrown away, and the tests are about
    # behaviour, not durability of this disk. The socket goes to our own
    # directory so no system-wide /var/run/postgresql is needed.
    as_pg_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c fsync=off -c max_connections=100" \
        start >/dev/null ||
        { tail -n 20 "$PG_DIR/server.log" >&2 2>/dev/null; die "postgres: pg_ctl start failed"; }
    local i
    for ((i = 0; i < WAIT_TENTHS; i++)); do
        if pg_ready; then
            "$PG_BIN/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U acemq -d postgres \
                -c 'CREATE DATABASE acemq' >/dev/null 2>&1 || true
            say "postgres: up"
            return 0
        fi
        sleep 0.1
    done
    die "postgres: not ready on 127.0.0.1:$PG_PORT after $((WAIT_TENTHS / 10)) s"
}

svc_postgres_stop() {
    if [ -s "$PG_DIR/data/postmaster.pid" ] && [ -n "$PG_BIN" ]; then
        say "postgres: stopping on 127.0.0.1:$PG_PORT"
        as_pg_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w -t 30 stop >/dev/null ||
            say "postgres: pg_ctl stop failed; see $PG_DIR/server.log"
    elif pg_ready; then
        say "postgres: 127.0.0.1:$PG_PORT answers but was not started from $PG_DIR; left running"
    else
        say "postgres: not running"
    fi
    remove_data postgres "$PG_DIR"
}

svc_postgres_status() { report_status postgres "$PG_PORT" pg_ready; }

# restart: the server goes away and comes back with its data, as a restarted
# or failed-over server does: every session is cut, tables stay.
svc_postgres_restart() {
    [ -s "$PG_DIR/data/postmaster.pid" ] || die "postgres: not running from $PG_DIR"
    say "postgres: restarting on 127.0.0.1:$PG_PORT (data kept)"
    as_pg_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -m fast -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c fsync=off -c max_connections=100" \
        restart >/dev/null || die "postgres: pg_ctl restart failed; see $PG_DIR/server.log"
}

svc_postgres_env() {
    printf 'export ACEMQ_PG_PORT=%s\n' "$PG_PORT"
    printf 'export ACEMQ_PG_URL=postgres://acemq@127.0.0.1:%s/acemq\n' "$PG_PORT"
    printf 'export ACEMQ_PG_PIDFILE=%s\n' "$PG_DIR/data/postmaster.pid"
}

# --- rabbitmq ------------------------------------------------------------

AMQP_PORT="${ACEMQ_AMQP_PORT:-5680}"
# Erlang distribution: our node listens here, so it never collides with a
# system-wide node on 25672 (rabbitmqctl's own port is this + 10000).
RMQ_DIST_PORT=25680
RMQ_NODE=acemq@localhost
RMQ_DIR="$SERVICES_DIR/rabbitmq"
RMQ_BIN=/usr/lib/rabbitmq/bin

# Runs a RabbitMQ script with our node's environment. The scripts under
# /usr/lib/rabbitmq/bin are called directly: Debian's /usr/sbin wrappers
# switch user and lose every RABBITMQ_* variable, so they would start (or
# talk to) the system-wide node instead of ours. HOME is the data directory,
# so the Erlang cookie the node creates there is private to this instance, and
# rabbitmqctl, run the same way, finds the same one. Under root the node runs
# as `rabbitmq`, which Debian's package creates, as postgres does above.
#
# The node's schedulers are not bound to CPUs (-stbt u, the Erlang runtime's
# own default; RabbitMQ binds them, -stbt db, as if the node had the machine
# to itself). Here it shares the CPUs with PostgreSQL and the tests, and a
# bound scheduler that another process preempts cannot move to an idle CPU.
# Measured with bench_relay on two vCPUs: the relay on PostgreSQL against a
# raw publisher, median 0.954 unbound and 0.925 bound over 36 runs each, the
# raw publisher as fast either way (docs/performance.md, bench_relay).
as_rmq() {
    local env=(env HOME="$RMQ_DIR"
        RABBITMQ_NODENAME="$RMQ_NODE"
        RABBITMQ_DIST_PORT="$RMQ_DIST_PORT"
        RABBITMQ_CONF_ENV_FILE="$RMQ_DIR/rabbitmq-env.conf"
        RABBITMQ_CONFIG_FILE="$RMQ_DIR/rabbitmq.conf"
        RABBITMQ_ADVANCED_CONFIG_FILE="$RMQ_DIR/advanced.config"
        RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ_DIR/enabled_plugins"
        RABBITMQ_MNESIA_BASE="$RMQ_DIR/mnesia"
        RABBITMQ_LOG_BASE="$RMQ_DIR/log"
        RABBITMQ_PID_FILE="$RMQ_DIR/rabbitmq.pid"
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
        RABBITMQ_SCHEDULER_BIND_TYPE=u
        ERL_EPMD_ADDRESS=127.0.0.1)
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u rabbitmq -- "${env[@]}" "$@"
    else
        "${env[@]}" "$@"
    fi
}

# Our node answers (by its name, with our cookie), not merely something on
# the port.
rmq_ping() {
    [ -s "$RMQ_DIR/.erlang.cookie" ] &&
        as_rmq "$RMQ_BIN/rabbitmqctl" -q ping >/dev/null 2>&1
}

svc_rabbitmq_start() {
    if [ ! -x "$RMQ_BIN/rabbitmq-server" ] || [ ! -x "$RMQ_BIN/rabbitmqctl" ]; then
        say "rabbitmq: $RMQ_BIN/rabbitmq-server not installed (scripts/deps.sh installs rabbitmq-server)" >&2
        exit 3
    fi
    if rmq_ping; then
        say "rabbitmq: already running on 127.0.0.1:$AMQP_PORT"
        return 0
    fi
    mkdir -p "$RMQ_DIR/mnesia" "$RMQ_DIR/log"
    # Erlang's port mapper outlives the node that started it; remember
    # whether that was us, so stop can take it down again.
    epmd -names >/dev/null 2>&1 || : >"$RMQ_DIR/epmd-ours"
    # An empty env file stands in for /etc/rabbitmq/rabbitmq-env.conf, whose
    # NODENAME or ports are the system node's business, not ours.
    : >"$RMQ_DIR/rabbitmq-env.conf"
    # No plugins: the management plugin would open a second port and slow
    # the start for nothing the tests use.
    echo '[].' >"$RMQ_DIR/enabled_plugins"
    # Loopback only. guest may log in from loopback (RabbitMQ's default), so
    # the URL `env` prints needs no user set up. The disk limit is low
    # because these instances hold little, and a nearly full disk on a CI
    # machine must not make the broker block publishers (which would read as
    # confirm timeouts).
    printf '%s\n' "listeners.tcp.default = 127.0.0.1:$AMQP_PORT" \
        'loopback_users.guest = true' 'disk_free_limit.absolute = 1MB' \
        >"$RMQ_DIR/rabbitmq.conf"
    if [ "$(id -u)" -eq 0 ]; then
        chown -R rabbitmq: "$RMQ_DIR"
        chmod o+x "$SERVICES_DIR"
    fi
    say "rabbitmq: starting $RMQ_NODE on 127.0.0.1:$AMQP_PORT, data in $RMQ_DIR"
    as_rmq "$RMQ_BIN/rabbitmq-server" -detached >"$RMQ_DIR/start.log" 2>&1 ||
        { cat "$RMQ_DIR/start.log" >&2; die "rabbitmq: rabbitmq-server -detached failed"; }
    # `wait` returns once the pid file's process runs the rabbit application,
    # and fails if that process dies first; --timeout bounds the rest.
    if ! as_rmq "$RMQ_BIN/rabbitmqctl" -q --timeout "$RMQ_CTL_TIMEOUT_S" \
        wait "$RMQ_DIR/rabbitmq.pid" >>"$RMQ_DIR/start.log" 2>&1; then
        tail -n 20 "$RMQ_DIR/start.log" "$RMQ_DIR"/log/*.log >&2 2>/dev/null || true
        die "rabbitmq: $RMQ_NODE did not come up on 127.0.0.1:$AMQP_PORT"
    fi
    say "rabbitmq: up (pid $(cat "$RMQ_DIR/rabbitmq.pid" 2>/dev/null || echo '?'))"
}

svc_rabbitmq_stop() {
    local pid=""
    pid=$(live_pid "$RMQ_DIR/rabbitmq.pid") || pid=""
    if [ -n "$pid" ] || rmq_ping; then
        say "rabbitmq: stopping $RMQ_NODE${pid:+ (pid $pid)} on 127.0.0.1:$AMQP_PORT"
        # By node name and cookie: only our node hears this, never a
        # system-wide one on 5672.
        as_rmq timeout "$RMQ_CTL_TIMEOUT_S" "$RMQ_BIN/rabbitmqctl" -q stop >/dev/null 2>&1 ||
            say "rabbitmq: rabbitmqctl stop failed"
        [ -z "$pid" ] || wait_gone_or_kill rabbitmq "$pid" stop
    elif (exec 3<>"/dev/tcp/127.0.0.1/$AMQP_PORT") 2>/dev/null; then
        # Something answers on our port but it is not our node: leave it
        # alone rather than stop somebody else's server.
        say "rabbitmq: 127.0.0.1:$AMQP_PORT answers but was not started from $RMQ_DIR; left running"
    else
        say "rabbitmq: not running"
    fi
    # `epmd -kill` refuses while any node is still registered, so a
    # system-wide node that came to use our epmd keeps it.
    if [ -e "$RMQ_DIR/epmd-ours" ] && epmd -kill >/dev/null 2>&1; then
        say "rabbitmq: stopped the epmd it started"
    fi
    remove_data rabbitmq "$RMQ_DIR"
}

svc_rabbitmq_status() { report_status rabbitmq "$AMQP_PORT" rmq_ping; }

svc_rabbitmq_env() {
    printf 'export ACEMQ_AMQP_PORT=%s\n' "$AMQP_PORT"
    printf 'export ACEMQ_AMQP_URL=amqp://guest:guest@127.0.0.1:%s/\n' "$AMQP_PORT"
    printf 'export ACEMQ_RABBITMQ_PIDFILE=%s\n' "$RMQ_DIR/rabbitmq.pid"
}

# pause/resume: the broker goes away and comes back with its data (queued
# messages survive), as a restarted server does: the fault tests' "broker
# stopped for a few seconds". stop_app closes every client connection and the
# listener; start_app opens them again.
svc_rabbitmq_pause() {
    say "rabbitmq: pausing $RMQ_NODE (stop_app)"
    as_rmq "$RMQ_BIN/rabbitmqctl" -q stop_app >/dev/null || die "rabbitmq: stop_app failed"
}

svc_rabbitmq_resume() {
    say "rabbitmq: resuming $RMQ_NODE (start_app)"
    as_rmq "$RMQ_BIN/rabbitmqctl" -q start_app >/dev/null || die "rabbitmq: start_app failed"
    as_rmq "$RMQ_BIN/rabbitmqctl" -q await_startup >/dev/null 2>&1 || true
}

# alarm/unalarm: a memory alarm raised and cleared, as a node past its
# memory limit raises one: it blocks every publishing connection
# (connection.blocked) until cleared. A limit of 0 raises it at once; 0.4
# is RabbitMQ's default limit.
svc_rabbitmq_alarm() {
    say "rabbitmq: raising a memory alarm on $RMQ_NODE"
    as_rmq "$RMQ_BIN/rabbitmqctl" -q set_vm_memory_high_watermark 0 >/dev/null ||
        die "rabbitmq: set_vm_memory_high_watermark 0 failed"
}

svc_rabbitmq_unalarm() {
    say "rabbitmq: clearing the memory alarm on $RMQ_NODE"
    as_rmq "$RMQ_BIN/rabbitmqctl" -q set_vm_memory_high_watermark 0.4 >/dev/null ||
        die "rabbitmq: set_vm_memory_high_watermark 0.4 failed"
}

# kill: the node dies at once, as on a crashed host (SIGKILL to its Erlang
# VM: nothing flushed, no client told), and starts again on the data it
# left, where durable queues and the persistent messages they had confirmed
# must still be.
svc_rabbitmq_kill() {
    local pid i
    pid=$(live_pid "$RMQ_DIR/rabbitmq.pid") || die "rabbitmq: not running from $RMQ_DIR"
    say "rabbitmq: killing $RMQ_NODE (pid $pid) with SIGKILL"
    kill -9 "$pid" || die "rabbitmq: cannot kill pid $pid"
    for ((i = 0; i < WAIT_TENTHS; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && die "rabbitmq: pid $pid still there after SIGKILL"
    svc_rabbitmq_start
}

# --- dispatch ------------------------------------------------------------

supported() { declare -F "svc_$1_start" >/dev/null; }

usage() {
    echo "usage: $0 start|stop|status|env [redis|postgres|rabbitmq|all]" >&2
    echo "       $0 pause|resume|alarm|unalarm|kill rabbitmq" >&2
    echo "       $0 restart postgres" >&2
    exit 2
}

# run ACTION NAME: one service; an unsupported one fails with 2 when named
# alone and is skipped under `all`.
run() {
    local action=$1 name=$2 quiet_skip=$3
    case " $SERVICES " in
    *" $name "*) ;;
    *)
        echo "services: unknown service '$name' (known: $SERVICES)" >&2
        exit 2
        ;;
    esac
    if ! supported "$name"; then
        if [ "$quiet_skip" = yes ]; then
            [ "$action" = env ] || say "$name: not yet supported, skipped"
            return 0
        fi
        say "$name: not yet supported" >&2
        exit 2
    fi
    if ! declare -F "svc_${name}_${action}" >/dev/null; then
        echo "services: $name has no '$action'" >&2
        exit 2
    fi
    "svc_${name}_${action}"
}

[ $# -ge 1 ] || usage
action=$1
case "$action" in
start | stop | status | pause | resume | alarm | unalarm | restart | kill) [ $# -eq 2 ] || usage ;;
env) [ $# -le 2 ] || usage ;;
*) usage ;;
esac
target=${2:-all}

if [ "$target" = all ]; then
    rc=0
    for s in $SERVICES; do
        run "$action" "$s" yes || rc=1
    done
    # Leave no empty parent behind once the last service is gone.
    [ "$action" != stop ] || rmdir -- "$SERVICES_DIR" 2>/dev/null || true
    exit $rc
fi
run "$action" "$target" no
if [ "$action" = stop ]; then rmdir -- "$SERVICES_DIR" 2>/dev/null || true; fi
