/* test_errmsg.c — every call that fails leaves a message about that failure.
 *
 * For each public call of the idempotency store, the outbox, the broker and
 * the relay, each invalid argument or state is provoked right after a
 * different error, and the handle's errmsg (or the thread's, for the calls
 * without a handle) must have changed and name the problem. The stores run
 * on memory and SQLite, the broker in-process: no server is needed.
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

#include "acemq/acemq.h"
#include "acemq/relay.h"
#include "acemq/sqlite.h"
#include "backends/test_control.h"
#include "scratch_db.h"

#define TEXT_MAX 1024

static void copy_text(char *dst, const char *src)
{
    snprintf(dst, TEXT_MAX, "%s", src ? src : "(null)");
}

/* rc is want, and after (the message once the call returned) differs from
 * before (the message a different error left) and contains needle. */
static void check_said(const char *call, int rc, int want, const char *before, const char *after,
                       const char *needle)
{
    if (rc != want)
        fail_msg("%s: %s, expected %s ('%s')", call, acemq_err_name(rc), acemq_err_name(want),
                 after);
    if (strcmp(before, after) == 0)
        fail_msg("%s: %s, but the message is still the previous error's: '%s'", call,
                 acemq_err_name(rc), after);
    if (!strstr(after, needle)) fail_msg("%s: '%s' does not say '%s'", call, after, needle);
}

/* The message after a different error, one that does not say needle: the
 * first of the candidates whose text does not contain it. */
static void pick_prime(char *before, const char *needle, const char *first, const char *second)
{
    if (!strstr(first, needle)) {
        copy_text(before, first);
        return;
    }
    if (strstr(second, needle)) fail_msg("no prime error avoids '%s'", needle);
    copy_text(before, second);
}

/* ------------------------------------------------------------ idem */

static const char *idem_said(acemq_idem *h, char *buf)
{
    copy_text(buf, acemq_idem_errmsg(h));
    return buf;
}

/* Leaves on h an error that does not say needle; before gets its text. */
static void prime_idem(acemq_idem *h, const char *needle, char *before)
{
    static char over[1025];
    memset(over, 'p', sizeof over);
    acemq_claim c;
    char a[TEXT_MAX], b[TEXT_MAX];
    assert_int_equal(acemq_idem_try_claim(h, over, sizeof over, NULL, &c), ACEMQ_EINVAL);
    idem_said(h, a);
    if (!strstr(a, needle)) {
        copy_text(before, a);
        return;
    }
    assert_int_equal(acemq_idem_renew(h, "p", 1, 1, -7), ACEMQ_EINVAL);
    pick_prime(before, needle, a, idem_said(h, b));
}

