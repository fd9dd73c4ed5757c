/* idem.c — the idempotency store on PostgreSQL: every operation one
 * prepared statement (idem_sql.c), binary parameters and results (a
 * batch's arrays go as text), run under the handle's lock, retried on a
 * serialization failure or a deadlock. idem_pg.h has the invariants;
 * docs/idempotency.md the user's view. */
#include <stdlib.h>
#include <string.h>

#include "backends/postgres/idem_pg.h"

/* Tries of a statement the server aborted for a serialization failure
 * (40001) or a deadlock (40P01): the statement ran in a transaction of its
 * own, so running it again is safe. */
#define RETRIES 5

typedef struct params {
    const char *v[5];
    int len[5];
    int fmt[5];
    char ints[5][8]; /* big-endian int8 values */
} params;

static void p_bytes(params *q, int i, const void *data, size_t len)
{
    q->v[i] = len ? data : NULL;
    q->len[i] = (int)len;
    q->fmt[i] = 1;
}

static void p_int(params *q, int i, int64_t x)
{
    uint64_t u = (uint64_t)x;
    for (int k = 7; k >= 0; k--, u >>= 8)
        q->ints[i][k] = (char)(u & 0xff);
    q->v[i] = q->ints[i];
    q->len[i] = 8;
    q->fmt[i] = 1;
}

static void p_null(params *q, int i)
{
    q->v[i] = NULL;
    q->len[i] = 0;
    q->fmt[i] = 1;
}

/* now_ms for a statement: NULL (the database's clock) unless the caller
 * injected a clock. */
static void p_now(const pg_idem *p, params *q, int i, int64_t now_ms)
{
    if (p->db_clock)
        p_null(q, i);
    else
        p_int(q, i, now_ms);
}

static int64_t get_int(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col)) return 0;
    const unsigned char *b = (const unsigned char *)PQgetvalue(r, row, col);
    int n = PQgetlength(r, row, col);
    uint64_t u = 0;
    for (int k = 0; k < n; k++)
        u = (u << 8) | b[k];
    /* smallint (2 bytes) and integer (4) are signed too; ours are never negative. */
    return (int64_t)u;
}

static int get_bool(const PGresult *r, int row, int col)
{
    return !PQgetisnull(r, row, col) && PQgetlength(r, row, col) == 1 &&
           PQgetvalue(r, row, col)[0] != 0;
}

static int retryable(const PGresult *r)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return state && (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0);
}

/* 1 when r failed because the session has no such prepared statement
 * (26000): the caller reset its connection or ran DEALLOCATE ALL. */
static int statement_missing(const PGresult *r)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return state && strcmp(state, "26000") == 0;
}

/* Runs statement q: 0 with *out (PQclear it), or the error, on h. A
 * connection of the store's own that was lost (a server restarted, a
 * network cut) is made again and the statement sent once more: each
 * statement is atomic, so the first try either committed or did not. A
 * claim that did commit then answers IN_PROGRESS to its own retry and its
 * lease runs out as any abandoned claim's; a confirm repeats harmlessly; a
 * release that did commit answers ACEMQ_ESTALE to its retry (its token no
 * longer holds anything, which is what the caller wanted).
 * Statements the session lost are prepared again and the statement sent
 * once more; inside a caller's transaction, which the failure aborted, the
 * error is answered and the next call prepares them. */
static int run(acemq_idem *h, int q, const params *in, PGresult **out)
{
    pg_idem *p = h->self;
    *out = NULL;
    int reconnected = 0, reprepared = 0;
    for (int attempt = 0;; attempt++) {
        int rc = acemq__pg_idem_ensure_connected(h);
        if (rc != 0) return rc;
        /* A batch confirm joins the table with its arguments, and a plan
         * cached while the table was small scans all of it once the table
         * has grown: it is planned for each batch's own arguments (the
         * planning costs a batch what one index probe costs each id). */
        PGresult *r = q == PGQ_CONFIRM_MANY
                          ? PQexecParams(p->conn, p->sql[q], acemq__pg_idem_nparams[q],
                                         acemq__pg_idem_types[q], in->v, in->len, in->fmt, 1)
                          : PQexecPrepared(p->conn, p->names[q], acemq__pg_idem_nparams[q], in->v,
                                           in->len, in->fmt, 1);
        ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
        if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
            *out = r;
            return 0;
        }
        /* Inside a caller's transaction the failed statement aborted it: a
         * retry would only be refused. */
        if (retryable(r) && attempt + 1 < RETRIES && PQtransactionStatus(p->conn) == PQTRANS_IDLE) {
            PQclear(r);
            continue;
        }
        if (statement_missing(r)) {
            p->unprepared = 1;
            if (!reprepared && PQtransactionStatus(p->conn) == PQTRANS_IDLE) {
                PQclear(r);
                reprepared = 1;
                continue;
            }
        }
        if (p->owns_conn && !reconnected && PQstatus(p->conn) == CONNECTION_BAD) {
            PQclear(r);
            reconnected = 1;
            continue;
        }
        rc = acemq__pg_idem_fail(h, r, p->names[q] + strlen("acemq_idem_") + strlen(p->table) + 1);
        PQclear(r);
        return rc;
    }
}

