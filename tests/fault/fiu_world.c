/* fiu_world.c — the shared fixture and checks of test_fault_fiu.c
 * (fiu_world.h). Faults are only ever on around one library call; every
 * check here runs with them off.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <unistd.h>

#include "acemq/sqlite.h"
#include "backends/test_control.h"
#include "fault/fiu_faults.h"
#include "fault/fiu_world.h"
#include "unit/scratch_db.h"

#define IDS 64
#define LEASE_MS 5000

static void exec_or_fail(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        fail_msg("%s: %s", sql, copy);
    }
}

int world_setup(void **state)
{
    void *scratch = NULL;
    if (scratch_db_setup(&scratch, "fiu") != 0) return -1;
    scratch_db *s = scratch;
    fiu_world *w = calloc(1, sizeof *w);
    if (!w) return -1;
    snprintf(w->dir, sizeof w->dir, "%s", s->dir);
    snprintf(w->path, sizeof w->path, "%s", s->path);
    snprintf(w->url, sizeof w->url, "sqlite:%s", s->path);
    free(s);
    if (acemq_manual_clock_new(&w->clock, 1000000000) != 0) return -1;
    /* The outbox's open creates its schema; the caller's tables beside it. */
    acemq_outbox *h = NULL;
    if (acemq_outbox_open(&h, w->url, NULL) != 0) return -1;
    acemq_outbox_close(h);
    if (sqlite3_open(w->path, &w->caller) != SQLITE_OK) return -1;
    if (acemq_sqlite_busy_wait(w->caller, 5000) != 0) return -1;
    exec_or_fail(w->caller, "CREATE TABLE orders(n INTEGER PRIMARY KEY, amount INTEGER NOT NULL);"
                            "CREATE TABLE effects(id TEXT PRIMARY KEY)");
    *state = w;
    return 0;
}

int world_teardown(void **state)
{
    fiu_world *w = *state;
    fiu_faults_off();
    acemq_outbox_close(w->outbox);
    (void)sqlite3_close(w->caller);
    acemq_manual_clock_free(w->clock);
    scratch_db *s = calloc(1, sizeof *s);
    if (s) {
        snprintf(s->dir, sizeof s->dir, "%s", w->dir);
        void *p = s;
        (void)scratch_db_teardown(&p);
    }
    free(w);
    return 0;
}

void world_record_id(char *buf, size_t cap, int i)
{
    snprintf(buf, cap, "order-%06d", i);
}

long world_scalar(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    if (sqlite3_step(st) != SQLITE_ROW) fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    long v = (long)sqlite3_column_int64(st, 0);
    (void)sqlite3_finalize(st);
    return v;
}

void world_expect_integrity(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const char *answer = (const char *)sqlite3_column_text(st, 0);
    if (!answer || strcmp(answer, "ok") != 0)
        fail_msg("integrity_check: %s", answer ? answer : "(null)");
    (void)sqlite3_finalize(st);
}

typedef struct fault_choice {
    unsigned kinds;
    double p;
} fault_choice;

/* A call makes tens of allocations and a few writes and syncs: memory
 * faults are rare per call, file faults frequent, so that both land on
 * early and late calls alike; an eighth of the calls meet none. */
static const fault_choice local_mix[] = {{FIU_ALL, 0.0},  {FIU_MEM, 0.002}, {FIU_MEM, 0.01},
                                         {FIU_MEM, 0.05}, {FIU_FILE, 0.1},  {FIU_FILE, 0.3},
                                         {FIU_FILE, 0.6}, {FIU_ALL, 0.02}};
/* A call to a server makes one to a few sends and receives: a failure on
 * the first, on a later one (after the server acted) and on none. The
 * first four leave memory alone. */
static const fault_choice network_mix[] = {{FIU_ALL, 0.0},
                                           {FIU_NET | FIU_FILE, 0.1},
                                           {FIU_NET | FIU_FILE, 0.3},
                                           {FIU_NET | FIU_FILE, 0.6},
                                           {FIU_MEM, 0.01},
                                           {FIU_ALL, 0.05}};

static const fault_choice *mix = local_mix;
static size_t mix_len = sizeof local_mix / sizeof local_mix[0];

void world_faults_network(int memory)
{
    mix = network_mix;
    mix_len = memory ? sizeof network_mix / sizeof network_mix[0] : 4;
}

