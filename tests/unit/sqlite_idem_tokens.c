/* sqlite_idem_tokens.c — the token scheme: a rolled-back claim's token is
 * never issued again (on one handle, two handles, two processes), processes
 * never share a token, and the end of a token's millisecond range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "acemq/acemq.h"
#include "acemq/sqlite.h"
#include "sqlite_idem_fixture.h"

/* ---- a rolled-back claim's token --------------------------------------------- *
 *
 * Holder A claims inside its own transaction on the caller's connection (the
 * inbox pattern) and rolls back; B then claims the same id, the clock standing
 * still. A still has its token and may still call with it: B's token must not
 * be A's, or A's confirm, release or renew would land on B's claim. */

/* What the id looks like before A's claim. */
typedef enum { FROM_NEW, FROM_EXPIRED, FROM_RELEASED } claim_from;

static const char *const from_name[] = {"new", "expired", "released"};

/* The id's state before A's claim, made by `other` on the fixture's clock: a
 * lease that ran out is left behind with the clock moved past it. */
static void prepare_id(fixture *f, acemq_idem *other, const char *id, claim_from from)
{
    acemq_claim c;
    if (from == FROM_NEW) return;
    assert_int_equal(sqlite_idem_claim(other, id, &c), ACEMQ_CLAIMED);
    if (from == FROM_RELEASED)
        assert_int_equal(acemq_idem_release(other, id, strlen(id), c.token), 0);
    else
        acemq_manual_clock_advance(f->clock, LEASE);
}

/* A claims id in a transaction on db (handle a, ACEMQ_IDEM_CONFIRM_IN_CALLER_TX)
 * and rolls back; answers A's token. */
static uint64_t claim_rolled_back(sqlite3 *db, acemq_idem *a, const char *id, claim_from from)
{
    sqlite_idem_exec(db, "BEGIN");
    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(a, id, &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, from == FROM_EXPIRED);
    sqlite_idem_exec(db, "ROLLBACK");
    return c.token;
}

/* A's calls with its rolled-back token change nothing; B's claim (token b_token)
 * still holds against a third claimer, then confirms. */
static void stale_holder_changes_nothing(sqlite3 *db, acemq_idem *a, acemq_idem *third,
                                         const char *id, uint64_t a_token, uint64_t b_token)
{
    size_t len = strlen(id);
    if (b_token == a_token)
        fail_msg("%s: B got the token %llu that A's rolled-back claim had", id,
                 (unsigned long long)a_token);
    sqlite_idem_exec(db, "BEGIN");
    assert_int_equal(acemq_idem_confirm(a, id, len, a_token), ACEMQ_ESTALE);
    sqlite_idem_exec(db, "COMMIT");
    assert_int_equal(acemq_idem_release(a, id, len, a_token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_renew(a, id, len, a_token, LEASE), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_is_confirmed(third, id, len), 0);
    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(third, id, &c), ACEMQ_IN_PROGRESS);
    assert_int_equal(acemq_idem_confirm(third, id, len, b_token), 0);
    assert_int_equal(sqlite_idem_claim(third, id, &c), ACEMQ_ALREADY_CONFIRMED);
}

/* B is A's own handle (the consumer retrying on its connection) or another
 * handle on the file. */
static void rolled_back_token_not_reissued(void **state, claim_from from)
{
    fixture *f = *state;
    sqlite3 *db = sqlite_idem_raw_open(f->path);
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    acemq_idem *a = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&a, db, &o), 0);
    acemq_idem *other = sqlite_idem_open_url(f, f->url);
    char id[2][32];
    for (int same = 0; same < 2; same++) {
        snprintf(id[same], sizeof id[same], "%s-%s", from_name[from], same ? "same" : "other");
        prepare_id(f, other, id[same], from);
    }
    for (int same = 0; same < 2; same++) {
        uint64_t a_token = claim_rolled_back(db, a, id[same], from);
        acemq_claim b;
        assert_int_equal(sqlite_idem_claim(same ? a : other, id[same], &b), ACEMQ_CLAIMED);
        assert_int_equal(b.takeover, from == FROM_EXPIRED);
        stale_holder_changes_nothing(db, a, other, id[same], a_token, b.token);
    }
    acemq_idem_close(other);
    acemq_idem_close(a);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

