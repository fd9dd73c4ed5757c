/* test_pg_idem.c — the PostgreSQL idempotency store where it differs from
 * the others, against the real server of scripts/services.sh:
 *
 *   test_pg_idem PATH-TO-services.sh
 *
 * The inbox (confirm inside the caller's transaction, with its effect, and
 * a child killed with SIGKILL at random points around its COMMIT), leases
 * on the database's clock, four processes on one store, a server restarted
 * under an open store, the limits its own connections keep on a cut
 * network, and what a bad URL or a server that is down says.
 * Needs ACEMQ_PG_URL; exits 77 (skipped) without it. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "acemq/acemq.h"
#include "acemq/postgres.h"
#include "backends/test_control.h"
#include "conformance/backends.h"
#include "conformance/pg_limits.h"

static const char *pg_url;
static const char *services;

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static PGconn *connect_pg(void)
{
    PGconn *c = PQconnectdb(pg_url);
    if (PQstatus(c) != CONNECTION_OK) fail_msg("connect: %s", PQerrorMessage(c));
    return c;
}

static void exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

static long count_rows(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return n;
}

/* A fresh table name, as the conformance suites make them. */
static void fresh_table(char *table, size_t cap)
{
    char url[512];
    assert_int_equal(test_backend_fresh_url("postgres", url, sizeof url), 0);
    assert_int_equal(test_backend_url_param(url, "table", table, cap), 0);
}

/* A store on a fresh table, opened by URL; the URL in url. */
static acemq_idem *open_fresh(char *url, size_t cap)
{
    assert_int_equal(test_backend_fresh_url("postgres", url, cap), 0);
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open(&h, url, NULL), 0);
    return h;
}

static acemq_idem *open_on(PGconn *c, const char *table, unsigned flags)
{
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.flags = flags;
    acemq_idem *h = NULL;
    if (acemq_idem_open_pg(&h, c, &o, table) != 0)
        fail_msg("acemq_idem_open_pg: %s", acemq_idem_errmsg(NULL));
    return h;
}

/* A fresh store table name in table, and a connection on which the
 * caller's effect table "<table>_effect" (one row per applied id) exists. */
static PGconn *with_effect_table(char *table, size_t cap)
{
    char sql[256];
    fresh_table(table, cap);
    PGconn *c = connect_pg();
    snprintf(sql, sizeof sql, "CREATE TABLE %s_effect (id text PRIMARY KEY)", table);
    exec_ok(c, sql);
    return c;
}

/* The inbox: the effect and the confirmation commit or roll back together;
 * with no transaction open confirm writes nothing. */
