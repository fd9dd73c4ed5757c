/* outbox.c — the outbox on SQLite: the add function that writes inside
 * the caller's transaction, and the draining side a relay opens by URL.
 *
 * Claims are one UPDATE ... RETURNING statement that commits on its own: a
 * claim is atomic, holds no lock once it returns, and SQLite's single writer
 * makes concurrent claimers take turns. A claim moves `token` on and sets
 * `lease_until`; marks match on the token and on a lease being set, so a mark
 * after a takeover, a release or an earlier mark changes nothing
 * (ACEMQ_ESTALE).
 *
 * Times are milliseconds since the Unix epoch from the handle's clock. The
 * schema, identical in meaning to the PostgreSQL one, is in docs/schema.md.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acemq/sqlite.h"
#include "backends/builtin.h"
#include "backends/sqlite/busy.h"
#include "backends/sqlite/claim_sync.h"
#include "backends/sqlite/errors.h"
#include "backends/test_control.h"
#include "core/url.h"
#include "os/file_watch.h"
#include "os/mono_time.h"
#include "outbox/outbox_backend.h"

#define SCHEMA_COMPONENT "outbox"
#define SCHEMA_VERSION 1

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS acemq_outbox("
    " seq INTEGER PRIMARY KEY,"
    " id TEXT NOT NULL UNIQUE,"
    " destination TEXT NOT NULL,"
    " routing_key TEXT NOT NULL DEFAULT '',"
    " ordering_key TEXT,"
    " headers TEXT,"
    " content_type TEXT,"
    " body BLOB NOT NULL DEFAULT x'',"
    " created_at INTEGER NOT NULL"
    "  DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),"
    " state INTEGER NOT NULL DEFAULT 0,"
    " attempts INTEGER NOT NULL DEFAULT 0,"
    " token INTEGER NOT NULL DEFAULT 0,"
    " lease_until INTEGER,"
    " next_attempt_at INTEGER NOT NULL DEFAULT 0,"
    " last_error TEXT,"
    " published_at INTEGER);"
    /* What claims walk, oldest first: only records still to publish. */
    "CREATE INDEX IF NOT EXISTS acemq_outbox_due ON acemq_outbox(seq) WHERE state = 0;"
    /* The ordering-key rule's probe: an earlier record of the same key that
     * is not yet published. */
    "CREATE INDEX IF NOT EXISTS acemq_outbox_key ON acemq_outbox(ordering_key, seq)"
    " WHERE state <> 1 AND ordering_key IS NOT NULL;"
    "CREATE INDEX IF NOT EXISTS acemq_outbox_dead ON acemq_outbox(seq) WHERE state = 2;"
    "CREATE INDEX IF NOT EXISTS acemq_outbox_published ON acemq_outbox(published_at)"
    " WHERE state = 1;";

#define COLUMNS                                                                                    \
    "seq, id, destination, routing_key, ordering_key, headers, content_type, body, created_at, "   \
    "attempts, token, last_error"

/* ?1 now, ?2 lease_until, ?3 batch size. */
static const char claim_sql[] =
    "UPDATE acemq_outbox SET token = token + 1, lease_until = ?2 WHERE seq IN ("
    " SELECT o.seq FROM acemq_outbox o"
    " WHERE o.state = 0 AND o.next_attempt_at <= ?1"
    "  AND (o.lease_until IS NULL OR o.lease_until <= ?1)"
    "  AND (o.ordering_key IS NULL OR NOT EXISTS ("
    "   SELECT 1 FROM acemq_outbox p"
    "   WHERE p.ordering_key = o.ordering_key AND p.state <> 1 AND p.seq < o.seq))"
    " ORDER BY o.seq LIMIT ?3)"
    " RETURNING " COLUMNS;

/* The relay's claim (claim_runs): a keyed record is due when its key's
 * oldest unpublished record is due and unleased, so a key's pending records
 * are claimed together, oldest first, and the relay publishes them one at a
 * time. A key's records never lease out of order: claims take whole
 * prefixes of a key, and a key whose oldest record is leased, backing off or
 * dead is passed over. ?1 now, ?2 lease_until, ?3 batch size. */