void rolled_back_new_id(void **state)
{
    rolled_back_token_not_reissued(state, FROM_NEW);
}

void rolled_back_takeover(void **state)
{
    rolled_back_token_not_reissued(state, FROM_EXPIRED);
}

void rolled_back_reclaim(void **state)
{
    rolled_back_token_not_reissued(state, FROM_RELEASED);
}

/* What the child of rolled_back_across_processes answers per id. */
typedef struct xp_answer {
    int rc;
    int takeover;
    uint64_t token;
} xp_answer;

/* In a child, on a clock of its own standing at `now`: opens the store, says
 * so with one byte (opening writes to the file, and the parent's connection has
 * no busy handler), then claims "xp-<k>" for each byte k the parent sends, and
 * answers. No cmocka asserts here (see race_child). */
static void claim_child(const char *url, int64_t now, int in_fd, int out_fd)
{
    acemq_manual_clock *clock = NULL;
    if (acemq_manual_clock_new(&clock, now) != 0) _exit(11);
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(clock);
    o.lease_ms = LEASE;
    o.retention_ms = RETENTION;
    o.synchronous = ACEMQ_SYNC_NORMAL;
    acemq_idem *h = NULL;
    if (acemq_idem_open(&h, url, &o) != 0) _exit(12);
    unsigned char k = 0;
    if (write(out_fd, &k, 1) != 1) _exit(13);
    while (read(in_fd, &k, 1) == 1) {
        char id[32];
        snprintf(id, sizeof id, "xp-%d", k);
        acemq_claim c;
        xp_answer ans = {0, 0, 0};
        ans.rc = acemq_idem_try_claim(h, id, strlen(id), NULL, &c);
        ans.takeover = c.takeover;
        ans.token = c.token;
        if (write(out_fd, &ans, sizeof ans) != (ssize_t)sizeof ans) _exit(13);
    }
    acemq_idem_close(h); /* the claims stay: held, not released */
    acemq_manual_clock_free(clock);
    _exit(0);
}

/* The same, with B in another process whose clock stands at the same
 * millisecond as A's: nothing in the database tells the two claims apart. */
