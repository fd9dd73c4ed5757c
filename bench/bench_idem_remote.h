/* bench_idem_remote.h — what the benches of the idempotency stores on a
 * server (bench_idem_pg, bench_idem_redis) share: their options, random
 * UUID ids, and the turns that time acemq beside a raw peer doing the same
 * work by hand on the same server.
 *
 * Each bench runs three cases, named <tech>/uuid/...: claim + confirm
 * pairs per second on one connection and on eight (a handle or a raw
 * connection per thread) against the raw peer, and claims per second
 * through acemq_idem_try_claim_many of 100 ids against one try_claim at a
 * time. Turns alternate, the peer's (raw, or one at a time) first, and
 * each figure is the median of its turns. */
#ifndef ACEMQ_BENCH_IDEM_REMOTE_H
#define ACEMQ_BENCH_IDEM_REMOTE_H

#include <stdio.h>

#include "acemq/acemq.h"

#ifndef ACEMQ_SOURCE_DIR
#define ACEMQ_SOURCE_DIR "."
#endif

/* A run's options, from the command line. */
typedef struct remote_config {
    const char *out_path;
    const char *filter;
    double seconds; /* per turn */
    int reps;
} remote_config;

/* The store under test and the raw peer beside it. The raw peer's calls
 * die on any failure. */
typedef struct remote_bench {
    const char *tech;                     /* the cases' first word: "redis", "postgres" */
    const char *raw_peer;                 /* what the raw peer does, in words */
    const char *store_url;                /* acemq_idem_open's URL */
    const acemq_idem_options *store_opts; /* NULL: the defaults */
    void *(*raw_open)(void);              /* one connection, ready for raw_pair */
    /* Claims and confirms id (36 bytes): 0, or 1 when the id was not new. */
    int (*raw_pair)(void *conn, const char *id);
    void (*raw_close)(void *conn);
} remote_bench;

/* Fills cfg from argv (--out, --seconds, --reps, --filter; bench_name's
 * usage on anything else, exit status 2). */
void remote_parse_args(int argc, char **argv, remote_config *cfg);

/* Runs the three cases, appending their JSON lines to out. */
void remote_run_cases(FILE *out, const remote_config *cfg, const remote_bench *b);

#endif