static const char claim_runs_sql[] =
    "UPDATE acemq_outbox SET token = token + 1, lease_until = ?2 WHERE seq IN ("
    " SELECT o.seq FROM acemq_outbox o"
    " WHERE o.state = 0 AND o.next_attempt_at <= ?1"
    "  AND (o.lease_until IS NULL OR o.lease_until <= ?1)"
    "  AND (o.ordering_key IS NULL OR ("
    "   SELECT p.state = 0 AND p.next_attempt_at <= ?1"
    "    AND (p.lease_until IS NULL OR p.lease_until <= ?1)"
    "   FROM acemq_outbox p WHERE p.ordering_key = o.ordering_key AND p.state <> 1"
    "   ORDER BY p.seq LIMIT 1))"
    " ORDER BY o.seq LIMIT ?3)"
    " RETURNING " COLUMNS;

enum {
    ST_CLAIM,
    ST_CLAIM_RUNS,
    ST_PUBLISH,
    ST_PUBLISH_DELETE,
    ST_EXISTS,
    ST_FAIL,
    ST_RELEASE,
    ST_PENDING,
    ST_DEAD_COUNT,
    ST_LIST_DEAD,
    ST_RETRY,
    ST_PURGE,
    ST_DATA_VERSION,
    ST_BEGIN,
    ST_BEGIN_READ,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_COUNT
};

static const char *const statement_sql[ST_COUNT] = {
    [ST_CLAIM] = claim_sql,
    [ST_CLAIM_RUNS] = claim_runs_sql,
    [ST_PUBLISH] = "UPDATE acemq_outbox SET state = 1, published_at = ?1, lease_until = NULL"
                   " WHERE id = ?2 AND token = ?3 AND state = 0 AND lease_until IS NOT NULL",
    [ST_PUBLISH_DELETE] = "DELETE FROM acemq_outbox"
                          " WHERE id = ?2 AND token = ?3 AND state = 0 AND lease_until IS NOT NULL"
                          " AND ?1 IS NOT NULL",
    [ST_EXISTS] = "SELECT 1 FROM acemq_outbox WHERE id = ?1",
    /* ?1 now, ?2 id, ?3 token, ?4 reason, ?5 max attempts, ?6 base, ?7 max
     * delay, ?8 jitter cut (percent). The right-hand sides read the row as it
     * was, so `attempts` is the count before this failure. */
    [ST_FAIL] = "UPDATE acemq_outbox SET attempts = attempts + 1, last_error = ?4,"
                " lease_until = NULL, state = CASE WHEN attempts + 1 >= ?5 THEN 2 ELSE 0 END,"
                " next_attempt_at = ?1 + min(?6 << min(attempts, 30), ?7) * (100 - ?8) / 100"
                " WHERE id = ?2 AND token = ?3 AND state = 0 AND lease_until IS NOT NULL",
    [ST_RELEASE] = "UPDATE acemq_outbox SET lease_until = NULL, next_attempt_at = ?1"
                   " WHERE id = ?2 AND token = ?3 AND state = 0 AND lease_until IS NOT NULL",
    [ST_PENDING] = "SELECT count(*) FILTER (WHERE lease_until IS NULL OR lease_until <= ?1),"
                   " count(*) FILTER (WHERE lease_until > ?1), min(created_at)"
                   " FROM acemq_outbox WHERE state = 0",
    [ST_DEAD_COUNT] = "SELECT count(*) FROM acemq_outbox WHERE state = 2",
    [ST_LIST_DEAD] = "SELECT " COLUMNS " FROM acemq_outbox WHERE state = 2 ORDER BY seq LIMIT ?1",
    [ST_RETRY] = "UPDATE acemq_outbox SET state = 0, attempts = 0, next_attempt_at = ?1,"
                 " lease_until = NULL WHERE id = ?2 AND state = 2",
    /* The longest published first, through acemq_outbox_published; the
     * rows a batch deletes leave that index at once, so the next batch
     * starts where this one ended. */
    [ST_PURGE] = "DELETE FROM acemq_outbox WHERE seq IN (SELECT seq FROM acemq_outbox"
                 " WHERE state = 1 AND published_at <= ?1 ORDER BY published_at LIMIT ?2)",
    [ST_DATA_VERSION] = "PRAGMA data_version",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    /* Deferred: a read that needs one snapshot, taking no write lock. */
    [ST_BEGIN_READ] = "BEGIN",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
};

enum { WATCH_UNTRIED, WATCH_ON, WATCH_OFF };

