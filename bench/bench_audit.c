/* bench_audit.c — ns per id of acemq's message audit on issue 3's stream
 * (2,000,000 ActiveMQ-style ids, 64 producers, 5 % redeliveries from the last
 * 1,000), beside ActiveMQ's own audit timed on the same file in the same run,
 * so the ratio holds on a noisy machine.
 *
 * Pairs: acemq_audit_check (the text id, parse included) beside ActiveMQ's
 * isDuplicate(String) (which parses too), and acemq_audit_check_seq (producer
 * and sequence split beforehand) beside isDuplicate(MessageId) on ids parsed
 * beforehand. The split ids are timed twice: with each producer's bytes where
 * the id was (split/check_seq: the producer bytes stream past with the
 * text, as the peer's do not), and with one copy per producer
 * (split/check_seq/interned: as the peer's --api messageid, which shares one
 * ProducerId, and so one key String, per producer; the audit still hashes
 * and compares the bytes, where ActiveMQ's map finds its own String by
 * identity). The thread-safe flavour is timed on one thread as well, to show
 * what its locking costs. The ratio is ActiveMQ ns / acemq ns; the target is
 * >= 10 (single thread). A missed target is printed, never a failure.
 *
 * The two sides take turns: the peer runs as a server (activemq-peer.sh
 * --time --serve, one JVM per API, warmed up before the first round), and
 * each round runs one pass of the peer's isDuplicate(String), then one of
 * each text form, then one of the peer's isDuplicate(MessageId), then one
 * of each split form. This machine moves between states for seconds at a
 * time (the same pass 30 % to 150 % slower, on either side); taking turns,
 * both sides meet the same states. Each side's figure is its median over
 * the rounds, and the ratio the median of the rounds' ratios (a round's
 * peer pass against the same round's acemq pass).
 *
 * The batch entry points (acemq_audit_check_many, acemq_audit_check_seq_many)
 * are timed too, on batches of MANY_BATCH ids, and labelled as such
 * (text/check_many, split/check_seq_many, text/check_many/thread-safe): ActiveMQ has
 * no batch call, but its harness also loops over an array of ids already in
 * memory, so the pairing is the same; the per-id lines stay the headline.
 *
 *   bench_audit [--gen PATH | --stream FILE] [--out FILE] [--rounds N] [--no-peer]
 *
 * Exit status: 0 measured (peer skipped included), 1 something broke, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acemq/audit.h"

#ifndef ACEMQ_SOURCE_DIR
#define ACEMQ_SOURCE_DIR "."
#endif

#define TARGET_RATIO 10.0
#define PEER_SKIPPED 3 /* activemq-peer.sh: Java or ActiveMQ's jars are missing */

typedef struct config {
    const char *gen;    /* gen_audit_stream, run to make the stream */
    const char *stream; /* or an existing stream */
    const char *out_path;
    const char *peer;
    int rounds;
    int no_peer;
} config;

/* The stream, whole, and each id in it: text and pre-split. */
typedef struct stream {
    char *text;
    size_t n;
    const char **id;
    size_t *id_len;
    const char **producer;
    size_t *producer_len;
    uint64_t *seq;
    /* The same, but each producer's bytes are one copy per producer (as
     * the peer's --api messageid has one ProducerId per producer). */
    const char **interned;
    char **copies; /* the copies, one per producer: [0, ncopies) */
    size_t ncopies;
} stream;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory (%zu bytes)", n);
    return p;
}

/* Paths go to the shell single-quoted; one holding a quote is refused
 * rather than escaped, since none of ours does. */
static void check_quotable(const char *path)
{
    if (strchr(path, '\'')) die("path with a single quote: %s", path);
}

/* FNV-1a: the bench's own, so that interning does not hash the way the audit does. */
static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211u;
    return h;
}

/* Points s->interned[i] at one copy of each distinct producer, made before
 * the clock: an open-addressed map from producer bytes to their copy. */
