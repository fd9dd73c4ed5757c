#!/usr/bin/env bash
# cli_audit.sh — the `acemq` tool and its `audit` command on small hand-written
# inputs: each answer (new, duplicate, unknown and its causes, error), CRLF
# lines, --fail-closed, --count, standard input, and every exit status.
#
#   cli_audit.sh ACEMQ
#
# Exit status: 0 all passed, 1 a check failed (each failure is printed).
set -uo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 ACEMQ" >&2
    exit 2
fi
acemq=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/acemq-cli-audit.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# check NAME WANT_STATUS WANT_STDOUT_FILE CMD...: runs CMD, compares its exit
# status and its standard output (byte for byte) with what is wanted.
check() {
    local name=$1 want_rc=$2 want=$3
    shift 3
    local rc=0
    "$@" >"$work/out" 2>"$work/err" || rc=$?
    if [ "$rc" -ne "$want_rc" ]; then
        fail "$name: exit status $rc, want $want_rc"
        sed 's/^/    stderr: /' "$work/err" >&2
    fi
    if [ -n "$want" ] && ! diff -u "$want" "$work/out" >"$work/diff"; then
        fail "$name: standard output differs"
        sed 's/^/    /' "$work/diff" >&2
    fi
}

# check_err NAME PATTERN: the last command's standard error matches PATTERN.
check_err() {
    grep -q -- "$2" "$work/err" || fail "$1: stderr lacks '$2': $(cat "$work/err")"
}

p=ID:host-1-1700000000000-1:1:1:1

# --- new, duplicate, CRLF, out of order, a last line without newline --------
{
    printf '%s\n' "$p:1" "$p:2" "$p:1" "q:5"
    printf '%s\r\n' "$p:2"   # CRLF: the \r is not part of the id
    printf '%s\n' "q:4" "q:4" # out of order within the window
    printf '%s' "q:5"        # no final newline
} >"$work/basic"
printf '%s\n' new new duplicate new duplicate new duplicate duplicate >"$work/basic.want"
check basic 0 "$work/basic.want" "$acemq" audit "$work/basic"
# shellcheck disable=SC2016 # $1 and $2 are sh -c's own arguments
check stdin 0 "$work/basic.want" sh -c '"$1" audit - <"$2"' sh "$acemq" "$work/basic"

# --- history lost: under fail-open new, under fail-closed unknown -----------
# depth 4, 1 producer:
#   a:10 new; a:3 is below where a's window began (7): BEFORE_START;
#   a:20 slides the window to 17..20, so a:12 is BEHIND_WINDOW;
#   b:1 evicts a; a:21 is a's return: EVICTED; a:21 again: duplicate.
printf '%s\n' a:10 a:3 a:20 a:12 b:1 a:21 a:21 >"$work/lost"
printf '%s\n' new new new new new new duplicate >"$work/lost.open"
printf '%s\n' new unknown new unknown new unknown duplicate >"$work/lost.closed"
check fail-open 0 "$work/lost.open" "$acemq" audit --depth 4 --producers 1 "$work/lost"
check fail-closed 0 "$work/lost.closed" \
    "$acemq" audit --depth=4 --producers=1 --fail-closed "$work/lost"

# --- --count: the totals ------------------------------------------------------
cat >"$work/lost.count" <<'END'
lines                 7
checks                7
new                   3
duplicate             1
unknown               3
unknown_evicted       1
unknown_behind_window 1
unknown_before_start  1
errors                0
evictions             2
forgotten             0
END
check count-closed 0 "$work/lost.count" \
    "$acemq" audit --count --fail-closed --depth 4 --producers 1 "$work/lost"
# Fail-open answers those three new, and counts them both as new and as unknown.
sed 's/^new                   3$/new                   6/' "$work/lost.count" >"$work/lost.count.open"
check count-open 0 "$work/lost.count.open" \
    "$acemq" audit --count --depth 4 --producers 1 "$work/lost"