void world_faults_on(void)
{
    const fault_choice *c = &mix[fiu_faults_next() % mix_len];
    fiu_faults_on(c->kinds, c->p);
}

void world_expect_clean(world_counts *c, const char *call, int i, int rc, const char *msg)
{
    c->calls++;
    switch (rc) {
    case ACEMQ_ENOMEM:
        c->enomem++;
        break;
    case ACEMQ_EIO:
        c->eio++;
        break;
    case ACEMQ_EBACKEND:
        c->ebackend++;
        break;
    default:
        if (rc >= 0) {
            c->ok++;
            return;
        }
        fail_msg("iteration %d: %s answered %s ('%s'): not an error a failed malloc, write, "
                 "fsync or read may cause",
                 i, call, acemq_err_name(rc), msg ? msg : "(null)");
    }
    if (!msg || !*msg)
        fail_msg("iteration %d: %s answered %s with no message", i, call, acemq_err_name(rc));
}

void world_report(const char *name, int iterations, const world_counts *c, long items)
{
    printf("%s: %d iterations, %ld calls under faults: %ld ok, %ld ENOMEM, %ld EIO, "
           "%ld EBACKEND; %ld items consistent\n",
           name, iterations, c->calls, c->ok, c->enomem, c->eio, c->ebackend, items);
}

/* ---------------------------------------------------------------- outbox */

void world_add_records(fiu_world *w, int from, int to)
{
    for (int i = from; i < to; i++) {
        char id[32];
        world_record_id(id, sizeof id, i);
        acemq_outbox_record r = {.id = id,
                                 .destination = "orders",
                                 .routing_key = "order.created",
                                 .body = "x",
                                 .body_len = 1};
        exec_or_fail(w->caller, "BEGIN IMMEDIATE");
        int rc = acemq_outbox_add_sqlite(w->caller, &r, NULL, NULL);
        if (rc != 0) fail_msg("add %s: %s", id, acemq_outbox_errmsg(NULL));
        exec_or_fail(w->caller, "COMMIT");
    }
}

static void outbox_options(fiu_world *w, acemq_outbox_options *o)
{
    acemq_outbox_options_init(o);
    o->clock = acemq_manual_clock_get(w->clock);
    o->jitter_percent = 0;
    o->backoff_base_ms = 100;
    o->backoff_max_ms = 1000;
    o->max_attempts = 1000000;
}

acemq_outbox *world_outbox(fiu_world *w)
{
    if (w->outbox) return w->outbox;
    acemq_outbox_options o;
    outbox_options(w, &o);
    if (acemq_outbox_open(&w->outbox, w->url, &o) != 0)
        fail_msg("outbox open: %s", acemq_outbox_errmsg(NULL));
    return w->outbox;
}

void world_open_under_faults(fiu_world *w, world_counts *c)
{
    acemq_outbox_options o;
    outbox_options(w, &o);
    for (int i = 0; i < 20; i++) {
        acemq_outbox *h = NULL;
        world_faults_on();
        int rc = acemq_outbox_open(&h, w->url, &o);
        fiu_faults_off();
        world_expect_clean(c, "acemq_outbox_open", i, rc, acemq_outbox_errmsg(NULL));
        if (rc != 0 && h) fail_msg("acemq_outbox_open failed and left a handle");
        acemq_outbox_close(h);
    }
}

void world_drain_outbox(fiu_world *w, acemq_outbox *h)
{
    for (int round = 0; round < 10000; round++) {
        acemq_manual_clock_advance(w->clock, 600000);
        const acemq_outbox_msg *msgs = NULL;
        size_t n = 0;
        int rc = acemq_outbox_claim_batch(h, 50, 30000, &msgs, &n);
        if (rc != 0) fail_msg("drain: claim: %s", acemq_outbox_errmsg(h));
        if (n == 0) return;
        acemq_outbox_mark marks[50];
        int status[50];
        for (size_t k = 0; k < n; k++)
            marks[k] = (acemq_outbox_mark){msgs[k].id, msgs[k].token};
        rc = acemq_outbox_mark_published_batch(h, marks, n, status);
        if (rc != 0) fail_msg("drain: mark: %s", acemq_outbox_errmsg(h));
        for (size_t k = 0; k < n; k++)
            if (status[k] != 0)
                fail_msg("drain: mark %s: %s", marks[k].id, acemq_err_name(status[k]));
    }
    fail_msg("the outbox never ran dry");
}

