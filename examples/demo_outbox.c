/* demo_outbox.c — the main job, end to end: a small order service writes each
 * order and its "order created" event in one SQLite transaction (some
 * transactions are rolled back on purpose: a declined payment), `acemq relay`
 * publishes the events to a real RabbitMQ, is killed with SIGKILL halfway and
 * started again, and the demo then reads the queue and accounts for every
 * order. It ends with a table and exits non-zero if anything disagrees: an
 * event lost, an event for a rolled-back order, a committed order unpublished.
 *
 * Usage: acemq-demo-outbox ACEMQ_TOOL   (ACEMQ_AMQP_URL names the broker;
 * `make demo` starts RabbitMQ on loopback and sets it.)
 */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acemq/sqlite.h"

#define ORDERS 2000
#define EXCHANGE "shop"
#define QUEUE "shop.order-events"

static void die(const char *fmt, const char *detail)
{
    fprintf(stderr, "demo: ");
    fprintf(stderr, fmt, detail);
    fprintf(stderr, "\n");
    exit(1);
}

static void sql(sqlite3 *db, const char *text)
{
    char *msg = NULL;
    if (sqlite3_exec(db, text, NULL, NULL, &msg) != SQLITE_OK) die("sqlite: %s", msg);
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ the broker */

static amqp_connection_state_t amqp_connect_url(const char *url_text)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s", url_text);
    struct amqp_connection_info info;
    amqp_default_connection_info(&info);
    if (amqp_parse_url(buf, &info) != AMQP_STATUS_OK) die("bad AMQP URL '%s'", url_text);
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (!s || amqp_socket_open(s, info.host, info.port) != AMQP_STATUS_OK)
        die("cannot connect to %s", url_text);
    const char *vhost = info.vhost && info.vhost[0] ? info.vhost : "/";
    amqp_rpc_reply_t r =
        amqp_login(c, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user, info.password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) die("login to %s failed", url_text);
    amqp_channel_open(c, 1);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("%s", "channel.open failed");
    return c;
}

static void check_reply(amqp_connection_state_t c, const char *what)
{
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("%s failed", what);
}

/* A durable topic exchange and a fresh queue bound to its order events. */
static void declare_topology(amqp_connection_state_t c)
{
    amqp_exchange_declare(c, 1, amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes("topic"), 0, 1, 0,
                          0, amqp_empty_table);
    check_reply(c, "exchange.declare");
    amqp_queue_delete(c, 1, amqp_cstring_bytes(QUEUE), 0, 0);
    check_reply(c, "queue.delete");
    amqp_queue_declare(c, 1, amqp_cstring_bytes(QUEUE), 0, 1, 0, 0, amqp_empty_table);
    check_reply(c, "queue.declare");
    amqp_queue_bind(c, 1, amqp_cstring_bytes(QUEUE), amqp_cstring_bytes(EXCHANGE),
                    amqp_cstring_bytes("order.*"), amqp_empty_table);
    check_reply(c, "queue.bind");
}

/* Reads the queue dry; seen[i] counts deliveries of order i's event. */
static long drain_queue(amqp_connection_state_t c, int *seen, long *foreign)
{
    long n = 0;
    for (;;) {
        amqp_rpc_reply_t r = amqp_basic_get(c, 1, amqp_cstring_bytes(QUEUE), 1);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) die("%s", "basic.get failed");
        if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) return n;
        amqp_message_t m;
        if (amqp_read_message(c, 1, &m, 0).reply_type != AMQP_RESPONSE_NORMAL)
            die("%s", "reading a message failed");
        int order = -1;
        if (m.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) {
            char id[64] = "";
            size_t len = m.properties.message_id.len < 63 ? m.properties.message_id.len : 63;
            memcpy(id, m.properties.message_id.bytes, len);
            if (sscanf(id, "order-%d-created", &order) != 1) order = -1;
        }
        if (order >= 0 && order < ORDERS)
            seen[order]++;
        else
            (*foreign)++;
        amqp_destroy_message(&m);
        n++;
    }
}

/* ------------------------------------------------------------ the relay */