static void intern(stream *s)
{
    size_t cap = 1024;
    while (cap < 2 * s->n && cap < ((size_t)1 << 22))
        cap *= 2;
    char **map = calloc(cap, sizeof *map);
    size_t *len = calloc(cap, sizeof *len);
    s->interned = xmalloc(s->n * sizeof *s->interned);
    s->copies = xmalloc(cap * sizeof *s->copies);
    s->ncopies = 0;
    if (!map || !len) die("out of memory");
    for (size_t i = 0; i < s->n; i++) {
        size_t at = (size_t)fnv(s->producer[i], s->producer_len[i]) & (cap - 1);
        while (map[at] &&
               !(len[at] == s->producer_len[i] && memcmp(map[at], s->producer[i], len[at]) == 0))
            at = (at + 1) & (cap - 1);
        if (!map[at]) {
            if (s->ncopies + 1 >= cap / 2) die("too many producers to intern");
            map[at] = xmalloc(s->producer_len[i]);
            memcpy(map[at], s->producer[i], s->producer_len[i]);
            len[at] = s->producer_len[i];
            s->copies[s->ncopies++] = map[at];
        }
        s->interned[i] = map[at];
    }
    free(map);
    free(len);
}

static void load(stream *s, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) die("%s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) die("%s: %s", path, strerror(errno));
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) die("%s: %s", path, strerror(errno));
    s->text = xmalloc((size_t)size + 1);
    if (fread(s->text, 1, (size_t)size, f) != (size_t)size) die("%s: short read", path);
    fclose(f);
    s->text[size] = '\0';
    size_t lines = 0;
    for (long i = 0; i < size; i++)
        lines += s->text[i] == '\n';
    lines++;
    s->id = xmalloc(lines * sizeof *s->id);
    s->id_len = xmalloc(lines * sizeof *s->id_len);
    s->producer = xmalloc(lines * sizeof *s->producer);
    s->producer_len = xmalloc(lines * sizeof *s->producer_len);
    s->seq = xmalloc(lines * sizeof *s->seq);
    s->n = 0;
    for (char *p = s->text, *end = s->text + size; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (len > 0) {
            acemq_audit_id parsed;
            if (acemq_audit_parse_id(p, len, &parsed) != 0)
                die("%s: line %zu: %s", path, s->n + 1, parsed.error);
            s->id[s->n] = p;
            s->id_len[s->n] = len;
            s->producer[s->n] = parsed.producer;
            s->producer_len[s->n] = parsed.producer_len;
            s->seq[s->n] = parsed.sequence;
            s->n++;
        }
        p += len + 1;
    }
    if (s->n == 0) die("%s: no ids", path);
    intern(s);
}

enum { FORM_TEXT, FORM_SPLIT, FORM_INTERNED, FORM_TEXT_MANY, FORM_SPLIT_MANY };

/* The batch entry points get the stream in batches of this many ids, as a
 * consumer would hand over its prefetched deliveries (1,000 is ActiveMQ's
 * default queue prefetch). */
#define MANY_BATCH 1000

/* A fresh audit with the default options and these flags. */
static acemq_audit *new_audit(unsigned flags)
{
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.flags = flags;
    acemq_audit *a;
    if (acemq_audit_new(&a, &o) != 0) die("acemq_audit_new failed");
    return a;
}

/* One pass over the stream in a fresh audit: ns per id; *dups gets the
 * duplicates seen, which also keeps the loop's results alive. The audit's
 * pointer is returned by new_audit, never address-taken here, so that it
 * stays in a register across the calls. */
