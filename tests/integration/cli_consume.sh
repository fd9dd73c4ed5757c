#!/usr/bin/env bash
# cli_consume.sh ACEMQ AMQP_TOOL PIPE_WORKER — `acemq consume --exec` and
# `--pipe` as an operator runs them, against the real RabbitMQ at
# ACEMQ_AMQP_URL (skipped, exit 77, without it):
#
# - --exec with a shell command: 50 messages, 10 of them published twice,
#   each runs the command once with its own body and headers, and with
#   SIGPIPE not ignored; the queue ends empty; SIGTERM exits 0.
# - --exec failures: a command that exits 1 and one that sleeps past --lease
#   are dead-lettered after --attempts runs with the count and the reason in
#   headers (the sleeper killed); without --dead-letter a failed message is
#   rejected to the queue's own x-dead-letter-exchange.
# - --pipe with examples/pipe_worker.py: 200 messages with duplicates, each
#   processed once; a child that crashes on one message is started again
#   and the message processed on its next attempt; an answer ok:false
#   counts as a failure with the child's reason; a child that exits between
#   messages costs the next message nothing.
# - usage errors exit 2 and say what is wrong; a bad store exits 1.
#
# amqp_tool (tests/integration/amqp_tool.c) declares the queues, publishes
# and reads back. Queue names carry the pid and a random part, so runs never
# share a queue. Every wait is on a condition, bounded generously; nothing
# asserts how fast anything is.
#
# Exit status: 0 all passed, 1 a check failed (each is printed), 77 skipped.
# shellcheck disable=SC2016 # the commands acemq runs expand their own variables
set -u
if [ $# -ne 3 ]; then
    echo "usage: $0 ACEMQ AMQP_TOOL PIPE_WORKER" >&2
    exit 2
fi
acemq=$1
tool=$2
worker=$3
if [ -z "${ACEMQ_AMQP_URL:-}" ]; then
    echo "cli_consume: ACEMQ_AMQP_URL is not set (scripts/services.sh start rabbitmq): skipped"
    exit 77
fi
command -v python3 >/dev/null || { echo "cli_consume: python3 is missing" >&2; exit 1; }
broker=$ACEMQ_AMQP_URL
tmp=$(mktemp -d /tmp/acemq-cli-consume-XXXXXX)
run=acemq.test.cli-consume.$$.$RANDOM
queues=()
consumer_pid=
cleanup() {
    [ -n "$consumer_pid" ] && kill -9 "$consumer_pid" 2>/dev/null
    # A command acemq had running when it was killed outlives it.
    [ -s "$tmp/slow.pids" ] && xargs kill -9 <"$tmp/slow.pids" 2>/dev/null
    [ ${#queues[@]} -gt 0 ] && "$tool" delete "${queues[@]}" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
check() { # check NAME COMMAND...: runs the command, counts a failure
    if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

# queue NAME [--dlx EX]: declares it and has it deleted at the end.
queue() {
    "$tool" declare "$@" || { echo "cannot declare $1"; exit 1; }
    queues+=("$1")
}
ready() { "$tool" count "$1" 2>/dev/null; }

# wait_until SECONDS COMMAND...: 0 once COMMAND succeeds, 1 after SECONDS.
wait_until() {
    local end=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -ge "$end" ] && return 1
        sleep 0.1
    done
}

port=${ACEMQ_TEST_PORT_BASE:-$((20000 + ($$ + 5000) % 10000))}
metrics() {
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
    timeout 5 cat <&3 >"$tmp/metrics.txt"
    local rc=$?
    exec 3<&-
    return $rc
}
metric() { awk -v n="$1" '$1 == n {print $2}' "$tmp/metrics.txt"; }
# metrics_reach NAME=N...: /metrics answers, and each counter is at least N.
metrics_reach() {
    metrics 2>/dev/null || return 1
    local kv v
    for kv in "$@"; do
        v=$(metric "acemq_consumer_${kv%%=*}_total")
        [ "${v:-0}" -ge "${kv#*=}" ] || return 1
    done
}

# start_consumer LOG ARGS...: `acemq consume --metrics 127.0.0.1:PORT ARGS...`
# in the background, its log in LOG, consumer_pid set, once its /metrics
# answers; on the next port when this one is taken (a few tries).
start_consumer() {
    local log=$1
    shift
    for _ in 1 2 3 4 5 6 7 8; do
        port=$((port + 1))
        "$acemq" consume --metrics "127.0.0.1:$port" "$@" 2>"$log" &
        consumer_pid=$!
        for _ in $(seq 1 600); do
            if metrics 2>/dev/null && grep -q '^# TYPE acemq_consumer' "$tmp/metrics.txt"; then
                return 0
            fi
            kill -0 "$consumer_pid" 2>/dev/null || break
            sleep 0.1
        done
        grep -q 'cannot listen' "$log" || return 1
        wait "$consumer_pid" 2>/dev/null
        consumer_pid=
    done
    return 1
}

exited() { # exited PID: gone, or a zombie waiting for `wait`
    [ ! -e "/proc/$1" ] || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]
}

# stop_consumer NAME: SIGTERM; it must exit, with status 0.
stop_consumer() {
    kill -TERM "$consumer_pid"
    # The wait's own answer, not a second look at /proc: once the shell has
    # reaped the consumer, its pid may already name another process.
    wait_until 120 exited "$consumer_pid"
    check "$1: SIGTERM ends it" test $? = 0
    kill -9 "$consumer_pid" 2>/dev/null
    wait "$consumer_pid"
    local status=$?
    consumer_pid=
    check "$1: SIGTERM, exit status 0" test "$status" = 0
}

# header FILE ID NAME: the header NAME of the message ID in FILE (lines of
# `amqp_tool get`), as JSON text (a string keeps its quotes).
header() {
    python3 - "$@" <<'EOF'
import json, sys
path, mid, name = sys.argv[1:]
for line in open(path):
    m = json.loads(line)
    if m.get("message_id") == mid:
        print(json.dumps(m["headers"].get(name), separators=(",", ":")))
        break
EOF
}

# ---- --exec: each new message once, its body and headers -------------------
q=$run.exec
queue "$q"
for i in $(seq -w 1 49); do echo "exec-$i body-$i"; done | "$tool" publish-lines "$q" --header source=bulk
"$tool" publish "$q" exec-50 body-50 --header order-id=ord-50
for i in $(seq -w 1 10); do echo "exec-$i body-$i"; done | "$tool" publish-lines "$q" --header source=bulk
check "exec: 60 messages published" test "$(ready "$q")" = 60
{
    for i in $(seq -w 1 49); do echo "exec-$i - bulk body-$i"; done
    echo "exec-50 ord-50 - body-50"
} >"$tmp/exec.want"
# The message's id, two headers ("-" when it has not got one) and the body
# (standard input); and the signals the command finds ignored.
cmd='printf "%s %s %s %s\n" "$ACEMQ_MESSAGE_ID" "${ACEMQ_HEADER_ORDER_ID:--}" \
  "${ACEMQ_HEADER_SOURCE:--}" "$(cat)" >>"$1"; grep "^SigIgn:" /proc/$$/status >"$2"'
start_consumer "$tmp/exec.log" --broker "$broker" --queue "$q" --store "sqlite:$tmp/exec.db" \
    --prefetch 8 --heartbeat 10 --exec -- sh -c "$cmd" sh "$tmp/exec.out" "$tmp/exec.sigign"
check "exec: started" test $? = 0
wait_until 120 metrics_reach processed=50 duplicates=10
check "exec: 50 processed, per /metrics" test "$(metric acemq_consumer_processed_total)" = 50
check "exec: 10 duplicates, per /metrics" test "$(metric acemq_consumer_duplicates_total)" = 10
check "exec: no failure, per /metrics" test "$(metric acemq_consumer_failed_total)" = 0
stop_consumer "exec"
check "exec: the command ran once per id, with its body and headers" \
    cmp -s <(sort "$tmp/exec.out") "$tmp/exec.want"
check "exec: ACEMQ_HEADER_ORDER_ID for the header order-id" grep -qx 'exec-50 ord-50 - body-50' "$tmp/exec.out"
# SIGPIPE is bit 13 of the mask: acemq ignores it for itself, not for the
# commands it starts (a `... | head` in one must end as in a shell).
check "exec: the command does not inherit an ignored SIGPIPE" \
    sh -c '[ $(( 0x$(awk "{print \$2}" "$1") & 0x1000 )) = 0 ]' sh "$tmp/exec.sigign"
check "exec: the queue ends empty" test "$(ready "$q")" = 0
check "exec: log: consuming, then stopped" grep -q 'event=stopped' "$tmp/exec.log"

# ---- --exec failures: counted to the dead-letter exchange ------------------
q=$run.fail
dx=$run.dead-ex
dq=$run.dead
queue "$q"
queue "$dq"
"$tool" declare-exchange "$dx"
"$tool" bind "$dq" "$dx" "$q" # dead letters keep their routing key: the queue's name
"$tool" publish "$q" fail-1 "will fail"
"$tool" publish "$q" slow-1 "will hang"
cmd='case "$ACEMQ_MESSAGE_ID" in
  fail-*) cat >/dev/null; echo "$ACEMQ_FAILURES" >>"$1"; exit 1 ;;
  slow-*) echo $$ >>"$2"; exec sleep 600 ;;
esac'
start_consumer "$tmp/fail.log" --broker "$broker" --queue "$q" --store "sqlite:$tmp/fail.db" \
    --lease 1 --attempts 2 --retry-delay 0.2 --dead-letter "$dx" \
    --exec -- sh -c "$cmd" sh "$tmp/fail.runs" "$tmp/slow.pids"
check "failures: started" test $? = 0
wait_until 120 metrics_reach dead_lettered=2
check "failures: 4 failed runs, per /metrics" test "$(metric acemq_consumer_failed_total)" = 4
check "failures: 2 dead-lettered, per /metrics" test "$(metric acemq_consumer_dead_lettered_total)" = 2
wait_until 60 test "$(ready "$dq")" = 2
for _ in 1 2; do "$tool" get "$dq" >>"$tmp/dead.json"; done
check "failures: both in the dead queue" test "$(wc -l <"$tmp/dead.json")" = 2
check "failures: exit 1 counted twice" test "$(header "$tmp/dead.json" fail-1 x-acemq-failures)" = '"2"'
check "failures: exit 1: the reason names the status" \
    grep -q 'exited with status 1' <<<"$(header "$tmp/dead.json" fail-1 x-acemq-error)"
check "failures: exit 1: the queue named" \
    test "$(header "$tmp/dead.json" fail-1 x-acemq-queue)" = "\"$q\""
check "failures: ACEMQ_FAILURES was 0, then 1" test "$(tr '\n' ' ' <"$tmp/fail.runs")" = "0 1 "
check "failures: past the lease counted twice" \
    test "$(header "$tmp/dead.json" slow-1 x-acemq-failures)" = '"2"'
check "failures: past the lease: the reason says killed" \
    grep -q 'ran past the lease and was killed' <<<"$(header "$tmp/dead.json" slow-1 x-acemq-error)"
check "failures: the command past the lease ran twice" test "$(wc -l <"$tmp/slow.pids")" = 2
check "failures: and was killed both times" \
    sh -c 'for p in $(cat "$1"); do ! kill -0 "$p" 2>/dev/null || exit 1; done' sh "$tmp/slow.pids"
check "failures: log: the reason" grep -q 'event=failed key=fail-1 reason="the command exited with status 1"' "$tmp/fail.log"
stop_consumer "failures"
check "failures: the queue ends empty" test "$(ready "$q")" = 0

# Without --dead-letter: rejected to the queue's own x-dead-letter-exchange.
q=$run.reject
dx2=$run.reject-ex
dq2=$run.rejected
"$tool" declare-exchange "$dx2"
queue "$dq2"
queue "$q" --dlx "$dx2"
"$tool" bind "$dq2" "$dx2" "$q"
"$tool" publish "$q" reject-1
start_consumer "$tmp/reject.log" --broker "$broker" --queue "$q" --store memory: --attempts 1 \
    --exec -- sh -c 'exit 3'
wait_until 120 test "$(ready "$dq2")" = 1
check "no --dead-letter: in the queue's dead-letter exchange" test "$(ready "$dq2")" = 1
"$tool" get "$dq2" >"$tmp/rejected.json"
check "no --dead-letter: RabbitMQ's x-death says rejected" \
    grep -q '"reason":"rejected"' <<<"$(header "$tmp/rejected.json" reject-1 x-death)"
stop_consumer "no --dead-letter"
check "no --dead-letter: the queue ends empty" test "$(ready "$q")" = 0

# ---- --pipe: examples/pipe_worker.py, 200 messages with duplicates ----------
q=$run.pipe
queue "$q"
# Each fifth message again, ten messages later.
for i in $(seq 1 200); do
    printf 'pipe-%03d body %03d ünïcödé\n' "$i" "$i"
    [ $((i % 5)) = 0 ] && [ "$i" -gt 10 ] && printf 'pipe-%03d body %03d ünïcödé\n' $((i - 10)) $((i - 10))
done >"$tmp/pipe.publish"
for i in 195 200; do printf 'pipe-%03d body %03d ünïcödé\n' "$i" "$i"; done >>"$tmp/pipe.publish"
"$tool" publish-lines "$q" <"$tmp/pipe.publish"
check "pipe: 240 messages published" test "$(ready "$q")" = 240
sort -u "$tmp/pipe.publish" >"$tmp/pipe.want"
start_consumer "$tmp/pipe.log" --broker "$broker" --queue "$q" --store "sqlite:$tmp/pipe.db" \
    --prefetch 32 --pipe -- python3 "$worker" "$tmp/pipe.out"
check "pipe: started" test $? = 0
wait_until 120 metrics_reach processed=200 duplicates=40
check "pipe: 200 processed, per /metrics" test "$(metric acemq_consumer_processed_total)" = 200
check "pipe: 40 duplicates, per /metrics" test "$(metric acemq_consumer_duplicates_total)" = 40
stop_consumer "pipe"
check "pipe: each message processed once, its body intact" cmp -s <(sort "$tmp/pipe.out") "$tmp/pipe.want"
check "pipe: no failure logged" test "$(grep -c 'event=failed' "$tmp/pipe.log")" = 0
check "pipe: the queue ends empty" test "$(ready "$q")" = 0

# ---- --pipe: a child that crashes mid-message, and one that says no ---------
q=$run.crash
dq3=$run.crash-dead
dx3=$run.crash-dead-ex
queue "$q"
queue "$dq3"
"$tool" declare-exchange "$dx3"
"$tool" bind "$dq3" "$dx3" "$q"
cat >"$tmp/crash_worker.py" <<'EOF'
# Dies on crash-07 the first time it sees it (the marker file says it did),
# without answering; answers ok:false to refuse-*; else records the message
# with its failures and its own pid.
import base64, json, os, sys
out, marker = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    msg = json.loads(line)
    if msg["id"] == "crash-07" and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(5)
    if msg["id"].startswith("refuse-"):
        print(json.dumps({"id": msg["id"], "ok": False, "error": "refused by the worker"}), flush=True)
        continue
    with open(out, "a") as f:
        body = base64.b64decode(msg["body"]).decode()
        f.write(f"{msg['id']} {msg['failures']} {os.getpid()} {body}\n")
    print(json.dumps({"id": msg["id"], "ok": True}), flush=True)
EOF
{
    for i in $(seq -w 1 20); do echo "crash-$i b$i"; done
    echo "refuse-1 no"
} | "$tool" publish-lines "$q"
start_consumer "$tmp/crash.log" --broker "$broker" --queue "$q" --store memory: --attempts 3 \
    --retry-delay 0.2 --dead-letter "$dx3" \
    --pipe -- python3 "$tmp/crash_worker.py" "$tmp/crash.out" "$tmp/crash.marker"
check "crash: started" test $? = 0
wait_until 120 metrics_reach processed=20 dead_lettered=1
check "crash: 20 processed, per /metrics" test "$(metric acemq_consumer_processed_total)" = 20
check "crash: 4 failures (the crash, three refusals), per /metrics" \
    test "$(metric acemq_consumer_failed_total)" = 4
check "crash: the child crashed" test -e "$tmp/crash.marker"
check "crash: every message processed once" \
    test "$(cut -d' ' -f1 "$tmp/crash.out" | sort | uniq | wc -l) $(wc -l <"$tmp/crash.out")" = "20 20"
check "crash: crash-07 processed on its second attempt" \
    test "$(awk '$1 == "crash-07" {print $2, $4}' "$tmp/crash.out")" = "1 b07"
check "crash: the child was started again, once" \
    test "$(cut -d' ' -f3 "$tmp/crash.out" | sort -u | wc -l)" = 2
check "crash: log: the child exited" \
    grep -q 'event=failed key=crash-07 reason="the --pipe command exited; restarted"' "$tmp/crash.log"
wait_until 60 test "$(ready "$dq3")" = 1
"$tool" get "$dq3" >"$tmp/refused.json"
check "refused: dead-lettered with the child's reason" \
    test "$(header "$tmp/refused.json" refuse-1 x-acemq-error)" = '"refused by the worker"'
check "refused: after 3 attempts" test "$(header "$tmp/refused.json" refuse-1 x-acemq-failures)" = '"3"'
stop_consumer "crash"
check "crash: the queue ends empty" test "$(ready "$q")" = 0

# ---- --pipe: a child that ends itself between messages ---------------------
# A worker that exits after every third answer (as one that recycles itself
# to bound its memory) never had the next message: that message is no
# failure, so even with --attempts 1 nothing is dead-lettered.
q=$run.recycle
queue "$q"
cat >"$tmp/recycle_worker.py" <<'EOF'
import json, os, sys
out = sys.argv[1]
for n, line in enumerate(sys.stdin, 1):
    msg = json.loads(line)
    with open(out, "a") as f:
        f.write(f"{msg['id']} {os.getpid()}\n")
    print(json.dumps({"id": msg["id"], "ok": True}), flush=True)
    if n == 3:
        sys.exit(0)
EOF
for i in $(seq 1 9); do echo "recycle-$i x"; done | "$tool" publish-lines "$q"
start_consumer "$tmp/recycle.log" --broker "$broker" --queue "$q" --store memory: --attempts 1 \
    --pipe -- python3 "$tmp/recycle_worker.py" "$tmp/recycle.out"
check "recycle: started" test $? = 0
settled() { # settled N: processed and dead-lettered add up to N, per /metrics
    metrics 2>/dev/null &&
        [ $(($(metric acemq_consumer_processed_total) + $(metric acemq_consumer_dead_lettered_total))) -ge "$1" ]
}
wait_until 120 settled 9
check "recycle: all 9 processed, per /metrics" test "$(metric acemq_consumer_processed_total)" = 9
check "recycle: no failure, per /metrics" test "$(metric acemq_consumer_failed_total)" = 0
check "recycle: three children, three messages each" \
    test "$(cut -d' ' -f2 "$tmp/recycle.out" | uniq -c | awk '{print $1}' | tr '\n' ' ')" = "3 3 3 "
stop_consumer "recycle"
check "recycle: the queue ends empty" test "$(ready "$q")" = 0

# ---- usage errors and a store that cannot be opened ------------------------
usage() { # usage NAME EXPECTED-TEXT ARGS...: exit 2, the text on stderr
    timeout 60 "$acemq" consume "${@:3}" >/dev/null 2>"$tmp/usage.err"
    local st=$?
    check "usage: $1: exit 2" test "$st" = 2
    check "usage: $1: says so" grep -q -- "$2" "$tmp/usage.err"
}
usage "no --queue" "--queue" --broker "$broker" --store memory: --exec -- true
usage "no --exec or --pipe" "give --exec -- COMMAND or --pipe -- COMMAND" \
    --broker "$broker" --queue "$run.exec" --store memory:
usage "--prefetch 0" "--prefetch: want a number from 1 to 65535, got '0'" \
    --broker "$broker" --queue "$run.exec" --store memory: --prefetch 0 --exec -- true
usage "--prefetch lots" "--prefetch: want a number from 1 to 65535, got 'lots'" \
    --broker "$broker" --queue "$run.exec" --store memory: --prefetch lots --exec -- true
usage "--heartbeat past an hour" "--heartbeat: want a number from 0 to 3600, got '3601'" \
    --broker "$broker" --queue "$run.exec" --store memory: --heartbeat 3601 --exec -- true
usage "--exec without a command" "--exec needs a command" \
    --broker "$broker" --queue "$run.exec" --store memory: --exec --
usage "an unknown option" "unknown argument '--fast'" \
    --broker "$broker" --queue "$run.exec" --store memory: --fast --exec -- true
timeout 60 "$acemq" consume --broker "$broker" --queue "$run.exec" --store kafka://x \
    --exec -- true >/dev/null 2>"$tmp/store.err"
check "a bad store URL: exit 1" test $? = 1
check "a bad store URL: says which" grep -q -- '--store kafka://x' "$tmp/store.err"
timeout 60 "$acemq" consume --broker "$broker" --queue "$run.exec" \
    --store "sqlite:$tmp/no-such-dir/idem.db" --exec -- true >/dev/null 2>"$tmp/store.err"
check "a store that cannot be opened: exit 1" test $? = 1
timeout 60 "$acemq" consume --broker "$broker" --queue "$run.no-such-queue" --store memory: \
    --exec -- true >/dev/null 2>"$tmp/noqueue.err"
check "a queue that does not exist: exit 1" test $? = 1
check "a queue that does not exist: says which" grep -q "$run.no-such-queue" "$tmp/noqueue.err"
"$acemq" consume --help >"$tmp/help.txt"
check "--help: exit 0" test $? = 0
check "--help: examples" grep -q 'Examples' "$tmp/help.txt"

if [ "$failures" != 0 ]; then
    echo "$failures check(s) failed"
    for f in "$tmp"/*.log; do echo "--- $f"; tail -n 30 "$f"; done
    exit 1
fi
echo "all checks passed"
