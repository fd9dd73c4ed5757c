/* sqlite_idem_file.c — one database file shared: two processes claiming the
 * same ids (each claimed once), and a store reopened on its file keeping every
 * claim and confirm. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "acemq/acemq.h"
#include "sqlite_idem_fixture.h"

/* ---- two processes -------------------------------------------------------- */

enum { RACE_IDS = 2000 };

/* In a child: cmocka's asserts must not run here, and exit() would run the
 * parent's atexit cleanup and delete the database under the other child. */
static void race_child(const char *url, int go_fd, int report_fd)
{
    char byte;
    if (read(go_fd, &byte, 1) < 0) _exit(10);
    acemq_manual_clock *clock = NULL;
    if (acemq_manual_clock_new(&clock, T0) != 0) _exit(11);
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(clock);
    o.synchronous = ACEMQ_SYNC_NORMAL;
    o.busy_timeout_ms = 60000;
    acemq_idem *h = NULL;
    if (acemq_idem_open(&h, url, &o) != 0) _exit(12);
    static unsigned char claimed[RACE_IDS];
    for (int i = 0; i < RACE_IDS; i++) {
        char id[32];
        snprintf(id, sizeof id, "race-%d", i);
        acemq_claim c;
        int rc = acemq_idem_try_claim(h, id, strlen(id), NULL, &c);
        if (rc == ACEMQ_CLAIMED) {
            claimed[i] = 1;
            if (acemq_idem_confirm(h, id, strlen(id), c.token) != 0) _exit(13);
        } else if (rc != ACEMQ_ALREADY_CONFIRMED && rc != ACEMQ_IN_PROGRESS) {
            fprintf(stderr, "child %d: %s: %s\n", (int)getpid(), acemq_err_name(rc),
                    acemq_idem_errmsg(h));
            _exit(14);
        }
    }
    acemq_idem_close(h);
    acemq_manual_clock_free(clock);
    size_t off = 0;
    while (off < sizeof claimed) {
        ssize_t n = write(report_fd, claimed + off, sizeof claimed - off);
        if (n <= 0) _exit(15);
        off += (size_t)n;
    }
    _exit(0);
}

void two_processes_claim_each_id_once(void **state)
{
    fixture *f = *state;
    /* The schema exists before the race, so the race is about the rows. */
    acemq_idem_close(sqlite_idem_open_url(f, f->url));
    int go[2];
    assert_int_equal(pipe(go), 0);
    int report[2][2];
    pid_t pid[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(pipe(report[k]), 0);
        pid[k] = fork();
        assert_true(pid[k] >= 0);
        if (pid[k] == 0) {
            close(go[1]);
            close(report[k][0]);
            race_child(f->url, go[0], report[k][1]);
        }
        close(report[k][1]);
    }
    close(go[0]);
    close(go[1]); /* both children see EOF and start together */
    static unsigned char claimed[2][RACE_IDS];
    for (int k = 0; k < 2; k++) {
        size_t off = 0;
        while (off < RACE_IDS) {
            ssize_t n = read(report[k][0], claimed[k] + off, RACE_IDS - off);
            if (n <= 0) break;
            off += (size_t)n;
        }
        close(report[k][0]);
        int status = 0;
        assert_int_equal(waitpid(pid[k], &status, 0), pid[k]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("child %d failed: status %d", k, status);
        assert_int_equal(off, RACE_IDS);
    }
    int per_child[2] = {0, 0};
    for (int i = 0; i < RACE_IDS; i++) {
        if (claimed[0][i] + claimed[1][i] != 1)
            fail_msg("id race-%d claimed %d times", i, claimed[0][i] + claimed[1][i]);
        per_child[0] += claimed[0][i];
        per_child[1] += claimed[1][i];
    }
    print_message("claims split %d / %d\n", per_child[0], per_child[1]);
    acemq_idem *h = sqlite_idem_open_url(f, f->url);
    assert_int_equal(acemq_idem_is_confirmed(h, "race-0", 6), 1);
    assert_int_equal(acemq_idem_is_confirmed(h, "race-1999", 9), 1);
    acemq_idem_close(h);
}

/* ---- reopen --------------------------------------------------------------- */

void reopen_keeps_state(void **state)
{
    fixture *f = *state;
    acemq_idem *h = sqlite_idem_open_url(f, f->url);
    acemq_claim c;
    assert_int_equal(sqlite_idem_claim(h, "done", &c), ACEMQ_CLAIMED);
    assert_int_equal(acemq_idem_confirm_result(h, "done", 4, c.token, "ok", 2), 0);
    assert_int_equal(sqlite_idem_claim(h, "held", &c), ACEMQ_CLAIMED);
    uint64_t held_token = c.token;
    acemq_idem_close(h); /* a crash, as far as "held" is concerned */

    h = sqlite_idem_open_url(f, f->url);
    assert_int_equal(acemq_idem_is_confirmed(h, "done", 4), 1);
    char buf[8];
    acemq_claim_opts co = {0};
    co.result_buf = buf;
    co.result_cap = sizeof buf;
    assert_int_equal(acemq_idem_try_claim(h, "done", 4, &co, &c), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(c.has_result, 1);
    assert_int_equal(c.result_len, 2);
    assert_memory_equal(buf, "ok", 2);
    assert_int_equal(sqlite_idem_claim(h, "held", &c), ACEMQ_IN_PROGRESS);
    assert_int_equal(c.lease_until_ms, T0 + LEASE);
    acemq_manual_clock_advance(f->clock, LEASE);
    assert_int_equal(sqlite_idem_claim(h, "held", &c), ACEMQ_CLAIMED);
    assert_int_equal(c.takeover, 1);
    assert_true(c.token > held_token);
    /* The dead holder's token is fenced off. */
    assert_int_equal(acemq_idem_confirm(h, "held", 4, held_token), ACEMQ_ESTALE);
    assert_int_equal(acemq_idem_confirm(h, "held", 4, c.token), 0);
    acemq_idem_close(h);
}
