/* bench_relay_outbox.c — the outboxes bench_relay drains: the handles opened
 * as `acemq relay` opens them, and backlogs of records written with raw SQL
 * on the caller's connection, with or without ordering keys. */
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>

#include "bench_common.h"
#include "bench_relay.h"

/* A relay-side outbox handle, opened as acemq relay opens its three. */
/* The outbox options the relay's handles are opened with. */
acemq_outbox_options relay_outbox_options(const config *cfg)
{
    acemq_outbox_options o;
    acemq_outbox_options_init(&o);
    o.synchronous = cfg->synchronous;
    o.delete_on_publish = cfg->delete_published;
    return o;
}

acemq_outbox *open_relay_outbox(const config *cfg, const char *url)
{
    acemq_outbox_options o = relay_outbox_options(cfg);
    acemq_outbox *h = NULL;
    if (acemq_outbox_open(&h, url, &o) != 0) die("outbox: %s", acemq_outbox_errmsg(NULL));
    return h;
}

void exec_sql(int pg, sqlite3 *db, PGconn *conn, const char *sql)
{
    if (pg) {
        PGresult *r = PQexec(conn, sql);
        if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
            die("postgres: %s: %s", sql, PQresultErrorMessage(r));
        PQclear(r);
    } else {
        char *msg = NULL;
        if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) die("sqlite: %s: %s", sql, msg);
    }
}

/* A backlog of n records; with keys > 0 each carries one of that many
 * ordering keys, UUID-shaped customer ids drawn at random per record, as a
 * burst of orders from many customers arrives. */
void refill_keyed(int pg, sqlite3 *db, PGconn *conn, long n, int keys)
{
    char sql[768];
    exec_sql(pg, db, conn, pg ? "TRUNCATE acemq_outbox" : "DELETE FROM acemq_outbox");
    const char *key = keys <= 0 ? "NULL"
                      : pg      ? "format('%s-4a1e-4b7c-9d2f-%s', lpad(to_hex(k * 40503 + 7), 8,"
                                  " '0'), lpad(k::text, 12, '0'))"
                                : "printf('%08x-4a1e-4b7c-9d2f-%012d', k * 40503 + 7, k)";
    int spread = keys > 0 ? keys : 1;
    if (pg)
        snprintf(
            sql, sizeof sql,
            "INSERT INTO acemq_outbox(id, destination, routing_key, ordering_key, body)"
            " SELECT 'r' || lpad(g::text, 8, '0'), '', '" QUEUE "', %s,"
            " convert_to(repeat('x', %d), 'UTF8')"
            " FROM (SELECT g, floor(random() * %d)::int AS k FROM generate_series(1, %ld) g) s",
            key, BODY_LEN, spread, n);
    else
        snprintf(sql, sizeof sql,
                 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < %ld),"
                 " r(i, k) AS (SELECT i, abs(random() %% %d) FROM g)"
                 " INSERT INTO acemq_outbox(id, destination, routing_key, ordering_key, body)"
                 " SELECT printf('r%%08d', i), '', '" QUEUE "', %s, zeroblob(%d) FROM r",
                 n, spread, key, BODY_LEN);
    exec_sql(pg, db, conn, sql);
    exec_sql(pg, db, conn, pg ? "VACUUM ANALYZE acemq_outbox" : "PRAGMA wal_checkpoint(TRUNCATE)");
    /* The fill's writes reach the table's files before the relay's turn,
     * as SQLite's checkpoint above does for its file: the turn then pays
     * for the relay's own writes, not for the background flush of the
     * fill's. A role that may not (PostgreSQL 15: superuser or
     * pg_checkpoint) runs without, said once. */
    static int checkpoint_refused;
    if (pg && !checkpoint_refused) {
        PGresult *r = PQexec(conn, "CHECKPOINT");
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            checkpoint_refused = 1;
            fprintf(stderr, "%s: CHECKPOINT refused, the fill's writes flush during turns: %s",
                    bench_name, PQresultErrorMessage(r));
        }
        PQclear(r);
    }
}

void refill(int pg, sqlite3 *db, PGconn *conn, long n)
{
    refill_keyed(pg, db, conn, n, 0);
}
