/* gen_audit_stream.c — writes the message-audit benchmark's stream of ids (issue 3):
 * N ActiveMQ-style ids "<producer>:<sequence>" from P producers, randomly
 * interleaved, each producer's sequences increasing from 1, with a fraction of
 * redeliveries drawn uniformly from the last W first deliveries. Standalone
 * (C11, libc only) and deterministic: the same options and --seed give the same
 * bytes on every machine.
 *
 *   gen_audit_stream [--ids N] [--producers P] [--redeliver F] [--window W]
 *                    [--seed S] [--out FILE] [--expect FILE]
 *                    [--no-loss | --lossy [--kinds FILE]] [--depth D] [--track T]
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
 * Lost history (--lossy). A stream on which an audit of depth D tracking T
 * producers loses history, for checking what each audit still catches
 * (tests/integration/audit_agreement.sh): the P producers are 4 busy ones,
 * which take half the first deliveries, and P - 4 others, which take the
 * rest, so that with P > T the others are evicted and come back all the
 * time. A first delivery now and then skips a few sequences, delivered
 * later ("late": out of order). A redelivery is one of:
 *   near    one of the last W first deliveries, as above;
 *   edge    a sequence D - 64 to R + 64 behind its producer's highest (R is
 *           ActiveMQ's bit count, 64 * ((D + 1) / 64 + 1)): near, in and
 *           past the slack that ActiveMQ's 64-bit bins keep beyond D;
 *   return  a sequence 1 to 96 below the first id of a producer's latest
 *           return after an eviction (the generator keeps the same exact
 *           LRU of T producers as the audits);
 *   again   one of the last 32 redeliveries, once more.
 * --expect then says "duplicate" for an id delivered before and "new" for
 * one that was not (the truth, which an audit that lost history cannot
 * always know), and --kinds FILE writes the kind of each line (first, late,
 * near, edge, return, again).
 *
 * Ids as brokers make them (--broker): "ID:<host>-<port>-<ms>-1:<conn>:1:<producer>:<seq>"
 * with the host names of cloud instances, services and pods (60 to 80 bytes),
 * as one of several competing consumers receives them; see broker() below.
 * The audit benchmark's target case runs on this stream.
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
          "                        [--no-loss | --lossy [--kinds FILE]] [--depth D] [--track T]\n"
          "       gen_audit_stream --broker [--ids N] [--producers P] [--redeliver F] [--seed S]\n"
          "                        [--out FILE] [--expect FILE]\n"
          "  --ids N         lines to write (default 2000000)\n"
          "  --producers P   producers, interleaved at random (default 64)\n"
          "  --redeliver F   fraction of lines that are redeliveries (default 0.05)\n"
          "  --window W      a redelivery repeats one of the last W first deliveries (1000)\n"
          "  --seed S        PRNG seed (default 1)\n"
          "  --out FILE      where the ids go (default stdout)\n"
          "  --expect FILE   also write new/duplicate per line, as a lossless audit answers\n"
          "  --no-loss       refuse options with which an audit of depth D tracking T\n"
          "                  producers could lose history (--depth 2048, --track 64)\n"
          "  --lossy         a stream that loses history in such an audit: evictions,\n"
          "                  returns, redeliveries past the window's edge, late ids\n"
          "  --kinds FILE    with --lossy: the kind of each line\n"
          "  --broker        ids as brokers make them: real host names, producers coming\n"
          "                  and going (P at a time, default 48), gaps left by competing\n"
          "                  consumers, redeliveries late in prefetch-sized bursts\n",
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

/* ---- --lossy ---- */

#define BUSY 4
#define AGAIN 32
#define RETURNS 64
#define LATE 256

/* Which sequences of one producer were delivered: a bitmap that grows. */
typedef struct delivered {
    uint64_t *bits;
    uint64_t words;
} delivered;

static void *grow_or_die(void *p, size_t bytes)
{
    void *q = realloc(p, bytes);
    if (!q) {
        fprintf(stderr, "gen_audit_stream: out of memory\n");
        exit(1);
    }
    return q;
}

