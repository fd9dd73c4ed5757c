/* consumer_rabbitmq_fleet.c — three consumer processes on one queue and
 * one store: 10,000 messages, 2,000 of them published twice (same
 * message_id), each id's effect exactly once.
 *
 * Each consumer is a process of its own (fork), with its own store handle,
 * its own broker connections and its own connection to the effects file
 * (SQLite), whose handler adds one to its id's row. Children send their
 * counters to the parent through one pipe, a fixed-size record per write
 * (under PIPE_BUF, so records from several children never interleave),
 * every 100 ms and once more when they stop. The parent stops them
 * (SIGTERM) once they acknowledged as many deliveries as were published,
 * or when a generous bound runs out, and then asserts: every id one
 * effect, the counters add up, the queue empty with nothing unsettled.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "acemq/broker.h"
#include "acemq/consumer.h"
#include "integration/broker_amqp_fixture.h"
#include "integration/consumer_rabbitmq.h"

#define FLEET_IDS 10000
#define FLEET_CHILDREN 3
/* Bounds, not expectations: a run takes far less. */
#define FLEET_DRAIN_MS 400000
#define FLEET_STOP_MS 60000
#define FLEET_STALL_MS 30000

/* --- the children ---------------------------------------------------------- */

typedef struct fleet_record {
    int child;
    int final;
    acemq_consumer_stats stats;
} fleet_record;

typedef struct fleet_spec {
    const char *queue, *store_url, *effects;
} fleet_spec;

static volatile sig_atomic_t child_stop;
static atomic_int child_run_done;
static int child_run_rc;

static void on_term(int sig)
{
    (void)sig;
    child_stop = 1;
}

typedef struct effect_ctx {
    sqlite3 *db;
    sqlite3_stmt *ins;
} effect_ctx;

/* The effect: one more for the id's row. A write that fails is a failed
 * handler, which the consumer retries; the counters would show it. */
static int add_effect(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    effect_ctx *x = ctx;
    sqlite3_reset(x->ins);
    sqlite3_bind_text(x->ins, 1, m->key, (int)m->key_len, SQLITE_TRANSIENT);
    if (sqlite3_step(x->ins) != SQLITE_DONE) {
        acemq_consumer_fail(c, sqlite3_errmsg(x->db));
        return 1;
    }
    return 0;
}

static void *child_run(void *arg)
{
    child_run_rc = acemq_consumer_run(arg, &child_stop);
    atomic_store(&child_run_done, 1);
    return NULL;
}

static void send_record(int fd, int child, int final, acemq_consumer *c)
{
    fleet_record r;
    memset(&r, 0, sizeof r);
    r.child = child;
    r.final = final;
    acemq_consumer_stats_get(c, &r.stats);
    while (write(fd, &r, sizeof r) < 0 && errno == EINTR) {
    }
}

/* A child's whole life; never returns. Exit codes name what failed. */
static void child_main(const fleet_spec *s, int child, int fd)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    acemq_idem *store = NULL;
    if (acemq_idem_open(&store, s->store_url, NULL) != 0) {
        fprintf(stderr, "child %d: store: %s\n", child, acemq_idem_errmsg(NULL));
        _exit(10);
    }
    effect_ctx x = {NULL, NULL};
    if (sqlite3_open(s->effects, &x.db) != SQLITE_OK || sqlite3_busy_timeout(x.db, 60000) ||
        sqlite3_prepare_v2(x.db,
                           "INSERT INTO effects(id, n) VALUES(?1, 1)"
                           " ON CONFLICT(id) DO UPDATE SET n = n + 1",
                           -1, &x.ins, NULL) != SQLITE_OK) {
        fprintf(stderr, "child %d: effects: %s\n", child, sqlite3_errmsg(x.db));
        _exit(11);
    }
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    o.handler = add_effect;
    o.ctx = &x;
    o.in_progress_delay_ms = 500;
    acemq_consumer *c = NULL;
    if (acemq_consumer_open(&c, broker_url, s->queue, store, &o) != 0) {
        fprintf(stderr, "child %d: consumer: %s\n", child, acemq_consumer_errmsg(NULL));
        _exit(12);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, child_run, c) != 0) _exit(13);
    while (!atomic_load(&child_run_done)) {
        send_record(fd, child, 0, c);
        sleep_ms(100);
    }
    pthread_join(t, NULL);
    if (child_run_rc != 0)
        fprintf(stderr, "child %d: run: %s: %s\n", child, acemq_err_name(child_run_rc),
                acemq_consumer_errmsg(c));
    send_record(fd, child, 1, c);
    close(fd);
    acemq_consumer_close(c);
    acemq_idem_close(store);
    sqlite3_finalize(x.ins);
    sqlite3_close(x.db);
    _exit(child_run_rc == 0 ? 0 : 14);
}