typedef struct sq {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    int64_t data_version;
    acemq__sqlite_busy busy; /* the busy handler's budget; a handle is one thread's */
    /* sq_wait's wake-up on the file's writes, started by the first wait. */
    acemq__file_watch watch;
    int watch_state;
    int64_t settle_until;         /* monotonic ms: look often until then (see sq_wait) */
    uint64_t version_reads;       /* PRAGMA data_version reads by sq_wait, for tests */
    acemq__claim_sync claim_sync; /* claims without an fsync (backends/sqlite/claim_sync.h) */
} sq;

static int sq_fail(acemq_outbox *h, sqlite3 *db, int rc, const char *doing)
{
    char buf[ACEMQ__SQLITE_WORDS];
    return acemq__outbox_fail(h, acemq__sqlite_code(rc), "sqlite: %s: %s", doing,
                              acemq__sqlite_words(db, rc, buf));
}

static int exec(acemq_outbox *h, sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc == SQLITE_OK) return 0;
    int code =
        acemq__outbox_fail(h, acemq__sqlite_code(rc), "sqlite: %s", msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    return code;
}

/* Steps a statement that returns no rows (or whose rows do not matter) and
 * resets it: 0 or an error with SQLite's words on h. */
static int run(acemq_outbox *h, sq *s, int which, const char *doing)
{
    sqlite3_stmt *st = s->st[which];
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    }
    int code = rc == SQLITE_DONE ? 0 : sq_fail(h, s->db, rc, doing);
    (void)sqlite3_reset(st);
    (void)sqlite3_clear_bindings(st);
    return code;
}

static int bind_text(sqlite3_stmt *st, int i, const char *v)
{
    return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

static int64_t system_ms(const acemq_clock *c)
{
    if (!c) c = acemq_clock_system();
    return c->now_ms(c->ctx);
}

/* ------------------------------------------------------------------ add */

int acemq_outbox_add_sqlite(sqlite3 *db, const acemq_outbox_record *r,
                            const acemq_outbox_add_options *o, char *id_out)
{
    if (!db) return acemq__outbox_fail_thread(ACEMQ_EINVAL, "db must not be NULL");
    if (sqlite3_get_autocommit(db))
        return acemq__outbox_fail_thread(ACEMQ_ENOTX,
                                         "add: no transaction is open on the connection; the "
                                         "record must be written with the work it belongs to");
    char id[ACEMQ_OUTBOX_ID_MAX + 1];
    char *headers = NULL;
    int rc = acemq__outbox_prepare_record(r, o, id, &headers);
    if (rc != 0) return rc;

    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(db,
                            "INSERT INTO acemq_outbox(id, destination, routing_key, ordering_key,"
                            " headers, content_type, body, created_at)"
                            " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT(id) DO NOTHING",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) {
        int code =
            strstr(sqlite3_errmsg(db), "no such table") ? ACEMQ_ESCHEMA : acemq__sqlite_code(rc);
        (void)acemq__outbox_fail_thread(code,
                                        "sqlite: %s (the outbox table is created by "
                                        "acemq_outbox_open on this database)",
                                        sqlite3_errmsg(db));
        free(headers);
        return code;
    }
    int b = bind_text(st, 1, id);
    if (b == SQLITE_OK) b = bind_text(st, 2, r->destination);
    if (b == SQLITE_OK) b = bind_text(st, 3, r->routing_key);
    if (b == SQLITE_OK) b = bind_text(st, 4, r->ordering_key);
    if (b == SQLITE_OK) b = bind_text(st, 5, headers);
    if (b == SQLITE_OK) b = bind_text(st, 6, r->content_type);
    if (b == SQLITE_OK)
        b = sqlite3_bind_blob64(st, 7, r->body ? r->body : "", r->body_len, SQLITE_STATIC);
    if (b == SQLITE_OK) b = sqlite3_bind_int64(st, 8, system_ms(o ? o->clock : NULL));
    if (b == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_DONE && sqlite3_changes(db) == 0)
            rc = acemq__outbox_fail_thread(ACEMQ_EEXIST, "add: a record with id '%s' exists", id);
        else if (rc == SQLITE_DONE)
            rc = 0;
        else {
            char buf[ACEMQ__SQLITE_WORDS];
            rc = acemq__outbox_fail_thread(acemq__sqlite_code(rc), "sqlite: add: %s",
                                           acemq__sqlite_words(db, rc, buf));
        }
    } else {
        rc =
            acemq__outbox_fail_thread(acemq__sqlite_code(b), "sqlite: add: %s", sqlite3_errmsg(db));
    }
    (void)sqlite3_finalize(st);
    free(headers);
    if (rc == 0 && id_out) memcpy(id_out, id, strlen(id) + 1);
    return rc;
}

