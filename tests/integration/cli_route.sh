#!/usr/bin/env bash
# cli_route.sh ACEMQ EXAMPLE_DIR BROKEN_DIR — `acemq route` as a user runs
# it, with no servers (timer sources, memory and SQLite repositories):
#
# - the example route: one "Processing" line and four duplicates, counted;
#   with an SQLite repository, a second run processes nothing at all;
# - skip_duplicate false: every tick runs the child steps, duplicate=true on
#   all but the first;
# - remove_on_failure: a child exec that fails the first time runs twice and
#   the key is confirmed once; with remove_on_failure false it runs once and
#   the key stays held (the later ticks find it in progress and fail);
# - filter and choice route exchanges by predicate; set_body and exec pass
#   the body along;
# - --check: every file of BROKEN_DIR fails with exit status 2 and the line,
#   column and words its "# expect:" comment names; the example passes;
# - SIGTERM lets the exchange in flight finish and exits 0;
# - --metrics serves per-route and per-step counts;
# - usage errors exit 2.
#
# Exit status: 0 all passed, 1 a check failed (each is printed).
# shellcheck disable=SC2016 # ${...} in route files is the route's, not the shell's
set -u
if [ $# -ne 3 ]; then
    echo "usage: $0 ACEMQ EXAMPLE_DIR BROKEN_DIR" >&2
    exit 2
fi
acemq=$1
example=$2
broken=$3
tmp=$(mktemp -d /tmp/acemq-cli-route-XXXXXX)
route_pid=
cleanup() {
    [ -n "$route_pid" ] && kill -9 "$route_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
check() { # check NAME COMMAND...: runs the command, counts a failure
    if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}
count() { grep -c -- "$1" "$2"; } # count PATTERN FILE: matching lines
# route FILE [ARGS...]: runs acemq route into $tmp/out and $tmp/err; $status
route() {
    "$acemq" route "$@" >"$tmp/out" 2>"$tmp/err"
    status=$?
}
show_output() { echo "--- stdout"; cat "$tmp/out"; echo "--- stderr"; cat "$tmp/err"; }

# The example as shipped (five ticks a second apart).
route "$example/route.yaml"
check "example exits 0" test "$status" -eq 0
check "example: one Processing line" test "$(count 'Processing unique message fixed-1' "$tmp/out")" -eq 1
check "example: the to step ran once" test "$(count 'log=processed' "$tmp/out")" -eq 1
check "example: four duplicates counted" \
    grep -q 'route=pinned event=summary exchanges=5 completed=5 failed=0 duplicates=4' "$tmp/out"
[ "$failures" -eq 0 ] || show_output

# The same with an SQLite repository, twice: the second run does nothing.
sed -e 's|url: "memory:"|url: "sqlite:'"$tmp"'/dedupe.db"|' \
    -e 's|period=1000|period=10\&delay=0|' "$example/route.yaml" >"$tmp/sqlite.yaml"
route "$tmp/sqlite.yaml"
check "sqlite first run: one Processing line" test "$(count 'Processing unique' "$tmp/out")" -eq 1
route "$tmp/sqlite.yaml"
check "sqlite second run exits 0" test "$status" -eq 0
check "sqlite second run: no Processing line" test "$(count 'Processing unique' "$tmp/out")" -eq 0
check "sqlite second run: five duplicates" grep -q 'exchanges=5 completed=5 failed=0 duplicates=5' "$tmp/out"
"$acemq" idem show --store "sqlite:$tmp/dedupe.db" fixed-1 >"$tmp/show" 2>&1
check "sqlite: the key is confirmed" grep -q 'confirmed' "$tmp/show"

# skip_duplicate: false runs the children every time, duplicate set on all but the first.
cat >"$tmp/noskip.yaml" <<'YAML'
repositories:
  dedupe: { url: "memory:" }
routes:
  - id: noskip
    from: "timer:t?period=5&delay=0&repeatCount=5"
    steps:
      - set_header: { name: messageId, value: "fixed-1" }
      - idempotent_consumer:
          repository: dedupe
          expression: "${header.messageId}"
          skip_duplicate: false
          steps:
            - log: "tick ${exchangeProperty.CamelTimerCounter} duplicate=${exchangeProperty.duplicate}"
YAML
route "$tmp/noskip.yaml"
check "skip_duplicate false: five runs of the children" test "$(count 'message="tick' "$tmp/out")" -eq 5
check "skip_duplicate false: the first is new" grep -q 'tick 1 duplicate=false' "$tmp/out"
check "skip_duplicate false: four are duplicates" test "$(count 'duplicate=true' "$tmp/out")" -eq 4

# remove_on_failure: an exec that fails the first time it runs.
flaky_route() { # flaky_route NAME REMOVE_ON_FAILURE
    cat >"$tmp/$1.yaml" <<YAML
repositories:
  dedupe: { url: "sqlite:$tmp/$1.db", lease_ms: 600000 }
routes:
  - id: $1
    from: "timer:t?period=5&delay=0&repeatCount=5"
    steps:
      - set_header: { name: messageId, value: "fixed-1" }
      - idempotent_consumer:
          repository: dedupe
          expression: "\${header.messageId}"
          remove_on_failure: $2
          steps:
            - exec: "echo run >> $tmp/$1.runs; if [ -e $tmp/$1.failed ]; then exit 0; fi; touch $tmp/$1.failed; echo first run fails >&2; exit 1"
YAML
}
flaky_route release true
route "$tmp/release.yaml"
check "remove_on_failure: exits 0" test "$status" -eq 0
check "remove_on_failure: the child ran twice" test "$(wc -l <"$tmp/release.runs")" -eq 2
check "remove_on_failure: one failure, three duplicates" \
    grep -q 'exchanges=5 completed=4 failed=1 duplicates=3' "$tmp/out"
check "remove_on_failure: the failure is told with its reason" grep -q 'first run fails' "$tmp/err"
"$acemq" idem show --store "sqlite:$tmp/release.db" fixed-1 >"$tmp/show" 2>&1
check "remove_on_failure: the key is confirmed once" grep -q 'confirmed' "$tmp/show"
flaky_route keep false
route "$tmp/keep.yaml"
check "remove_on_failure false: the child ran once" test "$(wc -l <"$tmp/keep.runs")" -eq 1
check "remove_on_failure false: every tick failed" grep -q 'exchanges=5 completed=0 failed=5 duplicates=0' "$tmp/out"
check "remove_on_failure false: later ticks are in progress" test "$(count 'in progress elsewhere' "$tmp/err")" -eq 4
"$acemq" idem show --store "sqlite:$tmp/keep.db" fixed-1 >"$tmp/show" 2>&1
check "remove_on_failure false: the key stays held" grep -q 'held' "$tmp/show"

# filter, choice, set_body and exec together.
cat >"$tmp/flow.yaml" <<'YAML'
routes:
  - id: flow
    from: "timer:t?period=1&delay=0&repeatCount=6"
    steps:
      - set_body: "n=${exchangeProperty.CamelTimerCounter}"
      - filter:
          simple: "${exchangeProperty.CamelTimerCounter} > 2"
          steps:
            - exec: "tr n N"
            - choice:
                when:
                  - simple: "${body} regex 'N=[34]'"
                    steps:
                      - log: "low ${body}"
                otherwise:
                  steps:
                    - log: "high ${body}"
YAML
route "$tmp/flow.yaml"
check "filter: two low" test "$(count 'message="low N=' "$tmp/out")" -eq 2
check "choice otherwise: two high" test "$(count 'message="high N=' "$tmp/out")" -eq 2
check "filter: ticks 1 and 2 filtered out" test "$(count 'message=' "$tmp/out")" -eq 4

# --check: each broken file fails where its "# expect:" comment says.
check_broken() {
    local f want ok=0
    for f in "$broken"/*.yaml; do
        want=$(sed -n '1s/^# expect: //p' "$f")
        "$acemq" route --check "$f" >"$tmp/out" 2>"$tmp/err"
        status=$?
        local where=${want%%: *} words=${want#*: }
        if [ "$status" -ne 2 ] || ! grep -qF -- "$f:$where:" "$tmp/err" || ! grep -qF -- "$words" "$tmp/err"; then
            echo "  $f: want status 2 and '$f:$where: ...$words', got $status:"
            cat "$tmp/err"
            ok=1
        fi
    done
    return $ok
}
check "--check: every broken file fails at its line and column" check_broken
route --check "$example/route.yaml"
check "--check: the example passes" test "$status" -eq 0
check "--check: says ok" grep -q 'ok (1 route)' "$tmp/out"
cat >"$tmp/nodir.yaml" <<'YAML'
routes:
  - id: nodir
    from: "file:/nonexistent/acemq-route-test"
    steps: []
YAML
route --check "$tmp/nodir.yaml"
check "--check: a source it cannot open" test "$status" -eq 2
check "--check: names the line and column of from" grep -qF "$tmp/nodir.yaml:3:11:" "$tmp/err"

cat >"$tmp/badstore.yaml" <<'YAML'
repositories:
  d: { url: "bogus:x" }
routes:
  - id: r
    from: "timer:t"
    steps: []
YAML
route --check "$tmp/badstore.yaml"
check "--check: an unknown store" test "$status" -eq 2
check "--check: names the repository's line and the known stores" \
    grep -qF "$tmp/badstore.yaml:2:3: repository 'd': unknown store 'bogus:'; known: memory:" "$tmp/err"

# SIGTERM: the exchange in flight finishes, then exit 0.
cat >"$tmp/forever.yaml" <<YAML
routes:
  - id: forever
    from: "timer:t?period=10&delay=0"
    steps:
      - exec: "touch $tmp/started; sleep 1; echo done >> $tmp/finished"
YAML
port=$((20000 + RANDOM % 20000))
"$acemq" route "$tmp/forever.yaml" --metrics "127.0.0.1:$port" >"$tmp/out" 2>"$tmp/err" &
route_pid=$!
for _ in $(seq 100); do [ -e "$tmp/started" ] && break; sleep 0.1; done
page() { exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3; }
page >"$tmp/metrics" 2>/dev/null
check "--metrics: per-route counts" grep -q 'acemq_route_exchanges_total{route="forever"}' "$tmp/metrics"
check "--metrics: per-step counts" grep -q 'acemq_route_step_runs_total{route="forever",step="exec1",kind="exec"}' "$tmp/metrics"
kill -TERM "$route_pid"
wait "$route_pid"
status=$?
route_pid=
check "SIGTERM: exit 0" test "$status" -eq 0
check "SIGTERM: the exchange in flight finished" test -s "$tmp/finished"
check "SIGTERM: nothing failed" grep -q 'route=forever event=summary .* failed=0' "$tmp/out"

# Usage errors.
route
check "no file: exit 2" test "$status" -eq 2
route "$example/route.yaml" --bogus
check "unknown option: exit 2" test "$status" -eq 2
check "unknown option: said" grep -q "unknown option '--bogus'" "$tmp/err"
route "$tmp/missing.yaml"
check "missing file: exit 2" test "$status" -eq 2
check "missing file: said" grep -qF "$tmp/missing.yaml" "$tmp/err"

echo "cli_route: $failures failure(s)"
[ "$failures" -eq 0 ]
