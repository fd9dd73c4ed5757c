/* test_consumer_sigstop.c — a consumer frozen with SIGSTOP past its lease
 * (issue 40, Tests), against the real RabbitMQ and a SQLite store shared
 * by two consumer processes:
 *
 *   1. consumer A (a child; lease_ms 1000, broker heartbeat_s 1) takes the
 *      one message and its handler waits, in the middle of its work, for
 *      the parent's word (a pipe), far past its lease;
 *   2. the parent freezes A with SIGSTOP: its lease keeper stops renewing
 *      and its connection stops answering heartbeats, so RabbitMQ drops the
 *      connection and delivers the message again;
 *   3. consumer B (another child: a normal handler, same queue, same
 *      store) gets it once A's lease ran out, takes the claim over, does
 *      the work and confirms it;
 *   4. the parent wakes A (SIGCONT, then the word): A's confirm is refused
 *      as stale (ACEMQ_ESTALE) and counted (stats.stale).
 *
 * Two variants:
 *
 *   inbox  effects and the store in one SQLite file; the handler confirms
 *          with acemq_consumer_confirm inside its transaction and rolls
 *          back on ACEMQ_ESTALE: the id ends with exactly ONE effect row,
 *          B's. SQLite has one writer per file, so A opens its transaction
 *          and writes its effect after the wait, not before it: a
 *          transaction held open by a frozen A would lock B out of the
 *          store, and no takeover could happen. A reports that it saw its
 *          own row beside B's inside the transaction (2), and that confirm
 *          answered ACEMQ_ESTALE; the row is gone after the ROLLBACK.
 *   plain  effects in a separate SQLite file, committed (autocommit)
 *          before the wait and so before the consumer confirms: the id
 *          ends with TWO effect rows, A's and B's, and A counts stale 1:
 *          the documented at-least-once case the inbox closes
 *          (docs/consumer.md, "Leases").
 *
 * Both: B processed the message once, the store has it confirmed, and the
 * queue ends empty with no consumer. The children report to the parent
 * through a pipe (fixed-size records under PIPE_BUF): A when its handler
 * holds the message and when it is done, both their counters every 50 ms
 * and once more when they stop (SIGTERM). A is frozen only at a moment it
 * holds no write lock on the shared file (probed with BEGIN IMMEDIATE; a
 * lease renewal caught mid-commit is let finish first), else B could not
 * claim. Every wait is a bounded loop on a condition, never an assertion
 * on time. Without ACEMQ_AMQP_URL the test prints SKIPPED and exits 77.
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
#include "acemq/sqlite.h"
#include "integration/broker_amqp_fixture.h"
#include "integration/consumer_rabbitmq.h"

/* Bounds, not expectations: each step takes seconds at most. */
#define HANDLER_BOUND_MS 120000  /* A's handler holds the message */
#define TAKEOVER_BOUND_MS 180000 /* B confirmed, A frozen */
#define GO_BOUND_MS 300000       /* A's handler waits for the word this long at most */
#define STALE_BOUND_MS 120000    /* A counted its stale confirm after SIGCONT */
#define STOP_BOUND_MS 60000      /* both children gone after SIGTERM */

enum { CHILD_A, CHILD_B, CHILDREN };
enum { REC_STATS, REC_IN_HANDLER, REC_HANDLER_DONE, REC_FINAL };

/* What a child tells the parent; under PIPE_BUF, so one write each and
 * records of the two children never interleave. */
typedef struct sig_record {
    int child;
    int kind;
    int confirm_rc; /* REC_HANDLER_DONE, inbox: what acemq_consumer_confirm answered */
    int rows_in_tx; /* REC_HANDLER_DONE: the id's effect rows A saw (inbox: in its transaction) */
    acemq_consumer_stats stats;
} sig_record;

typedef struct child_spec {
    int child; /* CHILD_A or CHILD_B */
    int inbox;
    const char *queue, *store_url, *effects, *log;
    int out_fd; /* records to the parent */
    int go_fd;  /* A: the parent's word to go on (one byte) */
} child_spec;