void world_expect_all_published(fiu_world *w, int n)
{
    assert_int_equal(world_scalar(w->caller, "SELECT count(*) FROM acemq_outbox"), n);
    long published =
        world_scalar(w->caller, "SELECT count(*) FROM acemq_outbox WHERE state = 1 AND "
                                "published_at IS NOT NULL");
    if (published != n) fail_msg("%ld of %d records published", published, n);
    acemq_outbox_pending p;
    assert_int_equal(acemq_outbox_pending_count(world_outbox(w), &p), 0);
    assert_int_equal(p.unclaimed + p.claimed + p.dead, 0);
    world_expect_integrity(w->caller);
}

void world_tally_start(world_tally *t, int n)
{
    t->seen = calloc((size_t)n, sizeof *t->seen);
    assert_non_null(t->seen);
    t->n = n;
    t->stranger[0] = '\0';
}

int world_tally_add(world_tally *t, const char *id, size_t len)
{
    char text[64];
    snprintf(text, sizeof text, "%.*s", (int)(len < 63 ? len : 63), id);
    int k = -1;
    char rest = 0;
    if (sscanf(text, "order-%d%c", &k, &rest) != 1 || k < 0 || k >= t->n) {
        snprintf(t->stranger, sizeof t->stranger, "%s", text);
        return -1;
    }
    t->seen[k]++;
    return 0;
}

long world_tally_end(world_tally *t, const char *where)
{
    long duplicates = 0;
    int missing = -1;
    char list[256] = "";
    size_t used = 0;
    int more = 0; /* the list was cut short */
    for (int k = 0; k < t->n; k++) {
        if (!t->seen[k] && missing < 0) missing = k;
        if (t->seen[k] < 2) continue;
        duplicates += t->seen[k] - 1;
        if (used + 32 < sizeof list) {
            int wrote = snprintf(list + used, sizeof list - used, "%sorder-%06d x%u",
                                 used ? ", " : "", k, t->seen[k]);
            if (wrote > 0) used += (size_t)wrote;
        } else {
            more = 1;
        }
    }
    free(t->seen);
    t->seen = NULL;
    if (t->stranger[0]) fail_msg("%s: the broker holds '%s', never committed", where, t->stranger);
    if (missing >= 0) fail_msg("%s: record order-%06d never reached the broker", where, missing);
    printf("%s: duplicates: %ld%s%s%s\n", where, duplicates, duplicates ? ": " : "", list,
           more ? ", ..." : "");
    return duplicates;
}

long world_expect_broker_holds(fiu_world *w, acemq_broker *probe, int n)
{
    (void)w;
    world_tally t;
    world_tally_start(&t, n);
    size_t total = acemq__memory_broker_count(probe);
    for (size_t i = 0; i < total; i++) {
        acemq__stored_msg m;
        assert_int_equal(acemq__memory_broker_get(probe, i, &m), 0);
        if (world_tally_add(&t, m.message_id, strlen(m.message_id)) != 0) break;
    }
    return world_tally_end(&t, "memory broker");
}

/* ------------------------------------------------------------------ idem */

typedef struct idem_model {
    unsigned char confirmed[IDS];
    world_counts counts;
    long twice; /* a confirmed id claimed again: the work done twice */
} idem_model;

static int id_of(char *buf, size_t cap, int k)
{
    return snprintf(buf, cap, "msg-%04d", k);
}

/* try_claim under faults; after an error, again with the faults off (and,
 * when the failed call had written its claim, once its lease ran out). */
static int claim_id(fiu_world *w, acemq_idem *h, idem_model *m, int i, int k, acemq_claim *c)
{
    char id[32];
    size_t len = (size_t)id_of(id, sizeof id, k);
    acemq_claim_opts opts = {.lease_ms = LEASE_MS};
    world_faults_on();
    int rc = acemq_idem_try_claim(h, id, len, &opts, c);
    fiu_faults_off();
    world_expect_clean(&m->counts, "acemq_idem_try_claim", i, rc, acemq_idem_errmsg(h));
    /* A server's store retries a statement once on a new connection: when
     * the lost one had taken the claim, the retry finds it held. */
    int lost_reply = rc == ACEMQ_IN_PROGRESS && w->replies_can_be_lost;
    if (rc >= 0 && !lost_reply) return rc;
    if (!lost_reply) rc = acemq_idem_try_claim(h, id, len, &opts, c);
    if (rc == ACEMQ_IN_PROGRESS) {
        acemq_manual_clock_advance(w->clock, LEASE_MS + 1);
        rc = acemq_idem_try_claim(h, id, len, &opts, c);
    }
    if (rc < 0) fail_msg("iteration %d: try_claim retry: %s", i, acemq_idem_errmsg(h));
    return rc;
}