static void inbox_commits_and_rolls_back_with_the_effect(void **state)
{
    (void)state;
    char table[80], sql[256];
    PGconn *c = with_effect_table(table, sizeof table);
    acemq_idem *h = open_on(c, table, ACEMQ_IDEM_CONFIRM_IN_CALLER_TX);
    acemq_claim cl;

    assert_int_equal(acemq_idem_try_claim(h, "a", 1, NULL, &cl), ACEMQ_CLAIMED);
    exec_ok(c, "BEGIN");
    snprintf(sql, sizeof sql, "INSERT INTO %s_effect VALUES ('a')", table);
    exec_ok(c, sql);
    assert_int_equal(acemq_idem_confirm(h, "a", 1, cl.token), 0);
    exec_ok(c, "ROLLBACK");
    assert_int_equal(acemq_idem_is_confirmed(h, "a", 1), 0);

    exec_ok(c, "BEGIN");
    exec_ok(c, sql);
    assert_int_equal(acemq_idem_confirm(h, "a", 1, cl.token), 0);
    exec_ok(c, "COMMIT");
    assert_int_equal(acemq_idem_is_confirmed(h, "a", 1), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s_effect", table);
    assert_int_equal(count_rows(c, sql), 1);

    /* No transaction: ENOTX, and the claim stays unconfirmed. */
    assert_int_equal(acemq_idem_try_claim(h, "b", 1, NULL, &cl), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm(h, "b", 1, cl.token), ACEMQ_ENOTX);
    assert_non_null(strstr(acemq_idem_errmsg(h), "no transaction"));
    assert_int_equal(acemq_idem_is_confirmed(h, "b", 1), 0);
    /* A transaction that already failed: ENOTX too. */
    exec_ok(c, "BEGIN");
    PQclear(PQexec(c, "SELECT 1/0"));
    assert_int_equal(acemq_idem_confirm(h, "b", 1, cl.token), ACEMQ_ENOTX);
    exec_ok(c, "ROLLBACK");
    assert_int_equal(acemq_idem_is_confirmed(h, "b", 1), 0);
    acemq_idem_close(h);
    PQfinish(c);
}

/* The caller resets its connection (a new session: no prepared statements)
 * or runs DEALLOCATE ALL: the store prepares its statements again. Outside
 * a transaction the call itself succeeds; inside one the failure aborted
 * it, so the call fails, and the first call after the caller's ROLLBACK
 * succeeds. */
static void the_callers_session_loses_the_statements(void **state)
{
    (void)state;
    char table[80], sql[256];
    PGconn *c = with_effect_table(table, sizeof table);
    acemq_idem *h = open_on(c, table, ACEMQ_IDEM_CONFIRM_IN_CALLER_TX);
    acemq_claim cl;
    assert_int_equal(acemq_idem_try_claim(h, "a", 1, NULL, &cl), ACEMQ_CLAIMED);

    PQreset(c);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    assert_int_equal(acemq_idem_try_claim(h, "b", 1, NULL, &cl), ACEMQ_CLAIMED);
    exec_ok(c, "DEALLOCATE ALL");
    assert_int_equal(acemq_idem_try_claim(h, "a", 1, NULL, &cl), ACEMQ_IN_PROGRESS);

    /* Inside the caller's transaction. */
    assert_int_equal(acemq_idem_try_claim(h, "c", 1, NULL, &cl), ACEMQ_CLAIMED);
    exec_ok(c, "BEGIN");
    snprintf(sql, sizeof sql, "INSERT INTO %s_effect VALUES ('c')", table);
    exec_ok(c, sql);
    exec_ok(c, "DEALLOCATE ALL");
    int rc = acemq_idem_confirm(h, "c", 1, cl.token);
    assert_true(rc < 0 && rc != ACEMQ_ESTALE);
    exec_ok(c, "ROLLBACK");
    exec_ok(c, "BEGIN");
    exec_ok(c, sql);
    assert_int_equal(acemq_idem_confirm(h, "c", 1, cl.token), 0);
    exec_ok(c, "COMMIT");
    assert_int_equal(acemq_idem_is_confirmed(h, "c", 1), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s_effect", table);
    assert_int_equal(count_rows(c, sql), 1);
    acemq_idem_close(h);
    PQfinish(c);
}

/* Tells the parent how far the child got, one byte at a time ('r' ready,
 * 'c' a commit), without ever waiting: a full pipe drops the byte. */
static void tell(int fd, char what)
{
    (void)!write(fd, &what, 1);
}

/* A child applies ids one at a time: claim, then BEGIN, its effect row and
 * the confirm, COMMIT. Killed with SIGKILL at random moments, it leaves
 * every id with its effect exactly when it is confirmed. It says on fd
 * (non-blocking) when it is ready and after each commit. */
static void child_applies(const char *table, int fd)
{
    PGconn *c = PQconnectdb(pg_url);
    if (PQstatus(c) != CONNECTION_OK) _exit(2);
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    o.lease_ms = 1; /* a killed holder's claim is taken over at once */
    acemq_idem *h = NULL;
    if (acemq_idem_open_pg(&h, c, &o, table) != 0) _exit(3);
    tell(fd, 'r');
    char sql[256];
    for (int i = 0;; i = (i + 1) % 40) {
        char id[16];
        int len = snprintf(id, sizeof id, "id-%d", i);
        acemq_claim cl;
        if (acemq_idem_try_claim(h, id, (size_t)len, NULL, &cl) != ACEMQ_CLAIMED) continue;
        PQclear(PQexec(c, "BEGIN"));
        snprintf(sql, sizeof sql, "INSERT INTO %s_effect VALUES ('%s')", table, id);
        PGresult *r = PQexec(c, sql);
        int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (ok && acemq_idem_confirm(h, id, (size_t)len, cl.token) == 0) {
            PQclear(PQexec(c, "COMMIT"));
            tell(fd, 'c');
        } else
            PQclear(PQexec(c, "ROLLBACK"));
    }
}

static void inbox_survives_kill_9_around_commit(void **state)
{
    (void)state;
    char table[80], sql[512];
    PGconn *c = with_effect_table(table, sizeof table);
    acemq_idem *h = open_on(c, table, 0); /* makes the schema before the children race */
    srand(42);
    for (int round = 0; round < 50; round++) {
        int pipefd[2];
        assert_int_equal(pipe(pipefd), 0);
        assert_int_equal(fcntl(pipefd[1], F_SETFL, O_NONBLOCK), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(pipefd[0]);
            child_applies(table, pipefd[1]);
        }
        close(pipefd[1]);
        /* The kill comes at a random moment after the child is ready, so
         * that it lands in its work however slow its start was; in the
         * first round, after its first commit, so that effects exist. */
        char got = 0;
        while (got != (round == 0 ? 'c' : 'r'))
            if (read(pipefd[0], &got, 1) != 1) fail_msg("the child died before it was killed");
        pause_ms(rand() % 40);
        assert_int_equal(kill(pid, SIGKILL), 0);
        close(pipefd[0]);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
    }
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s_effect", table);
    long effects = count_rows(c, sql);
    assert_true(effects > 0);
    /* Every effect confirmed, every confirmation with its effect. An id
     * the last child claimed and was killed before committing is held
     * (state 1) with no effect, as it should be: only confirmations count. */
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM %s_effect e FULL JOIN (SELECT id FROM %s WHERE state = 2) i"
             " ON convert_to(e.id, 'UTF8') = i.id WHERE e.id IS NULL OR i.id IS NULL",
             table, table);
    assert_int_equal(count_rows(c, sql), 0);
    for (int i = 0; i < 40; i++) {
        char id[16];
        int len = snprintf(id, sizeof id, "id-%d", i);
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s_effect WHERE id = '%s'", table, id);
        assert_int_equal(count_rows(c, sql), acemq_idem_is_confirmed(h, id, (size_t)len));
    }
    acemq_idem_close(h);
    PQfinish(c);
}

/* A lease runs out on the database's clock while its holder sleeps: another
 * handle takes the id over and the sleeper's confirm is refused. */
static void lease_runs_out_on_the_database_clock(void **state)
{
    (void)state;
    char url[512];
    assert_int_equal(test_backend_fresh_url("postgres", url, sizeof url), 0);
    acemq_idem *a = NULL, *b = NULL;
    assert_int_equal(acemq_idem_open(&a, url, NULL), 0);
    assert_int_equal(acemq_idem_open(&b, url, NULL), 0);
    acemq_claim_opts short_lease = {0};
    short_lease.lease_ms = 200;
    acemq_claim ca, cb;
    assert_int_equal(acemq_idem_try_claim(a, "slow", 4, &short_lease, &ca), ACEMQ_CLAIMED);
    int rc = ACEMQ_IN_PROGRESS;
    for (int tries = 0; tries < 600 && rc == ACEMQ_IN_PROGRESS; tries++) {
        rc = acemq_idem_try_claim(b, "slow", 4, NULL, &cb);
        if (rc == ACEMQ_IN_PROGRESS) pause_ms(50);
    }
    assert_int_equal(rc, ACEMQ_CLAIMED);
    assert_int_equal(cb.takeover, 1);
    assert_true(cb.token != ca.token);
    assert_int_equal(acemq_idem_confirm(a, "slow", 4, ca.token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(b, "slow", 4, cb.token), 0);
    acemq_idem_close(a);
    acemq_idem_close(b);
}

/* Four processes claim the same 2,000 ids, each through its own store:
 * exactly one CLAIMED per id. */
static void four_processes_one_claim_each(void **state)
{
    (void)state;
    enum { PROCS = 4, IDS = 2000 };
    char url[512];
    acemq_idem *h = open_fresh(url, sizeof url); /* the schema, once */
    int fds[PROCS];
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        int pipefd[2];
        assert_int_equal(pipe(pipefd), 0);
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            close(pipefd[0]);
            acemq_idem *mine = NULL;
            if (acemq_idem_open(&mine, url, NULL) != 0) _exit(2);
            unsigned char won[IDS];
            for (int n = 0; n < IDS; n++) {
                static const int stride[PROCS] = {1, 3, 7, 9}; /* prime to IDS */
                int i = (n * stride[p] + p * 613) % IDS;
                char id[16];
                int len = snprintf(id, sizeof id, "p-%d", i);
                acemq_claim c;
                int rc = acemq_idem_try_claim(mine, id, (size_t)len, NULL, &c);
                if (rc < 0) _exit(3);
                won[i] = rc == ACEMQ_CLAIMED;
                if (won[i] && acemq_idem_confirm(mine, id, (size_t)len, c.token) != 0) _exit(4);
            }
            _exit(write(pipefd[1], won, sizeof won) == (ssize_t)sizeof won ? 0 : 5);
        }
        close(pipefd[1]);
        fds[p] = pipefd[0];
    }
    int claims[IDS] = {0};
    for (int p = 0; p < PROCS; p++) {
        unsigned char won[IDS];
        size_t got = 0;
        while (got < sizeof won) {
            ssize_t n = read(fds[p], won + got, sizeof won - got);
            assert_true(n > 0);
            got += (size_t)n;
        }
        close(fds[p]);
        int status;
        assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        for (int i = 0; i < IDS; i++)
            claims[i] += won[i];
    }
    for (int i = 0; i < IDS; i++)
        assert_int_equal(claims[i], 1);
    acemq_idem_close(h);
}