/* -------------------------------------------------------------- schema */

static int ensure_schema(acemq_outbox *h, sqlite3 *db)
{
    int rc = exec(h, db, "BEGIN IMMEDIATE");
    if (rc != 0) return rc;
    rc = exec(h, db,
              "CREATE TABLE IF NOT EXISTS acemq_schema_version("
              "component TEXT PRIMARY KEY, version INTEGER NOT NULL)");
    sqlite3_stmt *st = NULL;
    int64_t version = 0;
    if (rc == 0) {
        int prc = sqlite3_prepare_v2(db,
                                     "SELECT version FROM acemq_schema_version"
                                     " WHERE component = '" SCHEMA_COMPONENT "'",
                                     -1, &st, NULL);
        if (prc != SQLITE_OK) rc = sq_fail(h, db, prc, "reading the schema version");
    }
    if (rc == 0) {
        int src = sqlite3_step(st);
        if (src == SQLITE_ROW)
            version = sqlite3_column_int64(st, 0);
        else if (src != SQLITE_DONE)
            rc = sq_fail(h, db, src, "reading the schema version");
    }
    (void)sqlite3_finalize(st);
    if (rc == 0 && version > SCHEMA_VERSION)
        rc = acemq__outbox_fail(h, ACEMQ_ESCHEMA,
                                "sqlite: outbox schema version %lld is newer than this "
                                "library's %d",
                                (long long)version, SCHEMA_VERSION);
    if (rc == 0) rc = exec(h, db, schema_sql);
    if (rc == 0 && version == 0)
        rc = exec(h, db,
                  "INSERT INTO acemq_schema_version(component, version) VALUES('" SCHEMA_COMPONENT
                  "', 1)");
    if (rc == 0) return exec(h, db, "COMMIT");
    (void)sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* ------------------------------------------------------------- relay side */

static void sq_close(acemq_outbox *h)
{
    sq *s = h->self;
    if (!s) return;
    for (int i = 0; i < ST_COUNT; i++)
        (void)sqlite3_finalize(s->st[i]);
    (void)sqlite3_close(s->db);
    if (s->watch_state == WATCH_ON) acemq__file_watch_close(&s->watch);
    free(s);
    h->self = NULL;
}

static int row_of(sqlite3_stmt *st, acemq__outbox_row *row)
{
    row->seq = sqlite3_column_int64(st, 0);
    row->id = (const char *)sqlite3_column_text(st, 1);
    row->destination = (const char *)sqlite3_column_text(st, 2);
    row->routing_key = (const char *)sqlite3_column_text(st, 3);
    row->ordering_key = (const char *)sqlite3_column_text(st, 4);
    row->headers_json = (const char *)sqlite3_column_text(st, 5);
    row->content_type = (const char *)sqlite3_column_text(st, 6);
    row->body = sqlite3_column_blob(st, 7);
    row->body_len = (size_t)sqlite3_column_bytes(st, 7);
    row->created_ms = sqlite3_column_int64(st, 8);
    row->attempts = sqlite3_column_int(st, 9);
    row->token = (uint64_t)sqlite3_column_int64(st, 10);
    row->last_error = (const char *)sqlite3_column_text(st, 11);
    /* A text column read back as NULL after sqlite3_column_text means out
     * of memory unless the value was NULL: id and destination never are. */
    return row->id && row->destination ? 0 : ACEMQ_ENOMEM;
}

/* Copies every row a statement returns into the handle's batch. */
static int collect(acemq_outbox *h, sq *s, sqlite3_stmt *st, const char *doing)
{
    int rc;
    int code = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        acemq__outbox_row row;
        if (row_of(st, &row) != 0) {
            code = acemq__outbox_fail(h, ACEMQ_ENOMEM, "sqlite: %s: out of memory", doing);
            break;
        }
        code = acemq__outbox_batch_add(h, &row);
        if (code != 0) break;
    }
    if (code == 0 && rc != SQLITE_DONE) code = sq_fail(h, s->db, rc, doing);
    /* Resetting an UPDATE ... RETURNING stopped early still applies it; the
     * statement ran to completion above unless an error came first. */
    (void)sqlite3_reset(st);
    (void)sqlite3_clear_bindings(st);
    return code;
}