#define IDEM_EXPECT(h, want, needle, call)                                                         \
    do {                                                                                           \
        char before_[TEXT_MAX], after_[TEXT_MAX];                                                  \
        prime_idem((h), (needle), before_);                                                        \
        int rc_ = (call);                                                                          \
        check_said(#call, rc_, (want), before_, idem_said((h), after_), (needle));                 \
    } while (0)

/* The same for the calls without a handle, explained by acemq_idem_errmsg(NULL). */
static void prime_idem_open(const char *needle, char *before)
{
    acemq_idem *h = NULL;
    char a[TEXT_MAX], b[TEXT_MAX];
    assert_int_equal(acemq_idem_open(&h, "nosuch:", NULL), ACEMQ_EURL);
    idem_said(NULL, a);
    if (!strstr(a, needle)) {
        copy_text(before, a);
        return;
    }
    assert_int_equal(acemq_idem_open(&h, "memory:?bogus=1", NULL), ACEMQ_EURL);
    pick_prime(before, needle, a, idem_said(NULL, b));
}

#define IDEM_OPEN_EXPECT(want, needle, call)                                                       \
    do {                                                                                           \
        char before_[TEXT_MAX], after_[TEXT_MAX];                                                  \
        prime_idem_open((needle), before_);                                                        \
        int rc_ = (call);                                                                          \
        check_said(#call, rc_, (want), before_, idem_said(NULL, after_), (needle));                \
    } while (0)

static void idem_calls(acemq_idem *h)
{
    static char long_id[2021];
    memset(long_id, 'x', sizeof long_id);
    acemq_claim c;
    uint64_t token = 0;

    /* try_claim, and claim that is built on it */
    IDEM_EXPECT(h, ACEMQ_EINVAL, "out is NULL", acemq_idem_try_claim(h, "a", 1, NULL, NULL));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "id is NULL", acemq_idem_try_claim(h, NULL, 1, NULL, &c));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "id is empty", acemq_idem_try_claim(h, "a", 0, NULL, &c));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "2021 bytes",
                acemq_idem_try_claim(h, long_id, sizeof long_id, NULL, &c));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "id is NULL", acemq_idem_claim(h, NULL, 1, &token));
    acemq_claim_opts o = {.lease_ms = -1};
    IDEM_EXPECT(h, ACEMQ_EINVAL, "lease_ms -1", acemq_idem_try_claim(h, "a", 1, &o, &c));
    o = (acemq_claim_opts){.lease_ms = INT64_MAX};
    IDEM_EXPECT(h, ACEMQ_EINVAL, "lease_ms", acemq_idem_try_claim(h, "a", 1, &o, &c));
    o = (acemq_claim_opts){.fingerprint = "f", .fingerprint_len = ACEMQ_IDEM_FINGERPRINT_MAX + 1};
    IDEM_EXPECT(h, ACEMQ_EINVAL, "fingerprint", acemq_idem_try_claim(h, "a", 1, &o, &c));
    o = (acemq_claim_opts){.fingerprint = NULL, .fingerprint_len = 4};
    IDEM_EXPECT(h, ACEMQ_EINVAL, "fingerprint", acemq_idem_try_claim(h, "a", 1, &o, &c));
    o = (acemq_claim_opts){.result_buf = NULL, .result_cap = 8};
    IDEM_EXPECT(h, ACEMQ_EINVAL, "result_buf", acemq_idem_try_claim(h, "a", 1, &o, &c));

    /* try_claim_many: the call itself, then one bad element among good ones */
    acemq_idem_key keys[3] = {{"k1", 2}, {"k2", 2}, {"k3", 2}};
    acemq_claim outs[3];
    int status[3];
    IDEM_EXPECT(h, ACEMQ_EINVAL, "keys is NULL",
                acemq_idem_try_claim_many(h, 3, NULL, NULL, outs, status));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "out is NULL",
                acemq_idem_try_claim_many(h, 3, keys, NULL, NULL, status));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "status is NULL",
                acemq_idem_try_claim_many(h, 3, keys, NULL, outs, NULL));
    {
        char before[TEXT_MAX], after[TEXT_MAX];
        keys[1].id = NULL;
        prime_idem(h, "keys[1].id is NULL", before);
        assert_int_equal(acemq_idem_try_claim_many(h, 3, keys, NULL, outs, status), 2);
        assert_int_equal(status[1], ACEMQ_EINVAL);
        check_said("try_claim_many(keys[1].id NULL)", status[1], ACEMQ_EINVAL, before,
                   idem_said(h, after), "keys[1].id is NULL");
        keys[1].id = "k2";
    }
    {
        char before[TEXT_MAX], after[TEXT_MAX];
        acemq_claim_opts many_opts[3] = {{0}, {0}, {.lease_ms = -3}};
        acemq_idem_key fresh[3] = {{"m1", 2}, {"m2", 2}, {"m3", 2}};
        prime_idem(h, "opts[2].lease_ms -3", before);
        assert_int_equal(acemq_idem_try_claim_many(h, 3, fresh, many_opts, outs, status), 2);
        assert_int_equal(status[2], ACEMQ_EINVAL);
        check_said("try_claim_many(opts[2].lease_ms -3)", status[2], ACEMQ_EINVAL, before,
                   idem_said(h, after), "opts[2].lease_ms -3");
    }
    {
        /* The message tells the batch's last error, in element order: a bad
         * element after one the store refused is the one explained. */
        char before[TEXT_MAX], after[TEXT_MAX];
        acemq_claim_opts fp_a = {.fingerprint = "AAAA", .fingerprint_len = 4};
        acemq_claim_opts many_opts[2] = {{.fingerprint = "BBBB", .fingerprint_len = 4}, {0}};
        acemq_idem_key batch[2] = {{"fp", 2}, {"", 0}};
        assert_int_equal(acemq_idem_try_claim(h, "fp", 2, &fp_a, &c), ACEMQ_CLAIMED);
        prime_idem(h, "keys[1].id is empty", before);
        assert_int_equal(acemq_idem_try_claim_many(h, 2, batch, many_opts, outs, status), 0);
        assert_int_equal(status[0], ACEMQ_EMISMATCH);
        check_said("try_claim_many(mismatch, then keys[1].id empty)", status[1], ACEMQ_EINVAL,
                   before, idem_said(h, after), "keys[1].id is empty");
    }

    /* confirm, confirm_result, release, renew, is_confirmed */
    assert_int_equal(acemq_idem_try_claim(h, "held", 4, NULL, &c), ACEMQ_CLAIMED);
    uint64_t stale = c.token + 12345;
    IDEM_EXPECT(h, ACEMQ_EINVAL, "id is NULL", acemq_idem_confirm(h, NULL, 1, c.token));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "id is empty", acemq_idem_confirm(h, "held", 0, c.token));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "2021 bytes",
                acemq_idem_confirm(h, long_id, sizeof long_id, c.token));
    IDEM_EXPECT(h, ACEMQ_ESTALE, "token", acemq_idem_confirm(h, "held", 4, stale));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "result is NULL",
                acemq_idem_confirm_result(h, "held", 4, c.token, NULL, 3));
    static char big[ACEMQ_IDEM_RESULT_MAX + 1];
    IDEM_EXPECT(h, ACEMQ_EINVAL, "result_len 65537",
                acemq_idem_confirm_result(h, "held", 4, c.token, big, sizeof big));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "id is NULL", acemq_idem_release(h, NULL, 1, c.token));
    IDEM_EXPECT(h, ACEMQ_ESTALE, "token", acemq_idem_release(h, "held", 4, stale));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "id is empty", acemq_idem_renew(h, "held", 0, c.token, 0));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "lease_ms -5", acemq_idem_renew(h, "held", 4, c.token, -5));
    IDEM_EXPECT(h, ACEMQ_ESTALE, "token", acemq_idem_renew(h, "held", 4, stale, 0));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "id is NULL", acemq_idem_is_confirmed(h, NULL, 1));
    IDEM_EXPECT(h, ACEMQ_EINVAL, "2021 bytes", acemq_idem_is_confirmed(h, long_id, sizeof long_id));

    /* stats_get: the call of the issue */
    IDEM_EXPECT(h, ACEMQ_EINVAL, "out is NULL", acemq_idem_stats_get(h, NULL));

    /* A success leaves the last error's text, as the header says. */
    char before[TEXT_MAX], after[TEXT_MAX];
    prime_idem(h, "token", before);
    acemq_idem_stats st;
    assert_int_equal(acemq_idem_stats_get(h, &st), 0);
    assert_int_equal(acemq_idem_confirm(h, "held", 4, c.token), 0);
    assert_string_equal(idem_said(h, after), before);
}