static void run_services(const char *what)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' %s postgres >/dev/null", services, what);
    if (system(cmd) != 0) fail_msg("%s failed", cmd);
}

/* The server restarted under an open store: the next calls reconnect and
 * carry on, and what was claimed before is still there. */
static void a_restarted_server_is_reconnected(void **state)
{
    (void)state;
    char url[512];
    acemq_idem *h = open_fresh(url, sizeof url);
    acemq_claim c, again;
    assert_int_equal(acemq_idem_try_claim(h, "before", 6, NULL, &c), ACEMQ_CLAIMED);
    run_services("restart");
    assert_int_equal(acemq_idem_confirm(h, "before", 6, c.token), 0);
    assert_int_equal(acemq_idem_try_claim(h, "before", 6, NULL, &again), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(acemq_idem_try_claim(h, "after", 5, NULL, &again), ACEMQ_CLAIMED);
    acemq_idem_close(h);
}

/* A connection the store makes itself keeps connect.c's limits, the one it
 * makes again after losing it too, and a limit the URL sets wins. The
 * server ends the store's session (as a failover or a cut would); the next
 * call connects again and goes through. */
static void its_own_connections_give_up_on_a_cut_network(void **state)
{
    (void)state;
    char url[600];
    acemq_idem *h = open_fresh(url, sizeof url);
    assert_pg_limits(acemq__pg_idem_conn(h), &pg_default_limits);
    PGconn *admin = connect_pg();
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d)",
             PQbackendPID(acemq__pg_idem_conn(h)));
    exec_ok(admin, sql);
    PQfinish(admin);
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(h, "after-cut", 9, NULL, &c), ACEMQ_CLAIMED);
    assert_pg_limits(acemq__pg_idem_conn(h), &pg_default_limits);
    acemq_idem_close(h);

    size_t n = strlen(url);
    snprintf(url + n, sizeof url - n,
             "&keepalives_idle=7&keepalives_interval=2&keepalives_count=4&tcp_user_timeout=5000"
             "&connect_timeout=3");
    assert_int_equal(acemq_idem_open(&h, url, NULL), 0);
    const pg_limits own = {7, 2, 4, 5000, "3"};
    assert_pg_limits(acemq__pg_idem_conn(h), &own);
    acemq_idem_close(h);
}

