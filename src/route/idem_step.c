/* idem_step.c — the idempotent_consumer step: the child steps run once per
 * key, guarded by a claim in the repository's idempotency store.
 *
 * Eager (the default), the key is claimed before the children run: a new
 * key runs them; a confirmed key is a duplicate (skipped, or run with the
 * property duplicate=true when skip_duplicate is false); a key held by a
 * claim elsewhere fails the exchange, so its source offers it again later
 * instead of dropping work that may yet fail. The claim is confirmed when
 * the exchange completes (completion_eager: when the children complete),
 * and released on failure when remove_on_failure is set; otherwise it stays
 * held until its lease runs out. Not eager (Camel's eager=false), the key
 * is only looked at before the children run and claimed after they
 * succeed: two deliveries of one key at once may both run them, as in
 * Camel. */
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "route/run_internal.h"

/* The property child steps read to tell a duplicate (skip_duplicate false)
 * from a new key; with skip_duplicate they only ever see new keys, so it is
 * left unset then. */
static void set_duplicate(acemq__exchange *x, int duplicate)
{
    /* Best effort: without memory the property is absent, which child
     * steps read as not a duplicate only when it is also not one. */
    (void)acemq__fields_set(&x->properties, "duplicate", duplicate ? "true" : "false");
}

/* Records a claim for settling later, in a node kept from an earlier
 * exchange when there is one: a route claims a key per exchange, and the
 * node and its key buffer are reused rather than allocated each time. */
static int hold(acemq__route_run *run, acemq__step *step, acemq__repository *repo,
                const acemq__buf *key, uint64_t token, acemq__held_claim **out)
{
    acemq__held_claim *c = run->spare;
    if (c) {
        run->spare = c->next;
    } else if (!(c = calloc(1, sizeof *c))) {
        return ACEMQ_ENOMEM;
    }
    acemq__buf_clear(&c->key);
    if (acemq__buf_put(&c->key, key->p, key->len) != 0) {
        c->next = run->spare;
        run->spare = c;
        return ACEMQ_ENOMEM;
    }
    c->repo = repo;
    c->step = step;
    c->token = token;
    c->next = NULL;
    *out = c;
    return 0;
}

void acemq__run_free(acemq__route_run *run)
{
    while (run->spare) {
        acemq__held_claim *c = run->spare;
        run->spare = c->next;
        acemq__buf_free(&c->key);
        free(c);
    }
}

int acemq__settle_claim(acemq__route_run *run, acemq__held_claim *c, int ok)
{
    acemq_idem *store = c->repo->store;
    int rc = 0;
    if (ok) {
        rc = acemq_idem_confirm(store, c->key.p, c->key.len, c->token);
        if (rc != 0)
            rc = acemq__step_fail(run, c->step, rc, "confirming key '%s' in repository '%s': %s",
                                  c->key.p, c->repo->name, acemq_idem_errmsg(store));
    } else if (c->step->remove_on_failure) {
        /* A release refused (a lease already lost) leaves nothing to undo. */
        (void)acemq_idem_release(store, c->key.p, c->key.len, c->token);
    }
    c->next = run->spare;
    run->spare = c;
    return rc;
}

/* A duplicate: skipped, or run with duplicate=true. */
static int duplicate(acemq__route_run *run, acemq__step *step, acemq__exchange *x)
{
    acemq__count(&step->counts.duplicates);
    if (step->skip_duplicate) return 0;
    set_duplicate(x, 1);
    return acemq__run_steps(run, &step->steps, x);
}

