/* outbox_fixture.c — see outbox_fixture.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acemq/postgres.h"
#include "acemq/sqlite.h"
#include "conformance/outbox_fixture.h"

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "outbox fixture: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

int outbox_backend_from_args(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "sqlite") != 0 && strcmp(argv[1], "postgres") != 0)) {
        fprintf(stderr, "usage: %s sqlite|postgres\n", argv[0]);
        exit(2);
    }
    if (strcmp(argv[1], "postgres") != 0) return 0;
    const char *url = getenv("ACEMQ_PG_URL");
    if (!url || !*url) {
        printf("SKIPPED: ACEMQ_PG_URL is not set (scripts/services.sh start postgres; "
               "make test sets it)\n");
        exit(TEST_SKIP);
    }
    return 1;
}

static char sqlite_dir[256];
static int fixture_seq;

static void remove_sqlite_dir(void)
{
    if (!sqlite_dir[0]) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sqlite_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", sqlite_dir);
}

static PGconn *pg_connect(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    if (!c || PQstatus(c) != CONNECTION_OK)
        fail("connecting to %s: %s", conninfo, c ? PQerrorMessage(c) : "out of memory");
    return c;
}

static void pg_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

void outbox_fixture_init(outbox_fixture *f, int pg)
{
    memset(f, 0, sizeof *f);
    f->pg = pg;
    int n = ++fixture_seq;
    if (acemq_manual_clock_new(&f->clock, 1000000000) != 0) fail("manual clock");
    acemq_outbox_options_init(&f->opts);
    f->opts.clock = acemq_manual_clock_get(f->clock);
    f->opts.synchronous = ACEMQ_SYNC_OFF; /* behaviour, not durability, is tested */
    f->add_opts.clock = f->opts.clock;
    if (!pg) {
        if (!sqlite_dir[0]) {
            snprintf(sqlite_dir, sizeof sqlite_dir, "/tmp/acemq-outbox-test-XXXXXX");
            if (!mkdtemp(sqlite_dir)) fail("mkdtemp");
            atexit(remove_sqlite_dir);
        }
        snprintf(f->url, sizeof f->url, "sqlite:%s/outbox-%d.db", sqlite_dir, n);
        if (sqlite3_open(f->url + 7, &f->db) != SQLITE_OK) fail("sqlite3_open %s", f->url);
        if (sqlite3_busy_timeout(f->db, 10000) != SQLITE_OK) fail("busy_timeout");
    } else {
        const char *base = getenv("ACEMQ_PG_URL");
        if (!base) fail("ACEMQ_PG_URL is not set");
        snprintf(f->schema, sizeof f->schema, "t_%ld_%d", (long)getpid(), n);
        PGconn *admin = pg_connect(base);
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SET client_min_messages = warning; DROP SCHEMA IF EXISTS %s CASCADE; "
                 "CREATE SCHEMA %s",
                 f->schema, f->schema);
        pg_exec(admin, sql);
        PQfinish(admin);
        snprintf(f->url, sizeof f->url, "%s%soptions=-csearch_path%%3D%s", base,
                 strchr(base, '?') ? "&" : "?", f->schema);
        f->conn = pg_connect(f->url);
    }
    /* The schema exists from here on, as it would after a relay started. */
    acemq_outbox *h = outbox_fixture_open(f);
    acemq_outbox_close(h);
}

void outbox_fixture_free(outbox_fixture *f)
{
    if (f->pg) {
        PQfinish(f->conn);
        const char *base = getenv("ACEMQ_PG_URL");
        if (!base) fail("ACEMQ_PG_URL is not set");
        PGconn *admin = pg_connect(base);
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SET client_min_messages = warning; DROP SCHEMA IF EXISTS %s CASCADE", f->schema);
        pg_exec(admin, sql);
        PQfinish(admin);
    } else {
        if (sqlite3_close(f->db) != SQLITE_OK) fail("sqlite3_close: statements left open");
    }
    acemq_manual_clock_free(f->clock);
    memset(f, 0, sizeof *f);
}