static int differs(const PGresult *r, int k, int col, const acemq__bytes *fp)
{
    if (fp->len == 0 || PQgetisnull(r, k, col)) return 0;
    size_t n = (size_t)PQgetlength(r, k, col);
    return n != fp->len || memcmp(PQgetvalue(r, k, col), fp->data, n) != 0;
}

/* Columns of the claims' RETURNING (the batch's adds the id). */
enum { C_CLAIMED, C_STATE, C_TOKEN, C_LEASE, C_EXPIRES, C_FP, C_RESULT, C_TAKEOVER, C_ID };

/* What try_claim answers from row k of a claim's result: claimed says the
 * statement took the row for this claim. */
static int answer_row(acemq_idem *h, const PGresult *r, int k, int claimed,
                      const acemq__claim_args *a, acemq_claim *out)
{
    if (claimed) {
        out->token = (uint64_t)get_int(r, k, C_TOKEN);
        out->lease_until_ms = get_int(r, k, C_LEASE);
        out->takeover = get_bool(r, k, C_TAKEOVER);
        return ACEMQ_CLAIMED;
    }
    /* Not taken: a confirmed row is within retention, a claimed one held
     * (or claimed with another payload's fingerprint). */
    int64_t state = get_int(r, k, C_STATE);
    if (differs(r, k, C_FP, &a->fingerprint))
        return acemq__idem_fail(h, ACEMQ_EMISMATCH,
                                "id already seen with a different payload fingerprint");
    if (state == 2) {
        if (!PQgetisnull(r, k, C_RESULT)) {
            size_t n = (size_t)PQgetlength(r, k, C_RESULT);
            out->has_result = 1;
            out->result_len = n;
            if (a->result_cap > 0 && n > 0)
                memcpy(a->result_buf, PQgetvalue(r, k, C_RESULT),
                       n < a->result_cap ? n : a->result_cap);
        }
        return ACEMQ_ALREADY_CONFIRMED;
    }
    if (state == 1) {
        out->lease_until_ms = get_int(r, k, C_LEASE);
        return ACEMQ_IN_PROGRESS;
    }
    return acemq__idem_fail(h, ACEMQ_EBACKEND, "postgres: a claim left the row in state %lld",
                            (long long)state);
}

/* The claim's parameters for one id. */
static void claim_params(const pg_idem *p, params *q, const acemq__bytes *id,
                         const acemq__claim_args *a)
{
    p_bytes(q, 0, id->data, id->len);
    p_now(p, q, 1, a->now_ms);
    p_int(q, 2, a->lease_until_ms - a->now_ms);
    if (a->fingerprint.len)
        p_bytes(q, 3, a->fingerprint.data, a->fingerprint.len);
    else
        p_null(q, 3);
}

/* The claim's answer from its result r (NULL: the statement's error on the
 * connection). */
static int claim_answer(acemq_idem *h, PGresult *r, const acemq__claim_args *a, acemq_claim *out)
{
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_TUPLES_OK) return acemq__pg_idem_fail(h, r, "claim");
    if (PQntuples(r) != 1)
        return acemq__idem_fail(h, ACEMQ_EBACKEND, "postgres: a claim returned no row");
    return answer_row(h, r, 0, get_bool(r, 0, C_CLAIMED), a, out);
}

