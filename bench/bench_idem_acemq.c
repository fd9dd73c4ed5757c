/* bench_idem_acemq.c — acemq's side of bench_idem: claim+confirm pairs one at
 * a time or claimed in batches, a run of them on fresh handles, and the
 * store's own counters checked against the pairs timed. */
#include <stdint.h>
#include <string.h>

#include "acemq/idem.h"

#include "bench_common.h"
#include "bench_idem.h"

int bench_acemq_pairs(worker *w)
{
    acemq_idem *h = w->ctx;
    const idset *ids = w->ids;
    int len = (int)ids->len;
    for (size_t i = w->lo; i < w->hi; i++) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        acemq_claim c;
        const char *id = id_at(ids, i);
        int rc = acemq_idem_try_claim(h, id, ids->len, NULL, &c);
        if (rc != ACEMQ_CLAIMED)
            return worker_fail(w, "try_claim(%.*s) = %s: %s", len, id, acemq_claim_status_name(rc),
                               acemq_idem_errmsg(h));
        rc = acemq_idem_confirm(h, id, ids->len, c.token);
        if (rc != 0)
            return worker_fail(w, "confirm(%.*s) = %s: %s", len, id, acemq_err_name(rc),
                               acemq_idem_errmsg(h));
        w->done++;
    }
    return 0;
}

int bench_acemq_batch_pairs(worker *w)
{
    acemq_idem *h = w->ctx;
    const idset *ids = w->ids;
    int len = (int)ids->len;
    acemq_idem_key keys[CLAIM_BATCH];
    acemq_claim c[CLAIM_BATCH];
    int st[CLAIM_BATCH];
    for (size_t lo = w->lo; lo < w->hi; lo += CLAIM_BATCH) {
        if (w->deadline > 0 && mono_now() >= w->deadline) break;
        size_t k = w->hi - lo < CLAIM_BATCH ? w->hi - lo : CLAIM_BATCH;
        for (size_t j = 0; j < k; j++) {
            keys[j].id = id_at(ids, lo + j);
            keys[j].id_len = ids->len;
        }
        int rc = acemq_idem_try_claim_many(h, k, keys, NULL, c, st);
        if (rc != (int)k) {
            for (size_t j = 0; j < k; j++)
                if (st[j] != ACEMQ_CLAIMED)
                    return worker_fail(w, "try_claim_many: %.*s = %s: %s", len, id_at(ids, lo + j),
                                       acemq_claim_status_name(st[j]), acemq_idem_errmsg(h));
            return worker_fail(w, "try_claim_many = %s: %s", acemq_claim_status_name(rc),
                               acemq_idem_errmsg(h));
        }
        for (size_t j = 0; j < k; j++) {
            rc = acemq_idem_confirm(h, id_at(ids, lo + j), ids->len, c[j].token);
            if (rc != 0)
                return worker_fail(w, "confirm(%.*s) = %s: %s", len, id_at(ids, lo + j),
                                   acemq_err_name(rc), acemq_idem_errmsg(h));
        }
        w->done += k;
    }
    return 0;
}

/* The store must have counted exactly the pairs we timed, or the figure
 * measured something other than claim+confirm. */
static void check_stats(acemq_idem **hs, int nh, size_t done)
{
    uint64_t claimed = 0, confirms = 0;
    for (int i = 0; i < nh; i++) {
        acemq_idem_stats st;
        int rc = acemq_idem_stats_get(hs[i], &st);
        if (rc != 0) die("acemq_idem_stats_get: %s", acemq_strerror(rc));
        claimed += st.claimed;
        confirms += st.confirms;
    }
    if (claimed != done || confirms != done)
        die("store counted %llu claims and %llu confirms for %zu timed pairs",
            (unsigned long long)claimed, (unsigned long long)confirms, done);
}

/* One run of pairs on fresh handles: one handle shared by the threads
 * (shared), or one per thread. Returns pairs/s; *share as least_share. */
double bench_acemq_run(int (*run)(worker *), const char *url, const acemq_idem_options *o,
                       int threads, int shared, const idset *ids, size_t n, double seconds,
                       double *share)
{
    acemq_idem *hs[MAX_THREADS] = {NULL};
    int nh = shared ? 1 : threads;
    for (int i = 0; i < nh; i++) {
        int rc = acemq_idem_open(&hs[i], url, o);
        if (rc != 0) die("acemq_idem_open(%s): %s", url, acemq_strerror(rc));
    }
    worker ws[MAX_THREADS];
    memset(ws, 0, sizeof ws);
    split(ws, threads, ids, n, seconds);
    for (int t = 0; t < threads; t++) {
        ws[t].run = run;
        ws[t].ctx = hs[shared ? 0 : t];
    }
    double elapsed = run_workers(ws, threads);
    size_t done = total_done(ws, threads);
    *share = least_share(ws, threads);
    check_stats(hs, nh, done);
    for (int i = 0; i < nh; i++)
        acemq_idem_close(hs[i]);
    if (done == 0) die("%s: no pair completed in %.2f s", url, elapsed);
    return (double)done / elapsed;
}