acemq_outbox *outbox_fixture_open(outbox_fixture *f)
{
    acemq_outbox *h = NULL;
    int rc = acemq_outbox_open(&h, f->url, &f->opts);
    if (rc != 0)
        fail("acemq_outbox_open(%s): %s: %s", f->url, acemq_err_name(rc),
             acemq_outbox_errmsg(NULL));
    return h;
}

void *outbox_fixture_connect(outbox_fixture *f)
{
    if (f->pg) return pg_connect(f->url);
    sqlite3 *db = NULL;
    if (sqlite3_open(f->url + 7, &db) != SQLITE_OK) fail("sqlite3_open");
    if (sqlite3_busy_timeout(db, 10000) != SQLITE_OK) fail("busy_timeout");
    return db;
}

void outbox_fixture_disconnect(outbox_fixture *f, void *conn)
{
    if (f->pg)
        PQfinish(conn);
    else if (sqlite3_close(conn) != SQLITE_OK)
        fail("sqlite3_close: statements left open");
}

void outbox_sql(outbox_fixture *f, void *conn, const char *sql)
{
    if (f->pg) {
        pg_exec(conn ? conn : f->conn, sql);
        return;
    }
    char *msg = NULL;
    if (sqlite3_exec(conn ? conn : f->db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail("%s: %s", sql, msg ? msg : "?");
}

int outbox_add(outbox_fixture *f, void *conn, const acemq_outbox_record *r, char *id_out)
{
    if (f->pg) return acemq_outbox_add_pg(conn ? conn : f->conn, r, &f->add_opts, id_out);
    return acemq_outbox_add_sqlite(conn ? conn : f->db, r, &f->add_opts, id_out);
}

long long outbox_scalar(outbox_fixture *f, const char *sql)
{
    if (f->pg) {
        PGresult *r = PQexec(f->conn, sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
            fail("%s: %s", sql, PQresultErrorMessage(r));
        long long n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        return n;
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(f->db, sql, -1, &st, NULL) != SQLITE_OK)
        fail("%s: %s", sql, sqlite3_errmsg(f->db));
    if (sqlite3_step(st) != SQLITE_ROW) fail("%s: %s", sql, sqlite3_errmsg(f->db));
    long long n = (long long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

long outbox_rows(outbox_fixture *f)
{
    return (long)outbox_scalar(f, "SELECT count(*) FROM acemq_outbox");
}

void outbox_fixture_tagged_url(outbox_fixture *f, const char *tag, char *out, size_t cap)
{
    if (!f->pg) fail("tagged URLs are for PostgreSQL");
    /* f->url always has a query part: the search_path option. */
    int n = snprintf(out, cap, "%s&application_name=%s_%s", f->url, f->schema, tag);
    if (n < 0 || (size_t)n >= cap) fail("tagged URL: no room");
}

long outbox_fixture_cut(outbox_fixture *f, const char *tag)
{
    if (!f->pg) fail("cutting connections is for PostgreSQL");
    /* The ended backends' pids, kept in a table of this session's: a client
     * that reconnects at once comes back under the same tag, so the wait
     * below follows the pids, not the tag. */
    char sql[512];
    snprintf(sql, sizeof sql,
             "CREATE TEMP TABLE IF NOT EXISTS cut_pids(pid int); TRUNCATE cut_pids;"
             " INSERT INTO cut_pids SELECT pid FROM pg_stat_activity"
             " WHERE application_name = '%s_%s'",
             f->schema, tag);
    outbox_sql(f, NULL, sql);
    long cut = (long)outbox_scalar(f, "SELECT count(pg_terminate_backend(pid)) FROM cut_pids");
    /* pg_terminate_backend only signals: wait (bounded) for them to go. */
    for (int i = 0; outbox_scalar(f, "SELECT count(*) FROM pg_stat_activity"
                                     " WHERE pid IN (SELECT pid FROM cut_pids)") > 0;
         i++) {
        if (i == 3000) fail("connections tagged %s still there after 30 s", tag);
        struct timespec ts = {0, 10000000L}; /* 10 ms */
        nanosleep(&ts, NULL);
    }
    return cut;
}
