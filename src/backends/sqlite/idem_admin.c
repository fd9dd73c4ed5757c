/* idem_admin.c — the SQLite store's operator calls (acemq_idem_counts_get,
 * acemq_idem_inspect, acemq_idem_forget; `acemq idem`). They are rare, so
 * each prepares its statement when it runs rather than at open. States
 * follow the columns (idem_open.c): state 1 with lease_until > now is held,
 * state 1 with the lease run out or state 0 (released) is abandoned, state
 * 2 with expires_at > now is confirmed, else expired. */
#include <string.h>

#include "backends/sqlite/idem_store.h"

#define STATE_SQL                                                                                  \
    "CASE WHEN state = 1 AND lease_until > ?1 THEN 1 WHEN state = 2 AND expires_at > ?1 THEN 3 "   \
    "WHEN state = 2 THEN 4 ELSE 2 END"

static int prepare(acemq_idem *h, const char *sql, sqlite3_stmt **st)
{
    sq *s = h->self;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
    return rc == SQLITE_OK ? 0 : acemq__sqlite_idem_fail(h, s->db, rc);
}

/* Finalizes st and turns an unexpected step result into the store's error. */
static int done(acemq_idem *h, sqlite3_stmt *st, int rc)
{
    sq *s = h->self;
    int err = rc < 0 ? rc : acemq__sqlite_idem_fail(h, s->db, rc);
    (void)sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : err;
}

static int count_states(acemq_idem *h, int64_t now_ms, acemq_idem_counts *out)
{
    sqlite3_stmt *st;
    int rc = prepare(h, "SELECT " STATE_SQL ", count(*) FROM acemq_idem GROUP BY 1", &st);
    if (rc != 0) return rc;
    rc = sqlite3_bind_int64(st, 1, now_ms);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        uint64_t n = (uint64_t)sqlite3_column_int64(st, 1);
        acemq__idem_counts_add(out, sqlite3_column_int(st, 0), n);
        rc = SQLITE_OK;
    }
    return done(h, st, rc);
}

static int next_lease(acemq_idem *h, int64_t now_ms, acemq_idem_counts *out)
{
    sqlite3_stmt *st;
    int rc = prepare(h,
                     "SELECT id, token, lease_until FROM acemq_idem WHERE state = 1"
                     " AND lease_until > ?1 ORDER BY lease_until LIMIT 1",
                     &st);
    if (rc != 0) return rc;
    rc = sqlite3_bind_int64(st, 1, now_ms);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        const void *id = sqlite3_column_blob(st, 0);
        out->has_next_lease = 1;
        out->next_id_len = len;
        if (id) memcpy(out->next_id, id, len < sizeof out->next_id ? len : sizeof out->next_id);
        out->next_token = (uint64_t)sqlite3_column_int64(st, 1);
        out->next_lease_until_ms = sqlite3_column_int64(st, 2);
    }
    return done(h, st, rc);
}

int acemq__sqlite_idem_counts(acemq_idem *h, int64_t now_ms, acemq_idem_counts *out)
{
    sq *s = h->self;
    pthread_mutex_lock(&s->lock);
    int rc = count_states(h, now_ms, out);
    if (rc == 0) rc = next_lease(h, now_ms, out);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int acemq__sqlite_idem_inspect(acemq_idem *h, const acemq__bytes *id, int64_t now_ms,
                               acemq_idem_record *out)
{
    sq *s = h->self;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(h,
                     "SELECT " STATE_SQL ", token, lease_until, expires_at, result IS NOT NULL,"
                     " length(result), length(fingerprint) FROM acemq_idem WHERE id = ?2",
                     &st);
    if (rc == 0) {
        rc = sqlite3_bind_int64(st, 1, now_ms);
        if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 2, id->data, (int)id->len, SQLITE_STATIC);
        if (rc == SQLITE_OK) rc = sqlite3_step(st);
        int found = rc == SQLITE_ROW;
        if (found) {
            out->state = sqlite3_column_int(st, 0);
            out->token = (uint64_t)sqlite3_column_int64(st, 1);
            out->lease_until_ms = sqlite3_column_int64(st, 2);
            out->expires_ms = sqlite3_column_int64(st, 3);
            out->has_result = sqlite3_column_int(st, 4);
            out->result_len = (size_t)sqlite3_column_int64(st, 5);
            out->fingerprint_len = (size_t)sqlite3_column_int64(st, 6);
        }
        rc = done(h, st, rc);
        if (rc == 0 && !found) rc = ACEMQ_ENOENT;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Deletes the row. Its token is not needed to keep later tokens apart: each
 * claim's token carries an issue number no other claim on the file had
 * (backends/sqlite/issue.h). */
int acemq__sqlite_idem_forget(acemq_idem *h, const acemq__bytes *id, int64_t now_ms)
{
    (void)now_ms;
    sq *s = h->self;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(h, "DELETE FROM acemq_idem WHERE id = ?1", &st);
    if (rc == 0) {
        int held = acemq__sqlite_idem_queue_enter(s);
        rc = sqlite3_bind_blob(st, 1, id->data, (int)id->len, SQLITE_STATIC);
        if (rc == SQLITE_OK) rc = sqlite3_step(st);
        int changed = rc == SQLITE_DONE ? sqlite3_changes(s->db) : 0;
        acemq__sqlite_idem_queue_leave(s, held);
        rc = done(h, st, rc);
        if (rc == 0) rc = changed > 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}
