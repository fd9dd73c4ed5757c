/* steps.c — runs a route's steps on an exchange: set_header, set_body, log,
 * to, exec, filter and choice here; idempotent_consumer in idem_step.c. A
 * step that fails stops the steps after it and fails the exchange. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "acemq/common.h"
#include "route/logline.h"
#include "route/run_internal.h"

int acemq__step_fail(acemq__route_run *run, const acemq__step *step, int rc, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    acemq__buf_clear(&run->why);
    (void)acemq__buf_puts(&run->why, text);
    run->failed_step = step->id;
    return rc < 0 ? rc : ACEMQ_EINVAL;
}

/* Evaluates a step's template into out (emptied first). */
static int eval(acemq__route_run *run, const acemq__step *step, const acemq__expr *e,
                const acemq__exchange *x, acemq__buf *out)
{
    acemq__buf_clear(out);
    int rc = acemq__expr_eval(e, x, out);
    if (rc != 0) return acemq__step_fail(run, step, rc, "%s", acemq_strerror(rc));
    return 0;
}

static int run_log(acemq__route_run *run, acemq__step *step, const acemq__exchange *x)
{
    acemq__buf msg = {0}, line = {0};
    int rc = eval(run, step, step->expr, x, &msg);
    if (rc == 0) {
        rc = acemq__logline_puts(&line, "route", run->route->id);
        if (rc == 0) rc = acemq__logline_puts(&line, "step", step->id);
        if (rc == 0) rc = acemq__logline_puts(&line, "exchange", x->id);
        if (rc == 0) rc = acemq__logline_put(&line, "message", acemq__buf_str(&msg), msg.len);
        if (rc == 0)
            acemq__logline_write(run->o->log, &line);
        else
            rc = acemq__step_fail(run, step, rc, "%s", acemq_strerror(rc));
    }
    acemq__buf_free(&msg);
    acemq__buf_free(&line);
    return rc;
}

static int run_set_header(acemq__route_run *run, acemq__step *step, acemq__exchange *x)
{
    acemq__buf v = {0};
    int rc = eval(run, step, step->expr, x, &v);
    if (rc == 0) {
        rc = acemq__fields_setn(&x->headers, step->name, acemq__buf_str(&v), v.len);
        if (rc != 0) rc = acemq__step_fail(run, step, rc, "%s", acemq_strerror(rc));
    }
    acemq__buf_free(&v);
    return rc;
}

static int run_set_body(acemq__route_run *run, acemq__step *step, acemq__exchange *x)
{
    acemq__buf v = {0};
    int rc = eval(run, step, step->expr, x, &v);
    if (rc == 0) {
        acemq__buf_free(&x->body);
        x->body = v;
        return 0;
    }
    acemq__buf_free(&v);
    return rc;
}

static int run_predicate(acemq__route_run *run, const acemq__step *step, const acemq__pred *p,
                         const acemq__exchange *x)
{
    int rc = acemq__pred_eval(p, x);
    if (rc < 0) return acemq__step_fail(run, step, rc, "%s", acemq_strerror(rc));
    return rc;
}

static int run_choice(acemq__route_run *run, acemq__step *step, acemq__exchange *x)
{
    for (size_t i = 0; i < step->n_whens; i++) {
        int rc = run_predicate(run, step, step->whens[i].pred, x);
        if (rc < 0) return rc;
        if (rc == 1) return acemq__run_steps(run, &step->whens[i].steps, x);
    }
    return step->has_otherwise ? acemq__run_steps(run, &step->steps, x) : 0;
}

static int run_one(acemq__route_run *run, acemq__step *step, acemq__exchange *x)
{
    int rc;
    acemq__buf why = {0};
    switch (step->kind) {
    case ACEMQ__STEP_SET_HEADER:
        return run_set_header(run, step, x);
    case ACEMQ__STEP_SET_BODY:
        return run_set_body(run, step, x);
    case ACEMQ__STEP_LOG:
        return run_log(run, step, x);
    case ACEMQ__STEP_TO:
        rc = acemq__endpoint_send(step->runtime, x, &why);
        if (rc != 0) rc = acemq__step_fail(run, step, rc, "%s", acemq__buf_str(&why));
        acemq__buf_free(&why);
        return rc;
    case ACEMQ__STEP_EXEC:
        rc = acemq__exec_run(step->command, step->timeout_ms, x, &why);
        if (rc != 0) rc = acemq__step_fail(run, step, rc, "%s", acemq__buf_str(&why));
        acemq__buf_free(&why);
        return rc;
    case ACEMQ__STEP_FILTER:
        rc = run_predicate(run, step, step->pred, x);
        if (rc < 0) return rc;
        if (rc == 0) {
            acemq__count(&step->counts.filtered);
            return 0;
        }
        return acemq__run_steps(run, &step->steps, x);
    case ACEMQ__STEP_CHOICE:
        return run_choice(run, step, x);
    case ACEMQ__STEP_IDEMPOTENT_CONSUMER:
        return acemq__run_idempotent(run, step, x);
    }
    return acemq__step_fail(run, step, ACEMQ_EINVAL, "unknown step kind %d", (int)step->kind);
}

int acemq__run_steps(acemq__route_run *run, acemq__steps *steps, acemq__exchange *x)
{
    for (size_t i = 0; i < steps->n; i++) {
        acemq__step *step = &steps->v[i];
        acemq__count(&step->counts.runs);
        int rc = run_one(run, step, x);
        if (rc != 0) {
            acemq__count(&step->counts.failures);
            return rc;
        }
    }
    return 0;
}
