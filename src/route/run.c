/* run.c — the route runtime (route.h): opens what a route file names, runs
 * a thread per route, and settles each exchange with its claims and its
 * source. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acemq/common.h"
#include "core/url.h"
#include "route/logline.h"
#include "route/run_internal.h"

/* How long a route waits on its source before looking at the stop flag. */
#define POLL_MS 100

typedef struct route_thread {
    acemq__route_run run;
    pthread_t thread;
    int started;
    struct acemq__routes *owner;
} route_thread;

struct acemq__routes {
    acemq__route_file *file;
    acemq__routes_options o;
    acemq__route_env env;
    route_thread *threads;
    size_t n;
    int stop;             /* read and written with __atomic: set once, by wait */
    pthread_mutex_t mu;   /* guards running */
    pthread_cond_t ended; /* signalled when a route ends */
    size_t running;
};

static void log_exchange(const acemq__route_run *run, FILE *f, const acemq__exchange *x,
                         const char *event, const char *error)
{
    acemq__buf line = {0};
    int rc = acemq__logline_puts(&line, "route", run->route->id);
    if (rc == 0 && run->failed_step && error)
        rc = acemq__logline_puts(&line, "step", run->failed_step);
    if (rc == 0) rc = acemq__logline_puts(&line, "exchange", x->id);
    if (rc == 0) rc = acemq__logline_puts(&line, "event", event);
    if (rc == 0 && error) rc = acemq__logline_puts(&line, "error", error);
    if (rc == 0) acemq__logline_write(f, &line);
    acemq__buf_free(&line);
}

/* Runs one exchange through the route and settles it: claims first, then
 * the source. */
static void run_exchange(acemq__route_run *run, acemq__exchange *x)
{
    acemq__route *route = run->route;
    acemq__count(&route->counts.exchanges);
    run->failed_step = NULL;
    acemq__buf_clear(&run->why);
    int rc = acemq__run_steps(run, &route->steps, x);
    int ok = rc == 0;
    /* Oldest claim first; a confirm refused fails the exchange, and the
     * claims after it are released as a failure would. */
    acemq__held_claim *order = NULL;
    while (run->held) {
        acemq__held_claim *c = run->held;
        run->held = c->next;
        c->next = order;
        order = c;
    }
    while (order) {
        acemq__held_claim *c = order;
        order = c->next;
        if (acemq__settle_claim(run, c, ok) != 0) ok = 0;
    }
    if (ok) {
        acemq__count(&route->counts.completed);
        if (run->o->verbose) log_exchange(run, run->o->log, x, "completed", NULL);
    } else {
        acemq__count(&route->counts.failed);
        log_exchange(run, run->o->errlog, x, "failed", acemq__buf_str(&run->why));
    }
    acemq__buf why = {0};
    if (acemq__source_done(run->source, x, ok, &why) != 0) {
        run->failed_step = NULL;
        log_exchange(run, run->o->errlog, x, "settle_failed", acemq__buf_str(&why));
    }
    acemq__buf_free(&why);
}

static int stopping(struct acemq__routes *r)
{
    return __atomic_load_n(&r->stop, __ATOMIC_ACQUIRE);
}

