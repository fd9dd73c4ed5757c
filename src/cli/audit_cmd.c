/* audit_cmd.c — `acemq audit`: runs a file of message ids, one per line,
 * through one message audit (include/acemq/audit.h) and prints its answer for
 * each line, or only the totals. docs/cli.md is the user's page.
 */
#include "cli/cli.h"

#include <acemq/acemq.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define CMD "audit"

/* Big stdio buffers: a stream of millions of short lines is otherwise a read
 * and a write system call every few kilobytes. */
#define IO_BUFFER (1u << 20)

typedef struct audit_args {
    acemq_audit_options opts;
    int count;        /* --count: totals only */
    const char *path; /* FILE, or "-" for stdin */
} audit_args;

static void usage_line(FILE *f)
{
    fputs("usage: acemq audit [--depth N] [--producers N] [--fail-closed] [--count] FILE|-\n", f);
}

static void help(void)
{
    usage_line(stdout);
    printf("\n"
           "Reads message ids \"<producer>:<sequence>\", one per line (a trailing \\r is\n"
           "dropped), runs them through one message audit, and prints for each line:\n"
           "  new          not seen before (or history was lost, without --fail-closed)\n"
           "  duplicate    seen before: a redelivery\n"
           "  unknown      history was lost (evicted producer, sequence behind the\n"
           "               window or before its start); only with --fail-closed\n"
           "  error: WHY   the line is not a well-formed id; nothing was recorded\n"
           "\n"
           "  --depth N      sequences remembered per producer (default 2048, max %u)\n"
           "  --producers N  producers remembered, least recently used dropped first\n"
           "                 (default 64, max %u)\n"
           "  --fail-closed  answer unknown where history was lost, instead of new\n"
           "  --count        print only the totals, one \"name value\" per line\n"
           "  FILE           the ids; - reads standard input\n"
           "\n"
           "Exit status: 0 every line was a well-formed id; 1 some line was malformed\n"
           "(each says error: on its own output line) or the input could not be read\n"
           "or the output written; 2 a usage error.\n"
           "\n"
           "Example:\n"
           "  $ printf 'ID:h-1:1:1:1:1\\nID:h-1:1:1:1:2\\nID:h-1:1:1:1:1\\n' | acemq audit -\n"
           "  new\n"
           "  new\n"
           "  duplicate\n"
           "  $ acemq audit --fail-closed --count captured-ids.txt\n",
           (unsigned)ACEMQ_AUDIT_DEPTH_MAX, (unsigned)ACEMQ_AUDIT_PRODUCERS_MAX);
}

static int usage_error(void)
{
    usage_line(stderr);
    fputs("Try 'acemq audit --help'.\n", stderr);
    return ACEMQ_CLI_USAGE;
}

/* 0 to go on, or the exit status to end with (help printed, usage error). */
static int parse_args(int argc, char **argv, audit_args *a, int *done)
{
    *done = 0;
    acemq_audit_options_init(&a->opts);
    a->count = 0;
    a->path = NULL;
    int only_files = 0; /* after "--", "-x" is a file name */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *v = NULL;
        int m;
        if (only_files || arg[0] != '-' || strcmp(arg, "-") == 0) {
            if (a->path) {
                fprintf(stderr, "acemq audit: one FILE only (got '%s' and '%s')\n", a->path, arg);
                return usage_error();
            }
            a->path = arg;
        } else if (strcmp(arg, "--") == 0) {
            only_files = 1;
        } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            help();
            *done = 1;
            return ACEMQ_CLI_OK;
        } else if (strcmp(arg, "--fail-closed") == 0) {
            a->opts.policy = ACEMQ_AUDIT_FAIL_CLOSED;
        } else if (strcmp(arg, "--count") == 0) {
            a->count = 1;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--depth", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_u32(CMD, "--depth", v, 1, ACEMQ_AUDIT_DEPTH_MAX,
                                              &a->opts.depth) != 0)
                return usage_error();
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--producers", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_u32(CMD, "--producers", v, 1, ACEMQ_AUDIT_PRODUCERS_MAX,
                                              &a->opts.max_producers) != 0)
                return usage_error();
        } else {
            fprintf(stderr, "acemq audit: unknown option '%s'\n", arg);
            return usage_error();
        }
    }
    if (!a->path) {
        fputs("acemq audit: give a FILE of ids, or - for standard input\n", stderr);
        return usage_error();
    }
    return ACEMQ_CLI_OK;
}

/* The totals, "name value" per line: easy for people and for awk. The audit's
 * own counters, so that under fail-open `unknown` counts lines that lost
 * history and were answered (and counted) `new`. */
