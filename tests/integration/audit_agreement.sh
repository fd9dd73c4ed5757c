#!/usr/bin/env bash
# audit_agreement.sh — acemq's message audit against ActiveMQ's own
# (ActiveMQMessageAuditNoSync) on a stream that loses no history: both must give
# the generator's expected answer for every id, line for line (issue 3).
#
#   audit_agreement.sh ACEMQ GEN_AUDIT_STREAM ACTIVEMQ_PEER [IDS]
#
# ACEMQ is the `acemq` tool, GEN_AUDIT_STREAM bench/gen_audit_stream, and
# ACTIVEMQ_PEER bench/peers/activemq-peer.sh. IDS defaults to 200,000.
# Exit status: 0 all three agree; 1 a disagreement (the first differing line is
# printed) or a tool failed; 3 skipped: no Java or no ActiveMQ jars (ctest's
# SKIP_RETURN_CODE), reported only after acemq was checked against the
# expected answers, so a missing JDK never hides an acemq failure.
set -euo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 ACEMQ GEN_AUDIT_STREAM ACTIVEMQ_PEER [IDS]" >&2
    exit 2
fi
acemq=$1 gen=$2 peer=$3 ids=${4:-200000}
# ActiveMQ's defaults, given to all three so the "no loss" claim is checked
# against the audits actually run.
depth=2048 producers=64

work=$(mktemp -d "${TMPDIR:-/tmp}/acemq-audit-agreement.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Prints the first line where $2 differs from the expected answers and fails.
compare() {
    local who=$1 got=$2
    local want_n got_n
    want_n=$(wc -l <"$work/expect")
    got_n=$(wc -l <"$got")
    if cmp -s "$work/expect" "$got"; then
        echo "audit_agreement: $who agrees on all $want_n ids"
        return 0
    fi
    # paste pairs the files line by line; awk reports the first mismatch,
    # including a file that ends early (an empty field). awk stops there, so
    # paste may die of SIGPIPE: that status is not the verdict.
    paste -d '\t' "$work/ids" "$work/expect" "$got" | awk -F '\t' -v who="$who" '
        $2 != $3 { printf "audit_agreement: %s differs at line %d: id %s: expected %s, %s said %s\n",
                   who, NR, $1, $2, who, ($3 == "" ? "(nothing)" : $3); exit }' || true
    echo "audit_agreement: $who: $got_n answers for $want_n ids" >&2
    exit 1
}

# --no-loss makes the generator refuse a stream that an audit of this depth
# and producer count could lose history on: then "new"/"duplicate" are exact.
"$gen" --ids "$ids" --no-loss --depth "$depth" --track "$producers" \
    --out "$work/ids" --expect "$work/expect" 2>"$work/gen.log" || {
    cat "$work/gen.log" >&2
    echo "audit_agreement: gen_audit_stream failed" >&2
    exit 1
}
# A stream without redeliveries would make agreement trivial.
dups=$(grep -c '^duplicate$' "$work/expect" || true)
if [ "$dups" -eq 0 ]; then
    echo "audit_agreement: the stream has no redeliveries; nothing would be tested" >&2
    exit 1
fi

# Fail-closed: on a lossless stream there must be no "unknown" either.
rc=0
"$acemq" audit --fail-closed --depth "$depth" --producers "$producers" "$work/ids" \
    >"$work/acemq.out" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "audit_agreement: acemq audit exited $rc" >&2
    exit 1
fi
compare acemq "$work/acemq.out"

# A small heap: the decisions stream holds little (the peer's default is
# sized for the 2,000,000-id timing run).
export ACEMQ_PEER_JAVA_OPTS=${ACEMQ_PEER_JAVA_OPTS:--Xmx256m -XX:+UseSerialGC}
rc=0
"$peer" --decisions --depth "$depth" --producers "$producers" "$work/ids" \
    >"$work/activemq.out" 2>"$work/peer.log" || rc=$?
if [ "$rc" -eq 3 ]; then
    cat "$work/peer.log" >&2
    echo "audit_agreement: skipped: ActiveMQ's audit is not available (acemq alone agreed)"
    exit 3
fi
if [ "$rc" -ne 0 ]; then
    cat "$work/peer.log" >&2
    echo "audit_agreement: activemq-peer.sh exited $rc" >&2
    exit 1
fi
compare activemq "$work/activemq.out"
echo "audit_agreement: $ids ids, $dups redeliveries: acemq = ActiveMQ = expected"
