/* test_relay_rabbitmq.c — `acemq relay` against a real RabbitMQ on loopback,
 * over a SQLite or a PostgreSQL outbox:
 *
 *   test_relay_rabbitmq sqlite|postgres PATH-TO-acemq PATH-TO-services.sh
 *
 * The relay runs as its own process, as in production; the test writes the
 * outbox with plain SQL, starts, kills and restarts relays, stops and starts
 * the broker, and reads the queue back with rabbitmq-c. It asserts what
 * arrived, never how fast: waits are bounded loops on the outbox's pending
 * count. Without ACEMQ_AMQP_URL (or ACEMQ_PG_URL for postgres) it exits 77,
 * which ctest reports as Skipped.
 */
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "conformance/outbox_fixture.h"

static int use_pg;
static const char *tool, *services, *amqp_url;
static char exchange[64], queue[80];

/* ------------------------------------------------------------ the broker */

static amqp_connection_state_t mq_connect(void)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", amqp_url);
    struct amqp_connection_info info;
    amqp_default_connection_info(&info);
    if (amqp_parse_url(buf, &info) != AMQP_STATUS_OK) fail_msg("bad URL %s", amqp_url);
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    assert_non_null(s);
    assert_int_equal(amqp_socket_open(s, info.host, info.port), AMQP_STATUS_OK);
    const char *vhost = info.vhost && info.vhost[0] ? info.vhost : "/";
    amqp_rpc_reply_t r =
        amqp_login(c, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user, info.password);
    assert_int_equal(r.reply_type, AMQP_RESPONSE_NORMAL);
    amqp_channel_open(c, 1);
    assert_int_equal(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
    return c;
}

