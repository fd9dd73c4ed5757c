/* fuzz_route_load.c — libFuzzer target for the route file loader: the input
 * as a route file's text, loaded; a refused file has at least one error and
 * no model, a loaded one none; everything is freed either way. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"
#include "route/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every error line names the file first. */
static void check_errors(const acemq__route_errors *e)
{
    for (size_t i = 0; i < e->n; i++)
        if (!e->lines[i] || strncmp(e->lines[i], "fuzz.yaml:", 10) != 0) abort();
}

/* A loaded model has what the runtime relies on: ids, sources, compiled
 * expressions, repository indexes in range. */
static void check_steps(const acemq__route_file *f, const acemq__steps *s)
{
    for (size_t i = 0; i < s->n; i++) {
        const acemq__step *st = &s->v[i];
        if (!st->id || !*st->id) abort();
        switch (st->kind) {
        case ACEMQ__STEP_SET_HEADER:
            if (!st->name || !st->expr) abort();
            break;
        case ACEMQ__STEP_SET_BODY:
        case ACEMQ__STEP_LOG:
            if (!st->expr) abort();
            break;
        case ACEMQ__STEP_TO:
            if (!st->to.scheme || !st->to.path) abort();
            break;
        case ACEMQ__STEP_EXEC:
            if (!st->command) abort();
            break;
        case ACEMQ__STEP_FILTER:
            if (!st->pred) abort();
            break;
        case ACEMQ__STEP_CHOICE:
            if (st->n_whens == 0) abort();
            for (size_t j = 0; j < st->n_whens; j++) {
                if (!st->whens[j].pred) abort();
                check_steps(f, &st->whens[j].steps);
            }
            break;
        case ACEMQ__STEP_IDEMPOTENT_CONSUMER:
            if (!st->expr || st->repository >= f->n_repos) abort();
            break;
        }
        check_steps(f, &st->steps);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    acemq__route_file *f = NULL;
    acemq__route_errors e = {0};
    int rc = acemq__route_load_text("fuzz.yaml", (const char *)data, size, &f, &e);
    check_errors(&e);
    if (rc == 0) {
        if (!f || e.n != 0 || f->n_routes == 0) abort();
        for (size_t i = 0; i < f->n_repos; i++)
            if (!f->repos[i].name || !f->repos[i].url) abort();
        for (size_t i = 0; i < f->n_routes; i++) {
            if (!f->routes[i].id || !f->routes[i].from.scheme) abort();
            check_steps(f, &f->routes[i].steps);
        }
    } else if (f || (rc == ACEMQ_EINVAL && e.n == 0)) {
        abort();
    }
    acemq__route_file_free(f);
    acemq__route_errors_free(&e);
    return 0;
}