static void judge_claim(const idem_model *m, int i, int k, int rc)
{
    if (rc == ACEMQ_CLAIMED && m->confirmed[k])
        fail_msg("iteration %d: msg-%04d was confirmed and is CLAIMED again: done twice", i, k);
    if (rc == ACEMQ_ALREADY_CONFIRMED && !m->confirmed[k])
        fail_msg("iteration %d: msg-%04d is ALREADY_CONFIRMED but no confirm succeeded", i, k);
    if (rc == ACEMQ_IN_PROGRESS)
        fail_msg("iteration %d: msg-%04d is IN_PROGRESS with no claim held", i, k);
}

void world_idem_model(fiu_world *w, const char *url, int iterations)
{
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(w->clock);
    idem_model m = {0};
    for (int i = 0; i < 20; i++) { /* opening under faults */
        acemq_idem *h = NULL;
        world_faults_on();
        int rc = acemq_idem_open(&h, url, &o);
        fiu_faults_off();
        world_expect_clean(&m.counts, "acemq_idem_open", i, rc, acemq_idem_errmsg(NULL));
        acemq_idem_close(h);
    }
    acemq_idem *h = NULL;
    if (acemq_idem_open(&h, url, &o) != 0) fail_msg("open %s: %s", url, acemq_idem_errmsg(NULL));
    for (int i = 0; i < iterations; i++) {
        int k = (int)(fiu_faults_next() % IDS);
        char id[32];
        size_t len = (size_t)id_of(id, sizeof id, k);
        acemq_claim c;
        int rc = claim_id(w, h, &m, i, k, &c);
        judge_claim(&m, i, k, rc);
        if (rc == ACEMQ_CLAIMED) {
            int confirm = fiu_faults_next() % 5 != 0;
            const char *call = confirm ? "acemq_idem_confirm" : "acemq_idem_release";
            world_faults_on();
            rc = confirm ? acemq_idem_confirm(h, id, len, c.token)
                         : acemq_idem_release(h, id, len, c.token);
            fiu_faults_off();
            /* The store's own retry on a new connection found the release
             * that lost its reply done. */
            if (rc == ACEMQ_ESTALE && !confirm && w->replies_can_be_lost) rc = 0;
            world_expect_clean(&m.counts, call, i, rc, acemq_idem_errmsg(h));
            if (rc != 0) {
                rc = confirm ? acemq_idem_confirm(h, id, len, c.token)
                             : acemq_idem_release(h, id, len, c.token);
                /* The failed release took effect and only its reply was
                 * lost: the token no longer holds. */
                if (rc == ACEMQ_ESTALE && !confirm && w->replies_can_be_lost) rc = 0;
                if (rc != 0)
                    fail_msg("iteration %d: %s retry: %s: %s", i, call, acemq_err_name(rc),
                             acemq_idem_errmsg(h));
            }
            if (confirm) m.confirmed[k] = 1;
        }
        world_faults_on();
        rc = acemq_idem_is_confirmed(h, id, len);
        fiu_faults_off();
        world_expect_clean(&m.counts, "acemq_idem_is_confirmed", i, rc, acemq_idem_errmsg(h));
        if (rc >= 0 && rc != m.confirmed[k])
            fail_msg("iteration %d: is_confirmed(%s) %d, expected %d", i, id, rc, m.confirmed[k]);
        acemq_manual_clock_advance(w->clock, 10);
    }
    long confirmed = 0;
    for (int k = 0; k < IDS; k++) {
        char id[32];
        size_t len = (size_t)id_of(id, sizeof id, k);
        int rc = acemq_idem_is_confirmed(h, id, len);
        if (rc != m.confirmed[k])
            fail_msg("end: is_confirmed(%s) %d, expected %d", id, rc, m.confirmed[k]);
        confirmed += rc;
    }
    acemq_idem_close(h);
    char name[64];
    snprintf(name, sizeof name, "idem %.*s", (int)strcspn(url, ":"), url);
    world_report(name, iterations, &m.counts, confirmed);
}