/* --- the parent ------------------------------------------------------------ */

static void make_effects(const char *path)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(db,
                     "PRAGMA journal_mode=WAL;"
                     "CREATE TABLE effects(id TEXT PRIMARY KEY, n INTEGER NOT NULL)",
                     NULL, NULL, &err) != SQLITE_OK)
        fail_msg("effects: %s", err);
    sqlite3_close(db);
}

/* 10,000 ids; those with i % 10 == 0 published again right behind
 * themselves (so two consumers often hold them at once: IN_PROGRESS),
 * those with i % 10 == 5 again after all the others (a late duplicate). */
static void publish_fleet(const char *q, const char *run)
{
    enum { TOTAL = FLEET_IDS + FLEET_IDS / 5 };
    static char ids[TOTAL][80];
    static acemq_broker_msg m[TOTAL];
    static acemq_publish_result res[TOTAL];
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < FLEET_IDS; i++) {
            int copies = pass == 0 ? 1 + (i % 10 == 0) : i % 10 == 5;
            for (int k = 0; k < copies; k++, n++) {
                (void)snprintf(ids[n], sizeof ids[n], "%s-%05d", run, i);
                m[n] = (acemq_broker_msg){.exchange = "",
                                          .routing_key = q,
                                          .message_id = ids[n],
                                          .body = ids[n],
                                          .body_len = strlen(ids[n])};
            }
        }
    assert_int_equal(n, TOTAL);
    acemq_broker *pub = open_broker(256);
    for (size_t at = 0; at < n; at += 1000) {
        size_t k = n - at < 1000 ? n - at : 1000;
        int rc = acemq_broker_publish(pub, m + at, k, res + at);
        if (rc != 0) fail_msg("publish: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(pub));
        for (size_t i = at; i < at + k; i++)
            if (res[i].outcome != ACEMQ_PUBLISH_CONFIRMED)
                fail_msg("message %zu: outcome %d: %s", i, res[i].outcome, res[i].reason);
    }
    acemq_broker_close(pub);
}

/* Deliveries acknowledged for good: published copies (retries) not counted. */
static uint64_t acked(const acemq_consumer_stats *s, int n)
{
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += s[i].processed + s[i].duplicates + s[i].stale + s[i].dead_lettered;
    return sum;
}

static uint64_t delivered(const acemq_consumer_stats *s, int n)
{
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += s[i].delivered;
    return sum;
}

/* Reads the children's records until every one has closed its end: stops
 * them once they acknowledged `total` deliveries, or when nothing was
 * delivered for FLEET_STALL_MS (a broken consumer that lost or stranded
 * messages; the assertions then say what), or at the bound. */
static void watch_children(int fd, const pid_t *pids, acemq_consumer_stats *last, int *finals,
                           uint64_t total)
{
    unsigned char buf[sizeof(fleet_record) * 64];
    size_t have = 0;
    int64_t drain_until = mono_ms() + FLEET_DRAIN_MS, kill_at = 0, moved_at = mono_ms();
    uint64_t seen = 0;
    for (;;) {
        int64_t now = mono_ms();
        if (delivered(last, FLEET_CHILDREN) != seen) {
            seen = delivered(last, FLEET_CHILDREN);
            moved_at = now;
        }
        int stalled = now - moved_at > FLEET_STALL_MS;
        if (!kill_at && (acked(last, FLEET_CHILDREN) >= total || stalled || now > drain_until)) {
            if (stalled || now > drain_until)
                print_message("not drained (%s): %llu of %llu acknowledged\n",
                              stalled ? "nothing delivered for a while" : "out of time",
                              (unsigned long long)acked(last, FLEET_CHILDREN),
                              (unsigned long long)total);
            for (int i = 0; i < FLEET_CHILDREN; i++)
                (void)kill(pids[i], SIGTERM);
            kill_at = now + FLEET_STOP_MS;
        }
        if (kill_at && now > kill_at) {
            for (int i = 0; i < FLEET_CHILDREN; i++)
                (void)kill(pids[i], SIGKILL);
            fail_msg("consumers did not stop within %d s of SIGTERM", FLEET_STOP_MS / 1000);
        }
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) continue;
        ssize_t got = read(fd, buf + have, sizeof buf - have);
        if (got < 0 && errno == EINTR) continue;
        assert_true(got >= 0);
        if (got == 0) break;
        have += (size_t)got;
        size_t used = 0;
        for (; have - used >= sizeof(fleet_record); used += sizeof(fleet_record)) {
            fleet_record r;
            memcpy(&r, buf + used, sizeof r);
            assert_true(r.child >= 0 && r.child < FLEET_CHILDREN);
            last[r.child] = r.stats;
            finals[r.child] |= r.final;
        }
        memmove(buf, buf + used, have - used);
        have -= used;
    }
}