static double run_once(const stream *s, int form, unsigned flags, size_t *dups)
{
    acemq_audit *const a = new_audit(flags);
    size_t d = 0;
    int results[MANY_BATCH];
    double t0 = mono_now();
    if (form == FORM_TEXT_MANY || form == FORM_SPLIT_MANY) {
        for (size_t i = 0; i < s->n; i += MANY_BATCH) {
            size_t m = s->n - i < MANY_BATCH ? s->n - i : MANY_BATCH;
            int rc =
                form == FORM_TEXT_MANY
                    ? acemq_audit_check_many(a, s->id + i, s->id_len + i, m, results, NULL)
                    : acemq_audit_check_seq_many(a, (const void *const *)(s->producer + i),
                                                 s->producer_len + i, s->seq + i, m, results, NULL);
            if (rc != 0) die("check_many: %s", acemq_err_name(rc));
            for (size_t j = 0; j < m; j++)
                d += results[j] == ACEMQ_AUDIT_DUPLICATE;
        }
    } else if (form == FORM_TEXT) {
        /* The arrays and the count in locals, as the peer's loop has them
         * (the JIT keeps them in registers): read through s, each would be
         * loaded again after every call, which may write anywhere, and the
         * id's load would wait on its array's. */
        const char *const *id = s->id;
        const size_t *id_len = s->id_len;
        for (size_t i = 0, n = s->n; i < n; i++) {
            int rc = acemq_audit_check(a, id[i], id_len[i], NULL);
            d += rc == ACEMQ_AUDIT_DUPLICATE;
        }
    } else {
        const char *const *producer = form == FORM_INTERNED ? s->interned : s->producer;
        const size_t *producer_len = s->producer_len;
        const uint64_t *seq = s->seq;
        for (size_t i = 0, n = s->n; i < n; i++) {
            int rc = acemq_audit_check_seq(a, producer[i], producer_len[i], seq[i], NULL);
            d += rc == ACEMQ_AUDIT_DUPLICATE;
        }
    }
    double t1 = mono_now();
    acemq_audit_stats st;
    if (acemq_audit_stats_get(a, &st) != 0 || st.checks != s->n)
        die("the audit answered %llu of %zu checks", (unsigned long long)st.checks, s->n);
    acemq_audit_free(a);
    *dups = d;
    return (t1 - t0) * 1e9 / (double)s->n;
}

/* The peer as a server (activemq-peer.sh --time --serve): one timed pass of
 * ActiveMQ's audit over the whole stream each time it is asked. */
typedef struct peer {
    const char *api; /* "string" or "messageid" */
    pid_t pid;
    FILE *to, *from;
    int running; /* ready and not yet ended */
    int skipped; /* exited 3: Java or ActiveMQ's jars missing */
} peer;

/* Starts the peer on the stream and waits for its "ready" (the file loaded,
 * the JIT warmed up); one that exits 3 first is skipped. */
