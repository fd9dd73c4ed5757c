/* test_outbox_drain.c — four claimers drain 100,000 records from one outbox:
 * every record published exactly once, and never held by two claimers at
 * once. Threads with a handle each on SQLite, a connection each on
 * PostgreSQL: `test_outbox_drain sqlite|postgres [records]`.
 *
 * The records are inserted with plain SQL, as a program in another language
 * would (docs/schema.md), so the schema's defaults are part of what is
 * tested. The clock never moves, so no lease runs out: any record seen by two
 * claimers is a broken claim, not a takeover.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance/outbox_fixture.h"

#define CLAIMERS 4
#define BATCH 100

static outbox_fixture fx;
static long records = 100000;
static atomic_int *holder;    /* claimer + 1 holding record i, 0 none */
static atomic_int *published; /* times record i was marked published */
static atomic_long done;
static atomic_long violations;

static void die(const char *what, acemq_outbox *h, int rc)
{
    fprintf(stderr, "%s: %s: %s\n", what, acemq_err_name(rc),
            h ? acemq_outbox_errmsg(h) : acemq_outbox_errmsg(NULL));
    exit(1);
}

static long index_of(const char *id)
{
    return strtol(id + 1, NULL, 10);
}

static void *claimer(void *arg)
{
    int me = *(const int *)arg;
    acemq_outbox *h = NULL;
    int rc = acemq_outbox_open(&h, fx.url, &fx.opts);
    if (rc != 0) die("open", NULL, rc);
    acemq_outbox_mark marks[BATCH];
    int status[BATCH];
    long idx[BATCH];
    while (atomic_load(&done) < records) {
        const acemq_outbox_msg *m;
        size_t n;
        rc = acemq_outbox_claim_batch(h, BATCH, 600000, &m, &n);
        if (rc != 0) die("claim_batch", h, rc);
        for (size_t i = 0; i < n; i++) {
            idx[i] = index_of(m[i].id);
            int expected = 0;
            if (idx[i] < 0 || idx[i] >= records ||
                !atomic_compare_exchange_strong(&holder[idx[i]], &expected, me)) {
                fprintf(stderr, "record %s claimed by %d while held by %d\n", m[i].id, me,
                        expected);
                atomic_fetch_add(&violations, 1);
            }
            marks[i].id = m[i].id;
            marks[i].token = m[i].token;
        }
        if (n == 0) continue;
        rc = acemq_outbox_mark_published_batch(h, marks, n, status);
        if (rc != 0) die("mark_published_batch", h, rc);
        for (size_t i = 0; i < n; i++) {
            if (status[i] != 0) {
                fprintf(stderr, "mark %s: %s\n", marks[i].id, acemq_err_name(status[i]));
                atomic_fetch_add(&violations, 1);
                continue;
            }
            atomic_fetch_add(&published[idx[i]], 1);
            atomic_store(&holder[idx[i]], 0);
            atomic_fetch_add(&done, 1);
        }
    }
    acemq_outbox_close(h);
    return NULL;
}

int main(int argc, char **argv)
{
    int pg = outbox_backend_from_args(argc, argv);
    if (argc > 2) records = strtol(argv[2], NULL, 10);
    if (records < 1 || records > 1000000) {
        fprintf(stderr, "records must be within 1..1000000\n");
        return 2;
    }
    outbox_fixture_init(&fx, pg);
    fx.opts.busy_timeout_ms = 120000; /* four writers take turns on SQLite's one lock */
    holder = calloc((size_t)records, sizeof *holder);
    published = calloc((size_t)records, sizeof *published);
    if (!holder || !published) return 1;

    char sql[512];
    if (pg)
        snprintf(sql, sizeof sql,
                 "INSERT INTO acemq_outbox(id, destination, routing_key, body)"
                 " SELECT 'r' || lpad(g::text, 7, '0'), 'orders', 'order.created',"
                 " convert_to('body ' || g, 'UTF8') FROM generate_series(0, %ld) g",
                 records - 1);
    else
        snprintf(
            sql, sizeof sql,
            "WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < %ld)"
            " INSERT INTO acemq_outbox(id, destination, routing_key, body)"
            " SELECT printf('r%%07d', i), 'orders', 'order.created', CAST('body ' || i AS BLOB)"
            " FROM g",
            records - 1);
    outbox_sql(&fx, NULL, sql);

    pthread_t t[CLAIMERS];
    static int who[CLAIMERS];
    for (int i = 0; i < CLAIMERS; i++) {
        who[i] = i + 1;
        if (pthread_create(&t[i], NULL, claimer, &who[i]) != 0) return 1;
    }
    for (int i = 0; i < CLAIMERS; i++)
        pthread_join(t[i], NULL);

    long once = 0, never = 0, twice = 0;
    for (long i = 0; i < records; i++) {
        int p = atomic_load(&published[i]);
        once += p == 1;
        never += p == 0;
        twice += p > 1;
    }
    acemq_outbox *h = outbox_fixture_open(&fx);
    acemq_outbox_pending pend;
    int rc = acemq_outbox_pending_count(h, &pend);
    if (rc != 0) die("pending_count", h, rc);
    acemq_outbox_close(h);
    printf("%s: %ld records, %d claimers: published once %ld, never %ld, more than once %ld, "
           "held by two at once %ld; left pending %llu\n",
           pg ? "postgres" : "sqlite", records, CLAIMERS, once, never, twice,
           (long)atomic_load(&violations),
           (unsigned long long)pend.unclaimed + pend.claimed + pend.dead);
    int ok = once == records && atomic_load(&violations) == 0 &&
             pend.unclaimed + pend.claimed + pend.dead == 0;
    outbox_fixture_free(&fx);
    free(holder);
    free(published);
    return ok ? 0 : 1;
}
