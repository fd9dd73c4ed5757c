#!/usr/bin/env bash
# ctest-strict.sh — runs a ctest command line and fails when a test did not run.
#
#   scripts/ctest-strict.sh [setarch -R] ctest ARGS...
#
# A test that needs a server exits 77 without the server's URL, and ctest
# reports it Skipped yet exits 0. `make test` and CI start every server
# first, so there a skip means a test that checked nothing: it fails the run
# instead of passing quietly. The output still streams as ctest writes it.
set -euo pipefail

[ $# -ge 1 ] || {
    echo "usage: $0 [prefix...] ctest ARGS..." >&2
    exit 2
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

set +e
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || exit "$rc"
if grep -q "tests did not run" "$log"; then
    echo "ctest-strict: some tests did not run (listed above): a server, its URL or a peer is missing" >&2
    exit 1
fi
if grep -q "No tests were found" "$log"; then
    echo "ctest-strict: no tests were found" >&2
    exit 1
fi
