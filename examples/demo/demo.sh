#!/usr/bin/env bash
# demo.sh BUILD_DIR [ORDERS] — `make demo`: the whole pipeline, with faults.
#
# The order service (orders.c) writes ORDERS orders (default 2,000), each with
# its outbox record in one SQLite transaction, a random tenth rolled back;
# `acemq relay` publishes them to RabbitMQ; two shippers (shipper.c, the
# inbox: shipment row and confirmation in one transaction) ship them. Faults,
# injected while it runs, each once:
#   - the relay killed with kill -9 and started again;
#   - every broker connection closed (rabbitmqctl close_all_connections);
#   - a tenth of the published outbox rows made pending again, so the relay
#     publishes them a second time with the same message id;
#   - shipper 2 kills itself (SIGKILL) right after a shipment committed and
#     before its acknowledgement (CRASH_AFTER), and is started again;
#   - shipper 1 killed with kill -9 at a random moment while it works.
# Then a table, every figure counted from the two databases and the queue;
# exit 1 when any checked line disagrees (or anything else fails).
#
# Needs ACEMQ_AMQP_URL (scripts/with-services.sh rabbitmq -- ... sets it) and
# the sqlite3 command (scripts/deps.sh installs it).
set -u
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 BUILD_DIR [ORDERS]" >&2
    exit 2
fi
build=$1
orders=${2:-2000}
if ! [[ $orders =~ ^[1-9][0-9]*$ ]] || [ "$orders" -lt 50 ]; then
    echo "demo: ORDERS must be a number, at least 50" >&2
    exit 2
fi
[ -n "${ACEMQ_AMQP_URL:-}" ] ||
    { echo "demo: ACEMQ_AMQP_URL is not set (make demo starts RabbitMQ and sets it)" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "demo: the sqlite3 command is missing" >&2; exit 1; }
for b in acemq acemq-demo-orders acemq-demo-shipper acemq-demo-mq; do
    [ -x "$build/$b" ] || { echo "demo: $build/$b is not built" >&2; exit 1; }
done

broker=$ACEMQ_AMQP_URL
tmp=$(mktemp -d "${TMPDIR:-/tmp}/acemq-demo-XXXXXX") || exit 1
shop=$tmp/shop.db      # the order service's: orders, attempts, the outbox
shipping=$tmp/ship.db  # the shippers': shipments, deliveries, the idem store
exchange=shop
key=order.created
queue=shop.shipping.$$
relay_pid='' orders_pid=''
ship_pid=("" "")
keep=${ACEMQ_DEMO_KEEP:-0} # 1: leave $tmp (databases, logs) for a look; set on failure

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    local p
    for p in "$relay_pid" "$orders_pid" "${ship_pid[@]}"; do
        [ -n "$p" ] && kill -9 "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    "$build/acemq-demo-mq" delete "$queue" >/dev/null 2>&1
    if [ "$keep" = 1 ]; then echo "demo: logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

tty=0
[ -t 1 ] && tty=1
# An event on its own line; on a terminal it first clears the progress line.
say() {
    [ "$tty" = 1 ] && printf '\r\033[K'
    echo "$*"
}
fail() {
    say "demo: FAIL: $*"
    keep=1
    exit 1
}

# q DB SQL: one value; waits for the writers' locks.
q() { sqlite3 -batch -noheader -cmd '.timeout 30000' "$1" "$2"; }
count() { # count DB SQL: 0 while the table is not made yet
    local n
    n=$(q "$1" "$2" 2>/dev/null) || n=0
    echo "${n:-0}"
}

# rabbitmqctl for the node scripts/services.sh starts: its scripts called
# directly with that node's name and home (its cookie), as its user under
# root, as services.sh itself does (Debian's wrappers would reach the
# system-wide node instead).
rmqctl() {
    local dir=${ACEMQ_SERVICES_DIR:-/tmp/acemq-services}/rabbitmq
    local cmd=(env HOME="$dir" RABBITMQ_NODENAME=acemq@localhost
        RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" ERL_EPMD_ADDRESS=127.0.0.1
        /usr/lib/rabbitmq/bin/rabbitmqctl -q -n acemq@localhost "$@")
    if [ "$(id -u)" -eq 0 ]; then runuser -u rabbitmq -- "${cmd[@]}"; else "${cmd[@]}"; fi
}

