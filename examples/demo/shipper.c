/* shipper.c — the demo's consumer: ships each order once, however often its
 * "order created" message arrives. The shipment row and the idempotency
 * store's confirmation commit in one SQLite transaction (the inbox,
 * docs/consumer.md), so a kill -9 at any point leaves either both or
 * neither; a redelivery of a shipped order is absorbed as a duplicate.
 *
 *   acemq-demo-shipper BROKER_URL QUEUE DB_PATH [CRASH_AFTER]
 *
 * CRASH_AFTER N: the process kills itself (SIGKILL) right after its Nth
 * shipment committed and before the message is acknowledged: the fault
 * the inbox exists for, injected at exactly that point.
 *
 * For the demo's counts every delivery the handler sees goes into
 * `deliveries` (kind 'run': the handler ran; 'dup': absorbed as a
 * duplicate), each in its own short transaction, so they survive kills.
 * SIGTERM or SIGINT: finish the message in hand, give back the rest, exit 0.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include <acemq/consumer.h>
#include <acemq/sqlite.h>

static volatile sig_atomic_t stop;
static long crash_after; /* 0: never */
static long shipped;     /* shipments this process committed */

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) == SQLITE_OK) return 0;
    fprintf(stderr, "shipper: %s: %s\n", sql, err ? err : sqlite3_errmsg(db));
    sqlite3_free(err);
    return -1;
}

/* Switches the file to WAL. Two shippers opening a new file at once: the
 * switch can answer SQLITE_BUSY without waiting in the busy handler, so it
 * is tried again for a few seconds. */
static int wal(sqlite3 *db)
{
    for (int i = 0; i < 200; i++) {
        int rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
        if (rc == SQLITE_OK) return 0;
        if (rc != SQLITE_BUSY) break;
        sqlite3_sleep(20);
    }
    fprintf(stderr, "shipper: PRAGMA journal_mode=WAL: %s\n", sqlite3_errmsg(db));
    return -1;
}

/* The order's number from its message id, "order-N-created"; -1 if none. */
static long order_of(const acemq_consumer_msg *m)
{
    long id = -1;
    char tail[16];
    if (m->key_len > 64 || sscanf(m->key, "order-%ld-%15s", &id, tail) != 2 ||
        strcmp(tail, "created") != 0)
        return -1;
    return id;
}

/* Records one delivery seen (its own transaction, outside the effect's). */
static int note(sqlite3 *db, long order, const char *kind)
{
    char sql[120];
    snprintf(sql, sizeof sql, "INSERT INTO deliveries(order_id, kind) VALUES(%ld, '%s')", order,
             kind);
    return exec(db, sql);
}

static void on_duplicate(void *ctx, const acemq_consumer_msg *m, const void *result, size_t len)
{
    (void)result;
    (void)len;
    /* A lost count is only a figure wrong in the table, which then
     * disagrees; the message itself is handled right either way. */
    (void)note(ctx, order_of(m), "dup");
}

/* The effect and the confirmation, in one transaction: both or neither. */
static int ship(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    sqlite3 *db = ctx;
    long order = order_of(m);
    if (order < 0) {
        acemq_consumer_fail(c, "not an order-N-created message id");
        return 1;
    }
    if (note(db, order, "run") != 0 || exec(db, "BEGIN IMMEDIATE") != 0) {
        acemq_consumer_fail(c, sqlite3_errmsg(db));
        return 1;
    }
    char sql[120];
    snprintf(sql, sizeof sql, "INSERT INTO shipments(order_id) VALUES(%ld)", order);
    /* ACEMQ_ESTALE: another shipper took the message over; ours must not
     * stand. */
    if (exec(db, sql) != 0 || acemq_consumer_confirm(c, m, NULL, 0) != 0) {
        acemq_consumer_fail(c, "shipment or confirm refused");
        (void)exec(db, "ROLLBACK");
        return 1;
    }
    if (exec(db, "COMMIT") != 0) return 1;
    if (crash_after > 0 && ++shipped == crash_after) {
        fprintf(stderr, "shipper: order %ld shipped, not yet acknowledged: SIGKILL\n", order);
        raise(SIGKILL);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s BROKER_URL QUEUE DB_PATH [CRASH_AFTER]\n", argv[0]);
        return 2;
    }
    const char *broker = argv[1], *queue = argv[2], *path = argv[3];
    if (argc == 5) crash_after = atol(argv[4]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) return 1;

    /* No UNIQUE on shipments.order_id on purpose: the demo must be able to
     * see an order shipped twice, not have the database hide it. */
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK || acemq_sqlite_busy_wait(db, 30000) != 0 ||
        wal(db) != 0 ||
        exec(db, "CREATE TABLE IF NOT EXISTS shipments(order_id INTEGER NOT NULL);"
                 "CREATE TABLE IF NOT EXISTS deliveries(order_id INTEGER, kind TEXT)") != 0) {
        fprintf(stderr, "shipper: %s: %s\n", path, db ? sqlite3_errmsg(db) : "?");
        sqlite3_close(db);
        return 1;
    }
    /* Two handles on one store in the same file: the consumer's own
     * (claims, renewals, releases) and the inbox on our connection. */
    char url[4200];
    snprintf(url, sizeof url, "sqlite:%s", path);
    acemq_idem *store = NULL, *inbox = NULL;
    acemq_idem_options io;
    acemq_idem_options_init(&io);
    io.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    if (acemq_idem_open(&store, url, NULL) != 0 || acemq_idem_open_sqlite(&inbox, db, &io) != 0) {
        fprintf(stderr, "shipper: store: %s\n", acemq_idem_errmsg(NULL));
        return 1;
    }
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    o.handler = ship;
    o.on_duplicate = on_duplicate;
    o.ctx = db;
    o.inbox = inbox;
    o.log = stderr;
    /* Short leases: the claims a killed shipper held pass to the other
     * one within seconds, not the default 30. */
    o.lease_ms = 3000;
    acemq_consumer *c = NULL;
    int status = 1;
    if (acemq_consumer_open(&c, broker, queue, store, &o) != 0)
        fprintf(stderr, "shipper: %s\n", acemq_consumer_errmsg(NULL));
    else if (acemq_consumer_run(c, &stop) != 0)
        fprintf(stderr, "shipper: %s\n", acemq_consumer_errmsg(c));
    else
        status = 0;
    acemq_consumer_close(c);
    acemq_idem_close(inbox);
    acemq_idem_close(store);
    sqlite3_close(db);
    return status;
}
