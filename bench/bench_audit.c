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
 * The batch entry points (acemq_audit_check_many, acemq_audit_check_seq_many)
 * are timed too, on batches of MANY_BATCH ids, and labelled as such
 * (text/check_many, split/check_seq_many, text/check_many/thread-safe): ActiveMQ has
 * no batch call, but its harness also loops over an array of ids already in
 * memory, so the pairing is the same; the per-id lines stay the headline.
 *
 *   bench_audit [--gen PATH | --stream FILE] [--out FILE] [--reps N] [--no-peer]
 *
 * Exit status: 0 measured (peer skipped included), 1 something broke, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    int reps;
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

typedef struct peer_result {
    double ns;   /* > 0 when measured */
    int skipped; /* 1: exit 3 */
} peer_result;

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

/* One pass over the stream in a fresh audit: ns per id; *dups gets the
 * duplicates seen, which also keeps the loop's results alive. */
static double run_once(const stream *s, int form, unsigned flags, size_t *dups)
{
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.flags = flags;
    acemq_audit *a;
    if (acemq_audit_new(&a, &o) != 0) die("acemq_audit_new failed");
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
        for (size_t i = 0; i < s->n; i++) {
            int rc = acemq_audit_check(a, s->id[i], s->id_len[i], NULL);
            d += rc == ACEMQ_AUDIT_DUPLICATE;
        }
    } else {
        const char **producer = form == FORM_INTERNED ? s->interned : s->producer;
        for (size_t i = 0; i < s->n; i++) {
            int rc = acemq_audit_check_seq(a, producer[i], s->producer_len[i], s->seq[i], NULL);
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

/* Median ns per id over reps passes, after one untimed warm-up pass. */
static double measure(const stream *s, int form, unsigned flags, int reps, size_t *dups)
{
    double *v = xmalloc((size_t)reps * sizeof *v);
    (void)run_once(s, form, flags, dups);
    for (int r = 0; r < reps; r++) {
        size_t d;
        v[r] = run_once(s, form, flags, &d);
        if (d != *dups) die("runs disagree: %zu then %zu duplicates", *dups, d);
    }
    double m = median(v, reps);
    free(v);
    return m;
}

/* Runs the peer's --time on the stream; its first stdout line is "ns_per_id X". */
static peer_result run_peer(const config *cfg, const char *api, const char *path)
{
    peer_result r = {0, 0};
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "'%s' --time --api %s '%s'", cfg->peer, api, path);
    if (n < 0 || (size_t)n >= sizeof cmd) die("peer command too long");
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) die("popen: %s", strerror(errno));
    char line[512];
    double ns = 0;
    int got = 0;
    while (fgets(line, sizeof line, p)) {
        if (!got && sscanf(line, "ns_per_id %lf", &ns) == 1) {
            got = 1;
            continue;
        }
        fputs(line, stdout); /* the peer's human line */
    }
    int status = pclose(p);
    if (status == -1) die("pclose: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == PEER_SKIPPED) {
        r.skipped = 1;
        return r;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !got || ns <= 0)
        die("the ActiveMQ peer (--api %s) failed (status %d)", api, status);
    r.ns = ns;
    return r;
}

static void report(FILE *out, const char *name, double ns, const char *peer, const peer_result *pr)
{
    if (pr && pr->ns > 0) {
        double ratio = pr->ns / ns;
        printf("%-27s %10.2f  %-22s %10.2f %8.1fx  %s\n", name, ns, peer, pr->ns, ratio,
               ratio >= TARGET_RATIO ? "yes" : "NO");
        fprintf(out,
                "{\"bench\":\"audit\",\"case\":\"%s\",\"value\":%.2f,\"unit\":\"ns/id\","
                "\"peer\":\"%s\",\"peer_value\":%.2f,\"ratio\":%.3f,\"target\":\">= 10 x peer "
                "speed\",\"target_met\":%s}\n",
                name, ns, peer, pr->ns, ratio, ratio >= TARGET_RATIO ? "true" : "false");
    } else {
        const char *why = pr ? "skipped" : "-";
        printf("%-27s %10.2f  %-22s %10s %9s  %s\n", name, ns, pr ? peer : "-", why, "-", "-");
        fprintf(out,
                "{\"bench\":\"audit\",\"case\":\"%s\",\"value\":%.2f,\"unit\":\"ns/id\","
                "\"peer\":%s%s%s,\"peer_value\":null,\"ratio\":null,\"target\":%s,"
                "\"target_met\":null}\n",
                name, ns, pr ? "\"" : "", pr ? peer : "null", pr ? "\"" : "",
                pr ? "\">= 10 x peer speed\"" : "null");
    }
    fflush(stdout);
    if (fflush(out) != 0) die("writing results: %s", strerror(errno));
}