static void idem_on_memory(void **state)
{
    (void)state;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open(&h, "memory:", NULL), 0);
    idem_calls(h);
    acemq_idem_close(h);
}

static void idem_on_sqlite(void **state)
{
    scratch_db *f = *state;
    char url[128];
    snprintf(url, sizeof url, "sqlite:%s", f->path);
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.synchronous = ACEMQ_SYNC_OFF;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open(&h, url, &o), 0);
    idem_calls(h);
    acemq_idem_close(h);
}

/* confirm joining the caller's transaction, with none open. */
static void idem_confirm_without_caller_tx(void **state)
{
    scratch_db *f = *state;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    acemq_idem *h = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&h, db, &o), 0);
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(h, "tx", 2, NULL, &c), ACEMQ_CLAIMED);
    IDEM_EXPECT(h, ACEMQ_ENOTX, "transaction", acemq_idem_confirm(h, "tx", 2, c.token));
    acemq_idem_close(h);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void idem_open_calls(void **state)
{
    scratch_db *f = *state;
    acemq_idem *h = NULL;
    acemq_idem_options o;
    IDEM_OPEN_EXPECT(ACEMQ_EINVAL, "out is NULL", acemq_idem_open(NULL, "memory:", NULL));
    IDEM_OPEN_EXPECT(ACEMQ_EINVAL, "url is NULL", acemq_idem_open(&h, NULL, NULL));
    IDEM_OPEN_EXPECT(ACEMQ_EURL, "nosuch", acemq_idem_open(&h, "nosuch:", NULL));
    acemq_idem_options_init(&o);
    o.lease_ms = 0;
    IDEM_OPEN_EXPECT(ACEMQ_EINVAL, "lease_ms", acemq_idem_open(&h, "memory:", &o));
    acemq_idem_options_init(&o);
    o.flags = 1u << 7;
    IDEM_OPEN_EXPECT(ACEMQ_EINVAL, "flags", acemq_idem_open(&h, "memory:", &o));

    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    IDEM_OPEN_EXPECT(ACEMQ_EINVAL, "out is NULL", acemq_idem_open_sqlite(NULL, db, NULL));
    IDEM_OPEN_EXPECT(ACEMQ_EINVAL, "db is NULL", acemq_idem_open_sqlite(&h, NULL, NULL));
    acemq_idem_options_init(&o);
    o.busy_timeout_ms = -1;
    IDEM_OPEN_EXPECT(ACEMQ_EINVAL, "busy_timeout_ms", acemq_idem_open_sqlite(&h, db, &o));
    assert_null(h);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* ------------------------------------------------------------ outbox */

static const char *outbox_said(const acemq_outbox *h, char *buf)
{
    copy_text(buf, acemq_outbox_errmsg(h));
    return buf;
}

static void prime_outbox(acemq_outbox *h, const char *needle, char *before)
{
    char a[TEXT_MAX], b[TEXT_MAX];
    assert_int_equal(acemq_outbox_wait(h, -1), ACEMQ_EINVAL);
    outbox_said(h, a);
    if (!strstr(a, needle)) {
        copy_text(before, a);
        return;
    }
    assert_int_equal(acemq_outbox_purge(h, -1, NULL), ACEMQ_EINVAL);
    pick_prime(before, needle, a, outbox_said(h, b));
}

#define OUTBOX_EXPECT(h, want, needle, call)                                                       \
    do {                                                                                           \
        char before_[TEXT_MAX], after_[TEXT_MAX];                                                  \
        prime_outbox((h), (needle), before_);                                                      \
        int rc_ = (call);                                                                          \
        check_said(#call, rc_, (want), before_, outbox_said((h), after_), (needle));               \
    } while (0)

static void prime_outbox_thread(const char *needle, char *before)
{
    acemq_outbox *h = NULL;
    char a[TEXT_MAX], b[TEXT_MAX];
    acemq_outbox_record r = {.destination = "x", .routing_key = "k"};
    assert_int_equal(acemq_outbox_add_sqlite(NULL, &r, NULL, NULL), ACEMQ_EINVAL);
    outbox_said(NULL, a);
    if (!strstr(a, needle)) {
        copy_text(before, a);
        return;
    }
    assert_int_equal(acemq_outbox_open(&h, NULL, NULL), ACEMQ_EINVAL);
    pick_prime(before, needle, a, outbox_said(NULL, b));
}

#define OUTBOX_THREAD_EXPECT(want, needle, call)                                                   \
    do {                                                                                           \
        char before_[TEXT_MAX], after_[TEXT_MAX];                                                  \
        prime_outbox_thread((needle), before_);                                                    \
        int rc_ = (call);                                                                          \
        check_said(#call, rc_, (want), before_, outbox_said(NULL, after_), (needle));              \
    } while (0)

static acemq_outbox *open_outbox(const scratch_db *f, char *url, size_t cap)
{
    snprintf(url, cap, "sqlite:%s", f->path);
    acemq_outbox_options o;
    acemq_outbox_options_init(&o);
    o.synchronous = ACEMQ_SYNC_OFF;
    acemq_outbox *h = NULL;
    int rc = acemq_outbox_open(&h, url, &o);
    if (rc != 0)
        fail_msg("acemq_outbox_open: %s: %s", acemq_err_name(rc), acemq_outbox_errmsg(NULL));
    return h;
}

static void sql(sqlite3 *db, const char *text)
{
    char *msg = NULL;
    if (sqlite3_exec(db, text, NULL, NULL, &msg) != SQLITE_OK) fail_msg("%s: %s", text, msg);
}

static void outbox_calls(void **state)
{
    scratch_db *f = *state;
    char url[128];
    acemq_outbox *h = open_outbox(f, url, sizeof url);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    sql(db, "BEGIN");
    acemq_outbox_record r = {.id = "r1", .destination = "x", .routing_key = "k"};
    assert_int_equal(acemq_outbox_add_sqlite(db, &r, NULL, NULL), 0);
    sql(db, "COMMIT");

    const acemq_outbox_msg *msgs = NULL;
    size_t n = 0;
    static char long_id[ACEMQ_OUTBOX_ID_MAX + 2];
    memset(long_id, 'x', sizeof long_id - 1);

    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "msgs must not be NULL",
                  acemq_outbox_claim_batch(h, 10, 1000, NULL, &n));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "n must not be NULL",
                  acemq_outbox_claim_batch(h, 10, 1000, &msgs, NULL));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "batch size", acemq_outbox_claim_batch(h, 0, 1000, &msgs, &n));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "batch size",
                  acemq_outbox_claim_batch(h, 100001, 1000, &msgs, &n));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "lease", acemq_outbox_claim_batch(h, 10, 0, &msgs, &n));

    assert_int_equal(acemq_outbox_claim_batch(h, 10, 60000, &msgs, &n), 0);
    assert_int_equal(n, 1);
    uint64_t token = msgs[0].token, stale = token + 77;

    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "id must", acemq_outbox_mark_published(h, NULL, token));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "id must", acemq_outbox_mark_published(h, "", token));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "longer than 255",
                  acemq_outbox_mark_published(h, long_id, token));
    OUTBOX_EXPECT(h, ACEMQ_ESTALE, "stale", acemq_outbox_mark_published(h, "r1", stale));
    OUTBOX_EXPECT(h, ACEMQ_ENOENT, "no record 'nosuch'",
                  acemq_outbox_mark_published(h, "nosuch", token));

    int status[2];
    acemq_outbox_mark marks[2] = {{"r1", stale}, {"", 1}};
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "marks must not be NULL",
                  acemq_outbox_mark_published_batch(h, NULL, 2, status));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "status must not be NULL",
                  acemq_outbox_mark_published_batch(h, marks, 2, NULL));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "marks[1].id",
                  acemq_outbox_mark_published_batch(h, marks, 2, status));

    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "id must", acemq_outbox_mark_failed(h, NULL, token, "why"));
    OUTBOX_EXPECT(h, ACEMQ_ESTALE, "stale", acemq_outbox_mark_failed(h, "r1", stale, "why"));
    OUTBOX_EXPECT(h, ACEMQ_ENOENT, "no record 'nosuch'",
                  acemq_outbox_mark_failed(h, "nosuch", token, "why"));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "id must", acemq_outbox_release(h, "", token));
    OUTBOX_EXPECT(h, ACEMQ_ESTALE, "stale", acemq_outbox_release(h, "r1", stale));
    OUTBOX_EXPECT(h, ACEMQ_ENOENT, "no record 'nosuch'", acemq_outbox_release(h, "nosuch", token));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "out must not be NULL", acemq_outbox_pending_count(h, NULL));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "msgs must not be NULL",
                  acemq_outbox_list_dead(h, 10, NULL, &n));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "max", acemq_outbox_list_dead(h, 0, &msgs, &n));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "id must", acemq_outbox_retry(h, NULL));
    OUTBOX_EXPECT(h, ACEMQ_ENOENT, "no dead record 'r1'", acemq_outbox_retry(h, "r1"));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "older_than_ms", acemq_outbox_purge(h, -1, NULL));
    OUTBOX_EXPECT(h, ACEMQ_EINVAL, "timeout_ms", acemq_outbox_wait(h, -1));

    /* A success leaves the last error's text. */
    char before[TEXT_MAX], after[TEXT_MAX];
    prime_outbox(h, "stale", before);
    assert_int_equal(acemq_outbox_mark_published(h, "r1", token), 0);
    assert_string_equal(outbox_said(h, after), before);

    acemq_outbox_close(h);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* The calls without a handle: open, and add on the caller's connection. */