/* The level for the writes that follow: relaxed 1 before a claim, 0 after
 * it and before a mark (backends/sqlite/claim_sync.h). 0 or an error. */
static int sync_level(acemq_outbox *h, sq *s, int relaxed)
{
    int rc = acemq__claim_sync_set(&s->claim_sync, s->db, relaxed);
    return rc == SQLITE_OK ? 0 : sq_fail(h, s->db, rc, "PRAGMA synchronous");
}

static int claim_with(acemq_outbox *h, int which, size_t max, int64_t lease_ms, int64_t now)
{
    sq *s = h->self;
    (void)sync_level(h, s, 1); /* failing to relax only costs the fsync */
    sqlite3_stmt *st = s->st[which];
    (void)sqlite3_bind_int64(st, 1, now);
    (void)sqlite3_bind_int64(st, 2, now + lease_ms);
    (void)sqlite3_bind_int64(st, 3, (sqlite3_int64)max);
    int rc = collect(h, s, st, "claim_batch");
    /* The UPDATE ran in its own implicit transaction. If copying failed
     * midway the claims stand, unseen: their leases hand them on. */
    (void)sync_level(h, s, 0); /* a mark tries again */
    return rc;
}

static int sq_claim(acemq_outbox *h, size_t max, int64_t lease_ms, int64_t now)
{
    return claim_with(h, ST_CLAIM, max, lease_ms, now);
}

static int sq_claim_runs(acemq_outbox *h, size_t max, int64_t lease_ms, int64_t now)
{
    return claim_with(h, ST_CLAIM_RUNS, max, lease_ms, now);
}

/* After a mark changed nothing: is the id there at all? */
static int stale_or_missing(acemq_outbox *h, sq *s, const char *id)
{
    sqlite3_stmt *st = s->st[ST_EXISTS];
    (void)bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    int code;
    if (rc == SQLITE_ROW)
        code = ACEMQ_ESTALE;
    else if (rc == SQLITE_DONE)
        code = ACEMQ_ENOENT;
    else
        code = sq_fail(h, s->db, rc, "looking up a record");
    (void)sqlite3_reset(st);
    (void)sqlite3_clear_bindings(st);
    return code;
}

/* ESTALE or ENOENT are answers about one record, not failures of the call:
 * the message says which. */
static int explain(acemq_outbox *h, int code, const char *what, const char *id)
{
    if (code == ACEMQ_ESTALE)
        return acemq__outbox_fail(h, code,
                                  "%s '%s': the claim was taken over, released or already "
                                  "marked; the token is stale",
                                  what, id);
    if (code == ACEMQ_ENOENT) return acemq__outbox_fail(h, code, "%s: no record '%s'", what, id);
    return code;
}

static int sq_mark_published(acemq_outbox *h, const acemq_outbox_mark *marks, size_t n, int *status,
                             int64_t now)
{
    sq *s = h->self;
    int which = h->opts.delete_on_publish ? ST_PUBLISH_DELETE : ST_PUBLISH;
    int rc = sync_level(h, s, 0);
    if (rc == 0 && n > 1) rc = run(h, s, ST_BEGIN, "mark_published: BEGIN");
    if (rc != 0) return rc;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        sqlite3_stmt *st = s->st[which];
        (void)sqlite3_bind_int64(st, 1, now);
        (void)bind_text(st, 2, marks[i].id);
        (void)sqlite3_bind_int64(st, 3, (sqlite3_int64)marks[i].token);
        rc = run(h, s, which, "mark_published");
        if (rc == 0) {
            status[i] = sqlite3_changes(s->db) ? 0 : stale_or_missing(h, s, marks[i].id);
            if (status[i] == ACEMQ_ESTALE || status[i] == ACEMQ_ENOENT)
                (void)explain(h, status[i], "mark_published", marks[i].id);
            else if (status[i] != 0)
                rc = status[i];
        }
    }
    if (n > 1) {
        if (rc == 0) rc = run(h, s, ST_COMMIT, "mark_published: COMMIT");
        if (rc != 0) (void)run(h, s, ST_ROLLBACK, "mark_published: ROLLBACK");
    }
    return rc;
}

