/* outbox.c — the outbox on PostgreSQL: the add function that writes inside
 * the caller's transaction, and the draining side relays on several machines
 * share.
 *
 * Claims are one statement: the due rows are picked oldest first with
 * FOR UPDATE SKIP LOCKED, so concurrent claimers pass over each other's rows
 * instead of queueing on them, and updated in the same statement (token moved
 * on, lease set) so a claim holds no lock once it returns. Leases are read
 * against the database's clock (clock_timestamp()), the one clock every relay
 * shares, unless the handle was given a clock (tests). Every insert fires a
 * statement-level trigger that sends NOTIFY acemq_outbox, delivered when the
 * inserting transaction commits; acemq_outbox_wait() waits for it.
 *
 * Marking a batch is one UPDATE over unnest()ed arrays: a round trip per
 * batch, not per record.
 */
#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acemq/postgres.h"
#include "backends/builtin.h"
#include "backends/postgres/connect.h"
#include "backends/postgres/outbox_sql.h"
#include "backends/postgres/schema.h"
#include "backends/test_control.h"
#include "os/mono_time.h"
#include "outbox/outbox_backend.h"

#define SCHEMA_VERSION 1

typedef struct pg {
    PGconn *conn;
    char *conninfo;
    int64_t purge_end; /* the highest seq when the purge under way began */
    /* LISTEN acemq_outbox is on for this session: from the handle's first
     * wait on, and again after each reconnect once it was. */
    int listening;
} pg;

/* libpq's message ends in a newline; the handle's text reads better without. */
static int pg_fail(acemq_outbox *h, int code, const char *doing, const char *msg)
{
    size_t len = msg ? strlen(msg) : 0;
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
        len--;
    return acemq__outbox_fail(h, code, "postgres: %s: %.*s", doing, (int)len, msg ? msg : "");
}

static int code_of(const PGresult *r, PGconn *conn)
{
    if (PQstatus(conn) == CONNECTION_BAD) return ACEMQ_EIO;
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!state) return r ? ACEMQ_EBACKEND : ACEMQ_ENOMEM;
    if (strcmp(state, "42P01") == 0) return ACEMQ_ESCHEMA; /* undefined_table */
    if (strcmp(state, "23505") == 0) return ACEMQ_EEXIST;  /* unique_violation */
    if (strncmp(state, "08", 2) == 0) return ACEMQ_EIO;    /* connection exception */
    if (strncmp(state, "53", 2) == 0) return ACEMQ_ENOMEM; /* insufficient resources */
    return ACEMQ_EBACKEND;
}

/* Checks a result; on failure records libpq's words, clears it, returns the code. */
static int check(acemq_outbox *h, PGresult *r, ExecStatusType want, const char *doing)
{
    pg *p = h->self;
    if (r && PQresultStatus(r) == want) return 0;
    int code = code_of(r, p->conn);
    (void)pg_fail(h, code, doing, r ? PQresultErrorMessage(r) : PQerrorMessage(p->conn));
    PQclear(r);
    return code;
}

static int exec_simple(acemq_outbox *h, const char *sql, const char *doing)
{
    pg *p = h->self;
    PGresult *r = PQexec(p->conn, sql);
    int rc =
        check(h, r, r && PQresultStatus(r) == PGRES_TUPLES_OK ? PGRES_TUPLES_OK : PGRES_COMMAND_OK,
              doing);
    if (rc == 0) PQclear(r);
    return rc;
}