static int pg_try_claim(acemq_idem *h, const acemq__bytes *id, const acemq__claim_args *a,
                        acemq_claim *out)
{
    pg_idem *p = h->self;
    params q;
    claim_params(p, &q, id, a);
    pthread_mutex_lock(&p->lock);
    PGresult *r = NULL;
    int rc = run(h, PGQ_CLAIM, &q, &r);
    if (rc == 0) rc = claim_answer(h, r, a, out);
    PQclear(r);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* A growing text buffer for the batch's array parameters. */
typedef struct text {
    char *s;
    size_t n, cap;
    int failed;
} text;

static void put(text *t, const char *data, size_t len)
{
    if (t->failed) return;
    if (t->n + len + 1 > t->cap) {
        size_t cap = (t->cap + len + 1) * 2;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->failed = 1;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
    memcpy(t->s + t->n, data, len);
    t->n += len;
    t->s[t->n] = '\0';
}

/* A bytea array element in PostgreSQL's text form: "\\x<hex>". */
static void put_bytea(text *t, const unsigned char *b, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    put(t, "\"\\\\x", 4);
    for (size_t i = 0; i < len; i++) {
        char pair[2] = {hex[b[i] >> 4], hex[b[i] & 15]};
        put(t, pair, 2);
    }
    put(t, "\"", 1);
}

/* The first earlier element of the batch with the same id, or i. */
static size_t first_of(const acemq__bytes *ids, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (ids[j].len == ids[i].len && memcmp(ids[j].data, ids[i].data, ids[i].len) == 0) return j;
    return i;
}

/* The row the batch's statement returned for id, or -1. */
static int row_of(const PGresult *r, const acemq__bytes *id)
{
    for (int k = 0; k < PQntuples(r); k++)
        if ((size_t)PQgetlength(r, k, C_ID) == id->len &&
            memcmp(PQgetvalue(r, k, C_ID), id->data, id->len) == 0)
            return k;
    return -1;
}

/* A batch in one round trip and one statement over arrays of its distinct
 * ids; a repeated id is answered from its first one's row, which is what a
 * second claim would have read. Binary ids travel hex-encoded. */
static int pg_try_claim_many(acemq_idem *h, size_t n, const acemq__bytes *ids,
                             const acemq__claim_args *a, acemq_claim *out, int *status)
{
    pg_idem *p = h->self;
    text t_ids = {0}, t_leases = {0}, t_fps = {0};
    put(&t_ids, "{", 1);
    put(&t_leases, "{", 1);
    put(&t_fps, "{", 1);
    size_t distinct = 0;
    int64_t now_ms = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ids[i].len || first_of(ids, i) != i) continue;
        const char *sep = distinct++ ? "," : "";
        put(&t_ids, sep, strlen(sep));
        put(&t_leases, sep, strlen(sep));
        put(&t_fps, sep, strlen(sep));
        put_bytea(&t_ids, ids[i].data, ids[i].len);
        char num[24];
        int len = snprintf(num, sizeof num, "%lld", (long long)(a[i].lease_until_ms - a[i].now_ms));
        put(&t_leases, num, (size_t)len);
        if (a[i].fingerprint.len)
            put_bytea(&t_fps, a[i].fingerprint.data, a[i].fingerprint.len);
        else
            put(&t_fps, "NULL", 4);
        now_ms = a[i].now_ms;
    }
    put(&t_ids, "}", 1);
    put(&t_leases, "}", 1);
    put(&t_fps, "}", 1);
    int rc = t_ids.failed || t_leases.failed || t_fps.failed
                 ? acemq__idem_fail(h, ACEMQ_ENOMEM, "postgres: out of memory")
                 : 0;
    pthread_mutex_lock(&p->lock);
    PGresult *r = NULL;
    if (rc == 0 && distinct > 0) {
        params q = {{t_ids.s, t_leases.s, t_fps.s}, {0}, {0}, {{0}}};
        p_now(p, &q, 3, now_ms);
        rc = run(h, PGQ_CLAIM_MANY, &q, &r);
    }
    for (size_t i = 0; i < n; i++) {
        if (!ids[i].len) continue;
        size_t first = first_of(ids, i);
        int k = rc == 0 ? row_of(r, &ids[i]) : -1;
        if (rc != 0)
            status[i] = rc;
        else if (k < 0)
            status[i] = acemq__idem_fail(h, ACEMQ_EBACKEND, "postgres: a batch lost an id");
        else
            status[i] =
                answer_row(h, r, k, first == i && get_bool(r, k, C_CLAIMED), &a[i], &out[i]);
    }
    PQclear(r);
    pthread_mutex_unlock(&p->lock);
    free(t_ids.s);
    free(t_leases.s);
    free(t_fps.s);
    return 0;
}