static int sq_mark_failed(acemq_outbox *h, const char *id, uint64_t token,
                          const acemq__fail_args *a, int64_t now)
{
    sq *s = h->self;
    int rc = sync_level(h, s, 0);
    if (rc != 0) return rc;
    sqlite3_stmt *st = s->st[ST_FAIL];
    (void)sqlite3_bind_int64(st, 1, now);
    (void)bind_text(st, 2, id);
    (void)sqlite3_bind_int64(st, 3, (sqlite3_int64)token);
    (void)bind_text(st, 4, a->reason);
    (void)sqlite3_bind_int(st, 5, a->max_attempts);
    (void)sqlite3_bind_int64(st, 6, a->backoff_base_ms);
    (void)sqlite3_bind_int64(st, 7, a->backoff_max_ms);
    (void)sqlite3_bind_int(st, 8, a->jitter_cut);
    rc = run(h, s, ST_FAIL, "mark_failed");
    if (rc != 0) return rc;
    if (sqlite3_changes(s->db)) return 0;
    return explain(h, stale_or_missing(h, s, id), "mark_failed", id);
}

static int sq_release(acemq_outbox *h, const char *id, uint64_t token, int64_t now)
{
    sq *s = h->self;
    sqlite3_stmt *st = s->st[ST_RELEASE];
    (void)sqlite3_bind_int64(st, 1, now);
    (void)bind_text(st, 2, id);
    (void)sqlite3_bind_int64(st, 3, (sqlite3_int64)token);
    int rc = run(h, s, ST_RELEASE, "release");
    if (rc != 0) return rc;
    if (sqlite3_changes(s->db)) return 0;
    return explain(h, stale_or_missing(h, s, id), "release", id);
}

static int sq_pending(acemq_outbox *h, acemq_outbox_pending *out, int64_t now)
{
    sq *s = h->self;
    int rc = run(h, s, ST_BEGIN_READ, "pending_count: BEGIN");
    if (rc != 0) return rc;
    sqlite3_stmt *st = s->st[ST_PENDING];
    (void)sqlite3_bind_int64(st, 1, now);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        out->unclaimed = (uint64_t)sqlite3_column_int64(st, 0);
        out->claimed = (uint64_t)sqlite3_column_int64(st, 1);
        if (sqlite3_column_type(st, 2) != SQLITE_NULL) {
            int64_t oldest = sqlite3_column_int64(st, 2);
            out->oldest_age_ms = now > oldest ? now - oldest : 0;
        }
    } else {
        rc = sq_fail(h, s->db, src, "pending_count");
    }
    (void)sqlite3_reset(st);
    (void)sqlite3_clear_bindings(st);
    if (rc == 0) {
        st = s->st[ST_DEAD_COUNT];
        src = sqlite3_step(st);
        if (src == SQLITE_ROW)
            out->dead = (uint64_t)sqlite3_column_int64(st, 0);
        else
            rc = sq_fail(h, s->db, src, "pending_count");
        (void)sqlite3_reset(st);
    }
    /* Read-only: COMMIT cannot lose anything, ROLLBACK on failure. */
    int end = run(h, s, rc == 0 ? ST_COMMIT : ST_ROLLBACK, "pending_count: end");
    return rc != 0 ? rc : end;
}

static int sq_list_dead(acemq_outbox *h, size_t max)
{
    sq *s = h->self;
    sqlite3_stmt *st = s->st[ST_LIST_DEAD];
    (void)sqlite3_bind_int64(st, 1, (sqlite3_int64)max);
    return collect(h, s, st, "list_dead");
}

static int sq_retry(acemq_outbox *h, const char *id, int64_t now)
{
    sq *s = h->self;
    sqlite3_stmt *st = s->st[ST_RETRY];
    (void)sqlite3_bind_int64(st, 1, now);
    (void)bind_text(st, 2, id);
    int rc = run(h, s, ST_RETRY, "retry");
    if (rc != 0) return rc;
    if (sqlite3_changes(s->db)) return 0;
    return acemq__outbox_fail(h, ACEMQ_ENOENT, "retry: no dead record '%s'", id);
}