/* Marks seq delivered; 1 when it already was. */
static int deliver(delivered *d, uint64_t seq)
{
    uint64_t w = seq / 64;
    if (w >= d->words) {
        uint64_t n = d->words ? d->words : 16;
        while (n <= w)
            n *= 2;
        d->bits = grow_or_die(d->bits, n * sizeof *d->bits);
        memset(d->bits + d->words, 0, (n - d->words) * sizeof *d->bits);
        d->words = n;
    }
    uint64_t bit = (uint64_t)1 << (seq % 64);
    int was = (d->bits[w] & bit) != 0;
    d->bits[w] |= bit;
    return was;
}

/* The audits' producer LRU, exact: a use moves p to the front; a producer
 * not held pushes the least recent one out when track are held. 1 when p
 * was held. */
static int lru_use(uint32_t *order, uint64_t *held, uint64_t track, uint32_t p)
{
    uint64_t at = 0;
    while (at < *held && order[at] != p)
        at++;
    int was = at < *held;
    if (!was) {
        if (*held < track) ++*held;
        at = *held - 1;
    }
    memmove(order + 1, order, at * sizeof *order);
    order[0] = p;
    return was;
}

typedef struct lossy_cfg {
    uint64_t ids, depth, track;
    uint32_t producers, window;
    double redeliver;
    FILE *out, *expect, *kinds;
} lossy_cfg;

static void lossy(const lossy_cfg *c)
{
    uint32_t np = c->producers;
    uint64_t reach = 64 * ((c->depth + 1) / 64 + 1);
    uint64_t edge_lo = c->depth > 64 ? c->depth - 64 : 1, edge_n = reach + 64 - edge_lo;
    uint64_t *top = grow_or_die(NULL, np * sizeof *top); /* highest sequence given */
    delivered *seen = grow_or_die(NULL, np * sizeof *seen);
    uint32_t *order = grow_or_die(NULL, (size_t)(c->track < np ? c->track : np) * sizeof *order);
    first_delivery *ring = grow_or_die(NULL, c->window * sizeof *ring);
    first_delivery again[AGAIN] = {{0, 0}}, returns[RETURNS] = {{0, 0}}, late[LATE] = {{0, 0}};
    memset(ring, 0, c->window * sizeof *ring);
    memset(top, 0, np * sizeof *top);
    memset(seen, 0, np * sizeof *seen);
    uint64_t ring_len = 0, ring_head = 0, again_len = 0, returns_len = 0, late_len = 0;
    uint64_t held = 0, track = c->track < np ? c->track : np;
    uint64_t count[6] = {0}, dups = 0;
    static const char *const kind_name[] = {"first", "late", "near", "edge", "return", "again"};
    for (uint64_t n = 0; n < c->ids; n++) {
        first_delivery d = {0, 0};
        int kind = -1;
        if (ring_len > 0 && rng_unit() < c->redeliver) {
            uint64_t r = rng_below(100);
            if (r >= 30 && r < 55) { /* edge: a recent producer, far back */
                first_delivery f =
                    ring[(ring_head + c->window - 1 - rng_below(ring_len)) % c->window];
                uint64_t back = edge_lo + rng_below(edge_n);
                if (back < top[f.producer]) {
                    d.producer = f.producer;
                    d.seq = top[f.producer] - back;
                    kind = 3;
                }
            } else if (r >= 55 && r < 75 && returns_len > 0) {
                first_delivery f =
                    returns[rng_below(returns_len < RETURNS ? returns_len : RETURNS)];
                uint64_t back = 1 + rng_below(96);
                d.producer = f.producer;
                d.seq = back < f.seq ? f.seq - back : 1;
                kind = 4;
            } else if (r >= 75 && again_len > 0) {
                d = again[rng_below(again_len < AGAIN ? again_len : AGAIN)];
                kind = 5;
            }
            if (kind < 0) { /* near, and what the others could not make */
                d = ring[(ring_head + c->window - 1 - rng_below(ring_len)) % c->window];
                kind = 2;
            }
            again[again_len++ % AGAIN] = d;
        } else if (late_len > 0 && rng_below(50) == 0) {
            uint64_t i = rng_below(late_len);
            d = late[i];
            late[i] = late[--late_len];
            kind = 1;
        } else {
            /* Half to the busy producers, half to the others. */
            uint32_t busy = np < BUSY ? np : BUSY;
            d.producer = np == busy || rng_below(2) == 0 ? (uint32_t)rng_below(busy)
                                                         : busy + (uint32_t)rng_below(np - busy);
            /* Now and then a few sequences skipped, to come late. */
            if (rng_below(50) == 0) {
                uint64_t skip = 1 + rng_below(4);
                for (uint64_t k = 1; k <= skip && late_len < LATE; k++)
                    late[late_len++] = (first_delivery){d.producer, top[d.producer] + k};
                top[d.producer] += skip;
            }
            d.seq = ++top[d.producer];
            kind = 0;
        }
        /* Every line is a use of its producer in the audits' LRU; a first
         * delivery from a producer not held, with ids before, is a return. */
        int was_held = lru_use(order, &held, track, d.producer);
        if (!was_held && kind == 0 && d.seq > 1) returns[returns_len++ % RETURNS] = d;
        if (kind == 0 || kind == 1) {
            ring[ring_head] = d;
            ring_head = (ring_head + 1) % c->window;
            if (ring_len < c->window) ring_len++;
        }
        int dup = deliver(&seen[d.producer], d.seq);
        dups += (uint64_t)dup;
        count[kind]++;
        fprintf(c->out, PRODUCER_FMT ":%" PRIu64 "\n", d.producer, d.seq);
        if (c->expect) fputs(dup ? "duplicate\n" : "new\n", c->expect);
        if (c->kinds) fprintf(c->kinds, "%s\n", kind_name[kind]);
    }
    fprintf(stderr, "gen_audit_stream: --lossy: %" PRIu64 " ids, %" PRIu64 " seen before;", c->ids,
            dups);
    for (int k = 0; k < 6; k++)
        fprintf(stderr, " %s %" PRIu64, kind_name[k], count[k]);
    fprintf(stderr, "; %" PRIu32 " producers, depth %" PRIu64 ", track %" PRIu64 "\n", np, c->depth,
            c->track);
    for (uint32_t p = 0; p < np; p++)
        free(seen[p].bits);
    free(ring);
    free(order);
    free(seen);
    free(top);
}