static pid_t start_relay(const char *tool, const char *outbox_url, const char *amqp_url,
                         const char *log)
{
    pid_t pid = fork();
    if (pid < 0) die("%s", "fork failed");
    if (pid == 0) {
        if (!freopen(log, "a", stderr)) _exit(126);
        /* A short lease, so the batch the killed relay held is taken over
         * within seconds. */
        execl(tool, tool, "relay", "--outbox", outbox_url, "--broker", amqp_url, "--batch", "50",
              "--poll", "0.05", "--lease", "3", "--confirm-timeout", "2", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static long pending(acemq_outbox *ob)
{
    acemq_outbox_pending p;
    if (acemq_outbox_pending_count(ob, &p) != 0) die("pending: %s", acemq_outbox_errmsg(ob));
    return (long)(p.unclaimed + p.claimed);
}

int main(int argc, char **argv)
{
    if (argc < 2) die("%s", "usage: acemq-demo-outbox PATH-TO-acemq");
    const char *tool = argv[1];
    const char *amqp_url = getenv("ACEMQ_AMQP_URL");
    if (!amqp_url) die("%s", "ACEMQ_AMQP_URL is not set (make demo starts RabbitMQ and sets it)");
    char dir[] = "/tmp/acemq-demo-XXXXXX";
    if (!mkdtemp(dir)) die("%s", "mkdtemp failed");
    char path[128], outbox_url[160], log[160];
    snprintf(path, sizeof path, "%s/shop.db", dir);
    snprintf(outbox_url, sizeof outbox_url, "sqlite:%s", path);
    snprintf(log, sizeof log, "%s/relay.log", dir);

    printf("acemq demo: orders and their events, one SQLite transaction each, to RabbitMQ\n\n");
    amqp_connection_state_t mq = amqp_connect_url(amqp_url);
    declare_topology(mq);
    printf("  RabbitMQ: exchange '%s' (topic) -> queue '%s' (order.*)\n", EXCHANGE, QUEUE);

    acemq_outbox *ob = NULL;
    if (acemq_outbox_open(&ob, outbox_url, NULL) != 0) die("outbox: %s", acemq_outbox_errmsg(NULL));
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK) die("%s", "sqlite3_open failed");
    /* Wait for the relay's lock as the relay waits for ours: short sleeps,
     * not SQLite's 1-100 ms steps. */
    if (acemq_sqlite_busy_wait(db, 10000) != 0) die("%s", "acemq_sqlite_busy_wait failed");
    sql(db, "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer TEXT, total_cents INTEGER)");

    /* The order service: the order row and its event commit or roll back together. */
    static int committed[ORDERS];
    int n_committed = 0, n_rolled_back = 0;
    for (int i = 0; i < ORDERS; i++) {
        char customer[32], id[64], body[128], insert[160];
        snprintf(customer, sizeof customer, "customer-%d", i % 37);
        snprintf(id, sizeof id, "order-%d-created", i);
        snprintf(body, sizeof body, "{\"order\":%d,\"customer\":\"%s\",\"total_cents\":%d}", i,
                 customer, 100 + i);
        snprintf(insert, sizeof insert, "INSERT INTO orders VALUES(%d, '%s', %d)", i, customer,
                 100 + i);
        sql(db, "BEGIN");
        sql(db, insert);
        acemq_outbox_header headers[] = {{"customer", customer}};
        acemq_outbox_record r = {.id = id,
                                 .destination = EXCHANGE,
                                 .routing_key = "order.created",
                                 .ordering_key = customer,
                                 .headers = headers,
                                 .n_headers = 1,
                                 .content_type = "application/json",
                                 .body = body,
                                 .body_len = strlen(body)};
        if (acemq_outbox_add_sqlite(db, &r, NULL, NULL) != 0)
            die("add: %s", acemq_outbox_errmsg(NULL));
        if (i % 10 == 3) { /* the payment was declined after the order was written */
            sql(db, "ROLLBACK");
            n_rolled_back++;
        } else {
            sql(db, "COMMIT");
            committed[i] = 1;
            n_committed++;
        }
    }
    printf("  order service: %d orders committed with their events, %d rolled back\n", n_committed,
           n_rolled_back);

    /* The relay, killed without warning halfway, then started again. */
    pid_t relay = start_relay(tool, outbox_url, amqp_url, log);
    long left = pending(ob);
    for (int t = 0; t < 600 && left > n_committed / 2; t++, left = pending(ob))
        pause_ms(10);
    kill(relay, SIGKILL);
    waitpid(relay, NULL, 0);
    long at_kill = pending(ob);
    printf("  acemq relay: killed with SIGKILL, %ld events still to publish\n", at_kill);
    relay = start_relay(tool, outbox_url, amqp_url, log);
    for (int t = 0; t < 6000 && pending(ob) > 0; t++)
        pause_ms(10);
    kill(relay, SIGTERM);
    int status = 0;
    waitpid(relay, &status, 0);
    int clean_exit = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("  acemq relay: restarted, drained the outbox, stopped by SIGTERM (exit %s)\n\n",
           clean_exit ? "0" : "non-zero");

    /* What arrived. */
    static int seen[ORDERS];
    long foreign = 0;
    long delivered = drain_queue(mq, seen, &foreign);
    long published_once = 0, duplicates = 0, lost = 0, phantom = 0;
    for (int i = 0; i < ORDERS; i++) {
        if (committed[i] && seen[i] == 0) lost++;
        if (!committed[i] && seen[i] > 0) phantom++;
        if (committed[i] && seen[i] >= 1) published_once++;
        if (seen[i] > 1) duplicates += seen[i] - 1;
    }
    acemq_outbox_pending p;
    if (acemq_outbox_pending_count(ob, &p) != 0) die("pending: %s", acemq_outbox_errmsg(ob));

    printf("  %-44s %6d\n", "orders committed", n_committed);
    printf("  %-44s %6d\n", "orders rolled back", n_rolled_back);
    printf("  %-44s %6ld\n", "events published (distinct, in the queue)", published_once);
    printf("  %-44s %6ld\n", "messages confirmed in the queue", delivered);
    printf("  %-44s %6ld\n", "duplicates (redelivered after the SIGKILL)", duplicates);
    printf("  %-44s %6ld\n", "events of rolled-back orders", phantom + foreign);
    printf("  %-44s %6llu\n", "left in the outbox (pending + dead)",
           (unsigned long long)p.unclaimed + p.claimed + p.dead);
    printf("  %-44s %6ld\n", "lost", lost);
    int ok = lost == 0 && phantom == 0 && foreign == 0 && published_once == n_committed &&
             p.unclaimed + p.claimed + p.dead == 0 && clean_exit;
    printf("\n%s\n", ok ? "every committed order's event arrived; none of a rolled-back one."
                        : "MISMATCH: see the table above and the relay's log.");
    if (!ok) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "cat %s", log);
        if (system(cmd) != 0) fprintf(stderr, "(no relay log)\n");
    }
    sqlite3_close(db);
    acemq_outbox_close(ob);
    amqp_channel_close(mq, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(mq, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(mq);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return ok ? 0 : 1;
}