static int sq_purge_batch(acemq_outbox *h, int64_t now, int64_t older_than_ms, uint64_t limit,
                          int64_t *cursor, uint64_t *purged)
{
    sq *s = h->self;
    sqlite3_stmt *st = s->st[ST_PURGE];
    (void)sqlite3_bind_int64(st, 1, now - older_than_ms);
    (void)sqlite3_bind_int64(st, 2, limit > INT64_MAX ? INT64_MAX : (sqlite3_int64)limit);
    int rc = run(h, s, ST_PURGE, "purge");
    if (rc != 0) return rc;
    *purged = (uint64_t)sqlite3_changes64(s->db);
    if (*purged < limit) *cursor = ACEMQ__PURGE_DONE; /* else the index goes on where it ended */
    return 0;
}

static int read_data_version(acemq_outbox *h, sq *s, int64_t *out)
{
    sqlite3_stmt *st = s->st[ST_DATA_VERSION];
    int rc = sqlite3_step(st);
    int code = 0;
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        code = sq_fail(h, s->db, rc, "PRAGMA data_version");
    (void)sqlite3_reset(st);
    return code;
}

static void watch_start(sq *s)
{
    s->watch_state = WATCH_OFF;
    const char *path = sqlite3_db_filename(s->db, "main");
    if (path && *path && acemq__file_watch_open(&s->watch, path) == 0) s->watch_state = WATCH_ON;
}

static void watch_stop(sq *s)
{
    acemq__file_watch_close(&s->watch);
    s->watch_state = WATCH_OFF;
}

/* Waits for another connection's commit: PRAGMA data_version moves then, and
 * reading it is a look at one page of the WAL index.
 *
 * Without a watch it is read every POLL_STEP_MS, some 200 times a second
 * while the relay is idle. With one (file_watch.h: a write to the file or its
 * -wal, from any process on this machine) an idle wait sleeps until a write
 * comes, and looks at least every WATCH_CHECK_MS all the same, for a writer
 * the watch cannot see (on another machine, over a network file system).
 * A write is not yet a commit: the writer appends its pages to the WAL
 * (the event), syncs them, and only then publishes the commit in the WAL
 * index, through shared memory, which raises no event. So after a write the
 * wait looks every SETTLE_STEP_MS for SETTLE_MS, long enough for the sync;
 * settle_until outlives the call, since the relay waits in slices. */
enum { POLL_STEP_MS = 5, WATCH_CHECK_MS = 100, SETTLE_MS = 50, SETTLE_STEP_MS = 1 };

static int sq_wait(acemq_outbox *h, int timeout_ms)
{
    sq *s = h->self;
    /* Started before the first look: a commit after that look is an event. */
    if (s->watch_state == WATCH_UNTRIED) watch_start(s);
    int64_t deadline = acemq__mono_ms() + timeout_ms;
    for (;;) {
        int64_t v = 0;
        int rc = read_data_version(h, s, &v);
        if (rc != 0) return rc;
        s->version_reads++;
        if (v != s->data_version) {
            s->data_version = v;
            return 1;
        }
        int64_t now = acemq__mono_ms();
        if (now >= deadline) return 0;
        int left = (int)(deadline - now); /* at most timeout_ms */
        if (s->watch_state != WATCH_ON) {
            acemq__sleep_ms(left < POLL_STEP_MS ? left : POLL_STEP_MS);
            continue;
        }
        int written;
        if (now < s->settle_until) {
            acemq__sleep_ms(left < SETTLE_STEP_MS ? left : SETTLE_STEP_MS);
            written = acemq__file_watch_wait(&s->watch, 0);
        } else {
            written =
                acemq__file_watch_wait(&s->watch, left < WATCH_CHECK_MS ? left : WATCH_CHECK_MS);
        }
        if (written > 0) s->settle_until = acemq__mono_ms() + SETTLE_MS;
        if (written < 0) watch_stop(s); /* the directory is gone, or worse: poll from here on */
    }
}

uint64_t acemq__sqlite_outbox_wait_reads(acemq_outbox *h, int *watching)
{
    sq *s = h->self;
    if (watching) *watching = s->watch_state == WATCH_ON;
    return s->version_reads;
}

static const acemq__outbox_methods sqlite_methods = {
    .version = ACEMQ__OUTBOX_METHODS_VERSION,
    .name = "sqlite",
    .close = sq_close,
    .claim_batch = sq_claim,
    .mark_published = sq_mark_published,
    .mark_failed = sq_mark_failed,
    .release = sq_release,
    .pending = sq_pending,
    .list_dead = sq_list_dead,
    .retry = sq_retry,
    .wait = sq_wait,
    .purge_batch = sq_purge_batch,
    .purge_pauses = 1,
    .claim_runs = sq_claim_runs,
};