/* Runs a fenced update (confirm, release, renew): 0 when it changed the
 * row, ACEMQ_ESTALE when the token is not the id's current claim. */
static int fenced(acemq_idem *h, int which, const char *what, const params *q)
{
    PGresult *r;
    int rc = run(h, which, q, &r);
    if (rc != 0) return rc;
    int changed = PQntuples(r) == 1;
    PQclear(r);
    if (changed) return 0;
    return acemq__idem_fail(h, ACEMQ_ESTALE,
                            "%s: token is not the current claim (taken over, released, or "
                            "forgotten)",
                            what);
}

/* With ACEMQ_IDEM_CONFIRM_IN_CALLER_TX a confirm joins the caller's open
 * transaction: ACEMQ_ENOTX, before anything is sent, when there is none
 * or it already failed; else 0. Caller holds p->lock. */
static int caller_tx_check(acemq_idem *h)
{
    pg_idem *p = h->self;
    if (!(h->opts.flags & ACEMQ_IDEM_CONFIRM_IN_CALLER_TX)) return 0;
    PGTransactionStatusType ts = PQtransactionStatus(p->conn);
    if (ts == PQTRANS_INERROR)
        return acemq__idem_fail(h, ACEMQ_ENOTX,
                                "postgres: the caller's transaction already failed: confirm "
                                "would not commit with it");
    if (ts != PQTRANS_INTRANS)
        return acemq__idem_fail(h, ACEMQ_ENOTX,
                                "postgres: no transaction is open on the caller's connection: "
                                "confirm joins the caller's transaction "
                                "(ACEMQ_IDEM_CONFIRM_IN_CALLER_TX)");
    return 0;
}

static int pg_confirm(acemq_idem *h, const acemq__bytes *id, uint64_t token,
                      const acemq__bytes *result, int64_t now_ms, int64_t expires_ms)
{
    pg_idem *p = h->self;
    params q;
    p_bytes(&q, 0, id->data, id->len);
    p_int(&q, 1, (int64_t)token);
    p_now(p, &q, 2, now_ms);
    p_int(&q, 3, expires_ms - now_ms);
    if (result->len)
        p_bytes(&q, 4, result->data, result->len);
    else
        p_null(&q, 4);
    pthread_mutex_lock(&p->lock);
    int rc = caller_tx_check(h);
    if (rc == 0) rc = fenced(h, PGQ_CONFIRM, "confirm", &q);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* 1 when elements i and j confirm the same claim: one id, one token. */
static int same_claim(const acemq__bytes *ids, const uint64_t *tokens, size_t i, size_t j)
{
    return tokens[i] == tokens[j] && ids[i].len == ids[j].len &&
           memcmp(ids[i].data, ids[j].data, ids[i].len) == 0;
}

/* Answers the batch's elements from the ordinalities r returned, one for
 * each claim the statement confirmed: 0 for the elements that name such a
 * claim, ESTALE for the rest. */
static void confirm_answers(acemq_idem *h, const PGresult *r, size_t n, const acemq__bytes *ids,
                            const uint64_t *tokens, int *status)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i].len) status[i] = ACEMQ_ESTALE;
    for (int k = 0; k < PQntuples(r); k++) {
        int64_t o = get_int(r, k, 0);
        if (o < 1 || (uint64_t)o > n || !ids[o - 1].len) continue;
        for (size_t i = 0; i < n; i++)
            if (ids[i].len && same_claim(ids, tokens, i, (size_t)(o - 1))) status[i] = 0;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i].len && status[i] == ACEMQ_ESTALE)
            (void)acemq__idem_fail(h, ACEMQ_ESTALE,
                                   "confirm: token %llu is not the current claim (taken over, "
                                   "released, or forgotten)",
                                   (unsigned long long)tokens[i]);
}

/* A batch of confirms in one round trip and one statement over arrays.
 * Element i is the arrays' element i + 1 (an id the core answered goes as
 * NULL, which matches no row), so an ordinality the statement returns
 * names an element. */
