/* orders.c — the demo's order service: each order row and its "order
 * created" outbox record commit in one SQLite transaction, or roll back
 * together (one order in ten: a declined payment). `acemq relay` publishes
 * what committed; nothing of a rolled-back order may ever reach a shipment.
 *
 *   acemq-demo-orders DB_PATH ORDERS EXCHANGE ROUTING_KEY
 *
 * After each transaction the outcome goes into `attempts` (its own short
 * transaction), so the demo can count rolled-back orders, which by design
 * leave nothing else behind. Exit 0 once every order was written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include <acemq/outbox.h>
#include <acemq/sqlite.h>

static int exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) == SQLITE_OK) return 0;
    fprintf(stderr, "orders: %s: %s\n", sql, err ? err : sqlite3_errmsg(db));
    sqlite3_free(err);
    return -1;
}

/* One order: its row and its outbox record in one transaction; commit or
 * roll back, then record the outcome. */
static int write_order(sqlite3 *db, int id, const char *exchange, const char *key, int declined)
{
    char sql[200], msg_id[64], body[128];
    snprintf(msg_id, sizeof msg_id, "order-%d-created", id);
    snprintf(body, sizeof body, "{\"order\":%d,\"total_cents\":%d}", id, 100 + id % 900);
    snprintf(sql, sizeof sql, "INSERT INTO orders(id, total_cents) VALUES(%d, %d)", id,
             100 + id % 900);
    if (exec(db, "BEGIN IMMEDIATE") != 0) return -1;
    acemq_outbox_record r = {.id = msg_id,
                             .destination = exchange,
                             .routing_key = key,
                             .content_type = "application/json",
                             .body = body,
                             .body_len = strlen(body)};
    if (exec(db, sql) != 0 || acemq_outbox_add_sqlite(db, &r, NULL, NULL) != 0) {
        fprintf(stderr, "orders: order %d: %s\n", id, acemq_outbox_errmsg(NULL));
        (void)exec(db, "ROLLBACK");
        return -1;
    }
    /* The payment is declined after the order was written: both go. */
    if (exec(db, declined ? "ROLLBACK" : "COMMIT") != 0) return -1;
    snprintf(sql, sizeof sql, "INSERT INTO attempts(order_id, outcome) VALUES(%d, '%s')", id,
             declined ? "rolled_back" : "committed");
    return exec(db, sql);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s DB_PATH ORDERS EXCHANGE ROUTING_KEY\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    /* The draining side's open creates the outbox table; the relay opens it
     * the same way later. */
    char url[4200];
    snprintf(url, sizeof url, "sqlite:%s", argv[1]);
    acemq_outbox *ob = NULL;
    if (n <= 0 || acemq_outbox_open(&ob, url, NULL) != 0) {
        fprintf(stderr, "orders: outbox %s: %s\n", url, acemq_outbox_errmsg(NULL));
        return 1;
    }
    acemq_outbox_close(ob);
    sqlite3 *db = NULL;
    /* WAL, so the relay reads while we write; the busy wait covers the
     * relay's short write locks (claims and marks). */
    if (sqlite3_open(argv[1], &db) != SQLITE_OK || acemq_sqlite_busy_wait(db, 30000) != 0 ||
        exec(db, "PRAGMA journal_mode=WAL") != 0 ||
        exec(db,
             "CREATE TABLE IF NOT EXISTS orders(id INTEGER PRIMARY KEY, total_cents INTEGER);"
             "CREATE TABLE IF NOT EXISTS attempts(order_id INTEGER PRIMARY KEY, outcome TEXT)") !=
            0) {
        fprintf(stderr, "orders: %s: %s\n", argv[1], db ? sqlite3_errmsg(db) : "?");
        sqlite3_close(db);
        return 1;
    }
    /* A random tenth of the orders are declined; which ones changes per
     * run, so nothing downstream can rely on a pattern. */
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    int status = 0;
    for (int i = 1; i <= n && status == 0; i++)
        if (write_order(db, i, argv[3], argv[4], rand() % 10 == 0) != 0) status = 1;
    sqlite3_close(db);
    return status;
}