/* ------------------------------------------------------------------ inbox */

static long effects_of(fiu_world *w, const char *id)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM effects WHERE id = '%s'", id);
    return world_scalar(w->caller, sql);
}

/* The effect and the confirm in one caller transaction: 1 when it committed. */
static int apply(fiu_world *w, acemq_idem *h, const char *id, size_t len, uint64_t token,
                 int *confirm_rc)
{
    char sql[128];
    snprintf(sql, sizeof sql, "INSERT INTO effects(id) VALUES('%s')", id);
    *confirm_rc = 0;
    int rc = sqlite3_exec(w->caller, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_exec(w->caller, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        *confirm_rc = acemq_idem_confirm(h, id, len, token);
        if (*confirm_rc != 0) rc = SQLITE_ERROR;
    }
    if (rc == SQLITE_OK) rc = sqlite3_exec(w->caller, "COMMIT", NULL, NULL, NULL);
    return rc == SQLITE_OK;
}

/* After a failed apply, with the faults off: the caller rolls back what is
 * still open (SQLite may have rolled back on its own already). */
static void rollback(fiu_world *w)
{
    if (sqlite3_get_autocommit(w->caller)) return;
    if (sqlite3_exec(w->caller, "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK)
        fail_msg("ROLLBACK: %s", sqlite3_errmsg(w->caller));
}

void world_inbox_model(fiu_world *w, int iterations)
{
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(w->clock);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    idem_model m = {0};
    acemq_idem *h = NULL;
    for (int i = 0; i < 20; i++) { /* opening under faults */
        world_faults_on();
        int rc = acemq_idem_open_sqlite(&h, w->caller, &o);
        fiu_faults_off();
        world_expect_clean(&m.counts, "acemq_idem_open_sqlite", i, rc, acemq_idem_errmsg(NULL));
        acemq_idem_close(h);
        h = NULL;
    }
    if (acemq_idem_open_sqlite(&h, w->caller, &o) != 0)
        fail_msg("open: %s", acemq_idem_errmsg(NULL));
    for (int i = 0; i < iterations; i++) {
        int k = (int)(fiu_faults_next() % IDS);
        char id[32];
        size_t len = (size_t)id_of(id, sizeof id, k);
        acemq_claim c;
        int rc = claim_id(w, h, &m, i, k, &c);
        judge_claim(&m, i, k, rc);
        if (rc == ACEMQ_CLAIMED) {
            int confirm_rc = 0;
            world_faults_on();
            int done = apply(w, h, id, len, c.token, &confirm_rc);
            fiu_faults_off();
            world_expect_clean(&m.counts, "acemq_idem_confirm (caller's transaction)", i,
                               confirm_rc, acemq_idem_errmsg(h));
            if (!done) {
                rollback(w);
                /* Rolled back: no effect, not confirmed; the claim still ours. */
                if (effects_of(w, id) != 0 || acemq_idem_is_confirmed(h, id, len) != 0)
                    fail_msg("iteration %d: %s rolled back but left its effect or confirm", i, id);
                done = apply(w, h, id, len, c.token, &confirm_rc);
                if (!done) rollback(w);
                if (!done)
                    fail_msg("iteration %d: retry of %s: %s / %s", i, id,
                             acemq_err_name(confirm_rc),
                             confirm_rc ? acemq_idem_errmsg(h) : sqlite3_errmsg(w->caller));
            }
            m.confirmed[k] = 1;
        }
        if (effects_of(w, id) != m.confirmed[k] ||
            acemq_idem_is_confirmed(h, id, len) != m.confirmed[k])
            fail_msg("iteration %d: %s: effect and confirm disagree with the answers", i, id);
        acemq_manual_clock_advance(w->clock, 10);
    }
    long applied = world_scalar(w->caller, "SELECT count(*) FROM effects");
    long confirmed = 0;
    for (int k = 0; k < IDS; k++)
        confirmed += m.confirmed[k];
    assert_int_equal(applied, confirmed);
    acemq_idem_close(h);
    world_report("inbox", iterations, &m.counts, applied);
}