/* --- the children ------------------------------------------------------------ */

static volatile sig_atomic_t child_stop;
static atomic_int child_run_done;
static int child_run_rc;

typedef struct handler_ctx {
    const child_spec *s;
    sqlite3 *db;        /* the effects' connection; with the inbox, the store's file too */
    sqlite3_stmt *ins;  /* one effect row: (id, who) */
    sqlite3_stmt *rows; /* the id's effect rows */
} handler_ctx;

static void on_term(int sig)
{
    (void)sig;
    child_stop = 1;
}

static void send_record(const child_spec *s, int kind, int confirm_rc, int rows, acemq_consumer *c)
{
    sig_record r;
    memset(&r, 0, sizeof r);
    r.child = s->child;
    r.kind = kind;
    r.confirm_rc = confirm_rc;
    r.rows_in_tx = rows;
    if (c) acemq_consumer_stats_get(c, &r.stats);
    while (write(s->out_fd, &r, sizeof r) < 0 && errno == EINTR) {
    }
}

static int exec_sql(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

static int insert_effect(handler_ctx *x, const acemq_consumer_msg *m)
{
    sqlite3_reset(x->ins);
    sqlite3_bind_text(x->ins, 1, m->key, (int)m->key_len, SQLITE_TRANSIENT);
    sqlite3_bind_text(x->ins, 2, x->s->child == CHILD_A ? "A" : "B", -1, SQLITE_STATIC);
    return sqlite3_step(x->ins) == SQLITE_DONE ? 0 : -1;
}

static int effect_rows(handler_ctx *x, const acemq_consumer_msg *m)
{
    sqlite3_reset(x->rows);
    sqlite3_bind_text(x->rows, 1, m->key, (int)m->key_len, SQLITE_TRANSIENT);
    int n = sqlite3_step(x->rows) == SQLITE_ROW ? sqlite3_column_int(x->rows, 0) : -1;
    sqlite3_reset(x->rows);
    return n;
}

/* A's handler, frozen in here: waits for the parent's byte, SIGSTOP and
 * SIGCONT included. 0, or -1 past the bound. */
static int wait_for_go(const child_spec *s)
{
    int64_t until = mono_ms() + GO_BOUND_MS;
    for (;;) {
        int64_t left = until - mono_ms();
        if (left <= 0) return -1;
        struct pollfd p = {s->go_fd, POLLIN, 0};
        int n = poll(&p, 1, (int)(left < 1000 ? left : 1000));
        if (n < 0 && errno != EINTR) return -1;
        if (n <= 0) continue;
        char b;
        ssize_t got = read(s->go_fd, &b, 1);
        if (got == 1) return 0;
        if (got == 0 || (got < 0 && errno != EINTR)) return -1;
    }
}

/* The effect and the confirm in one transaction (the inbox): both commit,
 * or neither. A waits for the word first (see the header: SQLite's one
 * writer). */
static int inbox_handler(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    handler_ctx *x = ctx;
    int is_a = x->s->child == CHILD_A;
    if (is_a) {
        send_record(x->s, REC_IN_HANDLER, 0, 0, c);
        if (wait_for_go(x->s) != 0) {
            acemq_consumer_fail(c, "no word from the parent");
            return 1;
        }
    }
    if (exec_sql(x->db, "BEGIN IMMEDIATE") != 0) {
        acemq_consumer_fail(c, sqlite3_errmsg(x->db));
        return 1;
    }
    int rows = -1, rc = insert_effect(x, m);
    if (rc == 0) {
        rows = effect_rows(x, m);
        rc = acemq_consumer_confirm(c, m, NULL, 0);
    }
    int done = rc == 0 && exec_sql(x->db, "COMMIT") == 0;
    if (!done) {
        acemq_consumer_fail(c, rc == ACEMQ_ESTALE ? "confirm refused as stale" : "effect failed");
        (void)exec_sql(x->db, "ROLLBACK");
    }
    if (is_a) send_record(x->s, REC_HANDLER_DONE, rc, rows, c);
    return done ? 0 : 1;
}

/* The effect committed on its own, before the consumer confirms: the
 * at-least-once case. A's waits after its effect. */
static int plain_handler(void *ctx, acemq_consumer *c, const acemq_consumer_msg *m)
{
    handler_ctx *x = ctx;
    if (insert_effect(x, m) != 0) {
        acemq_consumer_fail(c, sqlite3_errmsg(x->db));
        return 1;
    }
    if (x->s->child == CHILD_A) {
        send_record(x->s, REC_IN_HANDLER, 0, 0, c);
        int rc = wait_for_go(x->s);
        send_record(x->s, REC_HANDLER_DONE, 0, effect_rows(x, m), c);
        if (rc != 0) {
            acemq_consumer_fail(c, "no word from the parent");
            return 1;
        }
    }
    return 0;
}

static void *child_run(void *arg)
{
    child_run_rc = acemq_consumer_run(arg, &child_stop);
    atomic_store(&child_run_done, 1);
    return NULL;
}

/* A child's whole life; never returns. Exit codes name what failed. */
static void child_main(const child_spec *s)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *me = s->child == CHILD_A ? "A" : "B";
    FILE *log = fopen(s->log, "w");
    if (!log) _exit(9);
    setvbuf(log, NULL, _IOLBF, 0);
    acemq_idem *store = NULL, *inbox = NULL;
    if (acemq_idem_open(&store, s->store_url, NULL) != 0) {
        fprintf(log, "%s: store: %s\n", me, acemq_idem_errmsg(NULL));
        _exit(10);
    }
    handler_ctx x = {s, NULL, NULL, NULL};
    if (sqlite3_open(s->effects, &x.db) != SQLITE_OK || sqlite3_busy_timeout(x.db, 60000) ||
        sqlite3_prepare_v2(x.db, "INSERT INTO effects(id, who) VALUES(?1, ?2)", -1, &x.ins, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(x.db, "SELECT count(*) FROM effects WHERE id = ?1", -1, &x.rows, NULL) !=
            SQLITE_OK) {
        fprintf(log, "%s: effects: %s\n", me, sqlite3_errmsg(x.db));
        _exit(11);
    }
    if (s->inbox) {
        acemq_idem_options io;
        acemq_idem_options_init(&io);
        io.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
        if (acemq_idem_open_sqlite(&inbox, x.db, &io) != 0) {
            fprintf(log, "%s: inbox: %s\n", me, acemq_idem_errmsg(NULL));
            _exit(12);
        }
    }
    acemq_broker_options bo;
    acemq_broker_options_init(&bo);
    acemq_consumer_options o;
    acemq_consumer_options_init(&o);
    o.handler = s->inbox ? inbox_handler : plain_handler;
    o.ctx = &x;
    o.inbox = inbox;
    o.log = log;
    o.verbose = 1;
    o.in_progress_delay_ms = 200;
    if (s->child == CHILD_A) {
        /* Frozen, A loses both soon: its lease, and its connection. */
        o.lease_ms = 1000;
        bo.heartbeat_s = 1;
        o.broker = &bo;
    }
    acemq_consumer *c = NULL;
    if (acemq_consumer_open(&c, broker_url, s->queue, store, &o) != 0) {
        fprintf(log, "%s: consumer: %s\n", me, acemq_consumer_errmsg(NULL));
        _exit(13);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, child_run, c) != 0) _exit(14);
    while (!atomic_load(&child_run_done)) {
        send_record(s, REC_STATS, 0, 0, c);
        sleep_ms(50);
    }
    pthread_join(t, NULL);
    if (child_run_rc != 0)
        fprintf(log, "%s: run: %s: %s\n", me, acemq_err_name(child_run_rc),
                acemq_consumer_errmsg(c));
    send_record(s, REC_FINAL, 0, 0, c);
    close(s->out_fd);
    acemq_consumer_close(c);
    acemq_idem_close(inbox);
    acemq_idem_close(store);
    sqlite3_finalize(x.ins);
    sqlite3_finalize(x.rows);
    sqlite3_close(x.db);
    fclose(log);
    _exit(child_run_rc == 0 ? 0 : 15);
}