/* A batch travels as arrays of hex text: ids with NUL, quotes, backslashes,
 * braces and commas come back whole, each claimed once, a repeat answered
 * from its first. */
static void a_batch_of_awkward_binary_ids(void **state)
{
    (void)state;
    char url[512];
    acemq_idem *h = open_fresh(url, sizeof url);
    static const char a[] = {'a', 0, 'b'}, b[] = {'"', '\\', '{', '}', ',', ' '},
                      c[] = {(char)0xff, (char)0x80, '\'', 'N', 'U', 'L', 'L'};
    acemq_idem_key keys[4] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}, {a, sizeof a}};
    acemq_claim out[4];
    int st[4];
    assert_int_equal(acemq_idem_try_claim_many(h, 4, keys, NULL, out, st), 3);
    assert_int_equal(st[0], ACEMQ_CLAIMED);
    assert_int_equal(st[1], ACEMQ_CLAIMED);
    assert_int_equal(st[2], ACEMQ_CLAIMED);
    assert_int_equal(st[3], ACEMQ_IN_PROGRESS);
    for (int i = 0; i < 3; i++)
        assert_int_equal(acemq_idem_confirm(h, keys[i].id, keys[i].id_len, out[i].token), 0);
    acemq_claim one;
    assert_int_equal(acemq_idem_try_claim(h, c, sizeof c, NULL, &one), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(acemq_idem_try_claim(h, "NULL", 4, NULL, &one), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_try_claim_many(h, 4, keys, NULL, out, st), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(st[i], ACEMQ_ALREADY_CONFIRMED);
    acemq_idem_close(h);
}

/* Bad URLs are the URL's fault, and a server that is down an I/O error, both
 * with their reason. */
static void bad_urls_and_a_server_that_is_down(void **state)
{
    (void)state;
    char url[600];
    acemq_idem *h = NULL;
    snprintf(url, sizeof url, "%s%stable=bad-name", pg_url, strchr(pg_url, '?') ? "&" : "?");
    assert_int_equal(acemq_idem_open(&h, url, NULL), ACEMQ_EURL);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "bad-name"));
    snprintf(url, sizeof url, "%s%snot_a_libpq_option=1", pg_url, strchr(pg_url, '?') ? "&" : "?");
    assert_int_equal(acemq_idem_open(&h, url, NULL), ACEMQ_EURL);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "not_a_libpq_option"));
    assert_int_equal(acemq_idem_open(&h, "postgres://acemq@127.0.0.1:1/acemq", NULL), ACEMQ_EIO);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "connecting"));
    snprintf(url, sizeof url, "%s", pg_url);
    char *slash = strrchr(url, '/');
    assert_non_null(slash);
    snprintf(slash, sizeof url - (size_t)(slash - url), "/no_such_database");
    assert_int_equal(acemq_idem_open(&h, url, NULL), ACEMQ_EIO);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "no_such_database"));
    assert_null(h);
    /* A caller's connection inside a transaction cannot take the schema. */
    PGconn *c = connect_pg();
    exec_ok(c, "BEGIN");
    assert_int_equal(acemq_idem_open_pg(&h, c, NULL, NULL), ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "no transaction open"));
    exec_ok(c, "ROLLBACK");
    assert_int_equal(acemq_idem_open_pg(&h, c, NULL, "no spaces"), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_open_pg(&h, NULL, NULL, NULL), ACEMQ_EINVAL);
    PQfinish(c);
}