# --- malformed lines: reported in place, counted, exit 1 ----------------------
printf '%s\n' "$p:1" abc "" ":5" "p:" "p:12a" "p:18446744073709551616" "$p:1" "p:18446744073709551615" \
    >"$work/bad"
{
    echo new
    echo "error: id has no ':' between producer and sequence"
    echo "error: id is empty"
    echo "error: producer (before the last ':') is empty"
    echo "error: sequence (after the last ':') is empty"
    echo "error: sequence (after the last ':') is not a decimal number"
    echo "error: sequence (after the last ':') is above 2^64 - 1"
    echo duplicate
    echo new
} >"$work/bad.want"
check malformed 1 "$work/bad.want" "$acemq" audit "$work/bad"
check_err malformed "6 malformed lines, the first line 2: id has no ':'"
check malformed-count 1 "" "$acemq" audit --count "$work/bad"
grep -qx 'errors *6' "$work/out" || fail "malformed-count: no 'errors 6' in: $(cat "$work/out")"
grep -qx 'checks *3' "$work/out" || fail "malformed-count: no 'checks 3' in: $(cat "$work/out")"
grep -qx 'lines *9' "$work/out" || fail "malformed-count: no 'lines 9' in: $(cat "$work/out")"
# An overlong id: ACEMQ_AUDIT_ID_MAX is 1024 bytes.
{ printf 'p%.0s' $(seq 1100); printf ':1\n'; } >"$work/long"
check overlong 1 "" "$acemq" audit "$work/long"
grep -q '^error: id is longer' "$work/out" || fail "overlong: $(cat "$work/out")"

# --- an empty input is fine ----------------------------------------------------
: >"$work/empty"
check empty 0 "$work/empty" "$acemq" audit "$work/empty"

# --- usage errors: exit 2, nothing on stdout ----------------------------------
check no-file 2 "$work/empty" "$acemq" audit
check two-files 2 "$work/empty" "$acemq" audit "$work/basic" "$work/basic"
check bad-option 2 "$work/empty" "$acemq" audit --nope "$work/basic"
check depth-zero 2 "$work/empty" "$acemq" audit --depth 0 "$work/basic"
check_err depth-zero "want a number from 1 to"
check depth-junk 2 "$work/empty" "$acemq" audit --depth 12x "$work/basic"
check depth-negative 2 "$work/empty" "$acemq" audit --depth -1 "$work/basic"
check depth-huge 2 "$work/empty" "$acemq" audit --depth 16777217 "$work/basic"
check producers-missing 2 "$work/empty" "$acemq" audit "$work/basic" --producers
# --- a file that cannot be read: exit 1 ----------------------------------------
check missing-file 1 "$work/empty" "$acemq" audit "$work/does-not-exist"
check_err missing-file "does-not-exist"
check directory 1 "$work/empty" "$acemq" audit "$work"
# --- output that cannot be written (a full disk): exit 1, said on stderr ------
if [ -w /dev/full ]; then
    rc=0
    "$acemq" audit "$work/basic" >/dev/full 2>"$work/err" || rc=$?
    [ "$rc" -eq 1 ] || fail "full-disk: exit status $rc, want 1"
    check_err full-disk "writing standard output"
fi

# --- the tool itself ---------------------------------------------------------
check no-command 2 "$work/empty" "$acemq"
check_err no-command "usage: acemq"
check unknown-command 2 "$work/empty" "$acemq" frobnicate
check_err unknown-command "unknown command 'frobnicate'"
check help 0 "" "$acemq" --help
grep -q '^  audit ' "$work/out" || fail "help: no audit in: $(cat "$work/out")"
grep -q '^Examples:' "$work/out" || fail "help: no examples in: $(cat "$work/out")"
check version 0 "" "$acemq" --version
grep -qE '^acemq [0-9]+\.[0-9]+\.[0-9]+$' "$work/out" || fail "version: $(cat "$work/out")"
check audit-help 0 "" "$acemq" audit --help
grep -q 'Example' "$work/out" || fail "audit --help has no example"
check help-audit 0 "" "$acemq" help audit
grep -q 'usage: acemq audit' "$work/out" || fail "help audit: $(cat "$work/out")"

if [ "$failures" -ne 0 ]; then
    echo "cli_audit: $failures check(s) failed" >&2
    exit 1
fi
echo "cli_audit: all checks passed"
