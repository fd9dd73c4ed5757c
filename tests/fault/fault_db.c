/* fault_db.c — the fault suite's database shim over SQLite and libpq
 * (fault_db.h). A PostgreSQL connection that a restarted server cut is
 * told apart from a refused statement, because the tools redo the one and
 * fail on the other. */
#define _POSIX_C_SOURCE 200809L
#include "fault_db.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <acemq/postgres.h>
#include <acemq/sqlite.h>

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    (void)nanosleep(&t, NULL);
}

static void say(fault_db *d, const char *what, const char *why)
{
    size_t n = strlen(why);
    while (n > 0 && (why[n - 1] == '\n' || why[n - 1] == ' '))
        n--;
    (void)snprintf(d->err, sizeof d->err, "%s: %.*s", what, (int)n, why);
}

/* Two processes opening a new file at once: the switch to WAL can answer
 * SQLITE_BUSY without going through the busy handler, so it is tried again
 * for a few seconds. */
static int lite_wal(fault_db *d)
{
    for (int i = 0; i < 250; i++) {
        int rc = sqlite3_exec(d->lite, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
        if (rc == SQLITE_OK) return 0;
        if (rc != SQLITE_BUSY) break;
        sleep_ms(20);
    }
    say(d, "PRAGMA journal_mode=WAL", sqlite3_errmsg(d->lite));
    return -1;
}

int fault_db_open(fault_db *d, const char *url)
{
    memset(d, 0, sizeof *d);
    if (strncmp(url, "sqlite:", 7) == 0) {
        if (sqlite3_open(url + 7, &d->lite) != SQLITE_OK) {
            say(d, url, d->lite ? sqlite3_errmsg(d->lite) : "out of memory");
            return -1;
        }
        if (acemq_sqlite_busy_wait(d->lite, 30000) != 0) {
            say(d, "acemq_sqlite_busy_wait", sqlite3_errmsg(d->lite));
            return -1;
        }
        return lite_wal(d);
    }
    if (strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0) {
        d->pg = PQconnectdb(url);
        if (!d->pg || PQstatus(d->pg) != CONNECTION_OK) {
            say(d, "connecting", d->pg ? PQerrorMessage(d->pg) : "out of memory");
            return -1;
        }
        return 0;
    }
    say(d, url, "not a sqlite: or postgres:// URL");
    return -1;
}

void fault_db_close(fault_db *d)
{
    if (d->lite) (void)sqlite3_close(d->lite);
    if (d->pg) PQfinish(d->pg);
    d->lite = NULL;
    d->pg = NULL;
}

const char *fault_db_errmsg(const fault_db *d)
{
    return d->err;
}

static int pg_outcome(fault_db *d, PGresult *r, const char *sql)
{
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return FAULT_OK;
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    say(d, sql, r ? PQresultErrorMessage(r) : PQerrorMessage(d->pg));
    if (PQstatus(d->pg) == CONNECTION_BAD) return FAULT_LOST;
    /* 08: connection exceptions; 57P0x: the server shutting down or
     * restarted under the session. */
    if (state && (strncmp(state, "08", 2) == 0 || strncmp(state, "57P0", 4) == 0))
        return FAULT_LOST;
    if (state && strcmp(state, "23505") == 0) return FAULT_DUP;
    return FAULT_ERR;
}

int fault_db_exec(fault_db *d, const char *sql)
{
    if (d->lite) {
        char *msg = NULL;
        int rc = sqlite3_exec(d->lite, sql, NULL, NULL, &msg);
        if (rc == SQLITE_OK) return FAULT_OK;
        say(d, sql, msg ? msg : sqlite3_errmsg(d->lite));
        sqlite3_free(msg);
        int ext = sqlite3_extended_errcode(d->lite);
        return ext == SQLITE_CONSTRAINT_PRIMARYKEY || ext == SQLITE_CONSTRAINT_UNIQUE ? FAULT_DUP
                                                                                      : FAULT_ERR;
    }
    PGresult *r = PQexec(d->pg, sql);
    int rc = pg_outcome(d, r, sql);
    PQclear(r);
    return rc;
}

int fault_db_begin(fault_db *d)
{
    return fault_db_exec(d, d->lite ? "BEGIN IMMEDIATE" : "BEGIN");
}

void fault_db_rollback(fault_db *d)
{
    if (d->lite && sqlite3_get_autocommit(d->lite)) return;
    (void)fault_db_exec(d, "ROLLBACK");
}

int fault_db_reconnect(fault_db *d, int timeout_ms)
{
    if (d->lite) return 0;
    for (int waited = 0;; waited += 100) {
        if (PQstatus(d->pg) == CONNECTION_OK) return 0;
        if (waited >= timeout_ms) break;
        PQreset(d->pg);
        if (PQstatus(d->pg) == CONNECTION_OK) return 0;
        sleep_ms(100);
    }
    say(d, "reconnecting", PQerrorMessage(d->pg));
    return -1;
}

int fault_db_lost(const fault_db *d)
{
    return d->pg && PQstatus(d->pg) == CONNECTION_BAD;
}

int fault_db_outbox_add(fault_db *d, const acemq_outbox_record *r)
{
    int rc = d->lite ? acemq_outbox_add_sqlite(d->lite, r, NULL, NULL)
                     : acemq_outbox_add_pg(d->pg, r, NULL, NULL);
    if (rc != 0) say(d, "acemq_outbox_add", acemq_outbox_errmsg(NULL));
    return rc;
}

int fault_db_idem_open(fault_db *d, acemq_idem **out, unsigned flags)
{
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.flags = flags;
    int rc = d->lite ? acemq_idem_open_sqlite(out, d->lite, &o)
                     : acemq_idem_open_pg(out, d->pg, &o, NULL);
    if (rc != 0) say(d, "the inbox store", acemq_idem_errmsg(NULL));
    return rc;
}
