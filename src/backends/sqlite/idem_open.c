/* idem_open.c — the SQLite idempotency store's SQL and schema, and opening,
 * configuring and closing it: on a file of its own (sqlite:/path.db) or on
 * the caller's connection (acemq_idem_open_sqlite). The test controls
 * (backends/test_control.h) are here too. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "acemq/sqlite.h"
#include "backends/builtin.h"
#include "backends/test_control.h"
#include "idem/idem_backend.h"
#include "backends/sqlite/issue.h"
#include "backends/sqlite/busy.h"
#include "backends/sqlite/checkpoint.h"
#include "backends/sqlite/errors.h"
#include "backends/sqlite/writer_queue.h"
#include "backends/sqlite/idem_store.h"

#define SCHEMA_COMPONENT "idem"
#define SCHEMA_VERSION 1

const char *const acemq__sqlite_idem_sql[ST_COUNT] = {
    [ST_INSERT] = "INSERT INTO acemq_idem(id, state, token, lease_until, expires_at, fingerprint,"
                  " result) VALUES(?1, 1, ?2, ?3, NULL, ?4, NULL) ON CONFLICT(id) DO NOTHING",
    [ST_SELECT] = "SELECT state, token, lease_until, expires_at, fingerprint, result"
                  " FROM acemq_idem WHERE id = ?1",
    /* ?5 = 1: the old record is forgotten, so its fingerprint goes with it. */
    [ST_CLAIM] = "UPDATE acemq_idem SET state = 1, token = ?2, lease_until = ?3, expires_at = NULL,"
                 " fingerprint = CASE WHEN ?5 THEN ?4 ELSE coalesce(?4, fingerprint) END,"
                 " result = NULL WHERE id = ?1 AND token = ?6",
    /* A repeated confirm is fine while the confirmation is remembered; once it
     * is forgotten its token is as dead as the record. */
    [ST_CONFIRM] = "UPDATE acemq_idem SET state = 2, expires_at = ?3, result = ?4,"
                   " lease_until = NULL WHERE id = ?1 AND token = ?2"
                   " AND (state = 1 OR (state = 2 AND expires_at > ?5))",
    [ST_RELEASE] = "UPDATE acemq_idem SET state = 0, lease_until = NULL, expires_at = ?3"
                   " WHERE id = ?1 AND token = ?2 AND state = 1",
    [ST_RENEW] =
        "UPDATE acemq_idem SET lease_until = ?3 WHERE id = ?1 AND token = ?2 AND state = 1",
    [ST_IS_CONFIRMED] = "SELECT 1 FROM acemq_idem WHERE id = ?1 AND state = 2 AND expires_at > ?2",
    [ST_PURGE_DONE] = "DELETE FROM acemq_idem WHERE id IN (SELECT id FROM acemq_idem"
                      " WHERE expires_at <= ?1 AND state <> 1 LIMIT ?2)",
    /* The last key of the next window after ?1: a read, so it takes no write
     * lock however long the table is. */
    [ST_PURGE_WINDOW] = "SELECT max(id) FROM (SELECT id FROM acemq_idem WHERE id > ?1"
                        " ORDER BY id LIMIT ?2)",
    /* A primary-key range scan over at most one window's rows. */
    [ST_PURGE_ABANDONED] = "DELETE FROM acemq_idem WHERE id > ?1 AND id <= ?2 AND state = 1"
                           " AND lease_until <= ?3",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SAVEPOINT] = "SAVEPOINT acemq_idem",
    [ST_RELEASE_SP] = "RELEASE acemq_idem",
    [ST_ROLLBACK_TO] = "ROLLBACK TO acemq_idem",
};

/* One partial index, for the common purge (confirmed and released rows past
 * retention): a claimed row has no expires_at, so a claim does not touch it
 * and a confirm adds one entry. Every index entry a commit changes costs it a
 * whole page in the WAL, which is why abandoned claims, rare, have no index
 * of their own (docs/sqlite-store.md has the figures). */
