/* bench_audit.c — ns per id of acemq's message audit, beside ActiveMQ's own
 * audit (bench/peers/) timed on the same file in the same run, so the ratio
 * holds on a noisy machine. The ratio is ActiveMQ ns / acemq ns; the target
 * is >= 10 on one thread. A missed target is printed, never a failure.
 *
 * Streams, both made by gen_audit_stream (--gen):
 *   broker/  ids as brokers make them (gen_audit_stream --broker): real host
 *            names, producers coming and going, gaps from competing
 *            consumers, late redeliveries in prefetch-sized bursts. The
 *            target is judged here.
 *   short/   issue 3's stream: 2,000,000 short ids of 64 producers, 5 %
 *            redeliveries from the last 1,000; no target.
 * --stream FILE runs one given file instead, as stream/, with the target.
 *
 * Cases: acemq_audit_check (the text id, parse included) beside ActiveMQ's
 * isDuplicate(String) (which parses too), also in the thread-safe flavour
 * and through acemq_audit_check_many; acemq_audit_check_seq (producer and
 * sequence split beforehand) beside isDuplicate(MessageId) on ids parsed
 * beforehand, also through acemq_audit_check_seq_many. The batch calls get
 * MANY_BATCH ids at a time; ActiveMQ has no batch call, but its harness
 * loops over an array of ids already in memory too.
 *
 * The two sides take turns: the peer runs as a server (activemq-peer.sh
 * --time --serve, one JVM per API, warmed up first), and each round runs
 * one pass of the peer's isDuplicate(String), one of each text case, one of
 * the peer's isDuplicate(MessageId), one of each split case. Both sides so
 * meet the machine in the same states; each figure is a median over the
 * rounds, the ratio the median of the rounds' ratios.
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
}

static void unload(stream *s)
{
    free(s->text);
    free(s->id);
    free(s->id_len);
    free(s->producer);
    free(s->producer_len);
    free(s->seq);
}

enum { FORM_TEXT, FORM_SPLIT, FORM_TEXT_MANY, FORM_SPLIT_MANY };

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
        const char *const *producer = s->producer;
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
    int target;    /* 1: the case the 10x target is judged on */
} bench_case;

/* The target names the one-id text check of one thread beside
 * isDuplicate(String): text/check. The thread-safe flavour stands beside
 * ActiveMQMessageAuditNoSync, which takes no lock, and the split cases
 * beside isDuplicate(MessageId), which the target does not name. */
