/* gen_audit_stream.c — writes the message-audit benchmark's stream of ids (issue 3):
 * N ActiveMQ-style ids "<producer>:<sequence>" from P producers, randomly
 * interleaved, each producer's sequences increasing from 1, with a fraction of
 * redeliveries drawn uniformly from the last W first deliveries. Standalone
 * (C11, libc only) and deterministic: the same options and --seed give the same
 * bytes on every machine.
 *
 *   gen_audit_stream [--ids N] [--producers P] [--redeliver F] [--window W]
 *                    [--seed S] [--out FILE] [--expect FILE]
 *                    [--no-loss] [--depth D] [--track T]
 *
 * Defaults: 2,000,000 ids, 64 producers, 5 % redeliveries, W = 1,000, seed 1,
 * stdout. Producer k (0-based) is "ID:host-<k>-1700000000000-1:1:1:1", the shape
 * of an ActiveMQ producer id (connection id, session, producer), so a full id is
 * "ID:host-7-1700000000000-1:1:1:1:42".
 *
 * Each line is a redelivery with probability F (once there is something to
 * redeliver), else the next sequence of a producer chosen uniformly. A
 * redelivery repeats one of the last W ids that were delivered for the first
 * time (redeliveries do not enter that pool, so a chain of redeliveries cannot
 * reach further back than W). --expect FILE writes, line for line, what an
 * audit that lost no history must answer: "new" for a first delivery,
 * "duplicate" for a redelivery.
 *
 * No lost history. An audit with a window of depth D per producer and an LRU
 * of T producers answers every line of this stream exactly (new/duplicate as
 * in --expect) when
 *   (1) P <= T: no producer is ever evicted, and
 *   (2) W <= D and W <= 64 * floor((D + 1) / 64).
 * Why (2): a redelivery repeats (p, s) that is among the last W first
 * deliveries, so at most W - 1 first deliveries of any producer, p included,
 * came after it, and p's highest sequence so far is H <= s + W - 1: the lag
 * H - s is at most W - 1 < D, inside a window of depth D. ActiveMQ's window
 * (BitArrayBin) is floor((D + 1) / 64) + 1 blocks of 64 bits, and it slides by
 * whole blocks so that the block holding H is the last one: it keeps every
 * sequence from 64 * (floor(H / 64) - floor((D + 1) / 64)) up, i.e. at least
 * the 64 * floor((D + 1) / 64) sequences below H, 2,048 for D = 2,048. First
 * deliveries are never behind the window (each producer's sequences only
 * increase), and each producer starts at 1, so no id is below a window's base.
 * With the defaults (P = 64, W = 1,000) and ActiveMQ's defaults (T = 64,
 * D = 2,048) the stream loses nothing. The generator also measures the largest
 * lag it actually produced and prints it with the totals on stderr; --no-loss
 * makes it refuse (exit 2) options for which (1) or (2) fails against --depth
 * and --track (defaults 2,048 and 64).
 *
 * Exit status: 0 written, 1 an I/O error, 2 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PRODUCERS 1000000u
#define MAX_WINDOW 100000000u
#define PRODUCER_FMT "ID:host-%" PRIu32 "-1700000000000-1:1:1:1"

typedef struct first_delivery {
    uint32_t producer;
    uint64_t seq;
} first_delivery;

/* xoshiro256** seeded through splitmix64: fixed, portable, fast. */
static uint64_t rng_s[4];

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(void)
{
    uint64_t result = rotl(rng_s[1] * 5, 7) * 9;
    uint64_t t = rng_s[1] << 17;
    rng_s[2] ^= rng_s[0];
    rng_s[3] ^= rng_s[1];
    rng_s[1] ^= rng_s[2];
    rng_s[0] ^= rng_s[3];
    rng_s[2] ^= t;
    rng_s[3] = rotl(rng_s[3], 45);
    return result;
}

static void rng_seed(uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng_s[i] = splitmix64(&seed);
}

/* Uniform in [0, n), n > 0, without modulo bias. */
static uint64_t rng_below(uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = rng_next();
    } while (x >= limit);
    return x % n;
}

/* Uniform in [0, 1), 53 bits. */
static double rng_unit(void)
{
    return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

static void usage(const char *why)
{
    if (why) fprintf(stderr, "gen_audit_stream: %s\n", why);
    fputs("usage: gen_audit_stream [--ids N] [--producers P] [--redeliver F] [--window W]\n"
          "                        [--seed S] [--out FILE] [--expect FILE]\n"
          "                        [--no-loss] [--depth D] [--track T]\n"
          "  --ids N         lines to write (default 2000000)\n"
          "  --producers P   producers, interleaved at random (default 64)\n"
          "  --redeliver F   fraction of lines that are redeliveries (default 0.05)\n"
          "  --window W      a redelivery repeats one of the last W first deliveries (1000)\n"
          "  --seed S        PRNG seed (default 1)\n"
          "  --out FILE      where the ids go (default stdout)\n"
          "  --expect FILE   also write new/duplicate per line, as a lossless audit answers\n"
          "  --no-loss       refuse options with which an audit of depth D tracking T\n"
          "                  producers could lose history (--depth 2048, --track 64)\n",
          stderr);
    exit(2);
}

static uint64_t parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    if (!s) usage("an option needs a value");
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, "gen_audit_stream: %s: want a number in [%" PRIu64 ", %" PRIu64 "]\n", opt,
                lo, hi);
        exit(2);
    }
    return (uint64_t)v;
}