/* Claims key after the children ran (not eager). */
static int claim_after(acemq__route_run *run, acemq__step *step, acemq__repository *repo,
                       const acemq__buf *key)
{
    acemq_claim_opts co = {.lease_ms = repo->lease_ms};
    acemq_claim claim;
    int rc = acemq_idem_try_claim(repo->store, key->p, key->len, &co, &claim);
    if (rc < 0)
        return acemq__step_fail(run, step, rc, "claiming key '%s' in repository '%s': %s", key->p,
                                repo->name, acemq_idem_errmsg(repo->store));
    if (rc == ACEMQ_ALREADY_CONFIRMED) {
        /* Another delivery ran the children too and recorded the key. */
        acemq__count(&step->counts.duplicates);
        return 0;
    }
    if (rc == ACEMQ_IN_PROGRESS) return 0; /* its holder records the key */
    acemq__held_claim *c;
    rc = hold(run, step, repo, key, claim.token, &c);
    if (rc != 0) return acemq__step_fail(run, step, rc, "%s", acemq_strerror(rc));
    if (step->completion_eager) return acemq__settle_claim(run, c, 1);
    c->next = run->held;
    run->held = c;
    return 0;
}

static int lazy(acemq__route_run *run, acemq__step *step, acemq__repository *repo,
                const acemq__buf *key, acemq__exchange *x)
{
    int rc = acemq_idem_is_confirmed(repo->store, key->p, key->len);
    if (rc < 0)
        return acemq__step_fail(run, step, rc, "looking up key '%s' in repository '%s': %s", key->p,
                                repo->name, acemq_idem_errmsg(repo->store));
    if (rc == 1) return duplicate(run, step, x);
    if (!step->skip_duplicate) set_duplicate(x, 0);
    rc = acemq__run_steps(run, &step->steps, x);
    return rc != 0 ? rc : claim_after(run, step, repo, key);
}

int acemq__run_idempotent(acemq__route_run *run, acemq__step *step, acemq__exchange *x)
{
    acemq__repository *repo = &run->file->repos[step->repository];
    /* The step's own buffer: a nested idempotent consumer has its own, and
     * lazy() still needs this key after the child steps ran. */
    acemq__buf *key = &step->key;
    acemq__buf_clear(key);
    int rc = acemq__expr_eval(step->expr, x, key);
    if (rc != 0) {
        rc = acemq__step_fail(run, step, rc, "%s", acemq_strerror(rc));
    } else if (key->len == 0) {
        rc = acemq__step_fail(run, step, ACEMQ_EINVAL, "the key expression %s is empty",
                              step->expr_text);
    } else if (key->len > ACEMQ_IDEM_ID_MAX) {
        rc = acemq__step_fail(run, step, ACEMQ_ERANGE, "the key is %zu bytes, over %d", key->len,
                              ACEMQ_IDEM_ID_MAX);
    } else if (!step->eager) {
        rc = lazy(run, step, repo, key, x);
    } else {
        acemq_claim_opts co = {.lease_ms = repo->lease_ms};
        acemq_claim claim;
        rc = acemq_idem_try_claim(repo->store, key->p, key->len, &co, &claim);
        if (rc < 0) {
            rc = acemq__step_fail(run, step, rc, "claiming key '%s' in repository '%s': %s", key->p,
                                  repo->name, acemq_idem_errmsg(repo->store));
        } else if (rc == ACEMQ_ALREADY_CONFIRMED) {
            rc = duplicate(run, step, x);
        } else if (rc == ACEMQ_IN_PROGRESS) {
            acemq__count(&step->counts.in_progress);
            rc = acemq__step_fail(run, step, ACEMQ_EBUSY,
                                  "key '%s' is in progress elsewhere: the exchange goes back",
                                  key->p);
        } else {
            acemq__held_claim *c;
            rc = hold(run, step, repo, key, claim.token, &c);
            if (rc != 0) {
                (void)acemq_idem_release(repo->store, key->p, key->len, claim.token);
                rc = acemq__step_fail(run, step, rc, "%s", acemq_strerror(rc));
            } else {
                if (!step->skip_duplicate) set_duplicate(x, 0);
                rc = acemq__run_steps(run, &step->steps, x);
                if (step->completion_eager) {
                    int settled = acemq__settle_claim(run, c, rc == 0);
                    if (rc == 0) rc = settled;
                } else {
                    c->next = run->held;
                    run->held = c;
                }
            }
        }
    }
    return rc;
}