static int open_url(acemq_outbox *h, const acemq__url *url)
{
    static const char *const known[] = {NULL};
    const char *bad = NULL;
    if (acemq__url_check_params(url, known, &bad) != 0)
        return acemq__outbox_fail(h, ACEMQ_EURL, "sqlite outbox: unknown URL parameter '%s'", bad);
    if (!url->rest || !*url->rest)
        return acemq__outbox_fail(h, ACEMQ_EURL, "sqlite outbox: the URL names no file");
    sq *s = calloc(1, sizeof *s);
    if (!s) return acemq__outbox_fail(h, ACEMQ_ENOMEM, "out of memory");
    h->self = s;
    h->methods = &sqlite_methods;
    int rc = sqlite3_open_v2(
        url->rest, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        char buf[ACEMQ__SQLITE_WORDS];
        (void)acemq__outbox_fail(h, acemq__sqlite_code(rc), "sqlite: opening %s: %s", url->rest,
                                 acemq__sqlite_words(s->db, rc, buf));
        sq_close(h);
        h->methods = NULL;
        return acemq__sqlite_code(rc);
    }
    static const char *const sync_sql[] = {"PRAGMA synchronous=OFF", "PRAGMA synchronous=NORMAL",
                                           "PRAGMA synchronous=FULL"};
    /* The idempotency store's busy handler (backends/sqlite/busy.c), not
     * sqlite3_busy_timeout: SQLite's own sleeps 1, 2, 5, 10 ... 100 ms
     * between tries, so a relay's mark that meets a producer's commit would
     * sleep 10-80 ms for a lock held for one. */
    acemq__sqlite_busy_init(&s->busy, h->opts.busy_timeout_ms);
    rc = sqlite3_busy_handler(s->db, acemq__sqlite_busy_handler, &s->busy);
    if (rc != SQLITE_OK) rc = sq_fail(h, s->db, rc, "busy_handler");
    if (rc == 0) rc = exec(h, s->db, "PRAGMA journal_mode=WAL");
    if (rc == 0) rc = exec(h, s->db, sync_sql[h->opts.synchronous]);
    acemq__claim_sync_init(&s->claim_sync, h->opts.synchronous);
    if (rc == 0) rc = ensure_schema(h, s->db);
    for (int i = 0; rc == 0 && i < ST_COUNT; i++) {
        int prc = sqlite3_prepare_v3(s->db, statement_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                     &s->st[i], NULL);
        if (prc != SQLITE_OK) rc = sq_fail(h, s->db, prc, "preparing a statement");
    }
    if (rc == 0) rc = read_data_version(h, s, &s->data_version);
    if (rc != 0) {
        sq_close(h);
        h->methods = NULL;
    }
    return rc;
}

static int open_sqlite(acemq_outbox *h, const char *text)
{
    /* One machine, one clock: SQLite has no server to ask. */
    if (!h->has_clock) h->clock = *acemq_clock_system(), h->has_clock = 1;
    acemq__url u;
    int rc = acemq__url_parse(&u, text);
    if (rc != 0)
        return acemq__outbox_fail(h, rc, "'%s' is not a URL of the form scheme:rest", text);
    rc = open_url(h, &u);
    acemq__url_free(&u);
    return rc;
}

const acemq__outbox_backend acemq__sqlite_outbox_backend = {{"sqlite", "sqlite:"}, open_sqlite};

int acemq__sqlite_outbox_sync_setting(acemq_outbox *h, char *buf, size_t cap)
{
    sq *s = h->self;
    sqlite3_stmt *st = NULL;
    int prc = sqlite3_prepare_v2(s->db, "PRAGMA synchronous", -1, &st, NULL);
    if (prc != SQLITE_OK) return sq_fail(h, s->db, prc, "PRAGMA synchronous");
    prc = sqlite3_step(st);
    int rc = prc == SQLITE_ROW ? 0 : sq_fail(h, s->db, prc, "PRAGMA synchronous");
    if (rc == 0) (void)snprintf(buf, cap, "%d", sqlite3_column_int(st, 0));
    (void)sqlite3_finalize(st); /* its error, if any, was the step's */
    return rc;
}
