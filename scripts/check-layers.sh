#!/usr/bin/env bash
# check-layers.sh — fails when src/ breaks its layering (docs/design.md):
#
#   core < os < contracts (idem, outbox, broker, audit) < backends < runtimes
#   (relay, consumer, route) < cli
#
# 1. No file under src/ includes a header of a higher layer, whether the
#    header is internal (src/<layer>/...) or public (include/acemq/...: the
#    public header of a contract counts as that contract's layer).
# 2. A backend includes no other technology's headers (src/backends/<tech>/
#    sees its own folder and the shared src/backends/*.h only).
# 3. A contract's backend header (<contract>/<contract>_backend.h: the
#    vtable, the handle's insides) is included only by that contract and by
#    backends; a runtime uses the contract's public header and its
#    <contract>_internal.h.
# 4. No contract file (src/{idem,outbox,broker,audit}/) names a function or
#    object that a backend defines: contracts find backends by URL scheme in
#    their registry. Comments do not count.
#
# tests/, bench/, fuzz/ and examples/ are exempt: they may reach anything.
# Usage: scripts/check-layers.sh [SRC_DIR]   (default: src beside this script)
set -u

src=${1:-$(cd "$(dirname "$0")/.." && pwd)/src}
cc=${CC:-cc}
fail=0

# The layer of a header or source path relative to src/ or include/; empty
# when the path belongs to no layer (a system header, say).
layer_of() {
    case "$1" in
    core/*) echo 0 ;;
    os/*) echo 1 ;;
    idem/* | outbox/* | broker/* | audit/*) echo 2 ;;
    backends/*) echo 3 ;;
    relay/* | consumer/* | route/*) echo 4 ;;
    cli/*) echo 5 ;;
    acemq/common.h | acemq/log.h) echo 0 ;;
    acemq/idem.h | acemq/outbox.h | acemq/broker.h | acemq/audit.h) echo 2 ;;
    acemq/sqlite.h | acemq/postgres.h) echo 3 ;;
    acemq/relay.h | acemq/consumer.h) echo 4 ;;
    acemq/*) echo 5 ;;
    *) echo "" ;;
    esac
}

layer_names=(core os contracts backends runtimes cli)

# The technology folder of a path under backends/, or empty.
tech_of() {
    case "$1" in
    backends/*/*) local t=${1#backends/}; echo "${t%%/*}" ;;
    *) echo "" ;;
    esac
}

cd "$src" || exit 2
files=$(find . -name '*.[ch]' | sed 's|^\./||' | sort)

# Rules 1, 2 and 3.
for f in $files; do
    fl=$(layer_of "$f")
    [ -n "$fl" ] || continue
    ft=$(tech_of "$f")
    while IFS=: read -r line inc; do
        [ -n "$inc" ] || continue
        case "$inc" in */*) ;; *) inc="$(dirname "$f")/$inc" ;; esac
        il=$(layer_of "$inc")
        if [ -n "$il" ] && [ "$il" -gt "$fl" ]; then
            echo "src/$f:$line: includes \"$inc\" (${layer_names[$il]}) from ${layer_names[$fl]}"
            fail=1
        fi
        case "$inc" in
        */*_backend.h)
            if [ "${f%%/*}" != "${inc%%/*}" ] && [ "$fl" -ne 3 ]; then
                echo "src/$f:$line: includes \"$inc\", which only its contract and backends may"
                fail=1
            fi
            ;;
        esac
        it=$(tech_of "$inc")
        if [ -n "$ft" ] && [ -n "$it" ] && [ "$ft" != "$it" ]; then
            echo "src/$f:$line: the $ft backend includes \"$inc\" of the $it backend"
            fail=1
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/')
done

# Rule 4: what the backends define outside `static`: functions and objects
# whose definition starts a line ("int acemq__x(", "const T acemq__y = ").
backend_names=$([ -d backends ] && find backends -name '*.c' -exec cat {} + |
    grep -E '^[A-Za-z_][^;{}]*\b(acemq_[A-Za-z0-9_]*)[[:space:]]*(\(|=|\[)' |
    grep -Ev '^(static|typedef|return|extern)\b' |
    sed -E 's/^[^(=[]*\b(acemq_[A-Za-z0-9_]*)[[:space:]]*[(=[].*/\1/' | sort -u)
if [ -n "$backend_names" ]; then
    pattern=$(echo "$backend_names" | paste -sd'|')
    for f in $(echo "$files" | grep -E '^(idem|outbox|broker|audit)/'); do
        # The file without its comments (the preprocessor drops them and
        # leaves the directives as they are).
        hits=$("$cc" -fpreprocessed -dD -E -P -x c "$f" 2>/dev/null |
            grep -owE "$pattern" | sort -u | paste -sd' ')
        if [ -n "$hits" ]; then
            echo "src/$f: a contract names a backend's function or object: $hits"
            fail=1
        fi
    done
fi

if [ "$fail" -ne 0 ]; then
    echo "check-layers: the layering of src/ is broken (see docs/design.md, Layers)" >&2
    exit 1
fi
echo "check-layers: ok"
