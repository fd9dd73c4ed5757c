#!/usr/bin/env bash
# cli_idem.sh — `acemq idem` on an SQLite store whose rows are written with
# plain SQL as docs/schema.md describes them: status counts each state and
# names the next lease to end, show prints one record, forget makes an id
# new again, purge removes what has expired, and every exit status.
#
#   cli_idem.sh ACEMQ
#
# Exit status: 0 all passed, 1 a check failed (each failure is printed).
set -uo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 ACEMQ" >&2
    exit 2
fi
acemq=$1
command -v sqlite3 >/dev/null || { echo "cli_idem: sqlite3 is missing (scripts/deps.sh)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/acemq-cli-idem.XXXXXX")
trap 'rm -rf "$work"' EXIT
db=$work/idem.db
store=sqlite:$db
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# run WANT_STATUS CMD...: runs CMD into $work/out and $work/err and checks
# its exit status.
run() {
    local want=$1
    shift
    local rc=0
    "$@" >"$work/out" 2>"$work/err" || rc=$?
    [ "$rc" -eq "$want" ] || fail "$* exited $rc, wanted $want: $(cat "$work/err")"
}

# has LINE: the last command printed this exact line.
has() {
    grep -qxF -- "$1" "$work/out" || fail "no line '$1' in: $(tr '\n' '|' <"$work/out")"
}

# said TEXT: the last command's standard error contains TEXT.
said() {
    grep -qF -- "$1" "$work/err" || fail "stderr lacks '$1': $(cat "$work/err")"
}

# The store makes its table at open.
run 0 "$acemq" idem status --store "$store"
has "held 0"
has "confirmed 0"

now=$(($(date +%s) * 1000))
hour=3600000
day=$((24 * hour))
sqlite3 "$db" <<SQL || fail "sqlite3 could not write the rows"
INSERT INTO acemq_idem(id, state, token, lease_until, expires_at, fingerprint, result) VALUES
  (CAST('held-late' AS BLOB), 1, 11, $((now + 2 * hour)), NULL, NULL, NULL),
  (CAST('held-soon' AS BLOB), 1, 12, $((now + hour)), NULL, NULL, NULL),
  (CAST('lapsed' AS BLOB), 1, 13, $((now - 8 * day)), NULL, NULL, NULL),
  (CAST('released' AS BLOB), 0, 14, NULL, $((now + day)), NULL, NULL),
  (CAST('done' AS BLOB), 2, 15, NULL, $((now + day)), X'0011', CAST('ok' AS BLOB)),
  (CAST('old' AS BLOB), 2, 16, NULL, $((now - hour)), NULL, NULL),
  (X'6100ff', 2, 17, NULL, $((now + day)), NULL, NULL);
SQL

run 0 "$acemq" idem status --store "$store"
has "held 2"
has "abandoned 2"
has "confirmed 2"
has "expired 1"
has "next_lease_id held-soon"
has "next_lease_token 12"
has "next_lease_until_ms $((now + hour))"

run 0 "$acemq" idem show --store "$store" done
has "id done"
has "state confirmed"
has "token 15"
has "expires_ms $((now + day))"
has "result_bytes 2"
has "fingerprint_bytes 2"

run 0 "$acemq" idem show --store "$store" held-late
has "state held"
has "lease_until_ms $((now + 2 * hour))"

run 0 "$acemq" idem show --store "$store" lapsed
has "state abandoned"

run 1 "$acemq" idem show --store "$store" never-seen
said "never-seen: the store holds no record of this id"

# forget: the id is new again; an absent one is an error, the others still go.
run 1 "$acemq" idem forget --store "$store" done never-seen
has "forgot done"
said "never-seen: the store holds no record of it"
run 1 "$acemq" idem show --store "$store" done
[ "$(sqlite3 "$db" "SELECT count(*) FROM acemq_idem WHERE id = CAST('held-late' AS BLOB)")" = 1 ] ||
    fail "forget took another id with it"

# purge: the expired confirmation and the claim idle past retention go.
run 0 "$acemq" idem purge --store "$store"
has "purged 2"
run 0 "$acemq" idem status --store "$store"
has "held 2"
has "abandoned 1"
has "confirmed 1"
has "expired 0"

# A binary id is shown escaped, on one line.
sqlite3 "$db" "UPDATE acemq_idem SET state = 1, lease_until = $((now + 60000)), expires_at = NULL WHERE id = X'6100ff'" ||
    fail "sqlite3 could not update"
run 0 "$acemq" idem status --store "$store"
has 'next_lease_id a\x00\xff'

# Usage errors change nothing and exit 2.
run 2 "$acemq" idem
run 2 "$acemq" idem status
said "--store URL is required"
run 2 "$acemq" idem frobnicate --store "$store"
said "unknown subcommand 'frobnicate'"
run 2 "$acemq" idem show --store "$store"
said "name an id"
run 2 "$acemq" idem show --store "$store" a b
said "name one id"
run 2 "$acemq" idem status --store "$store" stray
said "unexpected argument 'stray'"
run 2 "$acemq" idem status --store "$store" --bogus
said "unknown option '--bogus'"
run 0 "$acemq" idem --help
has "  acemq idem status --store sqlite:/var/lib/shop/idem.db"

# A store that cannot be opened: a clear error, exit 1.
run 1 "$acemq" idem status --store "nosuch:thing"
said "unknown store 'nosuch:'"
run 1 "$acemq" idem status --store "sqlite:$work/missing-dir/x.db"

if [ "$failures" -ne 0 ]; then
    echo "cli_idem: $failures check(s) failed" >&2
    exit 1
fi
echo "cli_idem: all passed"