static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS acemq_idem("
    " id BLOB PRIMARY KEY,"
    " state INTEGER NOT NULL," /* 1 claimed, 2 confirmed, 0 released */
    " token INTEGER NOT NULL,"
    " lease_until INTEGER,"
    " expires_at INTEGER,"
    " fingerprint BLOB,"
    " result BLOB) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS acemq_idem_expires ON acemq_idem(expires_at)"
    " WHERE expires_at IS NOT NULL;";

/* Finds or makes the registry entry for the connection's main file. The key
 * is the file's identity after open, so "a.db", "./a.db" and a symlink to it
 * share one queue. Databases with no file (in-memory, temp) get none; nor does
 * one we cannot stat (a VFS of its own, say): they are private or decided by
 * SQLite's locks alone, which stay correct either way. */
static int file_join(acemq_idem *h)
{
    sq *s = h->self;
    const char *name = sqlite3_db_filename(s->db, "main");
    if (acemq__issue_open(name, &s->issue_fd) != 0)
        return acemq__idem_fail(h, ACEMQ_EIO, "sqlite: cannot open %s-acemq-issue: %s", name,
                                strerror(errno));
    struct stat st;
    if (!name || !*name || stat(name, &st) != 0) return 0;
    s->file = acemq__writer_queue_join(st.st_dev, st.st_ino);
    if (!s->file)
        return acemq__idem_fail(h, ACEMQ_ENOMEM, "sqlite: out of memory for the writer queue");
    return 0;
}

static void file_leave(sq *s)
{
    acemq__writer_queue *f = s->file;
    s->file = NULL;
    acemq__writer_queue_leave(f);
}

/* ---- open and close ------------------------------------------------------- */

static void sq_free_state(sq *s)
{
    if (!s) return;
    for (int i = 0; i < ST_COUNT; i++)
        (void)sqlite3_finalize(s->st[i]); /* NULL is a no-op */
    if (s->owns_db) (void)sqlite3_close_v2(s->db);
    file_leave(s);
    acemq__issue_close(s->issue_fd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void acemq__sqlite_idem_close(acemq_idem *h)
{
    sq_free_state(h->self);
    h->self = NULL;
}

/* NULL when out of memory (ACEMQ_ENOMEM), with the error text on h. */
static sq *sq_new_state(acemq_idem *h)
{
    sq *s = calloc(1, sizeof *s);
    if (!s) {
        (void)acemq__idem_fail(h, ACEMQ_ENOMEM, "sqlite: out of memory");
        return NULL;
    }
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        (void)acemq__idem_fail(h, ACEMQ_ENOMEM, "sqlite: cannot create a mutex");
        return NULL;
    }
    s->issue_fd = -1;
    acemq__sqlite_busy_init(&s->busy, h->opts.busy_timeout_ms);
    return s;
}

static int prepare(acemq_idem *h, int which)
{
    sq *s = h->self;
    int rc = sqlite3_prepare_v3(s->db, acemq__sqlite_idem_sql[which], -1, SQLITE_PREPARE_PERSISTENT,
                                &s->st[which], NULL);
    return rc == SQLITE_OK ? 0 : acemq__sqlite_idem_fail(h, s->db, rc);
}

static int exec(acemq_idem *h, const char *sql)
{
    sq *s = h->self;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : acemq__sqlite_idem_fail(h, s->db, rc);
}

/* Inside the open transaction: refuses a schema from a newer library before
 * touching anything, creates what is missing. */
static int ensure_schema_locked(acemq_idem *h)
{
    sq *s = h->self;
    int rc = exec(h, "CREATE TABLE IF NOT EXISTS acemq_schema_version("
                     "component TEXT PRIMARY KEY, version INTEGER NOT NULL)");
    if (rc != 0) return rc;
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(
        s->db, "SELECT version FROM acemq_schema_version WHERE component = '" SCHEMA_COMPONENT "'",
        -1, &st, NULL);
    if (rc != SQLITE_OK) return acemq__sqlite_idem_fail(h, s->db, rc);
    int64_t version = 0;
    int have = 0;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        have = 1;
        version = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    } else {
        rc = acemq__sqlite_idem_fail(h, s->db, rc);
    }
    (void)sqlite3_finalize(st);
    if (rc != 0) return rc;
    if (have && version > SCHEMA_VERSION)
        return acemq__idem_fail(h, ACEMQ_ESCHEMA,
                                "sqlite: schema version %lld of '" SCHEMA_COMPONENT
                                "' is newer than this library's %d",
                                (long long)version, SCHEMA_VERSION);
    if (have && version < 1)
        return acemq__idem_fail(h, ACEMQ_EBACKEND,
                                "sqlite: schema version %lld of '" SCHEMA_COMPONENT
                                "' is not one this library ever wrote",
                                (long long)version);
    rc = exec(h, schema_sql);
    if (rc == 0 && !have)
        rc =
            exec(h, "INSERT INTO acemq_schema_version(component, version) VALUES('" SCHEMA_COMPONENT
                    "', 1)");
    return rc;
}

/* Everything both open paths share, once the connection is configured. */
static int setup(acemq_idem *h)
{
    static const int control[] = {ST_BEGIN,     ST_COMMIT,     ST_ROLLBACK,
                                  ST_SAVEPOINT, ST_RELEASE_SP, ST_ROLLBACK_TO};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof control / sizeof *control; i++)
        rc = prepare(h, control[i]);
    if (rc != 0) return rc;
    sq *s = h->self;
    int queued = acemq__sqlite_idem_queue_enter(s);
    tx_kind kind;
    rc = acemq__sqlite_idem_tx_begin(h, &kind);
    if (rc == 0) rc = acemq__sqlite_idem_tx_end(h, kind, ensure_schema_locked(h));
    acemq__sqlite_idem_queue_leave(s, queued);
    for (int i = 0; rc == 0 && i < ST_COUNT; i++)
        if (!s->st[i]) rc = prepare(h, i);
    return rc;
}

