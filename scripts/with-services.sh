#!/usr/bin/env bash
# with-services.sh — runs a command with the real servers up on loopback, and
# stops them afterwards whatever the command's outcome.
#
#   scripts/with-services.sh SERVICES -- COMMAND...
#
# SERVICES is a comma-separated list (postgres,redis). Servers that were
# already running are left running afterwards. The command sees the
# ACEMQ_* variables of `scripts/services.sh env` (ACEMQ_PG_URL, ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

[ $# -ge 3 ] && [ "$2" = -- ] || {
    echo "usage: $0 postgres[,redis...] -- command..." >&2
    exit 2
}
IFS=, read -r -a services <<<"$1"
shift 2

started=()
stop_started() {
    local s
    for s in "${started[@]}"; do
        "$here/services.sh" stop "$s" || true
    done
}
trap stop_started EXIT

for s in "${services[@]}"; do
    if "$here/services.sh" status "$s" >/dev/null 2>&1; then
        echo "with-services: $s already running; left as it is"
    else
        "$here/services.sh" start "$s"
        started+=("$s")
    fi
    eval "$("$here/services.sh" env "$s")"
done

"$@"
