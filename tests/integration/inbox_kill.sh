#!/usr/bin/env bash
# inbox_kill.sh INBOX_CONSUMER AMQP_TOOL — the inbox under
# kill -9 (issue 40, Tests): examples/inbox_consumer.c, whose effect (a row
# in `applied`) and confirmation commit in one SQLite transaction, killed at
# random points many times, leaves every message's effect exactly once and
# nothing unacknowledged. Against the real RabbitMQ at ACEMQ_AMQP_URL
# (skipped, exit 77, without it).
#
# - 2,000 distinct messages and 400 of them again (same message_id), in a
#   shuffled order, on a fresh queue;
# - the consumer (one at a time, lease LEASE_MS) started and killed with
#   kill -9, at least 30 times: now and then while it starts (opening
#   SQLite, connecting), otherwise 10 to 200 ms after it began consuming
#   while work is left, so that the kills land in every step of a message
#   (claim, effect, COMMIT, between COMMIT and the ack, the ack), and 10 to
#   300 ms once it is all done;
# - then run to the end (every id applied, the queue empty and quiet) and
#   stopped with SIGTERM, which must end it with status 0. A SIGTERM gives
#   back what the consumer held at that moment (a redelivered duplicate it
#   was holding while another claim's lease ran out), so when the queue is
#   not empty once it is gone the consumer runs again, a few rounds at most:
#   a message that is never acknowledged fails the test all the same.
# - Afterwards: every id has exactly one row in `applied`, with its body;
#   the queue has no consumer and 0 messages ready.
#
# AMQP_TOOL (tests/integration/amqp_tool.c) declares, publishes and
# deletes, and says a queue's messages ready and consumers; the sqlite3 command reads the
# database. The queue's name carries the pid and a random part and the
# files live in a fresh temporary directory, both removed at the end.
# Every wait is on a condition, bounded generously (minutes); nothing
# asserts how fast anything is.
#
# Exit status: 0 passed, 1 failed (the reason and the consumer's log are
# printed), 2 usage, 77 skipped.
set -u
if [ $# -ne 2 ]; then
    echo "usage: $0 INBOX_CONSUMER AMQP_TOOL" >&2
    exit 2
fi
consumer=$1
tool=$2
if [ -z "${ACEMQ_AMQP_URL:-}" ]; then
    echo "inbox_kill: SKIPPED: ACEMQ_AMQP_URL is not set (scripts/services.sh start rabbitmq)"
    exit 77
fi
command -v sqlite3 >/dev/null ||
    { echo "inbox_kill: FAIL: the sqlite3 command is missing (scripts/deps.sh installs it)"; exit 1; }
command -v shuf >/dev/null || { echo "inbox_kill: FAIL: shuf (coreutils) is missing"; exit 1; }

IDS=2000
AGAIN=400 # every fifth id, published twice
KILLS=${ACEMQ_INBOX_KILLS:-40}
[ "$KILLS" -ge 30 ] 2>/dev/null || KILLS=30
LEASE_MS=2000
ROUNDS=5 # final runs at most (see above)

broker=$ACEMQ_AMQP_URL
tmp=$(mktemp -d "${TMPDIR:-/tmp}/acemq-inbox-kill-XXXXXX") || exit 1
q=acemq.test.inbox-kill.$$.$RANDOM
db=$tmp/shop.db
log=$tmp/consumer.log # every run's stderr, one after the other
run_log=$tmp/run.log  # the current run's
pid=
declared=0
cleanup() {
    if [ -n "$pid" ]; then
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    [ "$declared" = 1 ] && "$tool" delete "$q" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
    echo "inbox_kill: FAIL: $*"
    if [ -s "$run_log" ]; then
        echo "--- the current run's log (last 40 lines):"
        tail -n 40 "$run_log"
    elif [ -s "$log" ]; then
        echo "--- the consumer's log (last 40 lines):"
        tail -n 40 "$log"
    fi
    exit 1
}

sleep_ms() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

# wait_until SECONDS COMMAND...: 0 once COMMAND succeeds, 1 after SECONDS.
wait_until() {
    local end=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -ge "$end" ] && return 1
        sleep 0.1
    done
}

# The queue's "READY CONSUMERS" (amqp_tool state); ready and consumers.
state() { "$tool" state "$q"; }
ready() {
    local s
    s=$(state) || return 1
    echo "${s% *}"
}
no_consumer() {
    local s
    s=$(state) || return 1
    [ "${s#* }" = 0 ]
}

# sql QUERY: one value from the database (read-only use; waits for locks).
sql() { sqlite3 -batch -noheader -cmd '.timeout 60000' "$db" "$1"; }
# Ids with their effect so far: 0 before the consumer made the table.
applied() {
    local n=
    [ -f "$db" ] && n=$(sql 'SELECT count(DISTINCT id) FROM applied' 2>/dev/null)
    echo "${n:-0}"
}

exited() { # exited PID: gone, or a zombie waiting for `wait`
    [ ! -e "/proc/$1" ] || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]
}
consuming() { grep -q 'event=consuming' "$run_log"; }

# start N: the consumer in the background, pid set, its stderr in run_log.
start() {
    : >"$run_log"
    echo "--- run $1" >>"$log"
    "$consumer" "$broker" "$q" "$db" "$LEASE_MS" 2>"$run_log" &
    pid=$!
}
# Appends the run's log to the whole one.
keep_log() {
    cat "$run_log" >>"$log"
    : >"$run_log"
}