/* ---- --broker ---- */

/* Client hosts as a broker sees them in producer ids: cloud instance names,
 * service names, Kubernetes pods. */
static const char *const broker_hosts[] = {
    "ip-10-42-7-113.eu-west-1.compute.internal",
    "ip-10-42-19-201.eu-west-1.compute.internal",
    "ip-172-31-4-56.ec2.internal",
    "broker-2.prod.example.com",
    "orders-api-7d9f8c6b5-x2kqp",
    "payments-worker-5c7b9d4f8-4h8jz",
    "app-server-03.dc1.example.net",
    "billing-batch-01.internal.example.org",
    "inventory-sync-0.inventory.svc.cluster.local",
};
#define BROKER_HOSTS (sizeof broker_hosts / sizeof broker_hosts[0])
#define BROKER_CONSUMERS 3    /* competing consumers on the queue, this one among them */
#define BROKER_PREFETCH 500   /* deliveries a consumer holds unacknowledged */
#define BROKER_LIFE_MAX 20000 /* messages a producer sends before it closes, at most */
#define BROKER_ID_MAX 128     /* bytes of a producer id, NUL included */

/* One client JVM: its IdGenerator's seed and its last connection. */
typedef struct client {
    uint32_t port;
    uint64_t start_ms;
    uint64_t conn;     /* the last connection's number; 0: none yet */
    uint32_t producer; /* the last producer's number on that connection */
} client;

typedef struct broker_state {
    client clients[BROKER_HOSTS];
    char (*name)[BROKER_ID_MAX]; /* every producer ever: its id */
    uint64_t *top;               /* ... the last sequence it sent */
    delivered *seen;             /* ... the sequences this consumer got */
    uint32_t nproducers, cap;
} broker_state;

