#!/usr/bin/env bash
# deps.sh — installs the Debian packages acemq needs to build, test and bench.
# Idempotent: asks apt only for what is missing, and says nothing else when
# everything is there. Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libsqlite3-dev sqlite3      # the embedded default store
  libxxhash-dev               # the memory store's hash (XXH3)
  libpq-dev postgresql        # the outbox on PostgreSQL, and the server its tests run against
  libjansson-dev              # outbox headers as a JSON object (and, for the relay, back)
  libmicrohttpd-dev           # acemq relay --metrics: the Prometheus endpoint
  libcmocka-dev               # the test framework
  libfiu-dev fiu-utils        # the fault suite: malloc, write, fsync, send failed at random (tests/fault)
  libyaml-dev                 # acemq route: route files
  libhiredis-dev redis-server # the Redis peer in the benchmarks
  rabbitmq-server librabbitmq-dev # the relay's AMQP 0-9-1 broker (rabbitmq-c), and the server its tests run against
  clang-format clang-tidy cppcheck # the style and lint checks CI runs
  clang libclang-rt-14-dev     # make fuzz: libFuzzer and clang's sanitizer runtimes
  # ActiveMQ's own message audit, the peer of integration.audit_agreement and
  # of the audit benchmark (bench/peers/activemq-peer.sh): a JDK to compile
  # the harness, and ActiveMQ's client jar with the JMS and slf4j jars it needs.
  default-jdk-headless libactivemq-java
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    echo "deps: these Debian packages are missing: ${missing[*]}" >&2
    echo "deps: run 'sudo scripts/deps.sh' (or as root: apt-get install ${missing[*]})" >&2
    exit 1
  fi
else
  as_root=()
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