static FILE *open_out(const char *path)
{
    if (!path || strcmp(path, "-") == 0) return stdout;
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "gen_audit_stream: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return f;
}

static void close_out(FILE *f, const char *path)
{
    if (!f) return;
    int bad = ferror(f);
    if (f == stdout ? fflush(f) != 0 : fclose(f) != 0) bad = 1;
    if (bad) {
        fprintf(stderr, "gen_audit_stream: %s: write failed\n", path ? path : "stdout");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    uint64_t ids = 2000000, seed = 1, depth = 2048, track = 64;
    uint32_t producers = 64, window = 1000;
    double redeliver = 0.05;
    const char *out_path = NULL, *expect_path = NULL;
    int no_loss = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--ids") == 0) {
            ids = parse_u64(a, v, 0, UINT64_MAX / 2);
            i++;
        } else if (strcmp(a, "--producers") == 0) {
            producers = (uint32_t)parse_u64(a, v, 1, MAX_PRODUCERS);
            i++;
        } else if (strcmp(a, "--window") == 0) {
            window = (uint32_t)parse_u64(a, v, 1, MAX_WINDOW);
            i++;
        } else if (strcmp(a, "--seed") == 0) {
            seed = parse_u64(a, v, 0, UINT64_MAX);
            i++;
        } else if (strcmp(a, "--depth") == 0) {
            depth = parse_u64(a, v, 1, INT32_MAX);
            i++;
        } else if (strcmp(a, "--track") == 0) {
            track = parse_u64(a, v, 1, INT32_MAX);
            i++;
        } else if (strcmp(a, "--redeliver") == 0) {
            char *end;
            if (!v) usage("--redeliver needs a value");
            errno = 0;
            redeliver = strtod(v, &end);
            if (errno || end == v || *end || !(redeliver >= 0.0 && redeliver < 1.0))
                usage("--redeliver: want a fraction in [0, 1)");
            i++;
        } else if (strcmp(a, "--out") == 0) {
            if (!v) usage("--out needs a value");
            out_path = v;
            i++;
        } else if (strcmp(a, "--expect") == 0) {
            if (!v) usage("--expect needs a value");
            expect_path = v;
            i++;
        } else if (strcmp(a, "--no-loss") == 0) {
            no_loss = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(NULL);
        } else {
            fprintf(stderr, "gen_audit_stream: unknown option %s\n", a);
            usage(NULL);
        }
    }

    /* The conditions argued at the top of this file. */
    uint64_t amq_keeps = 64 * ((depth + 1) / 64);
    int lossless = producers <= track && window <= depth && window <= amq_keeps;
    if (no_loss && !lossless) {
        fprintf(stderr,
                "gen_audit_stream: --no-loss: %" PRIu32 " producers, window %" PRIu32
                " can lose history in an audit of depth %" PRIu64 " (ActiveMQ keeps %" PRIu64
                ") tracking %" PRIu64 " producers\n",
                producers, window, depth, amq_keeps, track);
        return 2;
    }

    uint64_t *next_seq = calloc(producers, sizeof *next_seq); /* last sequence given */
    first_delivery *ring = calloc(window, sizeof *ring);
    if (!next_seq || !ring) {
        fprintf(stderr, "gen_audit_stream: out of memory\n");
        free(ring);
        free(next_seq);
        return 1;
    }
    rng_seed(seed);

    FILE *out = open_out(out_path);
    FILE *expect = expect_path ? open_out(expect_path) : NULL;
    static char out_buf[1 << 20];
    setvbuf(out, out_buf, _IOFBF, sizeof out_buf);

    uint64_t ring_len = 0, ring_head = 0; /* ring_head: where the next one goes */
    uint64_t redelivered = 0, max_lag = 0;
    for (uint64_t n = 0; n < ids; n++) {
        first_delivery d;
        int again = ring_len > 0 && rng_unit() < redeliver;
        if (again) {
            /* Uniform over the last ring_len (<= W) first deliveries. */
            uint64_t back = rng_below(ring_len);
            d = ring[(ring_head + window - 1 - back) % window];
            uint64_t lag = next_seq[d.producer] - d.seq;
            if (lag > max_lag) max_lag = lag;
            redelivered++;
        } else {
            d.producer = (uint32_t)rng_below(producers);
            d.seq = ++next_seq[d.producer];
            ring[ring_head] = d;
            ring_head = (ring_head + 1) % window;
            if (ring_len < window) ring_len++;
        }
        fprintf(out, PRODUCER_FMT ":%" PRIu64 "\n", d.producer, d.seq);
        if (expect) fputs(again ? "duplicate\n" : "new\n", expect);
    }
    close_out(out, out_path);
    close_out(expect, expect_path);

    /* Checked, not only argued: every redelivery stayed within W - 1 of its
     * producer's highest sequence. */
    if (ids > 0 && redelivered > 0 && max_lag >= window) {
        fprintf(stderr, "gen_audit_stream: internal error: lag %" PRIu64 " >= window\n", max_lag);
        return 1;
    }
    fprintf(stderr,
            "gen_audit_stream: %" PRIu64 " ids, %" PRIu64 " redeliveries (%.2f%%), %" PRIu32
            " producers, window %" PRIu32 ", seed %" PRIu64 ", largest lag %" PRIu64
            "; lossless for depth %" PRIu64 " / %" PRIu64 " producers: %s\n",
            ids, redelivered, ids ? 100.0 * (double)redelivered / (double)ids : 0.0, producers,
            window, seed, max_lag, depth, track, lossless ? "yes" : "NO");
    free(ring);
    free(next_seq);
    return 0;
}