# ---- the messages ------------------------------------------------------------
"$tool" declare "$q" || fail "cannot declare $q"
declared=1
for ((i = 1; i <= IDS; i++)); do printf 'ik-%04d body-%04d\n' "$i" "$i"; done >"$tmp/first"
awk 'NR % 5 == 0' "$tmp/first" >"$tmp/again"
[ "$(wc -l <"$tmp/again")" -eq "$AGAIN" ] || fail "expected $AGAIN ids to publish again"
cat "$tmp/first" "$tmp/again" | shuf >"$tmp/all"
total=$((IDS + AGAIN))
"$tool" publish-lines "$q" <"$tmp/all" || fail "publishing $total messages"
n=$(ready) || fail "cannot read the queue's state"
[ "$n" = "$total" ] || fail "$n messages ready after publishing $total"
echo "inbox_kill: $total messages on $q ($IDS ids, $AGAIN of them twice)"

# ---- kill -9, again and again ------------------------------------------------
at_start=0
mid_work=0
idle=0
for ((k = 1; k <= KILLS; k++)); do
    start "$k"
    if ((RANDOM % 8 == 0)); then
        # While it starts: opening the database, making its tables,
        # connecting, consuming.
        sleep_ms $((1 + RANDOM % 15))
    else
        end=$((SECONDS + 120))
        until consuming; do
            exited "$pid" && break
            [ "$SECONDS" -ge "$end" ] && fail "run $k: no event=consuming within 2 minutes"
            sleep 0.005
        done
        if [ "$(applied)" -lt "$IDS" ]; then
            sleep_ms $((10 + RANDOM % 191))
        else
            sleep_ms $((10 + RANDOM % 291))
        fi
    fi
    kill -9 "$pid" 2>/dev/null
    { wait "$pid"; } 2>/dev/null # no "Killed" from the shell
    status=$?
    [ "$status" = 137 ] || fail "run $k: the consumer ended by itself before its kill (status $status)"
    pid=
    if ! consuming; then
        at_start=$((at_start + 1))
    elif [ "$(applied)" -lt "$IDS" ]; then
        mid_work=$((mid_work + 1))
    else
        idle=$((idle + 1))
    fi
    keep_log
done
done_before_end=$(applied)
echo "inbox_kill: $KILLS kills: $at_start while starting, $mid_work with work left," \
    "$idle once all was applied; $done_before_end of $IDS ids applied so far"

# ---- to the end, then SIGTERM ------------------------------------------------
# Done: every id applied, nothing ready. Quiet: still nothing ready after
# three seconds, longer than a held duplicate waits (in_progress_delay_ms,
# 1 s) before it goes back; a wait, not an assertion (see the header).
drained() { [ "$(applied)" = "$IDS" ] && [ "$(ready)" = 0 ]; }
quiet() {
    local i
    for i in 1 2 3 4 5 6; do
        drained || return 1
        sleep 0.5
    done
}
round=0
left=
while :; do
    round=$((round + 1))
    start "final-$round"
    wait_until 120 consuming || fail "final run $round: no event=consuming within 2 minutes"
    wait_until 600 drained ||
        fail "final run $round: not drained in 10 minutes: $(applied) of $IDS ids applied," \
            "$(ready) messages ready"
    wait_until 300 quiet || fail "final run $round: the queue did not stay empty"
    kill -TERM "$pid"
    wait_until 120 exited "$pid" || fail "final run $round: still running 2 minutes after SIGTERM"
    wait "$pid"
    status=$?
    pid=
    [ "$status" = 0 ] || fail "final run $round: SIGTERM ended it with status $status, not 0"
    grep -q 'event=stopped' "$run_log" || fail "final run $round: no event=stopped in its log"
    keep_log
    wait_until 120 no_consumer || fail "the queue still has a consumer 2 minutes after the last stopped"
    left=$(ready) || fail "cannot read the queue's state"
    [ "$left" = 0 ] && break
    [ "$round" -ge "$ROUNDS" ] &&
        fail "$left messages still ready after $round final runs: never acknowledged"
    echo "inbox_kill: final run $round gave back $left held messages at SIGTERM; running again"
done

# ---- what it left ------------------------------------------------------------
twice=$(sql 'SELECT count(*) FROM (SELECT id FROM applied GROUP BY id HAVING count(*) != 1)') ||
    fail "cannot read $db"
distinct=$(sql 'SELECT count(DISTINCT id) FROM applied')
rows=$(sql 'SELECT count(*) FROM applied')
wrong=$(sql "SELECT count(*) FROM applied WHERE id NOT GLOB 'ik-[0-9][0-9][0-9][0-9]'
             OR CAST(body AS TEXT) != 'body-' || substr(id, 4)")
[ "$twice" = 0 ] || {
    sql 'SELECT id, count(*) FROM applied GROUP BY id HAVING count(*) != 1 LIMIT 20'
    fail "$twice ids have more than one row in applied (the effect twice)"
}
[ "$distinct" = "$IDS" ] || fail "$distinct of $IDS ids in applied (an effect lost)"
[ "$rows" = "$IDS" ] || fail "$rows rows in applied for $IDS ids"
[ "$wrong" = 0 ] || fail "$wrong rows in applied with an id or body that was not published"
no_consumer || fail "the queue has a consumer at the end"
[ "$(ready)" = 0 ] || fail "messages left in the queue at the end"

count_event() { grep -c "event=$1\b" "$log"; }
echo "inbox_kill: PASS: $total messages ($IDS ids, $AGAIN twice), $KILLS kill -9" \
    "($at_start while starting, $mid_work with work left, $idle idle), final run in $round" \
    "round(s); applied: $rows rows, $distinct ids, none twice; queue: 0 ready, 0 consumers;" \
    "log: stale=$(count_event stale) lease_lost=$(count_event lease_lost)" \
    "store_error=$(count_event store_error) confirm_failed=$(count_event confirm_failed)" \
    "failed=$(count_event failed)"
exit 0