static void usage(const char *why)
{
    if (why) fprintf(stderr, "bench_audit: %s\n", why);
    fputs("usage: bench_audit [--gen PATH | --stream FILE] [--out FILE] [--reps N] [--no-peer]\n"
          "  --gen PATH     gen_audit_stream, run with its defaults (issue 3's stream)\n"
          "  --stream FILE  an existing stream of ids instead\n"
          "  --out FILE     append JSON lines here (default bench/results/latest.jsonl)\n"
          "  --reps N       timed passes per measurement; the median is reported (default 7)\n"
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
    cfg.reps = 7;
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
        else if (strcmp(a, "--reps") == 0) {
            char *end;
            long r = strtol(v, &end, 10);
            if (*end != '\0' || r < 1 || r > 1000) usage("--reps: 1..1000");
            cfg.reps = (int)r;
        } else
            usage("unknown option");
        i++;
    }
    if (!cfg.gen == !cfg.stream) usage("give --gen or --stream");

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
    check_quotable(path);
    check_quotable(cfg.peer);

    stream s;
    load(&s, path);
    FILE *out = fopen(cfg.out_path, "a");
    if (!out) die("%s: %s", cfg.out_path, strerror(errno));

    printf("message audit: %zu ids from %s; median of %d passes, ns per id, one thread\n", s.n,
           cfg.gen ? "gen_audit_stream (issue 3's stream)" : path, cfg.reps);
    size_t dups_text, dups_split, dups_interned, dups_ts, dups_many, dups_seq_many, dups_ts_many;
    double text = measure(&s, FORM_TEXT, 0, cfg.reps, &dups_text);
    double split = measure(&s, FORM_SPLIT, 0, cfg.reps, &dups_split);
    double interned = measure(&s, FORM_INTERNED, 0, cfg.reps, &dups_interned);
    double ts_text = measure(&s, FORM_TEXT, ACEMQ_AUDIT_THREAD_SAFE, cfg.reps, &dups_ts);
    double many = measure(&s, FORM_TEXT_MANY, 0, cfg.reps, &dups_many);
    double seq_many = measure(&s, FORM_SPLIT_MANY, 0, cfg.reps, &dups_seq_many);
    double ts_many = measure(&s, FORM_TEXT_MANY, ACEMQ_AUDIT_THREAD_SAFE, cfg.reps, &dups_ts_many);
    if (dups_split != dups_text || dups_interned != dups_text || dups_ts != dups_text ||
        dups_many != dups_text || dups_seq_many != dups_text || dups_ts_many != dups_text)
        die("the forms disagree: %zu, %zu, %zu, %zu, %zu, %zu, %zu duplicates", dups_text,
            dups_split, dups_interned, dups_ts, dups_many, dups_seq_many, dups_ts_many);
    printf("acemq: %zu duplicates found by every form\n", dups_text);

    peer_result p_string = {0, 1}, p_msgid = {0, 1};
    if (!cfg.no_peer) {
        p_string = run_peer(&cfg, "string", path);
        p_msgid = run_peer(&cfg, "messageid", path);
        if (p_string.skipped || p_msgid.skipped)
            printf("ActiveMQ peer skipped: Java or ActiveMQ's jars are not installed "
                   "(bench/peers/activemq-peer.sh exited %d)\n",
                   PEER_SKIPPED);
    } else {
        printf("ActiveMQ peer skipped: --no-peer\n");
    }

    printf("\n%-27s %10s  %-22s %10s %9s  %s\n", "case", "acemq ns", "peer", "peer ns", "ratio",
           "ratio >= 10");
    report(out, "text/check", text, "activemq-string", &p_string);
    report(out, "split/check_seq", split, "activemq-messageid", &p_msgid);
    report(out, "split/check_seq/interned", interned, "activemq-messageid", &p_msgid);
    report(out, "text/check/thread-safe", ts_text, "activemq-string", &p_string);
    report(out, "text/check_many", many, "activemq-string", &p_string);
    report(out, "split/check_seq_many", seq_many, "activemq-messageid", &p_msgid);
    report(out, "text/check_many/thread-safe", ts_many, "activemq-string", &p_string);

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