void rolled_back_across_processes(void **state)
{
    fixture *f = *state;
    sqlite3 *db = sqlite_idem_raw_open(f->path);
    acemq_idem_options o;
    sqlite_idem_options(f, &o);
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    acemq_idem *a = NULL;
    assert_int_equal(acemq_idem_open_sqlite(&a, db, &o), 0);
    acemq_idem *other = sqlite_idem_open_url(f, f->url);
    /* FROM_EXPIRED last: it moves the clock, to T0 + LEASE. */
    static const claim_from from[3] = {FROM_NEW, FROM_RELEASED, FROM_EXPIRED};
    char id[3][32];
    for (int k = 0; k < 3; k++) {
        snprintf(id[k], sizeof id[k], "xp-%d", k);
        prepare_id(f, other, id[k], from[k]);
    }

    int to_child[2], from_child[2];
    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(from_child), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(to_child[1]);
        close(from_child[0]);
        claim_child(f->url, T0 + LEASE, to_child[0], from_child[1]);
    }
    close(to_child[0]);
    close(from_child[1]);
    unsigned char opened = 1;
    assert_int_equal(read(from_child[0], &opened, 1), 1);
    assert_int_equal(opened, 0);
    for (int k = 0; k < 3; k++) {
        uint64_t a_token = claim_rolled_back(db, a, id[k], from[k]);
        unsigned char byte = (unsigned char)k;
        assert_int_equal(write(to_child[1], &byte, 1), 1);
        xp_answer b;
        assert_int_equal(read(from_child[0], &b, sizeof b), (ssize_t)sizeof b);
        assert_int_equal(b.rc, ACEMQ_CLAIMED);
        assert_int_equal(b.takeover, from[k] == FROM_EXPIRED);
        stale_holder_changes_nothing(db, a, other, id[k], a_token, b.token);
    }
    close(to_child[1]);
    close(from_child[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("child failed: status %d", status);
    acemq_idem_close(other);
    acemq_idem_close(a);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* Claims `id` in a transaction on a connection of its own, `rounds` times,
 * rolling each back, with the clock standing at `now`; writes each token to
 * out_fd. For a forked child: no cmocka asserts (see race_child). */
static int rolled_back_rounds(const char *path, int64_t now, const char *id, int rounds, int out_fd)
{
    acemq_manual_clock *clock = NULL;
    sqlite3 *db = NULL;
    acemq_idem *h = NULL;
    if (acemq_manual_clock_new(&clock, now) != 0) return 11;
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(clock);
    o.lease_ms = LEASE;
    o.flags = ACEMQ_IDEM_CONFIRM_IN_CALLER_TX;
    if (sqlite3_open(path, &db) != SQLITE_OK || sqlite3_busy_timeout(db, 10000) != SQLITE_OK)
        return 12;
    if (acemq_idem_open_sqlite(&h, db, &o) != 0) return 13;
    for (int i = 0; i < rounds; i++) {
        acemq_claim c;
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) return 14;
        if (acemq_idem_try_claim(h, id, strlen(id), NULL, &c) != ACEMQ_CLAIMED) return 15;
        if (sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK) return 16;
        if (write(out_fd, &c.token, sizeof c.token) != (ssize_t)sizeof c.token) return 17;
    }
    acemq_idem_close(h);
    acemq_manual_clock_free(clock);
    return sqlite3_close(db) == SQLITE_OK ? 0 : 18;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Two processes, each on a connection of its own, claim one id in turns of
 * rolled-back transactions with their clocks standing at the same ms: every
 * claim reads the same row, so only the file's shared counter keeps their
 * tokens apart; none of the 4,000 repeats. */
void processes_never_share_a_token(void **state)
{
    fixture *f = *state;
    enum { ROUNDS = 2000, ALL = 2 * ROUNDS };
    acemq_idem *init = sqlite_idem_open_url(f, f->url); /* makes the schema */
    acemq_idem_close(init);
    int pipes[2][2];
    pid_t pid[2];
    for (int p = 0; p < 2; p++) {
        assert_int_equal(pipe(pipes[p]), 0);
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0) {
            close(pipes[p][0]);
            _exit(rolled_back_rounds(f->path, T0, "shared", ROUNDS, pipes[p][1]));
        }
        close(pipes[p][1]);
    }
    static uint64_t tokens[ALL];
    for (int p = 0; p < 2; p++) {
        size_t want = ROUNDS * sizeof(uint64_t), got = 0;
        char *at = (char *)&tokens[(size_t)p * ROUNDS];
        while (got < want) {
            ssize_t n = read(pipes[p][0], at + got, want - got);
            if (n <= 0) break;
            got += (size_t)n;
        }
        close(pipes[p][0]);
        int status = 0;
        assert_int_equal(waitpid(pid[p], &status, 0), pid[p]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("child %d failed: status %d", p, status);
        assert_int_equal(got, want);
    }
    qsort(tokens, ALL, sizeof tokens[0], cmp_u64);
    for (size_t i = 1; i < ALL; i++)
        if (tokens[i] == tokens[i - 1])
            fail_msg("token %llu issued twice", (unsigned long long)tokens[i]);
}

/* A token's milliseconds have 42 bits (above 21 of issue number): a clock past
 * them counts as their end, and an id whose token reached it cannot be claimed
 * again. */
void token_range_ends(void **state)
{
    fixture *f = *state;
    acemq_idem *h = sqlite_idem_open_url(f, f->url);
    sqlite3 *db = sqlite_idem_raw_open(f->path);
    sqlite_idem_exec(db,
                     "INSERT INTO acemq_idem(id, state, token, expires_at)"
                     " VALUES(CAST('end' AS BLOB), 0, 9223372036854775807, 9223372036854775807)");
    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(h, "end", &c), ACEMQ_ERANGE);
    assert_non_null(strstr(acemq_idem_errmsg(h), "exhausted"));
    acemq_manual_clock_set(f->clock, INT64_MAX / 2);
    assert_int_equal(sqlite_idem_claim(h, "late", &c), ACEMQ_CLAIMED);
    assert_true(c.token >> 21 == (uint64_t)INT64_MAX >> 21);
    assert_int_equal(acemq_idem_release(h, "late", 4, c.token), 0);
    assert_int_equal(sqlite_idem_claim(h, "late", &c), ACEMQ_ERANGE);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    acemq_idem_close(h);
}