/* --- the parent ------------------------------------------------------------- */

/* One case's children, pipes, queue and files: the teardown's to clean up
 * when an assertion ends the case early. */
static struct {
    pid_t pid[CHILDREN];
    int reaped[CHILDREN], status[CHILDREN];
    int out_fd, go_fd;
    char dir[512], q[160];
    int have_dir, have_q;
} cs;

/* What the children said so far. */
typedef struct watch {
    acemq_consumer_stats last[CHILDREN];
    int final[CHILDREN];
    int in_handler, handler_done, confirm_rc, rows_in_tx;
    int eof;
    unsigned char buf[sizeof(sig_record) * 64];
    size_t have;
} watch;

static const char *const child_name[CHILDREN] = {"A", "B"};

static int case_setup(void **state)
{
    (void)state;
    memset(&cs, 0, sizeof cs);
    cs.out_fd = cs.go_fd = -1;
    return 0;
}

static int case_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < CHILDREN; i++) {
        if (cs.pid[i] <= 0 || cs.reaped[i]) continue;
        (void)kill(cs.pid[i], SIGKILL); /* ends a stopped one too */
        (void)waitpid(cs.pid[i], NULL, 0);
    }
    if (cs.out_fd >= 0) close(cs.out_fd);
    if (cs.go_fd >= 0) close(cs.go_fd);
    if (cs.have_q) drop_queue(cs.q);
    if (cs.have_dir) rm_tmpdir(cs.dir);
    memset(&cs, 0, sizeof cs);
    return 0;
}

