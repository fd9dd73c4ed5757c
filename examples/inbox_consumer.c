/* inbox_consumer.c — an idempotent consumer whose effect and confirmation
 * commit in one SQLite transaction (the inbox), so each message's effect
 * happens exactly once even when the process is killed at any point.
 *
 *   acemq-inbox-consumer amqp://guest:guest@127.0.0.1:5672/ orders /var/lib/shop/shop.db [LEASE_MS]
 *
 * Each message's body is inserted into the table `applied` of the
 * database; the idempotency store lives in the same file. SIGTERM or
 * SIGINT: finish the message in hand, give back the held ones, exit 0.
 * docs/consumer.md, "The inbox", explains the pattern.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include <acemq/consumer.h>
#include <acemq/sqlite.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) == SQLITE_OK) return 0;
    fprintf(stderr, "inbox-consumer: %s: %s\n", sql, err ? err : "?");
    sqlite3_free(err);
    return -1;
}

/* The effect and the confirmation, in one transaction on the app's own
 * connection: both commit, or neither. */
static int apply(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    sqlite3 *db = ctx;
    sqlite3_stmt *st = NULL;
    if (exec(db, "BEGIN IMMEDIATE") != 0) return 1;
    int rc = sqlite3_prepare_v2(db, "INSERT INTO applied(id, body) VALUES(?1, ?2)", -1, &st, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 1, m->key, (int)m->key_len, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_blob(st, 2, m->delivery->body, (int)m->delivery->body_len, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_finalize(st);
    /* ACEMQ_ESTALE: another consumer took the message over; our effect
     * must not stand. */
    if (rc != SQLITE_OK || acemq_consumer_confirm(c, m, NULL, 0) != 0) {
        acemq_consumer_fail(c, rc != SQLITE_OK ? sqlite3_errmsg(db) : "confirm refused");
        (void)exec(db, "ROLLBACK");
        return 1;
    }
    return exec(db, "COMMIT") == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s BROKER_URL QUEUE DB_PATH [LEASE_MS]\n", argv[0]);
        return 2;
    }
    const char *broker = argv[1], *queue = argv[2], *path = argv[3];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);

    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK || exec(db, "PRAGMA journal_mode=WAL") != 0 ||
        sqlite3_busy_timeout(db, 5000) != SQLITE_OK ||
        exec(db, "CREATE TABLE IF NOT EXISTS applied(id TEXT NOT NULL, body BLOB)") != 0) {
        fprintf(stderr, "inbox-consumer: %s: %s\n", path, db ? sqlite3_errmsg(db) : "?");
        return 1;
    }
    /* Two handles on one store: the consumer's own (claims, renewals,
     * releases) and the inbox on the app's connection (confirms). */
    char url[4200];
    snprintf(url, sizeof url, "sqlite:%s", path);
    acemq_idem *store = NULL, *inbox = NULL;
    acemq_idem_options io;
    acemq_idem_options_init(&io);
    io.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    if (acemq_idem_open(&store, url, NULL) != 0 || acemq_idem_open_sqlite(&inbox, db, &io) != 0) {
        fprintf(stderr, "inbox-consumer: store: %s\n", acemq_idem_errmsg(NULL));
        return 1;
    }
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    o.handler = apply;
    o.ctx = db;
    o.inbox = inbox;
    o.log = stderr;
    if (argc == 5) o.lease_ms = atoll(argv[4]);
    acemq_consumer *c = NULL;
    int status = 1;
    if (acemq_consumer_open(&c, broker, queue, store, &o) != 0)
        fprintf(stderr, "inbox-consumer: %s\n", acemq_consumer_errmsg(NULL));
    else if (acemq_consumer_run(c, &stop) != 0)
        fprintf(stderr, "inbox-consumer: %s\n", acemq_consumer_errmsg(c));
    else
        status = 0;
    acemq_consumer_close(c);
    acemq_idem_close(inbox);
    acemq_idem_close(store);
    sqlite3_close(db);
    return status;
}