static int prepare_all(acemq_outbox *h)
{
    pg *p = h->self;
    /* Every statement here keeps one good plan whatever its parameters
     * (index scans on the partial indexes and the keys); left to itself the
     * server re-plans the claim at every call, which cost three times its
     * execution at batch size 1. PostgreSQL 12 and later. */
    int src = exec_simple(h, "SET plan_cache_mode = force_generic_plan", "plan_cache_mode");
    if (src != 0) return src;
    /* synchronous below FULL: this session's commits (claims, marks, ...) do
     * not wait for the WAL flush. A server crash may then forget the last
     * of them, never half of one; for the outbox that only hands records out
     * again. */
    if (h->opts.synchronous != ACEMQ_SYNC_FULL) {
        src = exec_simple(h, "SET synchronous_commit = off", "synchronous_commit");
        if (src != 0) return src;
    }
    for (int i = 0; i < Q_COUNT; i++) {
        PGresult *r = PQprepare(p->conn, acemq__pg_queries[i].name, acemq__pg_queries[i].sql,
                                acemq__pg_queries[i].nparams, NULL);
        int rc = check(h, r, PGRES_COMMAND_OK, "preparing a statement");
        if (rc != 0) return rc;
        PQclear(r);
    }
    /* Only a handle that waits listens (pg_wait): every commit's NOTIFY
     * wakes each listening session, and libpq keeps what a session that
     * never waits is sent until someone asks for it. The relay's marking,
     * claiming and counting handles were each woken once a commit, and each
     * held every notification ever sent to it. */
    return p->listening ? exec_simple(h, "LISTEN acemq_outbox", "LISTEN") : 0;
}

static int ensure_schema(acemq_outbox *h)
{
    pg *p = h->self;
    acemq__pg_schema_error e;
    int rc =
        acemq__pg_schema_ensure(p->conn, "outbox", SCHEMA_VERSION, acemq__pg_schema_sql, 0, &e);
    if (rc == ACEMQ_ESCHEMA)
        return acemq__outbox_fail(h, ACEMQ_ESCHEMA,
                                  "postgres: outbox schema version %ld is newer than this "
                                  "library's %d",
                                  e.version, SCHEMA_VERSION);
    /* check() reports the failed statement's result, and clears it. */
    return rc == 0 ? 0 : check(h, e.result, PGRES_COMMAND_OK, e.doing);
}

/* A relay outlives network trouble: when the connection was lost, one
 * reconnect per call, with the statements prepared again. */
static int ensure_connected(acemq_outbox *h)
{
    pg *p = h->self;
    if (PQstatus(p->conn) == CONNECTION_OK) return 0;
    PQreset(p->conn);
    if (PQstatus(p->conn) != CONNECTION_OK)
        return pg_fail(h, ACEMQ_EIO, "reconnecting", PQerrorMessage(p->conn));
    return prepare_all(h);
}

/* Runs a prepared query with text parameters. */
static int run(acemq_outbox *h, int q, const char *const *values, PGresult **out, int binary)
{
    pg *p = h->self;
    *out = NULL;
    int rc = ensure_connected(h);
    if (rc != 0) return rc;
    PGresult *r = PQexecPrepared(p->conn, acemq__pg_queries[q].name, acemq__pg_queries[q].nparams,
                                 values, NULL, NULL, binary);
    rc = check(h, r, PGRES_TUPLES_OK, acemq__pg_queries[q].name + 6);
    if (rc == 0) *out = r;
    return rc;
}

static void pg_close(acemq_outbox *h)
{
    pg *p = h->self;
    if (!p) return;
    PQfinish(p->conn);
    free(p->conninfo);
    free(p);
    h->self = NULL;
}

/* Formats the handle's time, or NULL for the database's. */
static const char *now_param(char buf[24], int64_t now)
{
    if (now == ACEMQ__DB_NOW) return NULL;
    snprintf(buf, 24, "%lld", (long long)now);
    return buf;
}

static uint64_t be64(const char *v)
{
    const unsigned char *b = (const unsigned char *)v;
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x = x << 8 | b[i];
    return x;
}