static void print_totals(const acemq_audit_stats *s, uint64_t lines, uint64_t errors)
{
    printf("lines                 %" PRIu64 "\n"
           "checks                %" PRIu64 "\n"
           "new                   %" PRIu64 "\n"
           "duplicate             %" PRIu64 "\n"
           "unknown               %" PRIu64 "\n"
           "unknown_evicted       %" PRIu64 "\n"
           "unknown_behind_window %" PRIu64 "\n"
           "unknown_before_start  %" PRIu64 "\n"
           "errors                %" PRIu64 "\n"
           "evictions             %" PRIu64 "\n"
           "forgotten             %" PRIu64 "\n",
           lines, s->checks, s->news, s->duplicates, s->unknowns, s->unknown_evicted,
           s->unknown_behind_window, s->unknown_before_start, errors, s->evictions, s->forgotten);
}

/* Runs every line of in through the audit; ACEMQ_CLI_OK or ACEMQ_CLI_FAIL. */
static int run(acemq_audit *audit, FILE *in, const char *name, int count)
{
    /* Indexed by acemq_audit_result. */
    static const char *const answers[] = {"new\n", "duplicate\n", "unknown\n"};
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    uint64_t lines = 0, errors = 0, first_error = 0;
    const char *first_why = NULL;
    int status = ACEMQ_CLI_OK;

    while ((got = getline(&line, &cap, in)) != -1) {
        size_t len = (size_t)got;
        lines++;
        if (len > 0 && line[len - 1] == '\n') len--;
        if (len > 0 && line[len - 1] == '\r') len--;
        int r = acemq_audit_check(audit, line, len, NULL);
        if (r >= ACEMQ_AUDIT_NEW && r <= ACEMQ_AUDIT_UNKNOWN) {
            if (!count) fputs(answers[r], stdout);
            continue;
        }
        if (r != ACEMQ_EINVAL) {
            fprintf(stderr, "acemq audit: %s: line %" PRIu64 ": %s\n", name, lines,
                    acemq_strerror(r));
            status = ACEMQ_CLI_FAIL;
            break;
        }
        /* The check says only EINVAL; parsing again (malformed lines only)
         * gives the reason in words. */
        acemq_audit_id id;
        const char *why =
            acemq_audit_parse_id(line, len, &id) != 0 && id.error ? id.error : acemq_strerror(r);
        if (errors++ == 0) {
            first_error = lines;
            first_why = why;
        }
        if (!count) printf("error: %s\n", why);
    }
    if (status == ACEMQ_CLI_OK && ferror(in)) {
        fprintf(stderr, "acemq audit: %s: %s\n", name, strerror(errno));
        status = ACEMQ_CLI_FAIL;
    }
    free(line);

    if (count && status == ACEMQ_CLI_OK) {
        acemq_audit_stats s;
        acemq_audit_stats_get(audit, &s);
        print_totals(&s, lines, errors);
    }
    if (errors > 0) {
        /* The answers first, so on a terminal the summary comes after them. */
        fflush(stdout);
        fprintf(stderr,
                "acemq audit: %s: %" PRIu64 " malformed line%s, the first line %" PRIu64 ": %s\n",
                name, errors, errors == 1 ? "" : "s", first_error, first_why);
        status = ACEMQ_CLI_FAIL;
    }
    return status;
}

int acemq__cli_audit(int argc, char **argv)
{
    audit_args a;
    int done;
    int rc = parse_args(argc, argv, &a, &done);
    if (rc != ACEMQ_CLI_OK || done) return rc;

    static char out_buf[IO_BUFFER];
    setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);

    int from_stdin = strcmp(a.path, "-") == 0;
    const char *name = from_stdin ? "standard input" : a.path;
    FILE *in = from_stdin ? stdin : fopen(a.path, "rb");
    if (!in) {
        fprintf(stderr, "acemq audit: %s: %s\n", a.path, strerror(errno));
        return ACEMQ_CLI_FAIL;
    }
    setvbuf(in, NULL, _IOFBF, IO_BUFFER);

    acemq_audit *audit = NULL;
    rc = acemq_audit_new(&audit, &a.opts);
    if (rc != 0) {
        fprintf(stderr, "acemq audit: cannot make the audit: %s\n", acemq_strerror(rc));
        if (!from_stdin) fclose(in);
        return ACEMQ_CLI_FAIL;
    }
    int status = run(audit, in, name, a.count);
    acemq_audit_free(audit);
    if (!from_stdin) fclose(in);

    /* A full disk or a closed pipe shows up here, not at each fputs. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "acemq audit: writing standard output: %s\n", strerror(errno));
        status = ACEMQ_CLI_FAIL;
    }
    return status;
}