static void assert_effects(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT count(*), coalesce(min(n), 0), coalesce(max(n), 0),"
                                        " coalesce(sum(n), 0) FROM effects",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long long rows = sqlite3_column_int64(st, 0), lo = sqlite3_column_int64(st, 1),
              hi = sqlite3_column_int64(st, 2), sum = sqlite3_column_int64(st, 3);
    sqlite3_finalize(st);
    sqlite3_close(db);
    print_message("effects: %lld ids, %lld in all, %lld..%lld per id\n", rows, sum, lo, hi);
    assert_int_equal(rows, FLEET_IDS); /* every id (ids are the primary key) */
    assert_int_equal(lo, 1);           /* none lost... */
    assert_int_equal(hi, 1);           /* ...and none twice */
}

static void run_fleet(const char *kind, int quorum)
{
    char dir[512], url[600], effects[600], q[160], run[64];
    make_tmpdir(dir, sizeof dir);
    if (store_url(url, sizeof url, kind, dir) != 0) {
        rm_tmpdir(dir);
        print_message("SKIPPED: %s: its server's URL is not set\n", kind);
        skip();
    }
    (void)snprintf(effects, sizeof effects, "%s/effects.db", dir);
    (void)snprintf(run, sizeof run, "%s%s-%ld", quorum ? "q" : "", kind, (long)getpid());
    work_queue(q, sizeof q, run, quorum);
    make_effects(effects);
    /* The schema is made once, before the children race to open it. */
    acemq_idem_close(open_store(url));
    publish_fleet(q, run);

    fleet_spec spec = {q, url, effects};
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pids[FLEET_CHILDREN];
    fflush(NULL);
    for (int i = 0; i < FLEET_CHILDREN; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(fds[0]);
            child_main(&spec, i, fds[1]);
        }
    }
    close(fds[1]);
    acemq_consumer_stats last[FLEET_CHILDREN];
    int finals[FLEET_CHILDREN] = {0};
    memset(last, 0, sizeof last);
    watch_children(fds[0], pids, last, finals, FLEET_IDS + FLEET_IDS / 5);
    close(fds[0]);
    for (int i = 0; i < FLEET_CHILDREN; i++) {
        int status = 0;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("consumer %d ended with status 0x%x", i, (unsigned)status);
        assert_true(finals[i]);
    }

    acemq_consumer_stats sum;
    memset(&sum, 0, sizeof sum);
    for (int i = 0; i < FLEET_CHILDREN; i++) {
        const acemq_consumer_stats *s = &last[i];
        print_message("consumer %d: delivered %llu processed %llu duplicates %llu in_progress %llu "
                      "failed %llu stale %llu store_errors %llu\n",
                      i, (unsigned long long)s->delivered, (unsigned long long)s->processed,
                      (unsigned long long)s->duplicates, (unsigned long long)s->in_progress,
                      (unsigned long long)s->failed, (unsigned long long)s->stale,
                      (unsigned long long)s->store_errors);
        sum.delivered += s->delivered;
        sum.processed += s->processed;
        sum.duplicates += s->duplicates;
        sum.failed += s->failed;
        sum.stale += s->stale;
        sum.dead_lettered += s->dead_lettered;
    }
    assert_effects(effects);
    assert_int_equal(ready_once_idle(q), 0);
    assert_int_equal(sum.processed, FLEET_IDS);
    assert_int_equal(sum.duplicates, FLEET_IDS / 5);
    assert_true(sum.delivered >= FLEET_IDS + FLEET_IDS / 5);
    assert_int_equal(sum.failed, 0);
    assert_int_equal(sum.stale, 0);
    assert_int_equal(sum.dead_lettered, 0);
    drop_queue(q);
    drop_store(kind, url);
    rm_tmpdir(dir);
}

void fleet_sqlite(void **state)
{
    (void)state;
    run_fleet("sqlite", 0);
}

void fleet_postgres(void **state)
{
    (void)state;
    run_fleet("postgres", 0);
}

void fleet_redis(void **state)
{
    (void)state;
    run_fleet("redis", 0);
}

void fleet_quorum_sqlite(void **state)
{
    (void)state;
    run_fleet("sqlite", 1);
}