static void *route_main(void *arg)
{
    route_thread *t = arg;
    acemq__route_run *run = &t->run;
    struct acemq__routes *r = t->owner;
    acemq__buf why = {0};
    while (!stopping(r)) {
        acemq__exchange x;
        acemq__exchange_init(&x, run->route->id);
        acemq__buf_clear(&why);
        int rc = acemq__source_next(run->source, POLL_MS, &x, &why);
        if (rc == 0) {
            run_exchange(run, &x);
        } else if (rc == 1) {
            acemq__exchange_free(&x);
            break;
        } else if (rc != ACEMQ_ENOENT || why.len) {
            run->failed_step = NULL;
            log_exchange(run, run->o->errlog, &x, "source_error",
                         why.len ? acemq__buf_str(&why) : acemq_strerror(rc));
            if (rc != ACEMQ_ENOENT) {
                /* A source that failed without reconnecting by itself is
                 * asked again after a pause, not in a loop. */
                struct timespec pause = {1, 0};
                while (nanosleep(&pause, &pause) != 0 && errno == EINTR && !stopping(r)) {
                }
            }
        }
        acemq__exchange_free(&x);
    }
    acemq__buf_free(&why);
    acemq__run_free(run);
    pthread_mutex_lock(&r->mu);
    r->running--;
    pthread_cond_signal(&r->ended);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static int fail_at(acemq__buf *why, const acemq__route_file *f, acemq__where w, int rc,
                   const char *what, const char *detail)
{
    acemq__buf_clear(why);
    (void)acemq__buf_printf(why, "%s:%d:%d: %s: %s", f->path, w.line, w.column, what, detail);
    return rc;
}

static int open_endpoints(acemq__steps *steps, const acemq__route_env *env,
                          const acemq__route_file *f, acemq__buf *why);

static int open_step_endpoints(acemq__step *s, const acemq__route_env *env,
                               const acemq__route_file *f, acemq__buf *why)
{
    if (s->kind == ACEMQ__STEP_TO) {
        acemq__buf detail = {0};
        acemq__endpoint *e = NULL;
        int rc = acemq__endpoint_open(s, env, &e, &detail);
        if (rc != 0) {
            fail_at(why, f, s->where, rc, "cannot open", acemq__buf_str(&detail));
            acemq__buf_free(&detail);
            return rc;
        }
        acemq__buf_free(&detail);
        s->runtime = e;
        return 0;
    }
    for (size_t i = 0; i < s->n_whens; i++) {
        int rc = open_endpoints(&s->whens[i].steps, env, f, why);
        if (rc != 0) return rc;
    }
    return open_endpoints(&s->steps, env, f, why);
}

static int open_endpoints(acemq__steps *steps, const acemq__route_env *env,
                          const acemq__route_file *f, acemq__buf *why)
{
    for (size_t i = 0; i < steps->n; i++) {
        int rc = open_step_endpoints(&steps->v[i], env, f, why);
        if (rc != 0) return rc;
    }
    return 0;
}

/* Closes the endpoints and frees what the steps kept between exchanges. */
static void close_endpoints(acemq__steps *steps)
{
    for (size_t i = 0; i < steps->n; i++) {
        acemq__step *s = &steps->v[i];
        if (s->kind == ACEMQ__STEP_TO) {
            acemq__endpoint_close(s->runtime);
            s->runtime = NULL;
        }
        acemq__buf_free(&s->key);
        for (size_t w = 0; w < s->n_whens; w++)
            close_endpoints(&s->whens[w].steps);
        close_endpoints(&s->steps);
    }
}

static int open_stores(acemq__route_file *f, const acemq__routes_options *o, acemq__buf *why)
{
    for (size_t i = 0; i < f->n_repos; i++) {
        acemq__repository *repo = &f->repos[i];
        acemq_idem_options io;
        acemq_idem_options_init(&io);
        if (o->clock) io.clock = o->clock;
        if (repo->lease_ms > 0) io.lease_ms = repo->lease_ms;
        int rc = acemq_idem_open(&repo->store, repo->url, &io);
        if (rc != 0) {
            char what[160];
            (void)snprintf(what, sizeof what, "cannot open repository '%s'", repo->name);
            return fail_at(why, f, repo->where, rc, what, acemq_idem_errmsg(NULL));
        }
    }
    return 0;
}

static void close_all(acemq__routes *r)
{
    acemq__route_file *f = r->file;
    for (size_t i = 0; i < r->n; i++) {
        acemq__source_close(r->threads[i].run.source);
        r->threads[i].run.source = NULL;
        acemq__buf_free(&r->threads[i].run.why);
    }
    for (size_t i = 0; i < f->n_routes; i++)
        close_endpoints(&f->routes[i].steps);
    for (size_t i = 0; i < f->n_repos; i++) {
        acemq_idem_close(f->repos[i].store);
        f->repos[i].store = NULL;
    }
}

int acemq__routes_start(acemq__route_file *f, const acemq__routes_options *o, acemq__routes **out,
                        acemq__buf *why)
{
    *out = NULL;
    acemq__routes *r = calloc(1, sizeof *r);
    route_thread *threads = r ? calloc(f->n_routes ? f->n_routes : 1, sizeof *threads) : NULL;
    if (!threads) {
        free(r);
        return ACEMQ_ENOMEM;
    }
    r->file = f;
    if (o) r->o = *o;
    if (!r->o.log) r->o.log = stdout;
    if (!r->o.errlog) r->o.errlog = stderr;
    r->env.broker_url = r->o.broker_url ? r->o.broker_url : f->broker;
    r->env.log = r->o.log;
    r->threads = threads;
    r->n = f->n_routes;
    if (pthread_mutex_init(&r->mu, NULL) != 0 || pthread_cond_init(&r->ended, NULL) != 0) {
        free(threads);
        free(r);
        return ACEMQ_ENOMEM;
    }
    int rc = open_stores(f, &r->o, why);
    for (size_t i = 0; rc == 0 && i < f->n_routes; i++)
        rc = open_endpoints(&f->routes[i].steps, &r->env, f, why);
    for (size_t i = 0; rc == 0 && i < r->n; i++) {
        route_thread *t = &threads[i];
        t->owner = r;
        t->run = (acemq__route_run){.route = &f->routes[i], .file = f, .o = &r->o};
        acemq__buf detail = {0};
        rc = acemq__source_open(&f->routes[i].from, &r->env, &t->run.source, &detail);
        if (rc != 0)
            fail_at(why, f, f->routes[i].from.where, rc, "cannot open", acemq__buf_str(&detail));
        acemq__buf_free(&detail);
    }
    for (size_t i = 0; rc == 0 && i < r->n; i++) {
        pthread_mutex_lock(&r->mu);
        r->running++;
        pthread_mutex_unlock(&r->mu);
        if (pthread_create(&threads[i].thread, NULL, route_main, &threads[i]) != 0) {
            pthread_mutex_lock(&r->mu);
            r->running--;
            pthread_mutex_unlock(&r->mu);
            rc = ACEMQ_ENOMEM;
            acemq__buf_clear(why);
            (void)acemq__buf_puts(why, "cannot start a thread for a route");
        } else {
            threads[i].started = 1;
        }
    }
    if (rc != 0) {
        __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
        acemq__routes_wait(r, NULL);
        acemq__routes_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

void acemq__routes_wait(acemq__routes *r, const volatile sig_atomic_t *stop)
{
    pthread_mutex_lock(&r->mu);
    while (r->running > 0 && !(stop && *stop) && !stopping(r)) {
        struct timespec until;
        (void)clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += POLL_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&r->ended, &r->mu, &until);
    }
    pthread_mutex_unlock(&r->mu);
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
    for (size_t i = 0; i < r->n; i++) {
        if (!r->threads[i].started) continue;
        (void)pthread_join(r->threads[i].thread, NULL);
        r->threads[i].started = 0;
    }
}

void acemq__routes_close(acemq__routes *r)
{
    if (!r) return;
    close_all(r);
    (void)pthread_cond_destroy(&r->ended);
    (void)pthread_mutex_destroy(&r->mu);
    free(r->threads);
    free(r);
}