/* Runs a PRAGMA that answers one text row into buf. Switching to WAL needs an
 * exclusive lock that SQLite does not wait for, so BUSY is retried here with
 * the same back-off as every other lock. */
static int pragma_text(acemq_idem *h, const char *sql, char *buf, size_t cap)
{
    sq *s = h->self;
    for (int attempt = 0;; attempt++) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const unsigned char *t = sqlite3_column_text(st, 0);
            snprintf(buf, cap, "%s", t ? (const char *)t : "");
        } else if (rc == SQLITE_DONE) {
            snprintf(buf, cap, "%s", "");
        }
        int again = (rc & 0xff) == SQLITE_BUSY && acemq__sqlite_busy_handler(&s->busy, attempt);
        int ret = rc == SQLITE_ROW || rc == SQLITE_DONE || again
                      ? 0
                      : acemq__sqlite_idem_fail(h, s->db, rc);
        (void)sqlite3_finalize(st);
        if (!again) return ret;
    }
}

static int configure_own(acemq_idem *h)
{
    sq *s = h->self;
    int rc = sqlite3_busy_handler(s->db, acemq__sqlite_busy_handler, &s->busy);
    if (rc != SQLITE_OK) return acemq__sqlite_idem_fail(h, s->db, rc);
    /* Replaces the auto-checkpoint: see backends/sqlite/checkpoint.c. */
    acemq__sqlite_checkpoint_hook(s->db, &s->wal_frames);
    char mode[32];
    rc = pragma_text(h, "PRAGMA journal_mode=WAL", mode, sizeof mode);
    if (rc != 0) return rc;
    const char *file = sqlite3_db_filename(s->db, "main");
    /* An in-memory database has no WAL; it is private to this handle anyway. */
    if (strcasecmp(mode, "wal") != 0 && file && *file)
        return acemq__idem_fail(h, ACEMQ_EBACKEND,
                                "sqlite: '%s' stayed in journal mode '%s'; WAL is required", file,
                                mode);
    static const char *const sync_sql[] = {"PRAGMA synchronous=OFF", "PRAGMA synchronous=NORMAL",
                                           "PRAGMA synchronous=FULL"};
    acemq__claim_sync_init(&s->claim_sync, h->opts.synchronous);
    return exec(h, sync_sql[h->opts.synchronous]);
}

int acemq__sqlite_idem_parse_url(acemq_idem *h, const acemq__url *url, const char **path)
{
    static const char *const known[] = {"synchronous", "busy_timeout_ms", NULL};
    const char *bad = NULL;
    if (acemq__url_check_params(url, known, &bad) != 0)
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "sqlite: unknown URL parameter '%s' (known: synchronous, "
                                "busy_timeout_ms)",
                                bad ? bad : "");
    const char *sync = acemq__url_param(url, "synchronous");
    if (sync) {
        static const char *const names[] = {"off", "normal", "full"};
        int found = -1;
        for (int i = 0; i < 3; i++)
            if (strcasecmp(sync, names[i]) == 0) found = i;
        if (found < 0)
            return acemq__idem_fail(h, ACEMQ_EURL,
                                    "sqlite: synchronous='%s'; expected off, normal or full", sync);
        h->opts.synchronous = found;
    }
    int64_t timeout = h->opts.busy_timeout_ms;
    if (acemq__url_param_int(url, "busy_timeout_ms", 0, INT_MAX, &timeout) != 0)
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "sqlite: busy_timeout_ms='%s'; expected a whole number of "
                                "milliseconds, 0..%d",
                                acemq__url_param(url, "busy_timeout_ms"), INT_MAX);
    h->opts.busy_timeout_ms = (int)timeout;
    const char *p = url->rest;
    /* sqlite:///abs/path is common enough to accept; a host part is not. */
    if (p[0] == '/' && p[1] == '/') {
        if (p[2] != '/')
            return acemq__idem_fail(h, ACEMQ_EURL,
                                    "sqlite: '%s' names a host; use sqlite:/abs/path.db or "
                                    "sqlite:relative/path.db",
                                    p);
        p += 2;
    }
    if (*p == '\0')
        return acemq__idem_fail(h, ACEMQ_EURL,
                                "sqlite: the URL names no file; use sqlite:/abs/path.db");
    *path = p;
    return 0;
}