static const bench_case cases[] = {
    {"text/check", FORM_TEXT, 0, 1, 1},
    {"text/check/thread-safe", FORM_TEXT, ACEMQ_AUDIT_THREAD_SAFE, 1, 0},
    {"text/check_many", FORM_TEXT_MANY, 0, 1, 0},
    {"split/check_seq", FORM_SPLIT, 0, 0, 0},
    {"split/check_seq_many", FORM_SPLIT_MANY, 0, 0, 0},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* One case's figures: the median of its rounds and, with the peer, the
 * peer's median and the median of the rounds' ratios. */
static void report(FILE *out, const char *prefix, const bench_case *c, const double *ns,
                   const double *peer_ns, int rounds, int has_target)
{
    char name[64];
    snprintf(name, sizeof name, "%s/%s", prefix, c->name);
    double *v = xmalloc((size_t)rounds * sizeof *v);
    memcpy(v, ns, (size_t)rounds * sizeof *v);
    bench_result r = {"audit", name, median(v, rounds), "ns/id", NULL, 0, 0, NULL, 0};
    if (peer_ns) {
        r.peer = c->by_string ? "activemq isDuplicate(String)" : "activemq isDuplicate(MsgId)";
        memcpy(v, peer_ns, (size_t)rounds * sizeof *v);
        r.peer_value = median(v, rounds);
        for (int i = 0; i < rounds; i++)
            v[i] = peer_ns[i] / ns[i];
        r.ratio = median(v, rounds);
        if (has_target && c->target) {
            r.target = ">= 10 x peer speed";
            r.target_met = r.ratio >= TARGET_RATIO;
        }
    }
    bench_report(out, &r);
    free(v);
}

/* Times every case on the stream in path, in turns with the peer; prefix
 * names its cases. */
static void bench_stream(const config *cfg, FILE *out, const char *path, const char *prefix,
                         const char *what, int has_target)
{
    stream s;
    load(&s, path);
    /* The peers load the stream and warm up while nothing is timed. */
    peer by_string = {0}, by_msgid = {0};
    int have_peer = 0;
    if (!cfg->no_peer) {
        peer_start(&by_string, cfg->peer, "string", path);
        peer_start(&by_msgid, cfg->peer, "messageid", path);
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
    }
    printf("\n%s/: %zu ids, %s; %d rounds\n", prefix, s.n, what, cfg->rounds);
    /* Each case's duplicates, from its warm-up pass; every round must find
     * as many. The thread-safe flavour's LRU is per shard, so with many
     * producers it can evict (and so miss duplicates) where the other
     * cases do not. */
    size_t dups[NCASES];
    for (size_t c = 0; c < NCASES; c++)
        (void)run_once(&s, cases[c].form, cases[c].flags, &dups[c]);
    double(*ns)[NCASES] = calloc((size_t)cfg->rounds, sizeof *ns);
    double *peer_ns[2] = {calloc((size_t)cfg->rounds, sizeof(double)),
                          calloc((size_t)cfg->rounds, sizeof(double))};
    if (!ns || !peer_ns[0] || !peer_ns[1]) die("out of memory");
    for (int r = 0; r < cfg->rounds; r++) {
        /* The text cases right after the peer's text pass, the split ones
         * after its split pass. */
        for (int by_str = 1; by_str >= 0; by_str--) {
            if (have_peer) peer_ns[by_str][r] = peer_pass(by_str ? &by_string : &by_msgid);
            for (size_t c = 0; c < NCASES; c++) {
                if (cases[c].by_string != by_str) continue;
                size_t d;
                ns[r][c] = run_once(&s, cases[c].form, cases[c].flags, &d);
                if (d != dups[c])
                    die("%s found %zu duplicates, then %zu", cases[c].name, dups[c], d);
            }
        }
    }
    for (size_t c = 0; c < NCASES; c++)
        printf("%s%s: %zu duplicates in every round", c ? ", " : "acemq ", cases[c].name, dups[c]);
    printf("\n");
    if (have_peer) {
        peer_end(&by_string);
        peer_end(&by_msgid);
    }
    bench_header();
    double *col = xmalloc((size_t)cfg->rounds * sizeof *col);
    for (size_t c = 0; c < NCASES; c++) {
        for (int r = 0; r < cfg->rounds; r++)
            col[r] = ns[r][c];
        report(out, prefix, &cases[c], col, have_peer ? peer_ns[cases[c].by_string] : NULL,
               cfg->rounds, has_target);
    }
    free(col);
    free(ns);
    free(peer_ns[0]);
    free(peer_ns[1]);
    unload(&s);
}

/* Runs gen_audit_stream with args into a fresh temporary file, named in tmp. */
static void generate(const char *gen, const char *args, char *tmp)
{
    int fd = mkstemp(tmp);
    if (fd < 0) die("mkstemp: %s", strerror(errno));
    close(fd);
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "'%s' %s --out '%s' 2>/dev/null", gen, args, tmp);
    if (n < 0 || (size_t)n >= sizeof cmd) die("generator command too long");
    if (system(cmd) != 0) die("%s %s failed", gen, args);
}

static void usage(const char *why)
{
    if (why) fprintf(stderr, "bench_audit: %s\n", why);
    fputs("usage: bench_audit [--gen PATH | --stream FILE] [--out FILE] [--rounds N]\n"
          "                   [--peer PATH | --no-peer]\n"
          "  --gen PATH     gen_audit_stream: the broker/ stream (--broker) and short/\n"
          "                 (its defaults, issue 3's stream)\n"
          "  --stream FILE  an existing stream of ids instead (cases stream/)\n"
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
    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("%s: %s", cfg.out_path, strerror(errno));
    printf("message audit: ns per id, one thread; %s\n",
           cfg.no_peer ? "ActiveMQ peer skipped: --no-peer" : "beside ActiveMQ's audit");
    if (cfg.stream) {
        bench_stream(&cfg, out, cfg.stream, "stream", cfg.stream, 1);
    } else {
        check_quotable(cfg.gen);
        char broker[] = "/tmp/acemq-audit-broker.XXXXXX", plain[] = "/tmp/acemq-audit-short.XXXXXX";
        generate(cfg.gen, "--broker", broker);
        bench_stream(&cfg, out, broker, "broker", "gen_audit_stream --broker", 1);
        unlink(broker);
        generate(cfg.gen, "", plain);
        bench_stream(&cfg, out, plain, "short", "gen_audit_stream (issue 3's stream)", 0);
        unlink(plain);
    }
    printf("(medians over the rounds; ratio: the median of the rounds' peer/acemq)\n");
    if (fclose(out) != 0) die("%s: %s", cfg.out_path, strerror(errno));
    return 0;
}