/* A producer opens on a random client: on a new connection half the time,
 * else as the next producer of the client's last connection. */
static uint32_t open_producer(broker_state *b)
{
    if (b->nproducers == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->name = grow_or_die(b->name, b->cap * sizeof *b->name);
        b->top = grow_or_die(b->top, b->cap * sizeof *b->top);
        b->seen = grow_or_die(b->seen, b->cap * sizeof *b->seen);
    }
    uint32_t h = (uint32_t)rng_below(BROKER_HOSTS);
    client *c = &b->clients[h];
    if (c->conn == 0 || rng_below(2) == 0) {
        c->conn++;
        c->producer = 0;
    }
    c->producer++;
    uint32_t p = b->nproducers++;
    snprintf(b->name[p], BROKER_ID_MAX, "ID:%s-%" PRIu32 "-%" PRIu64 "-1:%" PRIu64 ":1:%" PRIu32,
             broker_hosts[h], c->port, c->start_ms, c->conn, c->producer);
    b->top[p] = 0;
    memset(&b->seen[p], 0, sizeof b->seen[p]);
    return p;
}

/* A queue served by BROKER_CONSUMERS competing consumers, as one of them
 * sees it: `active` producers send at once, each for 1 to BROKER_LIFE_MAX
 * messages, then close and another opens; this consumer gets one message in
 * BROKER_CONSUMERS, so each producer's sequence reaches it with gaps. A
 * fraction `redeliver` of the lines are redeliveries, in bursts of
 * BROKER_PREFETCH / 4 to BROKER_PREFETCH that start up to 2 * BROKER_PREFETCH
 * lines after they were decided: two in three are this consumer's own last
 * deliveries again (a rollback: duplicates), one in three the last messages
 * another consumer held (it failed: new here, and late). --expect answers
 * "duplicate" for an id this consumer got before. */
static void broker(uint64_t ids, uint32_t active, double redeliver, FILE *out, FILE *expect)
{
    broker_state b;
    memset(&b, 0, sizeof b);
    for (size_t h = 0; h < BROKER_HOSTS; h++) {
        b.clients[h].port = 32768 + (uint32_t)rng_below(28232);
        b.clients[h].start_ms = 1700000000000u + rng_below(86400000u);
    }
    uint32_t *slot = grow_or_die(NULL, active * sizeof *slot);
    uint64_t *left = grow_or_die(NULL, active * sizeof *left);
    for (uint32_t i = 0; i < active; i++) {
        slot[i] = open_producer(&b);
        left[i] = 1 + rng_below(BROKER_LIFE_MAX);
    }
    /* The last BROKER_PREFETCH deliveries to this consumer and to the others. */
    first_delivery mine[BROKER_PREFETCH], theirs[BROKER_PREFETCH], burst[BROKER_PREFETCH];
    uint64_t mine_n = 0, theirs_n = 0, burst_len = 0, burst_at = 0, burst_start = 0;
    /* A burst is decided per message sent, BROKER_CONSUMERS per line, and
     * holds 0.625 * BROKER_PREFETCH ids on average. */
    double p_burst = redeliver / (0.625 * BROKER_PREFETCH * BROKER_CONSUMERS);
    uint64_t redelivered = 0, dups = 0, bursts = 0;
    for (uint64_t n = 0; n < ids;) {
        first_delivery d;
        if (burst_at < burst_len && n >= burst_start) {
            d = burst[burst_at++];
            redelivered++;
        } else {
            if (burst_at == burst_len && rng_unit() < p_burst) {
                int own = rng_below(3) != 0;
                const first_delivery *from = own ? mine : theirs;
                uint64_t have = own ? mine_n : theirs_n;
                uint64_t want = BROKER_PREFETCH / 4 + rng_below(BROKER_PREFETCH * 3 / 4 + 1);
                burst_len = have < BROKER_PREFETCH ? have : BROKER_PREFETCH;
                if (burst_len > want) burst_len = want;
                for (uint64_t k = 0; k < burst_len; k++) /* oldest first, as delivered */
                    burst[k] = from[(have - burst_len + k) % BROKER_PREFETCH];
                if (!own) theirs_n = 0; /* now this consumer's */
                burst_at = 0;
                burst_start = n + rng_below(2 * (uint64_t)BROKER_PREFETCH);
                bursts += burst_len > 0;
            }
            uint32_t i = (uint32_t)rng_below(active);
            d.producer = slot[i];
            d.seq = ++b.top[d.producer];
            if (--left[i] == 0) {
                slot[i] = open_producer(&b);
                left[i] = 1 + rng_below(BROKER_LIFE_MAX);
            }
            if (rng_below(BROKER_CONSUMERS) != 0) {
                theirs[theirs_n++ % BROKER_PREFETCH] = d;
                continue;
            }
            mine[mine_n++ % BROKER_PREFETCH] = d;
        }
        int dup = deliver(&b.seen[d.producer], d.seq);
        dups += (uint64_t)dup;
        fprintf(out, "%s:%" PRIu64 "\n", b.name[d.producer], d.seq);
        if (expect) fputs(dup ? "duplicate\n" : "new\n", expect);
        n++;
    }
    fprintf(stderr,
            "gen_audit_stream: --broker: %" PRIu64 " ids, %" PRIu64 " redelivered in %" PRIu64
            " bursts, %" PRIu64 " seen before; %" PRIu32 " producers (%" PRIu32 " at a time)\n",
            ids, redelivered, bursts, dups, b.nproducers, active);
    for (uint32_t p = 0; p < b.nproducers; p++)
        free(b.seen[p].bits);
    free(b.seen);
    free(b.top);
    free(b.name);
    free(left);
    free(slot);
}

