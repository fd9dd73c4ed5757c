/* idem_batch_calls.c — acemq_idem_confirm_many in the conformance suite
 * (each element answered as its own confirm would be: stale tokens, bad
 * elements, a second confirm with the same token; stored results handed to
 * later duplicates; batches larger than one backend call), and the bad
 * calls of both batch calls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"
#include "conformance/idem_fixture.h"

static uint64_t claimed(fixture *f, const char *id)
{
    acemq_claim c;
    assert_int_equal(acemq_idem_try_claim(f->store, id, strlen(id), NULL, &c), ACEMQ_CLAIMED);
    return c.token;
}

void confirm_many_equals_calls(void **state)
{
    fixture *f = *state;
    uint64_t ta = claimed(f, "cm-a"), tb = claimed(f, "cm-b"), tc = claimed(f, "cm-c");
    assert_int_equal(acemq_idem_release(f->store, "cm-b", 4, tb), 0);
    acemq_idem_stats before;
    assert_int_equal(acemq_idem_stats_get(f->store, &before), 0);
    acemq_idem_confirmation c[5] = {
        {"cm-a", 4, ta, "ra", 2}, {"cm-b", 4, tb, NULL, 0}, {"cm-c", 4, tc, NULL, 0},
        {NULL, 4, tc, NULL, 0},   {"cm-c", 4, tc, NULL, 0},
    };
    int st[5];
    assert_int_equal(acemq_idem_confirm_many(f->store, 5, c, st), 3);
    assert_int_equal(st[0], 0);
    assert_int_equal(st[1], ACEMQ_ESTALE); /* released: the token is no claim */
    assert_int_equal(st[2], 0);
    assert_int_equal(st[3], ACEMQ_EINVAL);
    assert_int_equal(st[4], 0); /* confirming twice with one token is no error */
    acemq_idem_stats after;
    assert_int_equal(acemq_idem_stats_get(f->store, &after), 0);
    assert_int_equal(after.confirms - before.confirms, 3);
    assert_int_equal(after.stale_tokens - before.stale_tokens, 1);

    char buf[8];
    acemq_claim_opts o = {0};
    o.result_buf = buf;
    o.result_cap = sizeof buf;
    acemq_claim out;
    assert_int_equal(acemq_idem_try_claim(f->store, "cm-a", 4, &o, &out), ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(out.has_result, 1);
    assert_int_equal(out.result_len, 2);
    assert_memory_equal(buf, "ra", 2);
    assert_int_equal(acemq_idem_try_claim(f->store, "cm-c", 4, NULL, &out),
                     ACEMQ_ALREADY_CONFIRMED);
    assert_int_equal(acemq_idem_try_claim(f->store, "cm-b", 4, NULL, &out), ACEMQ_CLAIMED);
}

/* More confirmations than one backend call takes, all confirmed. */
void confirm_many_large(void **state)
{
    fixture *f = *state;
    enum { N = 150 };
    static char ids[N][16];
    acemq_idem_key keys[N];
    acemq_claim out[N];
    int st[N];
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "cm-big-%d", i);
        keys[i] = (acemq_idem_key){ids[i], strlen(ids[i])};
    }
    assert_int_equal(acemq_idem_try_claim_many(f->store, N, keys, NULL, out, st), N);
    acemq_idem_confirmation c[N];
    for (int i = 0; i < N; i++)
        c[i] = (acemq_idem_confirmation){ids[i], strlen(ids[i]), out[i].token, NULL, 0};
    assert_int_equal(acemq_idem_confirm_many(f->store, N, c, st), N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(st[i], 0);
        assert_int_equal(acemq_idem_is_confirmed(f->store, ids[i], strlen(ids[i])), 1);
    }
}

/* Bad calls of both batch calls: refused whole, nothing counted as an
 * error of the store. */
void batch_bad_calls(void **state)
{
    fixture *f = *state;
    acemq_idem_key keys[1] = {{"z", 1}};
    acemq_claim out[1];
    int st[1];
    assert_int_equal(acemq_idem_try_claim_many(NULL, 1, keys, NULL, out, st), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_try_claim_many(f->store, 1, NULL, NULL, out, st), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_try_claim_many(f->store, 1, keys, NULL, NULL, st), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_try_claim_many(f->store, 1, keys, NULL, out, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_try_claim_many(f->store, 0, NULL, NULL, NULL, NULL), 0);
    acemq_idem_confirmation c = {"z", 1, 1, NULL, 0};
    assert_int_equal(acemq_idem_confirm_many(NULL, 1, &c, st), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_confirm_many(f->store, 1, NULL, st), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_confirm_many(f->store, 1, &c, NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_idem_confirm_many(f->store, 0, NULL, NULL), 0);
    acemq_claim one;
    assert_int_equal(acemq_idem_try_claim(f->store, "z", 1, NULL, &one), ACEMQ_CLAIMED);
    acemq_idem_stats s;
    assert_int_equal(acemq_idem_stats_get(f->store, &s), 0);
    assert_int_equal(s.claimed, 1);
    assert_int_equal(s.errors, 0);
    /* An element the core refuses is its own answer, named by its index. */
    acemq_idem_confirmation big = {"z", 1, one.token, "r", (size_t)ACEMQ_IDEM_RESULT_MAX + 1};
    assert_int_equal(acemq_idem_confirm_many(f->store, 1, &big, st), 0);
    assert_int_equal(st[0], ACEMQ_EINVAL);
    assert_non_null(strstr(acemq_idem_errmsg(f->store), "confirmations[0]"));
}