static void mq_close(amqp_connection_state_t c)
{
    amqp_channel_close(c, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

/* A fresh durable queue bound to a fresh topic exchange for each case. */
static void declare(void)
{
    static int n;
    snprintf(exchange, sizeof exchange, "relay-test-%ld-%d", (long)getpid(), ++n);
    snprintf(queue, sizeof queue, "%s.q", exchange);
    amqp_connection_state_t c = mq_connect();
    amqp_exchange_declare(c, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes("topic"), 0, 1, 0,
                          0, amqp_empty_table);
    assert_int_equal(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
    amqp_queue_declare(c, 1, amqp_cstring_bytes(queue), 0, 1, 0, 0, amqp_empty_table);
    assert_int_equal(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
    amqp_queue_bind(c, 1, amqp_cstring_bytes(queue), amqp_cstring_bytes(exchange),
                    amqp_cstring_bytes("order.#"), amqp_empty_table);
    assert_int_equal(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
    /* An exchange nobody is bound to: what goes there is unroutable. */
    char nowhere[96];
    snprintf(nowhere, sizeof nowhere, "%s.nowhere", exchange);
    amqp_exchange_declare(c, 1, amqp_cstring_bytes(nowhere), amqp_cstring_bytes("topic"), 0, 1, 0,
                          0, amqp_empty_table);
    assert_int_equal(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
    mq_close(c);
}

/* Reads the queue dry: seen[i] counts deliveries of record i; order[] gets the
 * record numbers in delivery order. Returns the number of messages. */
static long drain(long n_records, int *seen, long *order)
{
    amqp_connection_state_t c = mq_connect();
    long got = 0;
    for (;;) {
        amqp_rpc_reply_t r = amqp_basic_get(c, 1, amqp_cstring_bytes(queue), 1);
        assert_int_equal(r.reply_type, AMQP_RESPONSE_NORMAL);
        if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) break;
        amqp_message_t m;
        assert_int_equal(amqp_read_message(c, 1, &m, 0).reply_type, AMQP_RESPONSE_NORMAL);
        assert_true(m.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG);
        char id[64] = "";
        size_t len = m.properties.message_id.len < 63 ? m.properties.message_id.len : 63;
        memcpy(id, m.properties.message_id.bytes, len);
        long k = -1;
        if (sscanf(id, "rec-%ld", &k) != 1 || k < 0 || k >= n_records)
            fail_msg("a message nobody wrote: '%s'", id);
        assert_true(m.properties._flags & AMQP_BASIC_DELIVERY_MODE_FLAG);
        assert_int_equal(m.properties.delivery_mode, 2); /* persistent */
        seen[k]++;
        if (order) order[got] = k;
        got++;
        amqp_destroy_message(&m);
    }
    mq_close(c);
    return got;
}

/* ------------------------------------------------------------ the outbox */

/* Records rec-FROM .. rec-(FROM+N-1), written with plain SQL. */
static void fill_from(outbox_fixture *f, long from, long n, int keys, const char *dest_suffix)
{
    char sql[1024];
    if (f->pg)
        snprintf(sql, sizeof sql,
                 "INSERT INTO acemq_outbox(id, destination, routing_key, ordering_key, body)"
                 " SELECT 'rec-' || g, '%s%s', 'order.created', %s, convert_to('x', 'UTF8')"
                 " FROM generate_series(%ld, %ld) g",
                 exchange, dest_suffix, keys ? "'key-' || (g % 10)" : "NULL", from, from + n - 1);
    else
        snprintf(sql, sizeof sql,
                 "WITH RECURSIVE g(i) AS (SELECT %ld UNION ALL SELECT i + 1 FROM g WHERE i < %ld)"
                 " INSERT INTO acemq_outbox(id, destination, routing_key, ordering_key, body)"
                 " SELECT 'rec-' || i, '%s%s', 'order.created', %s, x'78' FROM g",
                 from, from + n - 1, exchange, dest_suffix, keys ? "'key-' || (i % 10)" : "NULL");
    outbox_sql(f, NULL, sql);
}

static void fill(outbox_fixture *f, long n, int keys, const char *dest_suffix)
{
    fill_from(f, 0, n, keys, dest_suffix);
}

static long pending(acemq_outbox *ob)
{
    acemq_outbox_pending p;
    int rc = acemq_outbox_pending_count(ob, &p);
    if (rc != 0) fail_msg("pending_count: %s", acemq_outbox_errmsg(ob));
    return (long)(p.unclaimed + p.claimed);
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (bounded: a liveness check, not a timing one) until nothing is
 * pending, or until at most `until` records are. */
static void wait_pending(acemq_outbox *ob, long until, int max_seconds)
{
    for (long t = 0; t < max_seconds * 50L; t++) {
        if (pending(ob) <= until) return;
        pause_ms(20);
    }
    fail_msg("still %ld records pending after %d s", pending(ob), max_seconds);
}

/* ------------------------------------------------------------ relays */

static char log_path[256];

/* The relays a case started and has not stopped. A case that fails stops
 * where it failed; teardown then kills what it left running, which would
 * otherwise outlive the suite, keep its output pipe open and hold up the
 * run that waits for it. */
#define MAX_RELAYS 16
static pid_t running[MAX_RELAYS];

static void forget_relay(pid_t pid)
{
    for (int i = 0; i < MAX_RELAYS; i++)
        if (running[i] == pid) running[i] = 0;
}

static pid_t start_relay_with(const char *outbox_url, const char *broker_url, const char *lease,
                              const char *confirm_timeout)
{
    int slot = 0;
    while (slot < MAX_RELAYS && running[slot] != 0)
        slot++;
    assert_true(slot < MAX_RELAYS);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Dies with the suite, even one that aborts before its teardown:
         * a relay left running would hold ctest's pipe open, and the run. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(125);
        if (!freopen(log_path, "a", stderr)) _exit(126);
        execl(tool, tool, "relay", "--outbox", outbox_url, "--broker", broker_url, "--batch", "100",
              "--poll", "0.05", "--lease", lease, "--confirm-timeout", confirm_timeout,
              (char *)NULL);
        _exit(127);
    }
    running[slot] = pid;
    return pid;
}

static pid_t start_relay(outbox_fixture *f, const char *lease, const char *confirm_timeout)
{
    return start_relay_with(f->url, amqp_url, lease, confirm_timeout);
}

/* Where the relays' log ends now: what a case's relays write comes after. */
static long log_end(void)
{
    FILE *f = fopen(log_path, "r");
    if (!f) return 0;
    long end = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : 0;
    fclose(f);
    return end < 0 ? 0 : end;
}

/* Whether the relays' log holds `text` after offset `from`, now. */
static int log_has(long from, const char *text)
{
    FILE *f = fopen(log_path, "r");
    char line[2048];
    int found = 0;
    if (f && fseek(f, from, SEEK_SET) == 0)
        while (!found && fgets(line, sizeof line, f))
            found = strstr(line, text) != NULL;
    if (f) fclose(f);
    return found;
}

/* Waits (bounded) until the relays' log holds `text` after offset `from`. */
static void wait_for_log(long from, const char *text, int max_seconds)
{
    for (long t = 0; t < max_seconds * 50L; t++) {
        if (log_has(from, text)) return;
        pause_ms(20);
    }
    fail_msg("no '%s' in %s after %d s", text, log_path, max_seconds);
}

static int stop_relay(pid_t pid, int sig)
{
    kill(pid, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    forget_relay(pid);
    return status;
}

/* Set while a case has the broker paused, or its memory alarm raised, so
 * that teardown undoes it when the case failed before it could: the cases
 * after it need the broker. */
static int broker_paused, broker_alarmed;

static void broker(const char *action)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s %s rabbitmq >/dev/null", services, action);
    if (system(cmd) != 0) fail_msg("%s", cmd);
    if (strcmp(action, "pause") == 0 || strcmp(action, "resume") == 0)
        broker_paused = strcmp(action, "pause") == 0;
    if (strcmp(action, "alarm") == 0 || strcmp(action, "unalarm") == 0)
        broker_alarmed = strcmp(action, "alarm") == 0;
}

/* n records, the broker put through `action` (pause, alarm), and a relay
 * started that has logged `event` about it: the relay's pid; its outbox
 * in *ob, and in *from where the log stood before it started. */
static pid_t relay_meets_outage(outbox_fixture *f, long n, const char *action, const char *lease,
                                const char *confirm_timeout, const char *event, acemq_outbox **ob,
                                long *from)
{
    fill(f, n, 0, "");
    *ob = outbox_fixture_open(f);
    broker(action);
    *from = log_end();
    pid_t relay = start_relay(f, lease, confirm_timeout);
    wait_for_log(*from, event, 60);
    return relay;
}

/* Stops the relay with SIGTERM (it must exit 0), reads the queue and fails
 * on any record that never arrived; returns the duplicates. */
static long finish_and_count_duplicates(pid_t relay, long n, long *got)
{
    int status = stop_relay(relay, SIGTERM);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int *seen = calloc((size_t)n, sizeof *seen);
    assert_non_null(seen);
    *got = drain(n, seen, NULL);
    long dups = 0;
    for (long i = 0; i < n; i++) {
        if (seen[i] == 0) fail_msg("rec-%ld was lost", i);
        dups += seen[i] - 1;
    }
    free(seen);
    return dups;
}

/* ------------------------------------------------------------ cases */

static int setup(void **state)
{
    outbox_fixture *f = malloc(sizeof *f);
    if (!f) return -1;
    outbox_fixture_init(f, use_pg);
    f->opts.clock = NULL; /* real time: the relays are real processes */
    declare();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    for (int i = 0; i < MAX_RELAYS; i++)
        if (running[i] != 0) (void)stop_relay(running[i], SIGKILL);
    if (broker_paused) broker("resume");
    if (broker_alarmed) broker("unalarm");
    outbox_fixture_free(*state);
    free(*state);
    return 0;
}

static acemq_outbox *open_outbox(outbox_fixture *f)
{
    return outbox_fixture_open(f);
}

static void ten_thousand_once_each_in_key_order(void **state)
{
    outbox_fixture *f = *state;
    enum { N = 10000 };
    fill(f, N, 1, "");
    acemq_outbox *ob = open_outbox(f);
    pid_t relay = start_relay(f, "30", "20");
    wait_pending(ob, 0, 300);
    int status = stop_relay(relay, SIGTERM);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    static int seen[N];
    static long order[N];
    memset(seen, 0, sizeof seen);
    assert_int_equal(drain(N, seen, order), N);
    for (long i = 0; i < N; i++)
        if (seen[i] != 1) fail_msg("rec-%ld arrived %d times", i, seen[i]);
    /* Within each ordering key, record numbers only grow. */
    long last[10];
    for (int k = 0; k < 10; k++)
        last[k] = -1;
    for (long i = 0; i < N; i++) {
        int key = (int)(order[i] % 10);
        if (order[i] < last[key])
            fail_msg("key-%d: rec-%ld after rec-%ld", key, order[i], last[key]);
        last[key] = order[i];
    }
    acemq_outbox_close(ob);
}

static void unroutable_fails_not_published(void **state)
{
    outbox_fixture *f = *state;
    fill(f, 3, 0, ".nowhere");
    acemq_outbox *ob = open_outbox(f);
    pid_t relay = start_relay(f, "30", "20");
    /* Wait until each has failed once: attempts counted, reason kept. */
    for (int t = 0; t < 6000; t++) {
        if (outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE attempts >= 1") == 3) break;
        pause_ms(20);
    }
    int status = stop_relay(relay, SIGTERM);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE attempts >= 1"), 3);
    assert_int_equal(outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE state = 1"), 0);
    assert_int_equal(
        outbox_scalar(f, "SELECT count(*) FROM acemq_outbox WHERE last_error LIKE '%NO_ROUTE%'"),
        3);
    static int seen[3];
    assert_int_equal(drain(3, seen, NULL), 0);
    acemq_outbox_close(ob);
}

static void broker_restart_loses_nothing(void **state)
{
    outbox_fixture *f = *state;
    enum { N = 10000, HALF = N / 2 };
    fill(f, HALF, 0, "");
    acemq_outbox *ob = open_outbox(f);
    pid_t relay = start_relay(f, "10", "5");
    wait_pending(ob, HALF - 1000, 300);
    broker("pause");
    /* Written while the broker is away: none of these can be published
     * until it is back, so the relay certainly meets the outage. */
    fill_from(f, HALF, HALF, 0, "");
    pause_ms(3000); /* the broker is away for a few seconds */
    assert_true(pending(ob) >= HALF);
    broker("resume");
    wait_pending(ob, 0, 300);
    long got = 0, dups = finish_and_count_duplicates(relay, N, &got);
    printf("broker restart: %ld messages for %d records (%ld duplicates)\n", got, N, dups);
    acemq_outbox_close(ob);
}

static void kill_9_loses_nothing(void **state)
{
    outbox_fixture *f = *state;
    enum { N = 20000, BATCH = 100 };
    fill(f, N, 0, "");
    acemq_outbox *ob = open_outbox(f);
    unsigned seed = (unsigned)getpid();
    int kills = 0;
    /* Lease 3 s: a killed relay's batches are taken over three seconds
     * later, while a live relay, confirming within 1 s, never outlives its
     * own leases. */
    while (pending(ob) > 0 && kills < 8) {
        pid_t relay = start_relay(f, "3", "1");
        pause_ms(100 + rand_r(&seed) % 400);
        stop_relay(relay, SIGKILL);
        kills++;
    }
    pid_t relay = start_relay(f, "3", "1");
    wait_pending(ob, 0, 300);
    long got = 0, dups = finish_and_count_duplicates(relay, N, &got);
    /* What a killed relay had published and not yet marked is at most four
     * batches: one being sent, the one before it whose last confirms are
     * still coming in, one whose marks the marker thread is writing and one
     * waiting for the marker. (A batch claimed ahead and not yet sent goes
     * again after its lease, but was never published: no duplicate.) */
    printf("kill -9: %d kills, %ld messages for %d records, %ld duplicates (bound %d)\n", kills,
           got, N, dups, kills * 4 * BATCH);
    assert_true(dups <= (long)kills * 4 * BATCH);
    acemq_outbox_close(ob);
}

/* A memory alarm blocks the relay's connection (connection.blocked) for
 * three of its 1 s confirm timeouts. The relay logs broker_blocked and
 * waits on the same connection instead of giving up and publishing again:
 * once the alarm clears, every record arrives exactly once (leases of 60 s,
 * so none is taken over meanwhile). */
static void alarm_is_waited_out_without_duplicates(void **state)
{
    outbox_fixture *f = *state;
    enum { N = 1000 };
    acemq_outbox *ob;
    long from;
    pid_t relay = relay_meets_outage(f, N, "alarm", "60", "1", "event=broker_blocked", &ob, &from);
    pause_ms(3000);
    int gave_up = log_has(from, "event=outcome_unknown") || log_has(from, "lost connection");
    broker("unalarm");
    wait_for_log(from, "event=broker_unblocked", 60);
    assert_false(gave_up);
    wait_pending(ob, 0, 300);
    long got = 0, dups = finish_and_count_duplicates(relay, N, &got);
    printf("alarm: %ld messages for %d records (%ld duplicates)\n", got, N, dups);
    assert_int_equal(dups, 0);
    acemq_outbox_close(ob);
}

/* SIGTERM while the alarm holds the relay's connection blocked: the relay
 * stops waiting and exits 0 (it would otherwise wait as long as the alarm);
 * what it had in flight goes to its lease, and a relay started after the
 * alarm clears publishes every record. */
static void sigterm_ends_a_blocked_wait(void **state)
{
    outbox_fixture *f = *state;
    enum { N = 500 };
    acemq_outbox *ob;
    long from;
    pid_t relay = relay_meets_outage(f, N, "alarm", "2", "1", "event=broker_blocked", &ob, &from);
    kill(relay, SIGTERM);
    int status = 0;
    pid_t done = 0;
    for (int i = 0; i < 3000 && done == 0; i++) { /* 60 s at most */
        done = waitpid(relay, &status, WNOHANG);
        if (done == 0) pause_ms(20);
    }
    if (done == relay) forget_relay(relay);
    broker("unalarm");
    assert_int_equal(done, relay);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(log_has(from, "stopped waiting"));
    relay = start_relay(f, "2", "1");
    wait_pending(ob, 0, 300);
    long got = 0, dups = finish_and_count_duplicates(relay, N, &got);
    printf("SIGTERM while blocked: %ld messages for %d records (%ld duplicates)\n", got, N, dups);
    /* The repeats are what was in flight when the relay stopped waiting, and
     * the broker took after the alarm: four batches of 100 at most. */
    assert_true(dups <= 4L * 100);
    acemq_outbox_close(ob);
}

/* A relay started while its broker is down (started with it, or before
 * it) waits for it, logging broker_unavailable, and publishes everything
 * once it is up: the same as for a broker that goes away later. */
static void relay_started_before_the_broker(void **state)
{
    outbox_fixture *f = *state;
    enum { N = 1000 };
    acemq_outbox *ob;
    long from;
    pid_t relay =
        relay_meets_outage(f, N, "pause", "30", "20", "event=broker_unavailable", &ob, &from);
    assert_int_equal(waitpid(relay, NULL, WNOHANG), 0); /* still running */
    assert_int_equal(pending(ob), N);
    broker("resume");
    wait_pending(ob, 0, 300);
    long got = 0, dups = finish_and_count_duplicates(relay, N, &got);
    assert_int_equal(dups, 0);
    acemq_outbox_close(ob);
}

/* A broker that refuses the relay's user or password is a setting to fix,
 * not an outage to wait out: the relay says so and exits 1 at once. */
static void wrong_password_exits_at_once(void **state)
{
    outbox_fixture *f = *state;
    const char *at = strchr(amqp_url, '@');
    assert_non_null(at);
    char bad[512];
    snprintf(bad, sizeof bad, "amqp://guest:not-the-password%s", at);
    long from = log_end();
    pid_t relay = start_relay_with(f->url, bad, "30", "20");
    int status = 0;
    pid_t ended = 0;
    for (int t = 0; t < 3000 && ended == 0; t++) {
        ended = waitpid(relay, &status, WNOHANG);
        if (ended == 0) pause_ms(20);
    }
    assert_int_equal(ended, relay); /* else teardown kills it */
    forget_relay(relay);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    wait_for_log(from, "ACCESS_REFUSED", 10);
}

/* PostgreSQL only. The server ends all the relay's connections in the
 * middle of a run, as a restart, a failover or a network cut would. The
 * relay connects again, claims, marks and waits as before, and every
 * record arrives: those written before the cut and those written after it,
 * which only a relay that came back can publish. A batch confirmed but not
 * yet marked when its connection went is published again after its lease
 * (3 s): duplicates, never a loss. */
static void database_cut_loses_nothing(void **state)
{
    outbox_fixture *f = *state;
    enum { N = 10000, HALF = N / 2 };
    fill(f, HALF, 0, "");
    acemq_outbox *ob = open_outbox(f);
    char url[1200];
    outbox_fixture_tagged_url(f, "relay", url, sizeof url);
    pid_t relay = start_relay_with(url, amqp_url, "3", "1");
    wait_pending(ob, HALF - 1000, 300);
    long cut = outbox_fixture_cut(f, "relay");
    assert_true(cut >= 1);
    fill_from(f, HALF, HALF, 0, "");
    wait_pending(ob, 0, 300);
    long got = 0, dups = finish_and_count_duplicates(relay, N, &got);
    printf("database cut: %ld connections ended, %ld messages for %d records (%ld duplicates)\n",
           cut, got, N, dups);
    acemq_outbox_close(ob);
}

static void two_relays_share_the_work(void **state)
{
    outbox_fixture *f = *state;
    enum { N = 20000 };
    fill(f, N, 0, "");
    acemq_outbox *ob = open_outbox(f);
    pid_t a = start_relay(f, "30", "20"), b = start_relay(f, "30", "20");
    wait_pending(ob, 0, 300);
    int sa = stop_relay(a, SIGTERM), sb = stop_relay(b, SIGTERM);
    assert_true(WIFEXITED(sa) && WEXITSTATUS(sa) == 0);
    assert_true(WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
    static int seen[N];
    memset(seen, 0, sizeof seen);
    long got = drain(N, seen, NULL);
    for (long i = 0; i < N; i++)
        if (seen[i] == 0) fail_msg("rec-%ld was lost", i);
    /* No lease ran out (30 s, never reached), so no record went twice. */
    assert_int_equal(got, N);
    acemq_outbox_close(ob);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s sqlite|postgres ACEMQ_TOOL SERVICES_SH\n", argv[0]);
        return 2;
    }
    amqp_url = getenv("ACEMQ_AMQP_URL");
    if (!amqp_url || !*amqp_url) {
        printf("SKIPPED: ACEMQ_AMQP_URL is not set (scripts/services.sh start rabbitmq)\n");
        return TEST_SKIP;
    }
    use_pg = outbox_backend_from_args(argc, argv);
    tool = argv[2];
    services = argv[3];
    snprintf(log_path, sizeof log_path, "/tmp/acemq-relay-test-%ld.log", (long)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(ten_thousand_once_each_in_key_order, setup, teardown),
        cmocka_unit_test_setup_teardown(unroutable_fails_not_published, setup, teardown),
        cmocka_unit_test_setup_teardown(broker_restart_loses_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(kill_9_loses_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(two_relays_share_the_work, setup, teardown),
        cmocka_unit_test_setup_teardown(relay_started_before_the_broker, setup, teardown),
        cmocka_unit_test_setup_teardown(alarm_is_waited_out_without_duplicates, setup, teardown),
        cmocka_unit_test_setup_teardown(sigterm_ends_a_blocked_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(wrong_password_exits_at_once, setup, teardown),
    };
    const struct CMUnitTest postgres_tests[] = {
        cmocka_unit_test_setup_teardown(database_cut_loses_nothing, setup, teardown),
    };
    int rc = cmocka_run_group_tests_name(use_pg ? "relay + RabbitMQ (postgres outbox)"
                                                : "relay + RabbitMQ (sqlite outbox)",
                                         tests, NULL, NULL);
    if (use_pg)
        rc += cmocka_run_group_tests_name("relay + RabbitMQ, postgres only", postgres_tests, NULL,
                                          NULL);
    if (rc == 0)
        unlink(log_path);
    else
        fprintf(stderr, "relay logs: %s\n", log_path);
    return rc;
}