static uint32_t be32(const char *v)
{
    const unsigned char *b = (const unsigned char *)v;
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static const char *text_or_null(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

/* Copies rows of COLUMNS in binary format into the handle's batch. */
static int collect(acemq_outbox *h, PGresult *r)
{
    if (PQnfields(r) != 12) {
        PQclear(r);
        return acemq__outbox_fail(h, ACEMQ_EBACKEND, "postgres: unexpected result shape");
    }
    int rc = 0;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        acemq__outbox_row row;
        row.seq = (int64_t)be64(PQgetvalue(r, i, 0));
        row.id = PQgetvalue(r, i, 1);
        row.destination = PQgetvalue(r, i, 2);
        row.routing_key = PQgetvalue(r, i, 3);
        row.ordering_key = text_or_null(r, i, 4);
        row.headers_json = text_or_null(r, i, 5);
        row.content_type = text_or_null(r, i, 6);
        row.body = PQgetvalue(r, i, 7);
        row.body_len = (size_t)PQgetlength(r, i, 7);
        row.created_ms = (int64_t)be64(PQgetvalue(r, i, 8));
        row.attempts = (int)be32(PQgetvalue(r, i, 9));
        row.token = be64(PQgetvalue(r, i, 10));
        row.last_error = text_or_null(r, i, 11);
        rc = acemq__outbox_batch_add(h, &row);
    }
    PQclear(r);
    return rc;
}

static int claim_with(acemq_outbox *h, int which, size_t max, int64_t lease_ms, int64_t now)
{
    char nb[24], lb[24], mb[24];
    snprintf(lb, sizeof lb, "%lld", (long long)lease_ms);
    snprintf(mb, sizeof mb, "%zu", max);
    const char *v[] = {now_param(nb, now), lb, mb};
    PGresult *r;
    int rc = run(h, which, v, &r, 1);
    return rc != 0 ? rc : collect(h, r);
}

static int pg_claim(acemq_outbox *h, size_t max, int64_t lease_ms, int64_t now)
{
    return claim_with(h, Q_CLAIM, max, lease_ms, now);
}

static int pg_claim_runs(acemq_outbox *h, size_t max, int64_t lease_ms, int64_t now)
{
    return claim_with(h, Q_CLAIM_RUNS, max, lease_ms, now);
}

/* A growable string, for array literals. */
typedef struct strbuf {
    char *p;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->cap - b->len < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* {"a","b\"c"}: every element quoted, so any text survives. */
static void sb_text_array(strbuf *b, const acemq_outbox_mark *m, size_t n)
{
    sb_put(b, "{", 1);
    for (size_t i = 0; i < n; i++) {
        if (i) sb_put(b, ",", 1);
        sb_put(b, "\"", 1);
        for (const char *c = m[i].id; *c; c++) {
            if (*c == '"' || *c == '\\') sb_put(b, "\\", 1);
            sb_put(b, c, 1);
        }
        sb_put(b, "\"", 1);
    }
    sb_put(b, "}", 1);
}

static void sb_token_array(strbuf *b, const acemq_outbox_mark *m, size_t n)
{
    sb_put(b, "{", 1);
    for (size_t i = 0; i < n; i++) {
        char num[24];
        int len = snprintf(num, sizeof num, "%s%lld", i ? "," : "", (long long)m[i].token);
        sb_put(b, num, (size_t)len);
    }
    sb_put(b, "}", 1);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Index of id in the sorted list, or -1. */
static long find_sorted(const char **sorted, size_t n, const char *id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(sorted[mid], id);
        if (c == 0) return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static int one_row(acemq_outbox *h, int q, const char *const *v, const char *what, const char *id);

static int pg_mark_published(acemq_outbox *h, const acemq_outbox_mark *marks, size_t n, int *status,
                             int64_t now)
{
    if (n == 1 && !h->opts.delete_on_publish) {
        char nb[24], tb[24];
        snprintf(tb, sizeof tb, "%lld", (long long)marks[0].token);
        const char *v[] = {now_param(nb, now), marks[0].id, tb};
        int rc = one_row(h, Q_PUBLISH_ONE, v, "mark_published", marks[0].id);
        if (rc == 0 || rc == ACEMQ_ESTALE || rc == ACEMQ_ENOENT) {
            status[0] = rc;
            return 0;
        }
        return rc;
    }
    strbuf ids = {0}, tokens = {0};
    sb_text_array(&ids, marks, n);
    sb_token_array(&tokens, marks, n);
    if (ids.oom || tokens.oom) {
        free(ids.p);
        free(tokens.p);
        return acemq__outbox_fail(h, ACEMQ_ENOMEM, "out of memory");
    }
    char nb[24];
    const char *v[] = {now_param(nb, now), ids.p, tokens.p};
    PGresult *done = NULL, *present = NULL;
    int rc = run(h, h->opts.delete_on_publish ? Q_PUBLISH_DELETE : Q_PUBLISH, v, &done, 0);
    const char **marked = NULL, **existing = NULL;
    unsigned char *used = NULL;
    size_t n_marked = 0, n_existing = 0;
    if (rc == 0) {
        n_marked = (size_t)PQntuples(done);
        marked = malloc((n_marked ? n_marked : 1) * sizeof *marked);
        used = calloc(n_marked ? n_marked : 1, 1);
        if (!marked || !used) {
            rc = ACEMQ_ENOMEM;
            (void)acemq__outbox_fail(h, rc, "out of memory");
        }
    }
    if (rc == 0) {
        for (size_t i = 0; i < n_marked; i++)
            marked[i] = PQgetvalue(done, (int)i, 0);
        qsort(marked, n_marked, sizeof *marked, cmp_str);
        if (n_marked < n) {
            /* Some were not marked: stale, or not there at all? */
            const char *ev[] = {ids.p};
            rc = run(h, Q_EXISTS, ev, &present, 0);
            if (rc == 0) {
                n_existing = (size_t)PQntuples(present);
                existing = malloc((n_existing ? n_existing : 1) * sizeof *existing);
                if (!existing) {
                    rc = ACEMQ_ENOMEM;
                    (void)acemq__outbox_fail(h, rc, "out of memory");
                }
            }
            if (rc == 0) {
                for (size_t i = 0; i < n_existing; i++)
                    existing[i] = PQgetvalue(present, (int)i, 0);
                qsort(existing, n_existing, sizeof *existing, cmp_str);
            }
        }
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        long k = find_sorted(marked, n_marked, marks[i].id);
        /* The same id twice in one batch: the row was marked once, and the
         * second mark finds it marked, as a second call would. */
        if (k >= 0 && !used[k]) {
            used[k] = 1;
            status[i] = 0;
        } else if (h->opts.delete_on_publish && k >= 0) {
            status[i] = ACEMQ_ENOENT;
        } else {
            status[i] =
                find_sorted(existing, n_existing, marks[i].id) >= 0 ? ACEMQ_ESTALE : ACEMQ_ENOENT;
            (void)acemq__outbox_fail(h, status[i], "mark_published '%s': %s", marks[i].id,
                                     status[i] == ACEMQ_ESTALE
                                         ? "the claim was taken over, released or already "
                                           "marked; the token is stale"
                                         : "no such record");
        }
    }
    free(marked);
    free(existing);
    free(used);
    PQclear(done);
    PQclear(present);
    free(ids.p);
    free(tokens.p);
    return rc;
}

/* After a mark changed nothing: ESTALE when the record exists, else ENOENT. */
static int stale_or_missing(acemq_outbox *h, const char *what, const char *id)
{
    acemq_outbox_mark m = {id, 0};
    strbuf ids = {0};
    sb_text_array(&ids, &m, 1);
    if (ids.oom) return acemq__outbox_fail(h, ACEMQ_ENOMEM, "out of memory");
    const char *v[] = {ids.p};
    PGresult *r;
    int rc = run(h, Q_EXISTS, v, &r, 0);
    free(ids.p);
    if (rc != 0) return rc;
    int found = PQntuples(r) > 0;
    PQclear(r);
    if (found)
        return acemq__outbox_fail(h, ACEMQ_ESTALE,
                                  "%s '%s': the claim was taken over, released or already "
                                  "marked; the token is stale",
                                  what, id);
    return acemq__outbox_fail(h, ACEMQ_ENOENT, "%s: no record '%s'", what, id);
}

/* Runs an UPDATE ... RETURNING on one record: 0 when it changed a row. */
static int one_row(acemq_outbox *h, int q, const char *const *v, const char *what, const char *id)
{
    PGresult *r;
    int rc = run(h, q, v, &r, 0);
    if (rc != 0) return rc;
    int changed = PQntuples(r) > 0;
    PQclear(r);
    return changed ? 0 : stale_or_missing(h, what, id);
}

static int pg_mark_failed(acemq_outbox *h, const char *id, uint64_t token,
                          const acemq__fail_args *a, int64_t now)
{
    char nb[24], tb[24], mb[16], bb[24], xb[24], jb[16];
    snprintf(tb, sizeof tb, "%lld", (long long)token);
    snprintf(mb, sizeof mb, "%d", a->max_attempts);
    snprintf(bb, sizeof bb, "%lld", (long long)a->backoff_base_ms);
    snprintf(xb, sizeof xb, "%lld", (long long)a->backoff_max_ms);
    snprintf(jb, sizeof jb, "%d", a->jitter_cut);
    const char *v[] = {now_param(nb, now), id, tb, a->reason, mb, bb, xb, jb};
    return one_row(h, Q_FAIL, v, "mark_failed", id);
}

static int pg_release(acemq_outbox *h, const char *id, uint64_t token, int64_t now)
{
    char nb[24], tb[24];
    snprintf(tb, sizeof tb, "%lld", (long long)token);
    const char *v[] = {now_param(nb, now), id, tb};
    return one_row(h, Q_RELEASE, v, "release", id);
}

static int pg_pending(acemq_outbox *h, acemq_outbox_pending *out, int64_t now)
{
    char nb[24];
    const char *v[] = {now_param(nb, now)};
    PGresult *r;
    int rc = run(h, Q_PENDING, v, &r, 0);
    if (rc != 0) return rc;
    out->unclaimed = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    out->claimed = strtoull(PQgetvalue(r, 0, 1), NULL, 10);
    out->dead = strtoull(PQgetvalue(r, 0, 2), NULL, 10);
    out->oldest_age_ms = out->unclaimed + out->claimed ? strtoll(PQgetvalue(r, 0, 3), NULL, 10) : 0;
    if (out->oldest_age_ms < 0) out->oldest_age_ms = 0;
    PQclear(r);
    return 0;
}

static int pg_list_dead(acemq_outbox *h, size_t max)
{
    char mb[24];
    snprintf(mb, sizeof mb, "%zu", max);
    const char *v[] = {mb};
    PGresult *r;
    int rc = run(h, Q_LIST_DEAD, v, &r, 1);
    return rc != 0 ? rc : collect(h, r);
}

static int pg_retry(acemq_outbox *h, const char *id, int64_t now)
{
    char nb[24];
    const char *v[] = {now_param(nb, now), id};
    PGresult *r;
    int rc = run(h, Q_RETRY, v, &r, 0);
    if (rc != 0) return rc;
    int changed = PQntuples(r) > 0;
    PQclear(r);
    return changed ? 0 : acemq__outbox_fail(h, ACEMQ_ENOENT, "retry: no dead record '%s'", id);
}

static int pg_purge_batch(acemq_outbox *h, int64_t now, int64_t older_than_ms, uint64_t limit,
                          int64_t *cursor, uint64_t *purged)
{
    pg *p = h->self;
    PGresult *r = NULL;
    int rc;
    if (*cursor == 0) {
        /* Rows added from here on are too young to purge. */
        rc = run(h, Q_PURGE_END, NULL, &r, 0);
        if (rc != 0) return rc;
        p->purge_end = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
    }
    if (limit > INT64_MAX / 2) limit = INT64_MAX / 2;
    char nb[24], ob[24], fb[24], lb[24];
    snprintf(ob, sizeof ob, "%lld", (long long)older_than_ms);
    snprintf(fb, sizeof fb, "%lld", (long long)*cursor);
    snprintf(lb, sizeof lb, "%llu", (unsigned long long)limit);
    const char *v[] = {now_param(nb, now), ob, fb, lb};
    rc = run(h, Q_PURGE, v, &r, 0);
    if (rc != 0) return rc;
    *purged = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    int none = PQgetisnull(r, 0, 1);
    int64_t lo = none ? 0 : strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    PQclear(r);
    if (none || lo > p->purge_end - (int64_t)limit)
        *cursor = ACEMQ__PURGE_DONE;
    else
        *cursor = lo + (int64_t)limit;
    return 0;
}

/* Drains notifications libpq already holds: 1 when there was one. */
static int drain_notifies(PGconn *conn)
{
    int got = 0;
    PGnotify *n;
    while ((n = PQnotifies(conn)) != NULL) {
        got = 1;
        PQfreemem(n);
    }
    return got;
}

static int pg_wait(acemq_outbox *h, int timeout_ms)
{
    pg *p = h->self;
    int rc = ensure_connected(h);
    if (rc != 0) return rc;
    if (!p->listening) {
        rc = exec_simple(h, "LISTEN acemq_outbox", "LISTEN");
        if (rc != 0) return rc;
        p->listening = 1;
        /* A commit from before the LISTEN sent no notification this session
         * hears: "look again" once, and every commit after it wakes us. */
        return 1;
    }
    int64_t deadline = acemq__mono_ms() + timeout_ms;
    for (;;) {
        if (PQconsumeInput(p->conn) != 1)
            return pg_fail(h, ACEMQ_EIO, "waiting for NOTIFY", PQerrorMessage(p->conn));
        if (drain_notifies(p->conn)) return 1;
        int64_t left = deadline - acemq__mono_ms();
        if (left <= 0) return 0;
        struct pollfd pfd = {.fd = PQsocket(p->conn), .events = POLLIN};
        if (pfd.fd < 0) return pg_fail(h, ACEMQ_EIO, "waiting for NOTIFY", "no socket");
        int prc = poll(&pfd, 1, (int)left);
        if (prc < 0 && errno != EINTR)
            return acemq__outbox_fail(h, ACEMQ_EIO, "postgres: poll: %s", strerror(errno));
    }
}

/* The server's notices ("relation already exists, skipping") are not the
 * caller's business: a library does not write to stderr. */
static void ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static const acemq__outbox_methods pg_methods = {
    .version = ACEMQ__OUTBOX_METHODS_VERSION,
    .name = "postgres",
    .close = pg_close,
    .claim_batch = pg_claim,
    .mark_published = pg_mark_published,
    .mark_failed = pg_mark_failed,
    .release = pg_release,
    .pending = pg_pending,
    .list_dead = pg_list_dead,
    .retry = pg_retry,

    .wait = pg_wait,
    .purge_batch = pg_purge_batch,
    .claim_runs = pg_claim_runs,
};

static int open_pg(acemq_outbox *h, const char *conninfo)
{
    pg *p = calloc(1, sizeof *p);
    if (!p) return acemq__outbox_fail(h, ACEMQ_ENOMEM, "out of memory");
    h->self = p;
    h->methods = &pg_methods;
    p->conn = acemq__pg_connect(conninfo);
    int rc = 0;
    if (!p->conn)
        rc = acemq__outbox_fail(h, ACEMQ_ENOMEM, "postgres: out of memory connecting");
    else if (PQstatus(p->conn) != CONNECTION_OK)
        rc = pg_fail(h, ACEMQ_EIO, "connecting", PQerrorMessage(p->conn));
    if (rc == 0) (void)PQsetNoticeProcessor(p->conn, ignore_notice, NULL);
    if (rc == 0) rc = ensure_schema(h);
    if (rc == 0) rc = prepare_all(h);
    if (rc != 0) {
        pg_close(h);
        h->methods = NULL;
    }
    return rc;
}

/* libpq reads the whole URL (host, port, user, password, database and its
 * own parameters); both schemes it accepts open the same backend. */
const acemq__outbox_backend acemq__pg_outbox_backend = {{"postgres", "postgres://"}, open_pg};
const acemq__outbox_backend acemq__pgsql_outbox_backend = {{"postgresql", NULL}, open_pg};

/* ------------------------------------------------------------------ add */

int acemq_outbox_add_pg(PGconn *conn, const acemq_outbox_record *r,
                        const acemq_outbox_add_options *o, char *id_out)
{
    if (!conn) return acemq__outbox_fail_thread(ACEMQ_EINVAL, "conn must not be NULL");
    switch (PQtransactionStatus(conn)) {
    case PQTRANS_INTRANS:
        break;
    case PQTRANS_IDLE:
        return acemq__outbox_fail_thread(ACEMQ_ENOTX,
                                         "add: no transaction is open on the connection; the "
                                         "record must be written with the work it belongs to");
    case PQTRANS_INERROR:
        return acemq__outbox_fail_thread(ACEMQ_ENOTX,
                                         "add: the connection's transaction has failed; roll "
                                         "it back");
    case PQTRANS_ACTIVE:
        return acemq__outbox_fail_thread(ACEMQ_EBUSY, "add: a command is in progress on the "
                                                      "connection");
    default:
        return acemq__outbox_fail_thread(ACEMQ_EIO, "add: the connection is not usable: %s",
                                         PQerrorMessage(conn));
    }
    char id[ACEMQ_OUTBOX_ID_MAX + 1];
    char *headers = NULL;
    int rc = acemq__outbox_prepare_record(r, o, id, &headers);
    if (rc != 0) return rc;
    char cb[24];
    const char *created = NULL;
    if (o && o->clock) {
        snprintf(cb, sizeof cb, "%lld", (long long)o->clock->now_ms(o->clock->ctx));
        created = cb;
    }
    const char *values[8] = {id,
                             r->destination,
                             r->routing_key,
                             r->ordering_key,
                             headers,
                             r->content_type,
                             r->body ? (const char *)r->body : "",
                             created};
    int lengths[8] = {0, 0, 0, 0, 0, 0, (int)r->body_len, 0};
    int formats[8] = {0, 0, 0, 0, 0, 0, 1, 0};
    PGresult *res = PQexecParams(
        conn,
        "INSERT INTO acemq_outbox(id, destination, routing_key, ordering_key, headers,"
        " content_type, body, created_at) VALUES($1, $2, $3, $4, $5, $6, $7,"
        " COALESCE($8::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint))"
        " ON CONFLICT (id) DO NOTHING RETURNING seq",
        8, NULL, values, lengths, formats, 0);
    free(headers);
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        int code = code_of(res, conn);
        const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(conn);
        size_t len = strlen(msg);
        while (len > 0 && msg[len - 1] == '\n')
            len--;
        (void)acemq__outbox_fail_thread(code, "postgres: add: %.*s%s", (int)len, msg,
                                        code == ACEMQ_ESCHEMA ? " (the outbox table is created by "
                                                                "acemq_outbox_open on this "
                                                                "database)"
                                                              : "");
        PQclear(res);
        return code;
    }
    int inserted = PQntuples(res) > 0;
    PQclear(res);
    if (!inserted)
        return acemq__outbox_fail_thread(ACEMQ_EEXIST, "add: a record with id '%s' exists", id);
    if (id_out) memcpy(id_out, id, strlen(id) + 1);
    return 0;
}

PGconn *acemq__pg_outbox_conn(acemq_outbox *h)
{
    const pg *p = h->self;
    return p->conn;
}

int acemq__pg_outbox_listening(acemq_outbox *h, int *listening)
{
    pg *p = h->self;
    PGresult *r = PQexec(p->conn, "SELECT count(*) FROM pg_listening_channels()");
    int rc = check(h, r, PGRES_TUPLES_OK, "pg_listening_channels");
    if (rc != 0) return rc;
    *listening = (int)strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return 0;
}

int acemq__pg_outbox_sync_setting(acemq_outbox *h, char *buf, size_t cap)
{
    pg *p = h->self;
    PGresult *r = PQexec(p->conn, "SHOW synchronous_commit");
    int rc = check(h, r, PGRES_TUPLES_OK, "SHOW synchronous_commit");
    if (rc != 0) return rc;
    (void)snprintf(buf, cap, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return 0;
}