/* Reads what the children wrote, waiting up to wait_ms for the first. */
static void pump(watch *w, int wait_ms)
{
    if (w->eof) {
        if (wait_ms > 0) sleep_ms(wait_ms);
        return;
    }
    struct pollfd p = {cs.out_fd, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) return;
    ssize_t got = read(cs.out_fd, w->buf + w->have, sizeof w->buf - w->have);
    if (got < 0 && errno == EINTR) return;
    assert_true(got >= 0);
    if (got == 0) {
        w->eof = 1;
        return;
    }
    w->have += (size_t)got;
    size_t used = 0;
    for (; w->have - used >= sizeof(sig_record); used += sizeof(sig_record)) {
        sig_record r;
        memcpy(&r, w->buf + used, sizeof r);
        assert_true(r.child >= 0 && r.child < CHILDREN);
        w->last[r.child] = r.stats;
        if (r.kind == REC_FINAL) w->final[r.child] = 1;
        if (r.child == CHILD_A && r.kind == REC_IN_HANDLER) w->in_handler = 1;
        if (r.child == CHILD_A && r.kind == REC_HANDLER_DONE) {
            w->handler_done = 1;
            w->confirm_rc = r.confirm_rc;
            w->rows_in_tx = r.rows_in_tx;
        }
    }
    memmove(w->buf, w->buf + used, w->have - used);
    w->have -= used;
}

/* Fails the case when child i has ended (it should not have). */
static void still_alive(int i)
{
    if (!cs.reaped[i] && waitpid(cs.pid[i], &cs.status[i], WNOHANG) == cs.pid[i]) cs.reaped[i] = 1;
    if (cs.reaped[i])
        fail_msg("consumer %s ended early, status 0x%x (its log is in %s)", child_name[i],
                 (unsigned)cs.status[i], cs.dir);
}

/* 1 when another connection holds the write lock of the SQLite file. */
static int write_locked(const char *path)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 0);
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK) (void)sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY) fail_msg("probing %s: %s", path, sqlite3_errstr(rc));
    return rc == SQLITE_BUSY;
}