static void outbox_thread_calls(void **state)
{
    scratch_db *f = *state;
    char url[128];
    acemq_outbox_close(open_outbox(f, url, sizeof url)); /* creates the table */
    acemq_outbox *h = NULL;
    acemq_outbox_options o;

    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "out must not be NULL", acemq_outbox_open(NULL, url, NULL));
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "url must not be NULL", acemq_outbox_open(&h, NULL, NULL));
    OUTBOX_THREAD_EXPECT(ACEMQ_EURL, "nosuch", acemq_outbox_open(&h, "nosuch:x", NULL));
    acemq_outbox_options_init(&o);
    o.max_attempts = 0;
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "max_attempts", acemq_outbox_open(&h, url, &o));
    acemq_outbox_options_init(&o);
    o.backoff_max_ms = o.backoff_base_ms - 1;
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "backoff_max_ms", acemq_outbox_open(&h, url, &o));
    acemq_outbox_options_init(&o);
    o.jitter_percent = 101;
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "jitter_percent", acemq_outbox_open(&h, url, &o));
    acemq_outbox_options_init(&o);
    o.synchronous = 3;
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "synchronous", acemq_outbox_open(&h, url, &o));
    acemq_outbox_options_init(&o);
    o.busy_timeout_ms = -1;
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "busy_timeout_ms", acemq_outbox_open(&h, url, &o));
    assert_null(h);

    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    acemq_outbox_record r = {.id = "a1", .destination = "x", .routing_key = "k"};
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "db must not be NULL",
                         acemq_outbox_add_sqlite(NULL, &r, NULL, NULL));
    OUTBOX_THREAD_EXPECT(ACEMQ_ENOTX, "no transaction",
                         acemq_outbox_add_sqlite(db, &r, NULL, NULL));
    sql(db, "BEGIN");
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "record must not be NULL",
                         acemq_outbox_add_sqlite(db, NULL, NULL, NULL));
    acemq_outbox_record bad = r;
    bad.destination = NULL;
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "destination",
                         acemq_outbox_add_sqlite(db, &bad, NULL, NULL));
    bad = r;
    bad.ordering_key = "";
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "ordering_key",
                         acemq_outbox_add_sqlite(db, &bad, NULL, NULL));
    bad = r;
    bad.content_type = "\xff";
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "UTF-8", acemq_outbox_add_sqlite(db, &bad, NULL, NULL));
    bad = r;
    bad.body_len = 5;
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "body is NULL",
                         acemq_outbox_add_sqlite(db, &bad, NULL, NULL));
    bad = r;
    bad.body = "12345";
    bad.body_len = 5;
    acemq_outbox_add_options small = {.max_body = 4};
    OUTBOX_THREAD_EXPECT(ACEMQ_ERANGE, "over the maximum of 4",
                         acemq_outbox_add_sqlite(db, &bad, &small, NULL));
    bad = r;
    bad.n_headers = 1;
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "headers is NULL",
                         acemq_outbox_add_sqlite(db, &bad, NULL, NULL));
    acemq_outbox_header twice[2] = {{"h", "1"}, {"h", "2"}};
    bad = r;
    bad.headers = twice;
    bad.n_headers = 2;
    OUTBOX_THREAD_EXPECT(ACEMQ_EINVAL, "'h' is given twice",
                         acemq_outbox_add_sqlite(db, &bad, NULL, NULL));
    assert_int_equal(acemq_outbox_add_sqlite(db, &r, NULL, NULL), 0);
    OUTBOX_THREAD_EXPECT(ACEMQ_EEXIST, "'a1' exists", acemq_outbox_add_sqlite(db, &r, NULL, NULL));
    sql(db, "COMMIT");
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* ------------------------------------------------------------ broker */