int main(int argc, char **argv)
{
    uint64_t ids = 2000000, seed = 1, depth = 2048, track = 64;
    uint32_t producers = 64, window = 1000;
    double redeliver = 0.05;
    const char *out_path = NULL, *expect_path = NULL, *kinds_path = NULL;
    int no_loss = 0, lossy_mode = 0, broker_mode = 0, producers_given = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--ids") == 0) {
            ids = parse_u64(a, v, 0, UINT64_MAX / 2);
            i++;
        } else if (strcmp(a, "--producers") == 0) {
            producers = (uint32_t)parse_u64(a, v, 1, MAX_PRODUCERS);
            producers_given = 1;
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
        } else if (strcmp(a, "--kinds") == 0) {
            if (!v) usage("--kinds needs a value");
            kinds_path = v;
            i++;
        } else if (strcmp(a, "--no-loss") == 0) {
            no_loss = 1;
        } else if (strcmp(a, "--lossy") == 0) {
            lossy_mode = 1;
        } else if (strcmp(a, "--broker") == 0) {
            broker_mode = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(NULL);
        } else {
            fprintf(stderr, "gen_audit_stream: unknown option %s\n", a);
            usage(NULL);
        }
    }

    if (no_loss && lossy_mode) usage("--no-loss and --lossy exclude each other");
    if (kinds_path && !lossy_mode) usage("--kinds goes with --lossy");
    if (broker_mode && (no_loss || lossy_mode)) usage("--broker goes alone");
    if (broker_mode) {
        static char broker_buf[1 << 20];
        FILE *out = open_out(out_path);
        FILE *expect = expect_path ? open_out(expect_path) : NULL;
        setvbuf(out, broker_buf, _IOFBF, sizeof broker_buf);
        rng_seed(seed);
        broker(ids, producers_given ? producers : 48, redeliver, out, expect);
        close_out(out, out_path);
        close_out(expect, expect_path);
        return 0;
    }
    if (lossy_mode) {
        static char lossy_buf[1 << 20];
        lossy_cfg c = {ids,  depth, track, producers, window, redeliver, open_out(out_path),
                       NULL, NULL};
        setvbuf(c.out, lossy_buf, _IOFBF, sizeof lossy_buf);
        if (expect_path) c.expect = open_out(expect_path);
        if (kinds_path) c.kinds = open_out(kinds_path);
        rng_seed(seed);
        lossy(&c);
        close_out(c.out, out_path);
        close_out(c.expect, expect_path);
        close_out(c.kinds, kinds_path);
        return 0;
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