/* SIGSTOP for A, at a moment it holds no write lock on the store's file (a
 * renewal caught mid-commit would lock B out for as long as A sleeps). */
static void freeze_a(const char *store_file, watch *w)
{
    for (int attempt = 0; attempt < 200; attempt++) {
        int st = 0;
        assert_int_equal(kill(cs.pid[CHILD_A], SIGSTOP), 0);
        assert_int_equal(waitpid(cs.pid[CHILD_A], &st, WUNTRACED), cs.pid[CHILD_A]);
        if (!WIFSTOPPED(st)) {
            cs.reaped[CHILD_A] = 1;
            cs.status[CHILD_A] = st;
            fail_msg("consumer A ended instead of stopping: status 0x%x", (unsigned)st);
        }
        if (!write_locked(store_file)) {
            if (attempt > 0)
                print_message("A frozen on try %d (a write of its was let finish)\n", attempt + 1);
            return;
        }
        assert_int_equal(kill(cs.pid[CHILD_A], SIGCONT), 0);
        pump(w, 20);
    }
    fail_msg("A held the write lock of %s every time it was stopped", store_file);
}

static pid_t spawn(const child_spec *s)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) child_main(s);
    return pid;
}

static void publish_one(const char *q, const char *id)
{
    acemq_broker *pub = open_broker(16);
    acemq_broker_msg m = {
        .exchange = "", .routing_key = q, .message_id = id, .body = id, .body_len = strlen(id)};
    acemq_publish_result r;
    int rc = acemq_broker_publish(pub, &m, 1, &r);
    if (rc != 0) fail_msg("publish: %s: %s", acemq_err_name(rc), acemq_broker_errmsg(pub));
    if (r.outcome != ACEMQ_PUBLISH_CONFIRMED) fail_msg("publish %s: outcome %d", id, r.outcome);
    acemq_broker_close(pub);
}

static void make_effects(const char *path)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(db,
                     "PRAGMA journal_mode=WAL;"
                     "CREATE TABLE effects(id TEXT NOT NULL, who TEXT NOT NULL)",
                     NULL, NULL, &err) != SQLITE_OK)
        fail_msg("effects: %s", err);
    sqlite3_close(db);
}

/* The id's effect rows: all, and those of consumer who. */
static int count_effects(const char *path, const char *id, const char *who)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 60000);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT count(*) FROM effects WHERE id = ?1"
                                        " AND (?2 IS NULL OR who = ?2)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    if (who) sqlite3_bind_text(st, 2, who, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

static void print_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f))
        print_message("  %s", line);
    fclose(f);
}

static void print_stats(const char *who, const acemq_consumer_stats *s)
{
    print_message("consumer %s: delivered %llu processed %llu duplicates %llu in_progress %llu "
                  "failed %llu stale %llu store_errors %llu renewals %llu\n",
                  who, (unsigned long long)s->delivered, (unsigned long long)s->processed,
                  (unsigned long long)s->duplicates, (unsigned long long)s->in_progress,
                  (unsigned long long)s->failed, (unsigned long long)s->stale,
                  (unsigned long long)s->store_errors, (unsigned long long)s->renewals);
}