static const char *broker_said(const acemq_broker *b, char *buf)
{
    copy_text(buf, acemq_broker_errmsg(b));
    return buf;
}

/* Two refusals that change nothing, whatever b has outstanding. */
static void prime_broker(acemq_broker *b, const char *needle, char *before)
{
    char a[TEXT_MAX], c[TEXT_MAX];
    acemq_broker_msg m = {.exchange = NULL, .routing_key = "k", .message_id = "p"};
    acemq_publish_result res;
    assert_int_equal(acemq_broker_send(b, &m, 1, &res), ACEMQ_EINVAL);
    broker_said(b, a);
    if (!strstr(a, needle)) {
        copy_text(before, a);
        return;
    }
    assert_int_equal(acemq_broker_publish(b, NULL, 1, NULL), ACEMQ_EINVAL);
    pick_prime(before, needle, a, broker_said(b, c));
}

#define BROKER_EXPECT(b, want, needle, call)                                                       \
    do {                                                                                           \
        char before_[TEXT_MAX], after_[TEXT_MAX];                                                  \
        prime_broker((b), (needle), before_);                                                      \
        int rc_ = (call);                                                                          \
        check_said(#call, rc_, (want), before_, broker_said((b), after_), (needle));               \
    } while (0)

static void prime_broker_open(const char *needle, char *before)
{
    acemq_broker *b = NULL;
    char a[TEXT_MAX], c[TEXT_MAX];
    assert_int_equal(acemq_broker_open(&b, "nosuch://x", NULL), ACEMQ_EURL);
    broker_said(NULL, a);
    if (!strstr(a, needle)) {
        copy_text(before, a);
        return;
    }
    assert_int_equal(acemq_broker_open(&b, NULL, NULL), ACEMQ_EINVAL);
    pick_prime(before, needle, a, broker_said(NULL, c));
}

#define BROKER_OPEN_EXPECT(want, needle, call)                                                     \
    do {                                                                                           \
        char before_[TEXT_MAX], after_[TEXT_MAX];                                                  \
        prime_broker_open((needle), before_);                                                      \
        int rc_ = (call);                                                                          \
        check_said(#call, rc_, (want), before_, broker_said(NULL, after_), (needle));              \
    } while (0)

static void broker_calls(void **state)
{
    (void)state;
    acemq_broker *b = NULL;
    assert_int_equal(acemq_broker_open(&b, "memory:", NULL), 0);
    acemq_broker_msg m[2] = {{.exchange = "x", .routing_key = "k", .message_id = "m0"},
                             {.exchange = "x", .routing_key = "k", .message_id = "m1"}};
    acemq_publish_result res[ACEMQ_BROKER_MAX_SENDS + 1][2];

    BROKER_EXPECT(b, ACEMQ_EINVAL, "msgs must not be NULL",
                  acemq_broker_publish(b, NULL, 2, res[0]));
    BROKER_EXPECT(b, ACEMQ_EINVAL, "results must not be NULL", acemq_broker_publish(b, m, 2, NULL));
    m[1].routing_key = NULL;
    BROKER_EXPECT(b, ACEMQ_EINVAL, "message 1: routing_key", acemq_broker_publish(b, m, 2, res[0]));
    m[1].routing_key = "k";
    m[1].body_len = 3;
    BROKER_EXPECT(b, ACEMQ_EINVAL, "message 1: body", acemq_broker_send(b, m, 2, res[0]));
    m[1].body_len = 0;
    BROKER_EXPECT(b, ACEMQ_ENOENT, "no send outstanding", acemq_broker_collect(b));

    acemq__memory_broker_fault(b, ACEMQ__FAULT_REFUSE, 1, 0);
    BROKER_EXPECT(b, ACEMQ_EIO, "refused", acemq_broker_publish(b, m, 2, res[0]));

    for (int i = 0; i < ACEMQ_BROKER_MAX_SENDS; i++)
        assert_int_equal(acemq_broker_send(b, m, 2, res[i]), 0);
    BROKER_EXPECT(b, ACEMQ_EINVAL, "publish with sends outstanding",
                  acemq_broker_publish(b, m, 2, res[ACEMQ_BROKER_MAX_SENDS]));
    BROKER_EXPECT(b, ACEMQ_EINVAL, "4 sends outstanding",
                  acemq_broker_send(b, m, 2, res[ACEMQ_BROKER_MAX_SENDS]));
    for (int i = 0; i < ACEMQ_BROKER_MAX_SENDS; i++)
        assert_int_equal(acemq_broker_collect(b), 0);

    /* A success leaves the last error's text. */
    char before[TEXT_MAX], after[TEXT_MAX];
    prime_broker(b, "outstanding", before);
    assert_int_equal(acemq_broker_publish(b, m, 2, res[0]), 0);
    assert_string_equal(broker_said(b, after), before);
    acemq_broker_close(b);
}

static void broker_open_calls(void **state)
{
    (void)state;
    acemq_broker *b = NULL;
    acemq_broker_options o;
    BROKER_OPEN_EXPECT(ACEMQ_EINVAL, "out must not be NULL",
                       acemq_broker_open(NULL, "memory:", NULL));
    BROKER_OPEN_EXPECT(ACEMQ_EINVAL, "url must not be NULL", acemq_broker_open(&b, NULL, NULL));
    BROKER_OPEN_EXPECT(ACEMQ_EURL, "nosuch", acemq_broker_open(&b, "nosuch://x", NULL));
    acemq_broker_options_init(&o);
    o.window = 0;
    BROKER_OPEN_EXPECT(ACEMQ_EINVAL, "window", acemq_broker_open(&b, "memory:", &o));
    acemq_broker_options_init(&o);
    o.confirm_timeout_ms = 0;
    BROKER_OPEN_EXPECT(ACEMQ_EINVAL, "confirm_timeout_ms", acemq_broker_open(&b, "memory:", &o));
    acemq_broker_options_init(&o);
    o.heartbeat_s = -1;
    BROKER_OPEN_EXPECT(ACEMQ_EINVAL, "heartbeat_s", acemq_broker_open(&b, "memory:", &o));
    acemq_broker_options_init(&o);
    o.connect_timeout_ms = 0;
    BROKER_OPEN_EXPECT(ACEMQ_EINVAL, "connect_timeout_ms", acemq_broker_open(&b, "memory:", &o));
    assert_null(b);
}

/* ------------------------------------------------------------ relay */

static const char *relay_said(const acemq_relay *r, char *buf)
{
    copy_text(buf, acemq_relay_errmsg(r));
    return buf;
}

static void prime_relay_new(acemq_outbox *ob, acemq_broker *b, const char *needle, char *before)
{
    acemq_relay *r = NULL;
    char a[TEXT_MAX], c[TEXT_MAX];
    acemq_relay_options o;
    acemq_relay_options_init(&o);
    o.poll_ms = 0;
    assert_int_equal(acemq_relay_new(&r, ob, b, &o), ACEMQ_EINVAL);
    relay_said(NULL, a);
    if (!strstr(a, needle)) {
        copy_text(before, a);
        return;
    }
    acemq_relay_options_init(&o);
    o.batch = 0;
    assert_int_equal(acemq_relay_new(&r, ob, b, &o), ACEMQ_EINVAL);
    pick_prime(before, needle, a, relay_said(NULL, c));
}

#define RELAY_NEW_EXPECT(ob, b, want, needle, call)                                                \
    do {                                                                                           \
        char before_[TEXT_MAX], after_[TEXT_MAX];                                                  \
        prime_relay_new((ob), (b), (needle), before_);                                             \
        int rc_ = (call);                                                                          \
        check_said(#call, rc_, (want), before_, relay_said(NULL, after_), (needle));               \
    } while (0)

static void relay_calls(void **state)
{
    scratch_db *f = *state;
    char url[128];
    snprintf(url, sizeof url, "sqlite:%s", f->path);
    acemq_outbox_options oo;
    acemq_outbox_options_init(&oo);
    oo.busy_timeout_ms = 0; /* a locked database fails a claim at once */
    acemq_outbox *ob = NULL;
    assert_int_equal(acemq_outbox_open(&ob, url, &oo), 0);
    acemq_broker *b = NULL;
    assert_int_equal(acemq_broker_open(&b, "memory:", NULL), 0);
    acemq_relay *r = NULL;
    acemq_relay_options o;

    RELAY_NEW_EXPECT(ob, b, ACEMQ_EINVAL, "out must not be NULL",
                     acemq_relay_new(NULL, ob, b, NULL));
    RELAY_NEW_EXPECT(ob, b, ACEMQ_EINVAL, "ob (the outbox) must not be NULL",
                     acemq_relay_new(&r, NULL, b, NULL));
    RELAY_NEW_EXPECT(ob, b, ACEMQ_EINVAL, "b (the broker) must not be NULL",
                     acemq_relay_new(&r, ob, NULL, NULL));
    acemq_relay_options_init(&o);
    o.batch = 100001;
    RELAY_NEW_EXPECT(ob, b, ACEMQ_EINVAL, "batch", acemq_relay_new(&r, ob, b, &o));
    acemq_relay_options_init(&o);
    o.lease_ms = 0;
    RELAY_NEW_EXPECT(ob, b, ACEMQ_EINVAL, "lease_ms", acemq_relay_new(&r, ob, b, &o));
    acemq_relay_options_init(&o);
    o.poll_ms = 0;
    RELAY_NEW_EXPECT(ob, b, ACEMQ_EINVAL, "poll_ms", acemq_relay_new(&r, ob, b, &o));
    assert_null(r);

    /* acemq_relay_open says why in the same place, an outbox it cannot
     * open included. */
    RELAY_NEW_EXPECT(ob, b, ACEMQ_EINVAL, "out must not be NULL",
                     acemq_relay_open(NULL, url, &oo, b, NULL));
    RELAY_NEW_EXPECT(ob, b, ACEMQ_EINVAL, "outbox_url must not be NULL",
                     acemq_relay_open(&r, NULL, &oo, b, NULL));
    RELAY_NEW_EXPECT(ob, b, ACEMQ_EINVAL, "b (the broker) must not be NULL",
                     acemq_relay_open(&r, url, &oo, NULL, NULL));
    acemq_relay_options_init(&o);
    o.lease_ms = 0;
    RELAY_NEW_EXPECT(ob, b, ACEMQ_EINVAL, "lease_ms", acemq_relay_open(&r, url, &oo, b, &o));
    RELAY_NEW_EXPECT(ob, b, ACEMQ_EURL, "outbox kafka://x",
                     acemq_relay_open(&r, "kafka://x", &oo, b, NULL));
    assert_null(r);
    assert_int_equal(acemq_relay_open(&r, url, &oo, b, NULL), 0);
    acemq_relay_free(r);
    r = NULL;

    /* A step's failures: the outbox locked, then the broker refusing; and
     * run without its stop flag. */
    assert_int_equal(acemq_relay_new(&r, ob, b, NULL), 0);
    assert_string_equal(acemq_relay_errmsg(r), "");
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    sql(db, "BEGIN");
    acemq_outbox_record rec = {.id = "s1", .destination = "x", .routing_key = "k"};
    assert_int_equal(acemq_outbox_add_sqlite(db, &rec, NULL, NULL), 0);
    size_t claimed = 0;
    char before[TEXT_MAX], after[TEXT_MAX];
    relay_said(r, before);
    int rc = acemq_relay_step(r, &claimed);
    check_said("acemq_relay_step (outbox locked)", rc, ACEMQ_EBUSY, before, relay_said(r, after),
               "claim_batch");
    sql(db, "COMMIT");
    relay_said(r, before);
    acemq__memory_broker_fault(b, ACEMQ__FAULT_REFUSE, 1, 0);
    rc = acemq_relay_step(r, &claimed);
    assert_int_equal(claimed, 1);
    check_said("acemq_relay_step (broker refused)", rc, ACEMQ_EIO, before, relay_said(r, after),
               "refused");
    relay_said(r, before);
    rc = acemq_relay_run(r, NULL);
    check_said("acemq_relay_run(r, NULL)", rc, ACEMQ_EINVAL, before, relay_said(r, after), "stop");

    acemq_relay_free(r);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    acemq_broker_close(b);
    acemq_outbox_close(ob);
}

static int setup(void **state)
{
    return scratch_db_setup(state, "errmsg");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(idem_on_memory),
        cmocka_unit_test_setup_teardown(idem_on_sqlite, setup, scratch_db_teardown),
        cmocka_unit_test_setup_teardown(idem_confirm_without_caller_tx, setup, scratch_db_teardown),
        cmocka_unit_test_setup_teardown(idem_open_calls, setup, scratch_db_teardown),
        cmocka_unit_test_setup_teardown(outbox_calls, setup, scratch_db_teardown),
        cmocka_unit_test_setup_teardown(outbox_thread_calls, setup, scratch_db_teardown),
        cmocka_unit_test(broker_calls),
        cmocka_unit_test(broker_open_calls),
        cmocka_unit_test_setup_teardown(relay_calls, setup, scratch_db_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