start_relay() {
    # A 3 s lease: what a killed relay held is taken over within seconds.
    "$build/acemq" relay --outbox "sqlite:$shop" --broker "$broker" --batch 50 --poll 0.05 \
        --lease 3 --confirm-timeout 2 2>>"$tmp/relay.log" &
    relay_pid=$!
}
start_shipper() { # start_shipper I [CRASH_AFTER]
    "$build/acemq-demo-shipper" "$broker" "$queue" "$shipping" ${2:+"$2"} \
        2>>"$tmp/shipper$1.log" &
    ship_pid[$1]=$!
}
alive() { kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
kill9() { # kill9 PID: SIGKILL and reap, no "Killed" from the shell
    kill -9 "$1" 2>/dev/null
    { wait "$1"; } 2>/dev/null
}

# ---- the pipeline -------------------------------------------------------------
echo "acemq demo: $orders orders -> SQLite outbox -> acemq relay -> RabbitMQ -> 2 shippers (inbox)"
"$build/acemq-demo-mq" setup "$queue" "$exchange" "$key" || fail "cannot set up queue $queue"
# The order service runs first alone for a moment so the outbox exists when
# the relay opens it (the service creates it).
"$build/acemq-demo-orders" "$shop" "$orders" "$exchange" "$key" 2>>"$tmp/orders.log" &
orders_pid=$!
for ((i = 0; i < 100; i++)); do
    [ "$(count "$shop" 'SELECT count(*) FROM attempts')" -gt 0 ] && break
    alive "$orders_pid" || break
    sleep 0.05
done
start_relay
start_shipper 0
# Shipper 2 dies right after one of its shipments, before the ack.
crash_after=$((orders / 10 + RANDOM % (orders / 10)))
start_shipper 1 "$crash_after"
# Disowned, so that bash does not print "Killed" over the progress line when
# it dies; its log says how it ended instead.
disown "${ship_pid[1]}"

# ---- watch, inject, until everything is shipped and the queue is quiet --------
stage=0 resent=0 quiet=0 last_deliveries=-1 last_plain=0
deadline=$((SECONDS + 90 + orders / 20))
while :; do
    written=$(count "$shop" 'SELECT count(*) FROM attempts')
    committed=$(count "$shop" 'SELECT count(*) FROM orders')
    published=$(count "$shop" 'SELECT count(*) FROM acemq_outbox WHERE state = 1')
    pending=$(count "$shop" 'SELECT count(*) FROM acemq_outbox WHERE state <> 1')
    deliveries=$(count "$shipping" 'SELECT count(*) FROM deliveries')
    dups=$(count "$shipping" "SELECT count(*) FROM deliveries WHERE kind = 'dup'")
    effects=$(count "$shipping" 'SELECT count(DISTINCT order_id) FROM shipments')
    line="orders written $written  published $published  delivered $deliveries  duplicates absorbed $dups  effects applied $effects"
    if [ "$tty" = 1 ]; then
        printf '\r\033[K%s' "$line"
    elif [ $((SECONDS - last_plain)) -ge 2 ]; then
        echo "$line"
        last_plain=$SECONDS
    fi

    # The faults, each once, at points of the run the published count marks.
    if [ "$stage" = 0 ] && [ "$published" -ge $((orders * 20 / 100)) ]; then
        kill9 "$relay_pid"
        say "fault: acemq relay killed with kill -9 at $published published; restarted"
        start_relay
        stage=1
    elif [ "$stage" = 1 ] && [ "$published" -ge $((orders * 40 / 100)) ]; then
        rmqctl close_all_connections "acemq demo: connection cut" >/dev/null ||
            fail "rabbitmqctl close_all_connections failed"
        say "fault: every broker connection closed (rabbitmqctl close_all_connections)"
        stage=2
    elif [ "$stage" = 2 ] && [ "$published" -ge $((orders * 55 / 100)) ]; then
        # Same rows, same message ids: the relay publishes them again.
        resent=$(q "$shop" 'UPDATE acemq_outbox SET state = 0, published_at = NULL,
            next_attempt_at = 0 WHERE state = 1 AND abs(random()) % 10 = 0; SELECT changes()') ||
            fail "cannot make published rows pending again"
        say "fault: $resent published messages made pending again: the relay sends them twice"
        stage=3
    elif [ "$stage" = 3 ] && [ "$effects" -ge $((orders * 60 / 100)) ]; then
        sleep "0.$((RANDOM % 10))"
        kill9 "${ship_pid[0]}"
        say "fault: shipper 1 killed with kill -9 while it works; restarted"
        start_shipper 0
        stage=4
    fi
    # Shipper 2's own SIGKILL after a shipment; anything else dying is a failure.
    if ! alive "${ship_pid[1]}"; then
        if [ -z "$crash_after" ] || ! grep -q 'not yet acknowledged: SIGKILL' "$tmp/shipper1.log"; then
            fail "shipper 2 exited (see $tmp/shipper1.log)"
        fi
        say "fault: shipper 2 killed itself after shipment $crash_after, before its ack; restarted"
        crash_after=
        start_shipper 1
    fi
    alive "${ship_pid[0]}" || fail "shipper 1 exited (see $tmp/shipper0.log)"
    alive "$relay_pid" || fail "acemq relay exited (see $tmp/relay.log)"
    if [ -n "$orders_pid" ] && ! alive "$orders_pid"; then
        wait "$orders_pid" || fail "the order service failed (see $tmp/orders.log)"
        orders_pid=
    fi

    # Done: all written, nothing pending, every committed order shipped,
    # nothing ready, and no delivery for 2 s (longer than a held duplicate
    # waits before it goes back, 1 s).
    ready=$("$build/acemq-demo-mq" state "$queue") || fail "cannot read the queue's state"
    ready=${ready% *}
    if [ -z "$orders_pid" ] && [ "$stage" = 4 ] && [ -z "$crash_after" ] && [ "$pending" = 0 ] &&
        [ "$effects" = "$committed" ] && [ "$ready" = 0 ] && [ "$deliveries" = "$last_deliveries" ]; then
        quiet=$((quiet + 1))
        [ "$quiet" -ge 4 ] && break
    else
        quiet=0
    fi
    last_deliveries=$deliveries
    [ "$SECONDS" -ge "$deadline" ] && fail "not done within $((90 + orders / 20)) s"
    sleep 0.5
done
# The last progress line stays: on a terminal end it, otherwise print it.
if [ "$tty" = 1 ]; then echo; else echo "$line"; fi

# ---- stop everything cleanly ----------------------------------------------------
kill -TERM "$relay_pid" "${ship_pid[@]}"
for p in "$relay_pid" "${ship_pid[@]}"; do
    wait "$p" || fail "a process ended with status $? after SIGTERM (logs in $tmp)"
done
relay_pid='' ship_pid=("" "")

# ---- the reconciliation table: every figure counted, none assumed --------------
both() { q "$shipping" "ATTACH '$shop' AS shop; $1"; }
committed=$(q "$shop" 'SELECT count(*) FROM orders') || fail "cannot read $shop"
attempts_committed=$(q "$shop" "SELECT count(*) FROM attempts WHERE outcome = 'committed'")
rolled_back=$(q "$shop" "SELECT count(*) FROM attempts WHERE outcome = 'rolled_back'")
published=$(q "$shop" 'SELECT count(*) FROM acemq_outbox WHERE state = 1')
outbox_rows=$(q "$shop" 'SELECT count(*) FROM acemq_outbox')
deliveries=$(q "$shipping" 'SELECT count(*) FROM deliveries') || fail "cannot read $shipping"
dups=$(q "$shipping" "SELECT count(*) FROM deliveries WHERE kind = 'dup'")
effects=$(q "$shipping" 'SELECT count(*) FROM shipments')
twice=$(q "$shipping" 'SELECT count(*) FROM (SELECT 1 FROM shipments GROUP BY order_id HAVING count(*) > 1)')
phantom=$(both 'SELECT count(*) FROM shipments WHERE order_id NOT IN (SELECT id FROM shop.orders)')
lost=$(both 'SELECT count(*) FROM shop.orders WHERE id NOT IN (SELECT order_id FROM shipments)')
left=$("$build/acemq-demo-mq" state "$queue") || fail "cannot read the queue's state"
left=${left% *}

bad=0
# row LABEL VALUE [EXPECTED]: a line; with EXPECTED, checked.
row() {
    local mark=""
    if [ $# -eq 3 ]; then
        if [ "$2" = "$3" ]; then mark="ok"; else mark="MISMATCH (expected $3)"; bad=1; fi
    fi
    printf '  %-42s %7s  %s\n' "$1" "$2" "$mark"
}
echo
row "orders committed" "$committed" "$attempts_committed"
row "orders rolled back" "$rolled_back"
row "events published (outbox rows published)" "$published" "$committed"
row "outbox rows (committed orders only)" "$outbox_rows" "$committed"
row "messages sent twice on purpose" "$resent"
row "deliveries to the shippers" "$deliveries"
row "duplicates absorbed" "$dups"
row "effects applied (shipments)" "$effects" "$committed"
row "orders shipped more than once" "$twice" 0
row "effects of rolled-back orders" "$phantom" 0
row "lost (committed, never shipped)" "$lost" 0
row "left in the queue" "$left" 0
echo
if [ "$bad" = 0 ]; then
    echo "every committed order shipped exactly once; no rolled-back order shipped."
    exit 0
fi
keep=1
echo "MISMATCH: see the lines marked above"
exit 1
