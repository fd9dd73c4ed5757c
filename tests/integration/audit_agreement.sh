#!/usr/bin/env bash
# audit_agreement.sh — acemq's message audit against ActiveMQ's own
# (ActiveMQMessageAuditNoSync), on two kinds of stream (issues 3 and 37):
#
# - one that loses no history: acemq (fail-closed) and ActiveMQ must both
#   give the generator's expected answer for every id, line for line;
# - streams that lose history (gen_audit_stream --lossy: more producers than
#   the LRU holds, evictions and returns, redeliveries near and past the
#   window's edge, below a returned producer's first id, and again; ids out
#   of order), at ActiveMQ's defaults and at depth 100 with 8 producers. The
#   rule there: every id ActiveMQ answers duplicate, acemq answers duplicate
#   (fail-open, its default); and acemq answers duplicate only to an id that
#   was delivered before (the generator knows), under either policy. The
#   streams must make ActiveMQ catch redeliveries of each lossy kind (edge,
#   return, again), so that the rule is tested where history is lost.
#
#   audit_agreement.sh ACEMQ GEN_AUDIT_STREAM ACTIVEMQ_PEER [IDS]
#
# ACEMQ is the `acemq` tool, GEN_AUDIT_STREAM bench/gen_audit_stream, and
# ACTIVEMQ_PEER bench/peers/activemq-peer.sh. IDS (per stream) defaults to
# 200,000. Exit status: 0 all agree; 1 a disagreement (the first differing
# line is printed) or a tool failed; 3 skipped: no Java or no ActiveMQ jars
# (ctest's SKIP_RETURN_CODE), reported only after acemq was checked against
# the generator on every stream, so a missing JDK never hides an acemq
# failure.
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

# The lossy streams: NAME DEPTH TRACK PRODUCERS WINDOW, one a line.
lossy_streams='default 2048 64 100 1000
small 100 8 12 100'

# run_acemq NAME DEPTH TRACK OUT [--fail-closed]: acemq's answers on stream NAME.
run_acemq() {
    local name=$1 d=$2 t=$3 out=$4
    shift 4
    local rc=0
    "$acemq" audit "$@" --depth "$d" --producers "$t" "$work/$name.ids" >"$out" || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "audit_agreement: $name: acemq audit $* exited $rc" >&2
        exit 1
    fi
}

# seen_only NAME WHO ANSWERS: every duplicate in ANSWERS is an id delivered before.
seen_only() {
    local name=$1 who=$2 got=$3
    paste -d '\t' "$work/$name.ids" "$work/$name.expect" "$got" | awk -F '\t' \
        -v who="$who" -v name="$name" '
        NF != 3 { printf "audit_agreement: %s: %s: no answer at line %d\n", name, who, NR; bad = 1; exit }
        $3 == "duplicate" && $2 != "duplicate" {
            printf "audit_agreement: %s: %s answered duplicate at line %d to %s, never delivered before\n",
                   name, who, NR, $1; bad = 1; exit }
        END { exit bad }' || exit 1
}

while read -r name d t np w; do
    "$gen" --ids "$ids" --lossy --producers "$np" --window "$w" --redeliver 0.2 --depth "$d" \
        --track "$t" --out "$work/$name.ids" --expect "$work/$name.expect" \
        --kinds "$work/$name.kinds" 2>"$work/gen.log" || {
        cat "$work/gen.log" >&2
        echo "audit_agreement: gen_audit_stream --lossy failed" >&2
        exit 1
    }
    run_acemq "$name" "$d" "$t" "$work/$name.open"
    run_acemq "$name" "$d" "$t" "$work/$name.closed" --fail-closed
    run_acemq "$name" "$d" "$t" "$work/$name.count" --fail-closed --count
    seen_only "$name" "acemq" "$work/$name.open"
    seen_only "$name" "acemq --fail-closed" "$work/$name.closed"
    # The stream must lose history in acemq's audit, both ways.
    for cause in unknown_evicted unknown_behind_window; do
        if ! awk -v c="$cause" '$1 == c && $2 > 0 { found = 1 } END { exit !found }' \
            "$work/$name.count"; then
            echo "audit_agreement: $name: the lossy stream has no $cause; nothing would be tested" >&2
            exit 1
        fi
    done
    echo "audit_agreement: $name lossy stream: acemq answers duplicate only to ids delivered before"
done <<<"$lossy_streams"

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

while read -r name d t np w; do
    rc=0
    "$peer" --decisions --depth "$d" --producers "$t" "$work/$name.ids" \
        >"$work/$name.activemq" 2>"$work/peer.log" || rc=$?
    if [ "$rc" -ne 0 ]; then
        cat "$work/peer.log" >&2
        echo "audit_agreement: $name: activemq-peer.sh exited $rc" >&2
        exit 1
    fi
    # Every ActiveMQ duplicate is an acemq duplicate (fail-open); and, per
    # kind of line, ActiveMQ's duplicates, which the lossy kinds must have.
    paste -d '\t' "$work/$name.ids" "$work/$name.kinds" "$work/$name.open" \
        "$work/$name.activemq" | awk -F '\t' -v name="$name" '
        NF != 4 { printf "audit_agreement: %s: ActiveMQ: no answer at line %d\n", name, NR; bad = 1; exit }
        $4 == "duplicate" {
            amq[$2]++
            if ($3 != "duplicate") {
                printf "audit_agreement: %s: line %d (%s): %s: ActiveMQ said duplicate, acemq %s\n",
                       name, NR, $2, $1, $3
                bad = 1; exit
            }
        }
        $3 == "duplicate" && $4 != "duplicate" { more++ }
        END {
            if (bad) exit 1
            split("edge return again", lossy, " ")
            for (i = 1; i in lossy; i++)
                if (amq[lossy[i]] == 0) {
                    printf "audit_agreement: %s: ActiveMQ caught no %s redelivery; the stream tests nothing there\n",
                           name, lossy[i]
                    exit 1
                }
            printf "audit_agreement: %s lossy stream: every ActiveMQ duplicate is an acemq duplicate", name
            printf " (edge %d, return %d, again %d, near %d); acemq caught %d more\n",
                   amq["edge"], amq["return"], amq["again"], amq["near"], more
        }' || exit 1
    seen_only "$name" "ActiveMQ" "$work/$name.activemq"
done <<<"$lossy_streams"