static int pg_confirm_many(acemq_idem *h, size_t n, const acemq__bytes *ids, const uint64_t *tokens,
                           const acemq__bytes *results, int64_t now_ms, int64_t expires_ms,
                           int *status)
{
    pg_idem *p = h->self;
    size_t todo = 0, last = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ids[i].len) continue;
        todo++;
        last = i;
    }
    /* One element: the single confirm's statement, the same answer
     * without the arrays. */
    if (todo == 1) {
        status[last] = pg_confirm(h, &ids[last], tokens[last], &results[last], now_ms, expires_ms);
        return 0;
    }
    text t_ids = {0}, t_tokens = {0}, t_results = {0};
    put(&t_ids, "{", 1);
    put(&t_tokens, "{", 1);
    put(&t_results, "{", 1);
    for (size_t i = 0; i < n; i++) {
        const char *sep = i ? "," : "";
        put(&t_ids, sep, strlen(sep));
        put(&t_tokens, sep, strlen(sep));
        put(&t_results, sep, strlen(sep));
        /* An element the core answered (len 0) has no result to read. */
        if (!ids[i].len) {
            put(&t_ids, "NULL", 4);
            put(&t_tokens, "0", 1);
            put(&t_results, "NULL", 4);
            continue;
        }
        put_bytea(&t_ids, ids[i].data, ids[i].len);
        char num[24];
        /* As the single confirm sends it: a token above INT64_MAX turns
         * negative, matches no row and is stale. */
        int len = snprintf(num, sizeof num, "%lld", (long long)(int64_t)tokens[i]);
        put(&t_tokens, num, (size_t)len);
        if (results[i].len)
            put_bytea(&t_results, results[i].data, results[i].len);
        else
            put(&t_results, "NULL", 4);
    }
    put(&t_ids, "}", 1);
    put(&t_tokens, "}", 1);
    put(&t_results, "}", 1);
    int rc = t_ids.failed || t_tokens.failed || t_results.failed
                 ? acemq__idem_fail(h, ACEMQ_ENOMEM, "postgres: out of memory")
                 : 0;
    pthread_mutex_lock(&p->lock);
    if (rc == 0) rc = caller_tx_check(h);
    PGresult *r = NULL;
    if (rc == 0) {
        params q = {{t_ids.s, t_tokens.s, t_results.s}, {0}, {0}, {{0}}};
        p_now(p, &q, 3, now_ms);
        p_int(&q, 4, expires_ms - now_ms);
        rc = run(h, PGQ_CONFIRM_MANY, &q, &r);
    }
    if (rc == 0) {
        confirm_answers(h, r, n, ids, tokens, status);
    } else {
        /* One statement: its failure is every element's answer. */
        for (size_t i = 0; i < n; i++)
            if (ids[i].len) status[i] = rc;
    }
    PQclear(r);
    pthread_mutex_unlock(&p->lock);
    free(t_ids.s);
    free(t_tokens.s);
    free(t_results.s);
    return 0;
}

