#!/usr/bin/env bash
# check-tree.sh — fails when the tree outgrows the shape docs/design.md sets:
#
# 1. No C source or header tracked by git is over 800 lines: a file holds
#    one concept, short enough to read in one sitting.
# 2. Nothing in src/core/ serves a single backend: a core file that only
#    one src/backends/<tech>/ folder includes (and no other layer) belongs
#    in that folder, unless it carries a public facility
#    (include/acemq/<name>.h).
#
# Usage: scripts/check-tree.sh   (from anywhere inside the repository)
set -u
cd "$(dirname "$0")/.." || exit 2
fail=0
max=800

while read -r lines file; do
    [ "$file" = total ] && continue
    if [ "$lines" -gt "$max" ]; then
        echo "$file: $lines lines (at most $max: split it along its concepts)"
        fail=1
    fi
done < <(git ls-files '*.c' '*.h' | while read -r f; do [ -f "$f" ] && wc -l "$f"; done)

for f in $(git ls-files 'src/core/*.c' 'src/core/*.h'); do
    [ -f "$f" ] || continue
    # A core file behind a public header (include/acemq/<name>.h) is a
    # facility of the library, whoever inside calls it.
    name=$(basename "${f%.*}")
    [ -f "include/acemq/$name.h" ] && continue
    base=${f#src/}
    users=$(grep -rlF "\"$base\"" src --include='*.c' --include='*.h' | grep -v '^src/core/' |
        sed -E 's|^src/(backends/[^/]+)/.*|\1|; t; s|^src/([^/]+)/.*|\1|' | sort -u)
    [ -n "$users" ] || continue
    if [ "$(echo "$users" | wc -l)" -eq 1 ] && [[ $users == backends/* ]]; then
        echo "$f: only src/$users uses it: move it there"
        fail=1
    fi
done

[ $fail -eq 0 ] && echo "check-tree: ok"
exit $fail
