#!/usr/bin/env bash
# oracle.sh OUTBOX_URL EFFECTS_URL — the one verdict of every fault test:
# Jepsen's total-queue check, extended to effects. Over what fault_writer
# left in the outbox database and fault_shipper in the effects database:
#
#   - every committed outbox record is delivered at least once and its
#     effect applied: a committed order with no delivery or no effect row
#     is LOST;
#   - nothing is delivered or applied that was never committed: a delivery
#     or effect of an order that has no committed row (the rolled-back ones
#     included), or a delivery the shipper found not as written ('bad'), is
#     UNEXPECTED;
#   - every committed record's effect is applied exactly once: an order
#     with two or more effect rows is counted in TWICE;
#   - an order and its outbox record committed together or not at all: an
#     order without its record, a record without its order, or a
#     rolled-back order with either, is TORN.
#
# URLs: sqlite:PATH (the two files are attached to one session; every
# table name is unique across them) or postgres://... (the same database
# for both). Prints one line of counts:
#
#   counts: committed=N rolled_back=N delivered=N duplicates=N effects=N lost=N unexpected=N twice=N torn=N
#
# (delivered: deliveries the handlers saw; duplicates: those beyond each
# order's first) and, on a failure, up to ten offending order ids of each
# kind. Exit status: 0 all zero and something committed; 1 a loss, an
# unexpected message, a double effect, a torn order, or nothing committed;
# 2 usage or a database that cannot be read.
set -u
if [ $# -ne 2 ]; then
    echo "usage: $0 OUTBOX_URL EFFECTS_URL" >&2
    exit 2
fi
outbox=$1 effects=$2

case $outbox in
sqlite:*)
    [ "${effects%%:*}" = sqlite ] || { echo "oracle: both URLs must be sqlite:" >&2; exit 2; }
    q() { sqlite3 -batch -noheader -separator ' ' -cmd '.timeout 60000' "${effects#sqlite:}" \
        "ATTACH '${outbox#sqlite:}' AS o; $1"; }
    ;;
postgres://* | postgresql://*)
    [ "$outbox" = "$effects" ] || { echo "oracle: PostgreSQL: one database for both" >&2; exit 2; }
    q() { psql -X -q -A -t -F ' ' -v ON_ERROR_STOP=1 -d "$outbox" -c "$1"; }
    ;;
*)
    echo "oracle: $outbox is not a sqlite: or postgres:// URL" >&2
    exit 2
    ;;
esac

# Each kind of fault as a set of order ids; the counts are their sizes.
committed_ids="SELECT id FROM fault_orders"
lost_ids="SELECT id FROM fault_orders WHERE id NOT IN (SELECT order_id FROM fault_effects)
          OR id NOT IN (SELECT order_id FROM fault_deliveries WHERE order_id IS NOT NULL)"
unexpected_ids="SELECT order_id FROM fault_deliveries
                 WHERE kind = 'bad' OR order_id IS NULL OR order_id NOT IN ($committed_ids)
                UNION ALL
                SELECT order_id FROM fault_effects WHERE order_id NOT IN ($committed_ids)"
twice_ids="SELECT order_id FROM fault_effects GROUP BY order_id HAVING count(*) > 1"
record_ids="SELECT CAST(substr(id, 13) AS BIGINT) AS x FROM acemq_outbox WHERE id LIKE 'fault-order-%'"
torn_ids="SELECT id FROM fault_orders WHERE id NOT IN ($record_ids)
          UNION ALL SELECT r.x FROM ($record_ids) AS r WHERE r.x NOT IN ($committed_ids)
          UNION ALL SELECT id FROM fault_rolled_back WHERE id IN ($committed_ids)"

line=$(q "SELECT
    (SELECT count(*) FROM acemq_outbox),
    (SELECT count(*) FROM fault_rolled_back),
    (SELECT count(*) FROM fault_deliveries),
    (SELECT count(*) FROM fault_deliveries) -
        (SELECT count(DISTINCT order_id) FROM fault_deliveries),
    (SELECT count(*) FROM fault_effects),
    (SELECT count(*) FROM ($lost_ids) AS l),
    (SELECT count(*) FROM ($unexpected_ids) AS u),
    (SELECT count(*) FROM ($twice_ids) AS t),
    (SELECT count(*) FROM ($torn_ids) AS b)") || {
    echo "oracle: cannot read the databases ($outbox, $effects)" >&2
    exit 2
}
read -r committed rolled_back delivered duplicates applied lost unexpected twice torn <<<"$line"
echo "counts: committed=$committed rolled_back=$rolled_back delivered=$delivered" \
    "duplicates=$duplicates effects=$applied lost=$lost unexpected=$unexpected twice=$twice" \
    "torn=$torn"

# show NAME SET: up to ten ids of a failing kind.
show() { echo "oracle: $1: $(q "SELECT * FROM ($2) AS s LIMIT 10" | tr '\n' ' ')"; }
bad=0
[ "$lost" = 0 ] || { show "lost orders" "$lost_ids"; bad=1; }
[ "$unexpected" = 0 ] || { show "unexpected deliveries or effects" "$unexpected_ids"; bad=1; }
[ "$twice" = 0 ] || { show "orders applied twice" "$twice_ids"; bad=1; }
[ "$torn" = 0 ] || { show "torn orders" "$torn_ids"; bad=1; }
[ "$committed" -gt 0 ] || { echo "oracle: nothing committed: the run proves nothing"; bad=1; }
exit "$bad"