static int pg_release(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms)
{
    pg_idem *p = h->self;
    params q;
    p_bytes(&q, 0, id->data, id->len);
    p_int(&q, 1, (int64_t)token);
    p_now(p, &q, 2, now_ms);
    p_int(&q, 3, h->opts.retention_ms);
    pthread_mutex_lock(&p->lock);
    int rc = fenced(h, PGQ_RELEASE, "release", &q);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static int pg_renew(acemq_idem *h, const acemq__bytes *id, uint64_t token, int64_t now_ms,
                    int64_t lease_until_ms)
{
    pg_idem *p = h->self;
    params q;
    p_bytes(&q, 0, id->data, id->len);
    p_int(&q, 1, (int64_t)token);
    p_now(p, &q, 2, now_ms);
    p_int(&q, 3, lease_until_ms - now_ms);
    pthread_mutex_lock(&p->lock);
    int rc = fenced(h, PGQ_RENEW, "renew", &q);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static int pg_is_confirmed(acemq_idem *h, const acemq__bytes *id, int64_t now_ms)
{
    pg_idem *p = h->self;
    params q;
    p_bytes(&q, 0, id->data, id->len);
    p_now(p, &q, 1, now_ms);
    pthread_mutex_lock(&p->lock);
    PGresult *r;
    int rc = run(h, PGQ_IS_CONFIRMED, &q, &r);
    if (rc == 0) {
        rc = PQntuples(r) > 0;
        PQclear(r);
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

#define PURGE_BATCH 1000

/* Deletes in batches of PURGE_BATCH, each a statement of its own, until a
 * batch finds fewer. */
static int purge_batches(acemq_idem *h, int which, params *q, int limit_at, uint64_t *total)
{
    p_int(q, limit_at, PURGE_BATCH);
    for (;;) {
        PGresult *r;
        int rc = run(h, which, q, &r);
        if (rc != 0) return rc;
        uint64_t n = strtoull(PQcmdTuples(r), NULL, 10);
        PQclear(r);
        *total += n;
        if (n < PURGE_BATCH) return 0;
    }
}

static int pg_purge(acemq_idem *h, int64_t now_ms, uint64_t *purged)
{
    pg_idem *p = h->self;
    uint64_t n = 0;
    params q;
    pthread_mutex_lock(&p->lock);
    p_now(p, &q, 0, now_ms);
    int rc = purge_batches(h, PGQ_PURGE_DONE, &q, 1, &n);
    if (rc == 0) {
        p_now(p, &q, 0, now_ms);
        p_int(&q, 1, h->opts.retention_ms);
        rc = purge_batches(h, PGQ_PURGE_ABANDONED, &q, 2, &n);
    }
    pthread_mutex_unlock(&p->lock);
    *purged = n;
    return rc;
}

/* ---- the operator's calls ---- */

static int pg_counts(acemq_idem *h, int64_t now_ms, acemq_idem_counts *out)
{
    pg_idem *p = h->self;
    params q;
    p_now(p, &q, 0, now_ms);
    pthread_mutex_lock(&p->lock);
    PGresult *r;
    int rc = run(h, PGQ_COUNTS, &q, &r);
    if (rc == 0) {
        for (int i = 0; i < PQntuples(r); i++) {
            uint64_t n = (uint64_t)get_int(r, i, 1);
            acemq__idem_counts_add(out, (int)get_int(r, i, 0), n);
        }
        PQclear(r);
        rc = run(h, PGQ_NEXT_LEASE, &q, &r);
    }
    if (rc == 0) {
        if (PQntuples(r) == 1) {
            size_t len = (size_t)PQgetlength(r, 0, 0);
            out->has_next_lease = 1;
            out->next_id_len = len;
            memcpy(out->next_id, PQgetvalue(r, 0, 0),
                   len < sizeof out->next_id ? len : sizeof out->next_id);
            out->next_token = (uint64_t)get_int(r, 0, 1);
            out->next_lease_until_ms = get_int(r, 0, 2);
        }
        PQclear(r);
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static int pg_inspect(acemq_idem *h, const acemq__bytes *id, int64_t now_ms, acemq_idem_record *out)
{
    pg_idem *p = h->self;
    params q;
    p_bytes(&q, 0, id->data, id->len);
    p_now(p, &q, 1, now_ms);
    pthread_mutex_lock(&p->lock);
    PGresult *r;
    int rc = run(h, PGQ_INSPECT, &q, &r);
    if (rc == 0) {
        if (PQntuples(r) == 1) {
            out->state = (int)get_int(r, 0, 0);
            out->token = (uint64_t)get_int(r, 0, 1);
            out->lease_until_ms = get_int(r, 0, 2);
            out->expires_ms = get_int(r, 0, 3);
            out->has_result = get_bool(r, 0, 4);
            out->result_len = (size_t)get_int(r, 0, 5);
            out->fingerprint_len = (size_t)get_int(r, 0, 6);
        } else {
            rc = ACEMQ_ENOENT;
        }
        PQclear(r);
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static int pg_forget(acemq_idem *h, const acemq__bytes *id, int64_t now_ms)
{
    (void)now_ms;
    pg_idem *p = h->self;
    params q;
    p_bytes(&q, 0, id->data, id->len);
    pthread_mutex_lock(&p->lock);
    PGresult *r;
    int rc = run(h, PGQ_FORGET, &q, &r);
    if (rc == 0) {
        rc = strtoull(PQcmdTuples(r), NULL, 10) > 0;
        PQclear(r);
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

const acemq__idem_methods acemq__pg_idem_methods = {
    .version = ACEMQ__IDEM_METHODS_VERSION,
    .name = "postgres",
    .close = acemq__pg_idem_close,
    .try_claim = pg_try_claim,
    .confirm = pg_confirm,
    .release = pg_release,
    .renew = pg_renew,
    .is_confirmed = pg_is_confirmed,
    .purge = pg_purge,
    .try_claim_many = pg_try_claim_many,
    .counts = pg_counts,
    .inspect = pg_inspect,
    .forget = pg_forget,
    .confirm_many = pg_confirm_many,
};
