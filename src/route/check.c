/* check.c — `acemq route --check`'s second half (route.h): what loading
 * cannot know, found by opening each source and endpoint once and looking
 * each repository's store up by its URL scheme (stores are not opened: an
 * SQLite repository would create its file). */
#include <stdio.h>

#include "acemq/common.h"
#include "idem/idem_url.h"
#include "route/route.h"
#include "route/io.h"

static void check_steps(acemq__steps *steps, const acemq__route_env *env,
                        const acemq__route_file *f, acemq__route_errors *errors);

static void check_step(acemq__step *s, const acemq__route_env *env, const acemq__route_file *f,
                       acemq__route_errors *errors)
{
    if (s->kind == ACEMQ__STEP_TO) {
        acemq__buf why = {0};
        acemq__endpoint *e = NULL;
        if (acemq__endpoint_open(s, env, &e, &why) != 0)
            (void)acemq__route_error(errors, f->path, s->to.where, "cannot open %s: %s", s->to.text,
                                     acemq__buf_str(&why));
        acemq__endpoint_close(e);
        acemq__buf_free(&why);
    }
    for (size_t i = 0; i < s->n_whens; i++)
        check_steps(&s->whens[i].steps, env, f, errors);
    check_steps(&s->steps, env, f, errors);
}

static void check_steps(acemq__steps *steps, const acemq__route_env *env,
                        const acemq__route_file *f, acemq__route_errors *errors)
{
    for (size_t i = 0; i < steps->n; i++)
        check_step(&steps->v[i], env, f, errors);
}

int acemq__routes_check(acemq__route_file *f, const acemq__routes_options *o,
                        acemq__route_errors *errors)
{
    size_t before = errors->n;
    acemq__route_env env = {o && o->broker_url ? o->broker_url : f->broker, NULL};
    for (size_t i = 0; i < f->n_repos; i++) {
        const acemq__repository *repo = &f->repos[i];
        char why[320];
        if (acemq__idem_url_check(repo->url, why, sizeof why) != 0)
            (void)acemq__route_error(errors, f->path, repo->where, "repository '%s': %s",
                                     repo->name, why);
    }
    for (size_t i = 0; i < f->n_routes; i++) {
        acemq__route *route = &f->routes[i];
        acemq__buf why = {0};
        acemq__source *s = NULL;
        if (acemq__source_open(&route->from, &env, &s, &why) != 0)
            (void)acemq__route_error(errors, f->path, route->from.where, "cannot open %s: %s",
                                     route->from.text, acemq__buf_str(&why));
        acemq__source_close(s);
        acemq__buf_free(&why);
        check_steps(&route->steps, &env, f, errors);
    }
    return errors->n > before ? ACEMQ_EINVAL : 0;
}
