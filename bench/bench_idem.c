/* bench_idem.c — claim+confirm pairs per second for every idempotency backend,
 * each beside a peer that does the same writes on the same ids in the same run,
 * so the ratio still means something on a noisy machine.
 *
 * Ids are what producers send: 36-byte UUID text (random, version 4), made
 * before the clock starts. The memory store's target (>= 5,000,000 pairs/s on
 * one thread) is judged on them; memory/short/1t runs the same path on 14-byte
 * ids ("order-00000042") beside it, without a target.
 *
 * Peers: for the memory store, a real Redis on loopback doing SET NX / SET per id
 * through hiredis (what people reach for instead of an in-process store); for the
 * SQLite store, raw sqlite3 calls with the same table, journal mode, synchronous
 * setting and thread count. A missed target is printed, never a failure: benchmarks
 * measure, tests assert. The exit status is non-zero only when something broke.
 *
 * This file holds the options and the report; bench_idem_workers.c the ids and
 * threads, bench_idem_acemq.c acemq's pairs, bench_idem_memory.c the memory
 * cases, bench_idem_hiredis.c their Redis peer, bench_idem_sqlite.c the SQLite
 * cases and their raw sqlite3 peer.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "bench_common.h"
#include "bench_idem.h"

/* The 1-minute load average, printed with the figures: on a shared machine it
 * says how far to trust them. "?" where /proc is not there. */
static void read_loadavg(char *buf, size_t cap)
{
    snprintf(buf, cap, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return;
    double one;
    if (fscanf(f, "%lf", &one) == 1) snprintf(buf, cap, "%.2f", one);
    (void)fclose(f); /* read-only: nothing to lose */
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_idem [--quick] [--ids N] [--no-redis] [--out FILE] [--dir DIR]\n"
               "                  [--filter TEXT]\n"
               "  --quick        a short smoke run (one repetition, short runs)\n"
               "  --ids N        ids per memory run (default 1,000,000; --quick 100,000)\n"
               "  --no-redis     skip the Redis peer (memory cases then have no peer figure)\n"
               "  --out FILE     append JSON lines here (default bench/results/latest.jsonl)\n"
               "  --dir DIR      where the SQLite files go (default a fresh dir in /tmp)\n"
               "  --filter TEXT  only the cases whose name contains TEXT (e.g. memory/uuid)\n"
               "environment: ACEMQ_REDIS_PORT (default 6390)\n");
}

int main(int argc, char **argv)
{
    bench_name = "bench_idem";
    config cfg = {0};
    size_t ids_override = 0;
    cfg.out_path = ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            cfg.quick = 1;
        } else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(argv[++i], &end, 10);
            if (errno || *end || n == 0 || n >= MAX_IDS) die("--ids wants 1..%u", MAX_IDS - 1);
            ids_override = (size_t)n;
        } else if (strcmp(argv[i], "--no-redis") == 0) {
            cfg.no_redis = 1;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            cfg.out_path = argv[++i];
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            cfg.dir = argv[++i];
        } else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
            cfg.filter = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    /* Full: five runs of each side for a median, because one run in three
     * landing on a neighbour's fsync or compile is common on a shared two-core
     * machine; 1.5 s per time-sized run keeps the whole bench near 90 s. */
    cfg.mem_ids = ids_override ? ids_override : cfg.quick ? 100000 : 1000000;
    cfg.sql_ids = cfg.quick ? 200000 : 2000000;
    cfg.seconds = cfg.quick ? 0.3 : 1.5;
    cfg.reps = cfg.quick ? 1 : 5;
    const char *port = getenv("ACEMQ_REDIS_PORT");
    cfg.redis_port = port && *port ? atoi(port) : 6390;
    if (cfg.redis_port <= 0 || cfg.redis_port > 65535)
        die("ACEMQ_REDIS_PORT=%s is not a port", port);

    /* A Redis that goes away mid-run must fail a write, not kill us. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("signal(SIGPIPE): %s", strerror(errno));

    idset uuids, shorts;
    make_uuid_ids(&uuids, cfg.mem_ids > cfg.sql_ids ? cfg.mem_ids : cfg.sql_ids);
    make_short_ids(&shorts, cfg.mem_ids);

    char tmpl[4096];
    const char *dir = cfg.dir;
    if (!dir) {
        const char *tmp = getenv("TMPDIR");
        join_path(tmpl, sizeof tmpl, tmp && *tmp ? tmp : "/tmp", "/acemq-bench-XXXXXX");
        if (!mkdtemp(tmpl)) die("mkdtemp(%s): %s", tmpl, strerror(errno));
        dir = tmpl;
    }

    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("%s: %s", cfg.out_path, strerror(errno));

    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char load[64];
    read_loadavg(load, sizeof load);
    printf("bench_idem: acemq %s, SQLite %s, %ld cpus, load %s, %s run; SQLite files in %s\n",
           acemq_version(), sqlite3_libversion(), cpus, load, cfg.quick ? "quick" : "full", dir);
    printf("ids: random UUIDv4 text (36 bytes), memory/short: \"order-%%08d\" (14 bytes)\n"
           "memory: %zu ids per run; sqlite and redis: %.1f s per run; median of %d run%s\n",
           cfg.mem_ids, cfg.seconds, cfg.reps, cfg.reps == 1 ? "" : "s");
    fflush(stdout);

    double t0 = mono_now();
    bench_memory(&cfg, out, &uuids, &shorts);
    bench_sqlite(&cfg, out, dir, &uuids);
    double took = mono_now() - t0;
    read_loadavg(load, sizeof load);

    if (fclose(out) != 0) die("closing %s: %s", cfg.out_path, strerror(errno));
    if (!cfg.dir && rmdir(dir) != 0) die("rmdir(%s): %s", dir, strerror(errno));
    free(uuids.buf);
    free(shorts.buf);
    printf("\n%.1f s in all, load %s at the end; results appended to %s\n", took, load,
           cfg.out_path);
    return 0;
}