int acemq__idem_open_sqlite_url(acemq_idem *h, const acemq__url *url)
{
    const char *path = NULL;
    int rc = acemq__sqlite_idem_parse_url(h, url, &path);
    if (rc != 0) return rc;
    if (h->opts.flags & ACEMQ_IDEM_CONFIRM_IN_CALLER_TX)
        return acemq__idem_fail(h, ACEMQ_EINVAL,
                                "sqlite: ACEMQ_IDEM_CONFIRM_IN_CALLER_TX needs the caller's own "
                                "connection (acemq_idem_open_sqlite); a store opened by URL has "
                                "no caller transaction to join");
    sq *s = sq_new_state(h);
    if (!s) return ACEMQ_ENOMEM;
    sqlite3 *db = NULL;
    int src = sqlite3_open_v2(
        path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        char buf[ACEMQ__SQLITE_WORDS];
        rc = acemq__idem_fail(h, acemq__sqlite_code(src), "sqlite: cannot open '%s': %s", path,
                              acemq__sqlite_words(db, src, buf));
        (void)sqlite3_close_v2(db);
        sq_free_state(s);
        return rc;
    }
    s->db = db;
    s->owns_db = 1;
    h->self = s;
    rc = file_join(h);
    if (rc == 0) rc = configure_own(h);
    if (rc == 0) rc = setup(h);
    if (rc != 0) {
        acemq__sqlite_idem_close(h);
        return rc;
    }
    h->methods = &acemq__sqlite_idem_methods;
    return 0;
}

int acemq_idem_open_sqlite(acemq_idem **out, sqlite3 *db, const acemq_idem_options *o)
{
    if (!out) return acemq__idem_open_fail(ACEMQ_EINVAL, "out is NULL");
    *out = NULL;
    if (!db) return acemq__idem_open_fail(ACEMQ_EINVAL, "db is NULL");
    acemq_idem *h = NULL;
    int rc = acemq__idem_new(&h, o);
    if (rc != 0) return rc;
    sq *s = sq_new_state(h);
    rc = s ? 0 : ACEMQ_ENOMEM;
    if (s) {
        /* The caller's connection keeps its journal mode, synchronous setting
         * and busy handler: they are the caller's choices for all its work. */
        s->db = db;
        s->owns_db = 0;
        h->self = s;
        /* The caller's connection joins the file's writer queue too, for our
         * own calls only: the caller's other writes on it go unqueued (the
         * queue never decides a race, SQLite does), and while the caller
         * holds a transaction our calls write unqueued as well. */
        rc = file_join(h);
        if (rc == 0) rc = setup(h);
        if (rc != 0) acemq__sqlite_idem_close(h);
    }
    if (rc != 0) {
        acemq__idem_free(h);
        return rc;
    }
    h->methods = &acemq__sqlite_idem_methods;
    *out = h;
    return 0;
}

const acemq__idem_backend acemq__sqlite_idem_backend = {{"sqlite", "sqlite:"},
                                                        acemq__idem_open_sqlite_url};

/* ---- test hooks (backends/test_control.h) ---------------------------------- */

const void *acemq__sqlite_idem_queue(const acemq_idem *h)
{
    const sq *s = h->self;
    return s ? s->file : NULL;
}

size_t acemq__sqlite_idem_queue_files(void)
{
    return acemq__writer_queue_files();
}

int acemq__sqlite_idem_queue_waiters(const acemq_idem *h)
{
    const sq *s = h->self;
    if (!s || !s->file) return 0;
    return acemq__writer_queue_waiters(s->file);
}

int acemq__sqlite_idem_queue_hold(acemq_idem *h, int hold)
{
    sq *s = h->self;
    if (!s || !s->file) return -1;
    if (hold) {
        struct timespec start;
        int waited = 0;
        while (!acemq__writer_queue_acquire(s->file, INT_MAX, &start, &waited)) {
        }
    } else {
        acemq__writer_queue_release(s->file);
    }
    return 0;
}
