/* route_metrics.c — the page `acemq route --metrics` serves: per route, the
 * exchanges taken, completed and failed; per step, its runs and failures,
 * and an idempotent consumer's duplicates and keys found in progress. Route
 * and step ids are [A-Za-z0-9_.-]+ (the loader checks), so they need no
 * escaping as label values. */
#include "cli/route_metrics.h"

#include <stddef.h>

#include "route/model.h"

static uint64_t load(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

typedef struct step_metric {
    const char *name, *help;
    size_t offset; /* into acemq__step_counts */
} step_metric;

static const step_metric step_metrics[] = {
    {"acemq_route_step_runs_total", "Exchanges that reached the step.",
     offsetof(acemq__step_counts, runs)},
    {"acemq_route_step_failures_total", "Exchanges that failed in the step or its children.",
     offsetof(acemq__step_counts, failures)},
    {"acemq_route_step_duplicates_total",
     "idempotent_consumer: exchanges whose key was confirmed before.",
     offsetof(acemq__step_counts, duplicates)},
    {"acemq_route_step_in_progress_total",
     "idempotent_consumer: exchanges whose key was held elsewhere (failed, to come again).",
     offsetof(acemq__step_counts, in_progress)},
    {"acemq_route_step_filtered_total", "filter: exchanges whose predicate was false.",
     offsetof(acemq__step_counts, filtered)},
};

static const char *kind_name(acemq__step_kind k)
{
    static const char *const names[] = {"set_header", "set_body", "log",    "to",
                                        "exec",       "filter",   "choice", "idempotent_consumer"};
    return (size_t)k < sizeof names / sizeof names[0] ? names[k] : "unknown";
}

static void put_steps(acemq__page *o, const char *route, const acemq__steps *steps,
                      const step_metric *m)
{
    for (size_t i = 0; i < steps->n; i++) {
        const acemq__step *s = &steps->v[i];
        const uint64_t *c = (const uint64_t *)((const char *)&s->counts + m->offset);
        acemq__page_put(o, "%s{route=\"%s\",step=\"%s\",kind=\"%s\"} %llu\n", m->name, route, s->id,
                        kind_name(s->kind), (unsigned long long)load(c));
        for (size_t w = 0; w < s->n_whens; w++)
            put_steps(o, route, &s->whens[w].steps, m);
        put_steps(o, route, &s->steps, m);
    }
}

static void put_route_counter(acemq__page *o, const acemq__route_file *f, const char *name,
                              const char *help, size_t offset)
{
    acemq__page_put(o, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < f->n_routes; i++) {
        const uint64_t *c = (const uint64_t *)((const char *)&f->routes[i].counts + offset);
        acemq__page_put(o, "%s{route=\"%s\"} %llu\n", name, f->routes[i].id,
                        (unsigned long long)load(c));
    }
}

void acemq__route_metrics_render(void *ctx, acemq__page *o)
{
    const acemq__route_file *f = ctx;
    put_route_counter(o, f, "acemq_route_exchanges_total", "Exchanges taken from the source.",
                      offsetof(acemq__route_counts, exchanges));
    put_route_counter(o, f, "acemq_route_completed_total", "Exchanges that ran to the end.",
                      offsetof(acemq__route_counts, completed));
    put_route_counter(o, f, "acemq_route_failed_total",
                      "Exchanges that failed in a step and went back to their source.",
                      offsetof(acemq__route_counts, failed));
    for (size_t m = 0; m < sizeof step_metrics / sizeof step_metrics[0]; m++) {
        acemq__page_put(o, "# HELP %s %s\n# TYPE %s counter\n", step_metrics[m].name,
                        step_metrics[m].help, step_metrics[m].name);
        for (size_t i = 0; i < f->n_routes; i++)
            put_steps(o, f->routes[i].id, &f->routes[i].steps, &step_metrics[m]);
    }
}
