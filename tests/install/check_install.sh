#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, then builds and runs a
# consumer three ways: pkg-config, CMake find_package (shared), and static.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib* | head -1)
export PKG_CONFIG_PATH="$libdir/pkgconfig"
export LD_LIBRARY_PATH="$libdir"
# Sanitizer builds leave the sanitizer flags out of the package files, as they should.
extra=()
[ -n "${ACEMQ_SANITIZE_FLAGS:-}" ] && extra=($ACEMQ_SANITIZE_FLAGS)

echo "pkg-config: $(pkg-config --modversion acemq)"
cc "${extra[@]}" -o "$tmp/pc" "$src/tests/install/consumer/main.c" $(pkg-config --cflags --libs acemq)
"$tmp/pc"

cmake -S "$src/tests/install/consumer" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_C_FLAGS="${ACEMQ_SANITIZE_FLAGS:-}" >/dev/null
cmake --build "$tmp/cm" >/dev/null
"$tmp/cm/consumer_shared"
"$tmp/cm/consumer_static"
echo "install: headers, shared and static libraries, pkg-config and CMake package all work"