static void run_case(int inbox)
{
    const char *variant = inbox ? "inbox" : "plain";
    char url[600], effects[600], store_file[600], id[96], logs[CHILDREN][600], what[64];
    make_tmpdir(cs.dir, sizeof cs.dir);
    cs.have_dir = 1;
    assert_int_equal(store_url(url, sizeof url, "sqlite", cs.dir), 0);
    (void)snprintf(store_file, sizeof store_file, "%s/idem.db", cs.dir);
    assert_string_equal(url + strlen("sqlite:"), store_file);
    /* The inbox: the effects in the store's own file. */
    (void)snprintf(effects, sizeof effects, "%s/%s", cs.dir, inbox ? "idem.db" : "effects.db");
    for (int i = 0; i < CHILDREN; i++)
        (void)snprintf(logs[i], sizeof logs[i], "%s/%s.log", cs.dir, child_name[i]);
    (void)snprintf(what, sizeof what, "sigstop.%s", variant);
    work_queue(cs.q, sizeof cs.q, what, 0);
    cs.have_q = 1;
    /* The schemas are made once, before the children open them. */
    acemq_idem_close(open_store(url));
    make_effects(effects);
    (void)snprintf(id, sizeof id, "sigstop-%s-%ld", variant, (long)getpid());
    publish_one(cs.q, id);

    int out[2], go[2];
    assert_int_equal(pipe(out), 0);
    assert_int_equal(pipe(go), 0);
    cs.out_fd = out[0];
    cs.go_fd = go[1];
    child_spec spec[CHILDREN];
    for (int i = 0; i < CHILDREN; i++)
        spec[i] = (child_spec){i, inbox, cs.q, url, effects, logs[i], out[1], go[0]};

    /* A takes the message (B does not run yet) and holds it in its handler. */
    cs.pid[CHILD_A] = spawn(&spec[CHILD_A]);
    close(go[0]);
    watch w;
    memset(&w, 0, sizeof w);
    for (int64_t until = mono_ms() + HANDLER_BOUND_MS; !w.in_handler; pump(&w, 50)) {
        still_alive(CHILD_A);
        if (mono_ms() > until) fail_msg("A's handler never got the message");
    }
    if (!inbox)
        assert_int_equal(count_effects(effects, id, "A"), 1); /* committed before the wait */

    /* Frozen: no renewals, no heartbeats. B joins. */
    freeze_a(store_file, &w);
    cs.pid[CHILD_B] = spawn(&spec[CHILD_B]);
    close(out[1]);
    acemq_idem *look = open_store(url);
    int confirmed = 0;
    for (int64_t until = mono_ms() + TAKEOVER_BOUND_MS; !confirmed; pump(&w, 50)) {
        still_alive(CHILD_B);
        int rc = acemq_idem_is_confirmed(look, id, strlen(id));
        if (rc < 0) fail_msg("is_confirmed: %s: %s", acemq_err_name(rc), acemq_idem_errmsg(look));
        confirmed = rc == 1 && w.last[CHILD_B].processed >= 1;
        if (!confirmed && mono_ms() > until) {
            uint32_t ready = 0, consumers = 0;
            queue_counts(cs.q, &ready, &consumers);
            fail_msg("B did not take the message over while A was frozen: confirmed %d, B "
                     "processed %llu, queue %u ready and %u consumers (RabbitMQ should have "
                     "dropped A after its missed heartbeats)",
                     rc, (unsigned long long)w.last[CHILD_B].processed, (unsigned)ready,
                     (unsigned)consumers);
        }
    }
    acemq_idem_close(look);
    assert_int_equal(count_effects(effects, id, "B"), 1);
    assert_int_equal(count_effects(effects, id, "A"), inbox ? 0 : 1);

    /* A wakes, finishes its work and confirms: refused as stale. */
    assert_int_equal(kill(cs.pid[CHILD_A], SIGCONT), 0);
    char word = 'g';
    assert_int_equal(write(cs.go_fd, &word, 1), 1);
    for (int64_t until = mono_ms() + STALE_BOUND_MS;
         !(w.handler_done &&
           w.last[CHILD_A].stale + w.last[CHILD_A].processed + w.last[CHILD_A].failed >= 1);
         pump(&w, 50)) {
        still_alive(CHILD_A);
        if (mono_ms() > until) fail_msg("A did not settle its message after SIGCONT");
    }

    /* Both stop; their last counters come through the pipe. */
    for (int i = 0; i < CHILDREN; i++)
        assert_int_equal(kill(cs.pid[i], SIGTERM), 0);
    for (int64_t until = mono_ms() + STOP_BOUND_MS; !w.eof; pump(&w, 100))
        if (mono_ms() > until) fail_msg("the consumers did not stop within a minute of SIGTERM");
    for (int i = 0; i < CHILDREN; i++) {
        for (int64_t until = mono_ms() + STOP_BOUND_MS; !cs.reaped[i]; sleep_ms(20)) {
            if (waitpid(cs.pid[i], &cs.status[i], WNOHANG) == cs.pid[i]) cs.reaped[i] = 1;
            if (!cs.reaped[i] && mono_ms() > until)
                fail_msg("consumer %s has not exited a minute after SIGTERM", child_name[i]);
        }
    }
    for (int i = 0; i < CHILDREN; i++) {
        print_message("consumer %s's log:\n", child_name[i]);
        print_file(logs[i]);
        print_stats(child_name[i], &w.last[i]);
    }
    for (int i = 0; i < CHILDREN; i++) {
        if (!WIFEXITED(cs.status[i]) || WEXITSTATUS(cs.status[i]) != 0)
            fail_msg("consumer %s ended with status 0x%x", child_name[i], (unsigned)cs.status[i]);
        assert_true(w.final[i]);
    }

    const acemq_consumer_stats *a = &w.last[CHILD_A], *b = &w.last[CHILD_B];
    int rows = count_effects(effects, id, NULL);
    if (inbox)
        print_message("inbox: %d effect row(s) for %s; A saw %d inside its transaction, and its "
                      "confirm answered %s\n",
                      rows, id, w.rows_in_tx, acemq_err_name(w.confirm_rc));
    else
        print_message("plain: %d effect row(s) for %s; A saw %d after its wait\n", rows, id,
                      w.rows_in_tx);
    /* B did the work, once. */
    assert_int_equal(b->processed, 1);
    assert_int_equal(b->stale, 0);
    assert_int_equal(b->failed, 0);
    assert_int_equal(count_effects(effects, id, "B"), 1);
    /* A's confirm was refused as stale, and counted. */
    /* Anything delivered to A again (after its reconnect) was a duplicate. */
    assert_int_equal(a->delivered, 1 + a->duplicates);
    assert_int_equal(a->stale, 1);
    assert_int_equal(a->processed, 0);
    assert_int_equal(a->failed, 0);
    if (inbox) {
        /* Its effect was written, then rolled back with the refused confirm. */
        assert_int_equal(w.confirm_rc, ACEMQ_ESTALE);
        assert_int_equal(w.rows_in_tx, 2);
        assert_int_equal(count_effects(effects, id, "A"), 0);
        assert_int_equal(rows, 1);
    } else {
        /* The at-least-once case: A's effect stands beside B's. */
        assert_int_equal(count_effects(effects, id, "A"), 1);
        assert_int_equal(rows, 2);
    }
    look = open_store(url);
    assert_int_equal(acemq_idem_is_confirmed(look, id, strlen(id)), 1);
    acemq_idem_close(look);
    assert_int_equal(ready_once_idle(cs.q), 0);
}

static void sigstop_inbox_rolls_back_the_stale_effect(void **state)
{
    (void)state;
    run_case(1);
}

static void sigstop_without_inbox_counts_the_stale_effect(void **state)
{
    (void)state;
    run_case(0);
}

/* An argument runs only the tests whose names match it (cmocka's filter,
 * `*` a wildcard): test_consumer_sigstop '*inbox_rolls*'. */
int main(int argc, char **argv)
{
    broker_url = getenv("ACEMQ_AMQP_URL"); /* broker_amqp_fixture.h */
    if (!broker_url || !*broker_url) {
        printf("SKIPPED: ACEMQ_AMQP_URL is not set (scripts/services.sh start rabbitmq)\n");
        return 77;
    }
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(sigstop_inbox_rolls_back_the_stale_effect, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(sigstop_without_inbox_counts_the_stale_effect, case_setup,
                                        case_teardown),
    };
    return cmocka_run_group_tests(tests, admin_open, admin_close);
}