static void peer_start(peer *pp, const char *program, const char *api, const char *path)
{
    memset(pp, 0, sizeof *pp);
    pp->api = api;
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) die("pipe: %s", strerror(errno));
    /* Closed on exec: the other peer, started next, must not hold this
     * one's pipes (dup2 below makes the child's stdin and stdout without
     * the flag). */
    for (int i = 0; i < 2; i++)
        if (fcntl(to_child[i], F_SETFD, FD_CLOEXEC) != 0 ||
            fcntl(from_child[i], F_SETFD, FD_CLOEXEC) != 0)
            die("fcntl: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pp->pid = fork();
    if (pp->pid < 0) die("fork: %s", strerror(errno));
    if (pp->pid == 0) {
        if (dup2(to_child[0], STDIN_FILENO) < 0 || dup2(from_child[1], STDOUT_FILENO) < 0)
            _exit(127);
        close(to_child[0]);
        close(to_child[1]);
        close(from_child[0]);
        close(from_child[1]);
        execl(program, program, "--time", "--serve", "--api", api, path, (char *)NULL);
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    pp->to = fdopen(to_child[1], "w");
    pp->from = fdopen(from_child[0], "r");
    if (!pp->to || !pp->from) die("fdopen: %s", strerror(errno));
}

static int peer_reap(peer *pp)
{
    int status;
    while (waitpid(pp->pid, &status, 0) < 0)
        if (errno != EINTR) die("waitpid: %s", strerror(errno));
    return status;
}

static void peer_wait_ready(peer *pp)
{
    char line[512];
    if (fgets(line, sizeof line, pp->from) && strcmp(line, "ready\n") == 0) {
        pp->running = 1;
        return;
    }
    fclose(pp->to);
    fclose(pp->from);
    int status = peer_reap(pp);
    if (WIFEXITED(status) && WEXITSTATUS(status) == PEER_SKIPPED) {
        pp->skipped = 1;
        return;
    }
    die("the ActiveMQ peer (--api %s) failed to start (status %d)", pp->api, status);
}

/* One timed pass of the peer: its ns per id. */
static double peer_pass(peer *pp)
{
    if (fputs("pass\n", pp->to) == EOF || fflush(pp->to) != 0)
        die("the ActiveMQ peer (--api %s): %s", pp->api, strerror(errno));
    char line[256];
    double ns = 0;
    if (!fgets(line, sizeof line, pp->from) || sscanf(line, "ns %lf", &ns) != 1 || ns <= 0)
        die("the ActiveMQ peer (--api %s) stopped answering", pp->api);
    return ns;
}

/* Ends the peer and prints its own summary line of the passes it ran. */
static void peer_end(peer *pp)
{
    if (!pp->running) return;
    pp->running = 0;
    if (fputs("end\n", pp->to) == EOF || fclose(pp->to) != 0)
        die("the ActiveMQ peer (--api %s): %s", pp->api, strerror(errno));
    char line[512];
    while (fgets(line, sizeof line, pp->from))
        if (strncmp(line, "ns_per_id ", 10) != 0) fputs(line, stdout); /* the human line */
    fclose(pp->from);
    int status = peer_reap(pp);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("the ActiveMQ peer (--api %s) failed (status %d)", pp->api, status);
}

/* What each case times, and which of the peer's APIs it is set beside. */
typedef struct bench_case {
    const char *name;
    int form;
    unsigned flags;
    int by_string; /* 1: beside isDuplicate(String); 0: isDuplicate(MessageId) */
} bench_case;

static const bench_case cases[] = {
    {"text/check", FORM_TEXT, 0, 1},
    {"split/check_seq", FORM_SPLIT, 0, 0},
    {"split/check_seq/interned", FORM_INTERNED, 0, 0},
    {"text/check/thread-safe", FORM_TEXT, ACEMQ_AUDIT_THREAD_SAFE, 1},
    {"text/check_many", FORM_TEXT_MANY, 0, 1},
    {"split/check_seq_many", FORM_SPLIT_MANY, 0, 0},
    {"text/check_many/thread-safe", FORM_TEXT_MANY, ACEMQ_AUDIT_THREAD_SAFE, 1},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* One case's line and JSON: peer_ns NULL when the peer was skipped, or
 * not asked for (no_peer). */
static void report(FILE *out, const bench_case *c, const double *ns, const double *peer_ns,
                   int rounds, int no_peer)
{
    double *v = xmalloc((size_t)rounds * sizeof *v);
    memcpy(v, ns, (size_t)rounds * sizeof *v);
    double mine = median(v, rounds);
    const char *peer_name = c->by_string ? "activemq-string" : "activemq-messageid";
    if (peer_ns) {
        double theirs, ratio;
        memcpy(v, peer_ns, (size_t)rounds * sizeof *v);
        theirs = median(v, rounds);
        for (int r = 0; r < rounds; r++)
            v[r] = peer_ns[r] / ns[r];
        ratio = median(v, rounds);
        printf("%-27s %10.2f  %-22s %10.2f %8.1fx  %s\n", c->name, mine, peer_name, theirs, ratio,
               ratio >= TARGET_RATIO ? "yes" : "NO");
        fprintf(out,
                "{\"bench\":\"audit\",\"case\":\"%s\",\"value\":%.2f,\"unit\":\"ns/id\","
                "\"peer\":\"%s\",\"peer_value\":%.2f,\"ratio\":%.3f,\"rounds\":%d,"
                "\"target\":\">= 10 x peer speed\",\"target_met\":%s}\n",
                c->name, mine, peer_name, theirs, ratio, rounds,
                ratio >= TARGET_RATIO ? "true" : "false");
    } else {
        const char *why = no_peer ? "-" : "skipped";
        printf("%-27s %10.2f  %-22s %10s %9s  %s\n", c->name, mine, no_peer ? "-" : peer_name, why,
               "-", "-");
        fprintf(out,
                "{\"bench\":\"audit\",\"case\":\"%s\",\"value\":%.2f,\"unit\":\"ns/id\","
                "\"peer\":%s%s%s,\"peer_value\":null,\"ratio\":null,\"rounds\":%d,"
                "\"target\":%s,\"target_met\":null}\n",
                c->name, mine, no_peer ? "" : "\"", no_peer ? "null" : peer_name,
                no_peer ? "" : "\"", rounds, no_peer ? "null" : "\">= 10 x peer speed\"");
    }
    free(v);
    fflush(stdout);
    if (fflush(out) != 0) die("writing results: %s", strerror(errno));
}

static void usage(const char *why)
{
    if (why) fprintf(stderr, "bench_audit: %s\n", why);
    fputs("usage: bench_audit [--gen PATH | --stream FILE] [--out FILE] [--rounds N] [--no-peer]\n"
          "  --gen PATH     gen_audit_stream, run with its defaults (issue 3's stream)\n"
          "  --stream FILE  an existing stream of ids instead\n"
          "  --out FILE     append JSON lines here (default bench/results/latest.jsonl)\n"
          "  --rounds N     rounds, each one timed pass of every case and of the peer;\n"
          "                 medians are reported (default 11)\n"
          "  --peer PATH    ActiveMQ's audit (default bench/peers/activemq-peer.sh)\n"
          "  --no-peer      time acemq alone\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    bench_name = "bench_audit";
    config cfg = {0};
    cfg.out_path = ACEMQ_SOURCE_DIR "/bench/results/latest.jsonl";
    cfg.peer = ACEMQ_SOURCE_DIR "/bench/peers/activemq-peer.sh";
    cfg.rounds = 11;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-peer") == 0) {
            cfg.no_peer = 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) usage(NULL);
        if (!v) usage("an option needs a value");
        if (strcmp(a, "--gen") == 0)
            cfg.gen = v;
        else if (strcmp(a, "--stream") == 0)
            cfg.stream = v;
        else if (strcmp(a, "--out") == 0)
            cfg.out_path = v;
        else if (strcmp(a, "--peer") == 0)
            cfg.peer = v;
        else if (strcmp(a, "--rounds") == 0) {
            char *end;
            long r = strtol(v, &end, 10);
            if (*end != '\0' || r < 1 || r > 1000) usage("--rounds: 1..1000");
            cfg.rounds = (int)r;
        } else
            usage("unknown option");
        i++;
    }
    if (!cfg.gen == !cfg.stream) usage("give --gen or --stream");
    /* A peer that dies must be an error message, not a signal. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("signal: %s", strerror(errno));

    char tmp[] = "/tmp/acemq-audit-stream.XXXXXX";
    const char *path = cfg.stream;
    if (cfg.gen) {
        int fd = mkstemp(tmp);
        if (fd < 0) die("mkstemp: %s", strerror(errno));
        close(fd);
        check_quotable(cfg.gen);
        char cmd[4096];
        int n = snprintf(cmd, sizeof cmd, "'%s' --out '%s' 2>/dev/null", cfg.gen, tmp);
        if (n < 0 || (size_t)n >= sizeof cmd) die("generator command too long");
        if (system(cmd) != 0) die("%s failed", cfg.gen);
        path = tmp;
    }

    stream s;
    load(&s, path);
    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("%s: %s", cfg.out_path, strerror(errno));

    /* The peers load the stream and warm up while nothing is timed. */
    peer by_string = {0}, by_msgid = {0};
    int have_peer = 0;
    if (!cfg.no_peer) {
        peer_start(&by_string, cfg.peer, "string", path);
        peer_start(&by_msgid, cfg.peer, "messageid", path);
        peer_wait_ready(&by_string);
        peer_wait_ready(&by_msgid);
        have_peer = by_string.running && by_msgid.running;
        if (!have_peer) {
            peer_end(&by_string);
            peer_end(&by_msgid);
            printf("ActiveMQ peer skipped: Java or ActiveMQ's jars are not installed "
                   "(bench/peers/activemq-peer.sh exited %d)\n",
                   PEER_SKIPPED);
        }
    } else {
        printf("ActiveMQ peer skipped: --no-peer\n");
    }

    printf("message audit: %zu ids from %s; %d rounds, each one pass of every case and of the "
           "peer, in turn; ns per id, one thread\n",
           s.n, cfg.gen ? "gen_audit_stream (issue 3's stream)" : path, cfg.rounds);
    size_t dups = 0;
    for (size_t c = 0; c < NCASES; c++) { /* acemq's warm-up pass */
        size_t d;
        (void)run_once(&s, cases[c].form, cases[c].flags, &d);
        if (c == 0) dups = d;
        if (d != dups)
            die("%s found %zu duplicates, %s %zu", cases[c].name, d, cases[0].name, dups);
    }
    double(*ns)[NCASES] = calloc((size_t)cfg.rounds, sizeof *ns);
    double *peer_string = calloc((size_t)cfg.rounds, sizeof *peer_string);
    double *peer_msgid = calloc((size_t)cfg.rounds, sizeof *peer_msgid);
    if (!ns || !peer_string || !peer_msgid) die("out of memory");
    for (int r = 0; r < cfg.rounds; r++) {
        /* The text cases right after the peer's text pass, the split ones
         * after its split pass. */
        for (int by_str = 1; by_str >= 0; by_str--) {
            if (have_peer)
                (by_str ? peer_string : peer_msgid)[r] = peer_pass(by_str ? &by_string : &by_msgid);
            for (size_t c = 0; c < NCASES; c++) {
                if (cases[c].by_string != by_str) continue;
                size_t d;
                ns[r][c] = run_once(&s, cases[c].form, cases[c].flags, &d);
                if (d != dups)
                    die("%s found %zu duplicates, %s %zu", cases[c].name, d, cases[0].name, dups);
            }
        }
    }
    printf("acemq: %zu duplicates found by every case in every round\n", dups);
    if (have_peer) {
        peer_end(&by_string);
        peer_end(&by_msgid);
    }

    printf("\n%-27s %10s  %-22s %10s %9s  %s\n", "case", "acemq ns", "peer", "peer ns", "ratio",
           "ratio >= 10");
    double *col = xmalloc((size_t)cfg.rounds * sizeof *col);
    for (size_t c = 0; c < NCASES; c++) {
        for (int r = 0; r < cfg.rounds; r++)
            col[r] = ns[r][c];
        report(out, &cases[c], col,
               have_peer ? (cases[c].by_string ? peer_string : peer_msgid) : NULL, cfg.rounds,
               cfg.no_peer);
    }
    printf("(medians over the rounds; ratio: the median of the rounds' peer/acemq)\n");
    free(col);
    free(ns);
    free(peer_string);
    free(peer_msgid);

    if (fclose(out) != 0) die("%s: %s", cfg.out_path, strerror(errno));
    if (cfg.gen) unlink(tmp);
    free(s.text);
    free(s.id);
    free(s.id_len);
    free(s.producer);
    free(s.producer_len);
    free(s.seq);
    for (size_t i = 0; i < s.ncopies; i++)
        free(s.copies[i]);
    free(s.copies);
    free(s.interned);
    return 0;
}
