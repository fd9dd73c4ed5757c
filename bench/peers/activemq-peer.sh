#!/usr/bin/env bash
# activemq-peer.sh — runs ActiveMQ Classic's own message audit
# (ActiveMQMessageAuditNoSync) over a file of ids: ActiveMQAuditPeer.java,
# compiled on first use with the JDK alone (no build tool) into a cache
# directory, and run with Debian's jars on the classpath.
#
#   bench/peers/activemq-peer.sh --decisions [--depth N] [--producers N] FILE|-
#   bench/peers/activemq-peer.sh --time [--reps N] [--warmup N] [--api messageid|string] FILE
#
# Options are ActiveMQAuditPeer's (--help lists them). Environment:
#   ACEMQ_ACTIVEMQ_JAR   ActiveMQ's client jar (default /usr/share/java/activemq-client.jar)
#   ACEMQ_JAVA_LIB       where the other jars are (default /usr/share/java)
#   ACEMQ_PEER_CACHE     where the class goes (default ${TMPDIR:-/tmp}/acemq-activemq-peer)
#   ACEMQ_PEER_JAVA_OPTS JVM options (default -Xms2g -Xmx2g -XX:+UseSerialGC)
#
# Exit status: the peer's (0 done, 1 error, 2 usage), or 3 when Java, the JDK
# compiler or ActiveMQ's jars are not installed: callers report the peer as
# skipped, not passed. The packages: default-jdk-headless and libactivemq-java
# (scripts/deps.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$here/ActiveMQAuditPeer.java
lib=${ACEMQ_JAVA_LIB:-/usr/share/java}
amq_jar=${ACEMQ_ACTIVEMQ_JAR:-$lib/activemq-client.jar}
cache=${ACEMQ_PEER_CACHE:-${TMPDIR:-/tmp}/acemq-activemq-peer}
class=$cache/ActiveMQAuditPeer.class

skip() {
    echo "activemq-peer: skipped: $*" >&2
    echo "activemq-peer: install with: apt-get install default-jdk-headless libactivemq-java" >&2
    exit 3
}

# isDuplicate's overloads name javax.jms.Message, so javac needs the JMS API;
# the string path (IdGenerator) logs through slf4j, silenced by its nop binding.
jms_jar=$lib/geronimo-jms_1.1_spec.jar
slf4j_jars=("$lib/slf4j-api.jar" "$lib/slf4j-nop.jar")
for jar in "$amq_jar" "$jms_jar" "${slf4j_jars[@]}"; do
    [ -r "$jar" ] || skip "$jar not found"
done
command -v java >/dev/null 2>&1 || skip "no java on PATH"
classpath=$amq_jar:$jms_jar:${slf4j_jars[0]}:${slf4j_jars[1]}

if [ ! -f "$class" ] || [ "$src" -nt "$class" ]; then
    command -v javac >/dev/null 2>&1 || skip "no javac on PATH (a JDK is needed to compile the peer)"
    mkdir -p "$cache"
    # Compile aside and move in, so concurrent callers never see half a class.
    tmp=$(mktemp -d "$cache/build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    if ! javac -nowarn -d "$tmp" -cp "$classpath" "$src" >"$tmp/javac.log" 2>&1; then
        cat "$tmp/javac.log" >&2
        echo "activemq-peer: javac failed" >&2
        exit 1
    fi
    mv -f "$tmp/ActiveMQAuditPeer.class" "$class"
    rm -rf "$tmp"
    trap - EXIT
fi

# A fixed heap (--time on 2,000,000 ids peaks near 0.5 GB) and the serial
# collector: the timed loop allocates next to nothing, and of the three
# collectors tried it gave ActiveMQ its best and steadiest figures here
# (docs/performance.md, "message audit: the ActiveMQ peer").
# shellcheck disable=SC2086 # the options are words on purpose
exec java ${ACEMQ_PEER_JAVA_OPTS:--Xms2g -Xmx2g -XX:+UseSerialGC} \
    -cp "$cache:$classpath" ActiveMQAuditPeer "$@"
