#!/usr/bin/env bash
# cli_relay.sh ACEMQ — `acemq relay` and `acemq outbox` as an operator runs
# them: rows written with plain SQL are published (to the in-process broker),
# an unroutable one fails and is counted, /metrics answers in Prometheus text,
# SIGTERM ends the relay with status 0, and status/dead/retry/purge do what
# they say. Waits on the relay's progress with a bounded loop; asserts only
# what happened, never how fast.
set -u
acemq=$1
tmp=$(mktemp -d /tmp/acemq-cli-relay-XXXXXX)
relay_pid=
cleanup() {
    [ -n "$relay_pid" ] && kill -9 "$relay_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
check() { # check NAME COMMAND...: runs the command, counts a failure
    if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

db=$tmp/shop.db
url=sqlite:$db
# Below the kernel's ephemeral ports (32768 and up here), where any client
# connection of a test running beside this one may hold a port; start_relay
# still moves on when the port it tried is taken.
port=${ACEMQ_TEST_PORT_BASE:-$((20000 + $$ % 10000))}

# The schema comes from the library; rows come from plain SQL, as from any language.
check "status on a new outbox" sh -c "'$acemq' outbox status --outbox '$url' | grep -qx 'unclaimed 0'"
sqlite3 "$db" "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 50)
  INSERT INTO acemq_outbox(id, destination, routing_key, body)
  SELECT printf('order-%03d', i), 'orders', 'order.created', CAST('{}' AS BLOB) FROM g;
  INSERT INTO acemq_outbox(id, destination, routing_key, body)
  VALUES ('lost-1', 'nowhere', 'x', x'00'), ('lost-2', 'nowhere', 'x', x'00');"
check "status counts the rows" sh -c "'$acemq' outbox status --outbox '$url' | grep -qx 'unclaimed 52'"

metrics() {
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
    # Bounded: a program other than the relay may hold the port and never answer.
    timeout 5 cat <&3 >"$tmp/metrics.txt"
    local rc=$?
    exec 3<&-
    return $rc
}

# start_relay LOG ARGS...: `acemq relay ARGS... --metrics 127.0.0.1:PORT` in
# the background, its log in LOG, relay_pid set, once its /metrics answers.
# A relay that exits because the port is taken is started again on the next
# one (a few tries); anything else is left to the checks.
start_relay() {
    local log=$1
    shift
    for _ in 1 2 3 4 5 6 7 8; do
        port=$((port + 1))
        "$acemq" relay "$@" --metrics "127.0.0.1:$port" 2>"$log" &
        relay_pid=$!
        for _ in $(seq 1 600); do
            # Ours only: another program may be the one listening there.
            if metrics 2>/dev/null && grep -q '^# TYPE acemq_relay' "$tmp/metrics.txt"; then
                return 0
            fi
            kill -0 "$relay_pid" 2>/dev/null || break
            sleep 0.1
        done
        grep -q 'cannot listen' "$log" || return 1
        wait "$relay_pid" 2>/dev/null
        relay_pid=
    done
    return 1
}

start_relay "$tmp/relay.log" --outbox "$url" --broker "memory:cli?unroutable=nowhere" --poll 0.05 \
    --synchronous normal -v
published=0
for _ in $(seq 1 600); do
    if metrics 2>/dev/null; then
        published=$(awk '$1 == "acemq_relay_published_total" {print $2}' "$tmp/metrics.txt")
        returned=$(awk '$1 == "acemq_relay_returned_total" {print $2}' "$tmp/metrics.txt")
        [ "${published:-0}" = 50 ] && [ "${returned:-0}" -ge 2 ] && break
    fi
    sleep 0.1
done
check "50 published, per /metrics" test "$published" = 50
check "the unroutable rows were returned" test "${returned:-0}" -ge 2
check "/metrics is Prometheus text" grep -q '^# TYPE acemq_relay_confirm_latency_seconds histogram' "$tmp/metrics.txt"
check "/metrics has the +Inf bucket" grep -q 'acemq_relay_confirm_latency_seconds_bucket{le="+Inf"} 50' "$tmp/metrics.txt"
check "/metrics has the pending gauge" grep -q '^acemq_outbox_pending ' "$tmp/metrics.txt"
check "/metrics says the broker is not blocking" grep -q '^acemq_relay_broker_blocked 0$' "$tmp/metrics.txt"

kill -TERM "$relay_pid"
wait "$relay_pid"
status=$?
relay_pid=
check "SIGTERM: exit status 0" test "$status" = 0
check "log: start" grep -q 'event=start' "$tmp/relay.log"
check "log: a failure with its reason" grep -q 'event=publish_failed id=lost-1 reason="returned: NO_ROUTE"' "$tmp/relay.log"
check "log: stop" grep -q 'event=stop' "$tmp/relay.log"
check "the unroutable rows wait, not published" sh -c "'$acemq' outbox status --outbox '$url' | grep -qx 'unclaimed 2'"

# A dead row, as max_attempts failures leave it.
sqlite3 "$db" "UPDATE acemq_outbox SET state = 2, attempts = 10, last_error = 'returned: NO_ROUTE' WHERE id = 'lost-1'"
check "dead lists it with its error" sh -c "'$acemq' outbox dead --outbox '$url' | grep -qP '^lost-1\t10\treturned: NO_ROUTE$'"
check "retry mends it" sh -c "'$acemq' outbox retry --outbox '$url' lost-1 | grep -qx 'retried lost-1'"
"$acemq" outbox retry --outbox "$url" order-001 >/dev/null 2>&1
check "retry of a record that is not dead: exit 1" test $? = 1
check "purge removes what was published" sh -c "'$acemq' outbox purge --outbox '$url' --older-than 0 | grep -qx 'purged 50'"

# --delete-published: what was confirmed is gone from the table, not kept.
db2=$tmp/deleting.db
"$acemq" outbox status --outbox "sqlite:$db2" >/dev/null # makes the schema
sqlite3 "$db2" "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 20)
  INSERT INTO acemq_outbox(id, destination, routing_key, body)
  SELECT printf('gone-%02d', i), 'orders', 'order.created', CAST('{}' AS BLOB) FROM g;"
start_relay "$tmp/relay2.log" --outbox "sqlite:$db2" --broker memory:deleting --poll 0.05 \
    --delete-published
published=0
for _ in $(seq 1 600); do
    if metrics 2>/dev/null; then
        published=$(awk '$1 == "acemq_relay_published_total" {print $2}' "$tmp/metrics.txt")
        [ "${published:-0}" = 20 ] && break
    fi
    sleep 0.1
done
kill -TERM "$relay_pid"
wait "$relay_pid"
status=$?
relay_pid=
check "--delete-published: 20 published" test "$published" = 20
check "--delete-published: exit status 0" test "$status" = 0
check "--delete-published: no row left" test "$(sqlite3 "$db2" "SELECT count(*) FROM acemq_outbox")" = 0

"$acemq" relay --outbox "$url" >/dev/null 2>&1
check "relay without --broker: exit 2" test $? = 2
"$acemq" relay --outbox "$url" --broker memory: --lease 10 --confirm-timeout 20 >/dev/null 2>&1
check "lease not above the confirm timeout: exit 2" test $? = 2
"$acemq" relay --outbox "$url" --broker memory: --heartbeat -1 2>"$tmp/heartbeat.err"
check "--heartbeat -1: exit 2" test $? = 2
check "--heartbeat -1: the range named" grep -q 'from 0 to 3600' "$tmp/heartbeat.err"
"$acemq" relay --outbox "$url" --broker memory: --synchronous sometimes 2>"$tmp/sync.err"
check "unknown --synchronous: exit 2" test $? = 2
check "unknown --synchronous: the choices named" grep -q 'full, normal or off' "$tmp/sync.err"
"$acemq" relay --outbox "kafka://x" --broker memory: >/dev/null 2>"$tmp/kafka.err"
check "unknown outbox URL: exit 1" test $? = 1
check "unknown outbox URL: says which" grep -q "outbox kafka://x" "$tmp/kafka.err"
timeout 10 "$acemq" relay --outbox "$url" --broker memory: --parallel-db >/dev/null 2>&1
check "--parallel-db is no option: exit 2" test $? = 2
"$acemq" outbox purge --outbox "$url" >/dev/null 2>&1
check "purge without --older-than: exit 2" test $? = 2
# A broker nobody answers for at start (nothing listens on loopback port 1)
# is waited for, not an error: the relay logs each attempt, keeps running,
# and a SIGTERM during the wait ends it with status 0.
"$acemq" relay --outbox "$url" --broker amqp://guest:guest@127.0.0.1:1/ 2>"$tmp/nobroker.log" &
relay_pid=$!
for _ in $(seq 1 500); do
    grep -q 'event=broker_unavailable' "$tmp/nobroker.log" 2>/dev/null && break
    sleep 0.02
done
check "no broker at start: logged" grep -q 'event=broker_unavailable .*refused or unreachable' "$tmp/nobroker.log"
check "no broker at start: still running" kill -0 "$relay_pid"
kill -TERM "$relay_pid"
wait "$relay_pid"
status=$?
relay_pid=
check "no broker at start: SIGTERM, exit 0" test "$status" = 0

# Operator mistakes with `acemq outbox`: usage errors exit 2 and name the
# mistake; an outbox that cannot be opened exits 1 and says why.
outbox_usage() { # outbox_usage NAME EXPECTED-TEXT ARGS...: exit 2, the text on stderr
    "$acemq" outbox "${@:3}" >/dev/null 2>"$tmp/usage.err"
    local st=$?
    check "outbox ${*:3}: exit 2" test "$st" = 2
    check "outbox ${*:3}: says $1" grep -q -- "$2" "$tmp/usage.err"
}
outbox_usage "the subcommand" "unknown subcommand 'drain'" drain --outbox "$url"
outbox_usage "the option" "unknown option '--force'" status --outbox "$url" --force
outbox_usage "--outbox" "--outbox URL is required" status
outbox_usage "the ids" "name at least one record id" retry --outbox "$url"
outbox_usage "the argument" "unexpected argument 'extra'" status --outbox "$url" extra
"$acemq" outbox status --outbox "sqlite:$tmp/no-such-dir/x.db" >/dev/null 2>"$tmp/open.err"
check "status on an outbox that cannot be opened: exit 1" test $? = 1
check "status on an outbox that cannot be opened: says why" \
    grep -q "no-such-dir/x.db: sqlite: opening" "$tmp/open.err"
check "relay --help has examples" sh -c "'$acemq' relay --help | grep -q Examples"
check "outbox --help has examples" sh -c "'$acemq' outbox --help | grep -q Examples"

[ "$failures" = 0 ] || { echo "$failures check(s) failed; relay log:"; cat "$tmp/relay.log"; exit 1; }
echo "all checks passed"