/* Every component records its schema version; a database whose version is
 * newer than this library's is refused at open, idempotency store and
 * outbox alike, and nothing is written. A database of its own, so that the
 * other tests' stores, opening meanwhile, never see the newer version. */
static void a_newer_schema_is_refused(void **state)
{
    (void)state;
    char db[64], url[600];
    snprintf(db, sizeof db, "acemq_schema_%ld", (long)getpid());
    PGconn *admin = connect_pg();
    char sql[160];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", db);
    exec_ok(admin, sql);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", db);
    exec_ok(admin, sql);
    snprintf(url, sizeof url, "%s", pg_url);
    char *slash = strrchr(url, '/');
    assert_non_null(slash);
    snprintf(slash, sizeof url - (size_t)(slash - url), "/%s", db);

    acemq_idem *h = NULL;
    acemq_outbox *o = NULL;
    assert_int_equal(acemq_idem_open(&h, url, NULL), 0);
    acemq_idem_close(h);
    assert_int_equal(acemq_outbox_open(&o, url, NULL), 0);
    acemq_outbox_close(o);
    PGconn *c = PQconnectdb(url);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    assert_int_equal(count_rows(c, "SELECT count(*) FROM acemq_schema_version WHERE version = 1"),
                     2);
    exec_ok(c, "UPDATE acemq_schema_version SET version = 2");
    h = NULL;
    o = NULL;
    assert_int_equal(acemq_idem_open(&h, url, NULL), ACEMQ_ESCHEMA);
    assert_non_null(strstr(acemq_idem_errmsg(NULL), "schema version 2 is newer"));
    assert_null(h);
    assert_int_equal(acemq_outbox_open(&o, url, NULL), ACEMQ_ESCHEMA);
    assert_non_null(strstr(acemq_outbox_errmsg(NULL), "schema version 2 is newer"));
    assert_null(o);
    assert_int_equal(count_rows(c, "SELECT count(*) FROM acemq_schema_version WHERE version = 2"),
                     2);
    PQfinish(c);
    snprintf(sql, sizeof sql, "DROP DATABASE %s", db);
    exec_ok(admin, sql);
    PQfinish(admin);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-services.sh\n", argv[0]);
        return 2;
    }
    services = argv[1];
    pg_url = getenv("ACEMQ_PG_URL");
    if (!pg_url || !*pg_url) {
        printf("SKIPPED: ACEMQ_PG_URL is not set (scripts/services.sh start postgres)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(inbox_commits_and_rolls_back_with_the_effect),
        cmocka_unit_test(the_callers_session_loses_the_statements),
        cmocka_unit_test(inbox_survives_kill_9_around_commit),
        cmocka_unit_test(lease_runs_out_on_the_database_clock),
        cmocka_unit_test(four_processes_one_claim_each),
        cmocka_unit_test(a_batch_of_awkward_binary_ids),
        cmocka_unit_test(bad_urls_and_a_server_that_is_down),
        cmocka_unit_test(a_newer_schema_is_refused),
        cmocka_unit_test(its_own_connections_give_up_on_a_cut_network),
        cmocka_unit_test(a_restarted_server_is_reconnected),
    };
    return cmocka_run_group_tests_name("postgres idem", tests, NULL, NULL);
}
