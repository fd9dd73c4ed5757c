/* idem_cmd.c — `acemq idem status|show|forget|purge`: what an operator needs
 * to look at an idempotency store and mend it. docs/cli.md is the user's
 * page. */
#include "cli/cli.h"

#include <acemq/acemq.h>

#include <stdio.h>
#include <string.h>

#define CMD "idem"

static void usage_line(FILE *f)
{
    fputs("usage: acemq idem status --store URL\n"
          "       acemq idem show   --store URL ID\n"
          "       acemq idem forget --store URL ID...\n"
          "       acemq idem purge  --store URL\n",
          f);
}

static void help(void)
{
    usage_line(stdout);
    fputs("\n"
          "  status  records by state (held, abandoned, confirmed, expired) and the held\n"
          "          claim whose lease ends first, one \"name value\" per line\n"
          "  show    one id's record: state, token, lease or retention, result and\n"
          "          fingerprint sizes\n"
          "  forget  forgets each ID on purpose, whatever its state, so that its message\n"
          "          is processed again when it comes back; a holder's token goes stale\n"
          "  purge   removes expired confirmations and abandoned claims now; prints how\n"
          "          many (abandoned claims go once idle for the default retention, 7 days)\n"
          "\n"
          "  --store URL  sqlite:/path/app.db, postgres://user@host:port/db, redis://host:port\n"
          "\n"
          "States: held (claimed, lease running), abandoned (lease ran out, or released:\n"
          "the next claim takes it over), confirmed (duplicates are acknowledged),\n"
          "expired (retention over: treated as new, and purged).\n"
          "Times are the store's: *_ms are milliseconds since the epoch, *_in_ms from now.\n"
          "\n"
          "Exit status: 0 done; 1 failed (an ID with no record, a store error); 2 usage\n"
          "error.\n"
          "\n"
          "Examples:\n"
          "  acemq idem status --store sqlite:/var/lib/shop/idem.db\n"
          "  acemq idem show --store postgres://ops@db/shop order-1842\n"
          "  acemq idem forget --store sqlite:/var/lib/shop/idem.db order-1842\n"
          "  acemq idem purge --store postgres://ops@db/shop\n",
          stdout);
}

static int usage_error(void)
{
    usage_line(stderr);
    fputs("Try 'acemq idem --help'.\n", stderr);
    return ACEMQ_CLI_USAGE;
}

/* An id as text: printable ASCII as is, every other byte as \xNN, a
 * backslash as \\, so that one id stays one word on one line. */
static void print_id(const unsigned char *id, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (id[i] == '\\')
            fputs("\\\\", stdout);
        else if (id[i] > ' ' && id[i] < 0x7f)
            putchar(id[i]);
        else
            printf("\\x%02x", id[i]);
    }
}

/* Now on this machine's clock, for the *_in_ms lines. */
static int64_t local_now_ms(void)
{
    const acemq_clock *c = acemq_clock_system();
    return c->now_ms(c->ctx);
}

static int status_cmd(acemq_idem *h)
{
    acemq_idem_counts c;
    if (acemq_idem_counts_get(h, &c) != 0) {
        fprintf(stderr, "acemq idem status: %s\n", acemq_idem_errmsg(h));
        return ACEMQ_CLI_FAIL;
    }
    printf("held %llu\nabandoned %llu\nconfirmed %llu\nexpired %llu\n", (unsigned long long)c.held,
           (unsigned long long)c.abandoned, (unsigned long long)c.confirmed,
           (unsigned long long)c.expired);
    if (c.has_next_lease) {
        size_t shown = c.next_id_len < sizeof c.next_id ? c.next_id_len : sizeof c.next_id;
        fputs("next_lease_id ", stdout);
        print_id(c.next_id, shown);
        printf("%s\nnext_lease_token %llu\nnext_lease_until_ms %lld\nnext_lease_ends_in_ms %lld\n",
               shown < c.next_id_len ? "..." : "", (unsigned long long)c.next_token,
               (long long)c.next_lease_until_ms,
               (long long)(c.next_lease_until_ms - local_now_ms()));
    }
    return ACEMQ_CLI_OK;
}

static int show_cmd(acemq_idem *h, const char *id)
{
    acemq_idem_record r;
    int rc = acemq_idem_inspect(h, id, strlen(id), &r);
    if (rc != 0) {
        fprintf(stderr, "acemq idem show: %s: %s\n", id, acemq_idem_errmsg(h));
        return ACEMQ_CLI_FAIL;
    }
    fputs("id ", stdout);
    print_id((const unsigned char *)id, strlen(id));
    printf("\nstate %s\ntoken %llu\n", acemq_idem_state_name(r.state), (unsigned long long)r.token);
    int64_t now = local_now_ms();
    if (r.state == ACEMQ_IDEM_HELD || r.state == ACEMQ_IDEM_ABANDONED) {
        if (r.lease_until_ms > 0)
            printf("lease_until_ms %lld\nlease_ends_in_ms %lld\n", (long long)r.lease_until_ms,
                   (long long)(r.lease_until_ms - now));
    } else {
        printf("expires_ms %lld\nexpires_in_ms %lld\n", (long long)r.expires_ms,
               (long long)(r.expires_ms - now));
    }
    if (r.has_result) printf("result_bytes %zu\n", r.result_len);
    if (r.fingerprint_len) printf("fingerprint_bytes %zu\n", r.fingerprint_len);
    return ACEMQ_CLI_OK;
}

static int forget_cmd(acemq_idem *h, const char *const *ids, int n)
{
    int status = ACEMQ_CLI_OK;
    for (int i = 0; i < n; i++) {
        int rc = acemq_idem_forget(h, ids[i], strlen(ids[i]));
        if (rc < 0) {
            fprintf(stderr, "acemq idem forget: %s: %s\n", ids[i], acemq_idem_errmsg(h));
            status = ACEMQ_CLI_FAIL;
        } else if (rc == 0) {
            fprintf(stderr, "acemq idem forget: %s: the store holds no record of it\n", ids[i]);
            status = ACEMQ_CLI_FAIL;
        } else {
            printf("forgot %s\n", ids[i]);
        }
    }
    return status;
}

static int purge_cmd(acemq_idem *h)
{
    uint64_t purged = 0;
    if (acemq_idem_purge(h, &purged) != 0) {
        fprintf(stderr, "acemq idem purge: %s\n", acemq_idem_errmsg(h));
        return ACEMQ_CLI_FAIL;
    }
    printf("purged %llu\n", (unsigned long long)purged);
    return ACEMQ_CLI_OK;
}

int acemq__cli_idem(int argc, char **argv)
{
    static const char *const subs[] = {"status", "show", "forget", "purge", NULL};
    const char *sub = NULL;
    int m = acemq__cli_subcommand(CMD, argc, argv, subs, &sub);
    if (m != ACEMQ__CLI_TAKEN) {
        if (m == ACEMQ__CLI_HELP) help();
        return m == ACEMQ__CLI_HELP ? ACEMQ_CLI_OK : usage_error();
    }
    int takes_ids = strcmp(sub, "show") == 0 || strcmp(sub, "forget") == 0;
    const char *url = NULL, *v = NULL;
    const char *ids[256] = {0};
    int n_ids = 0;
    for (int i = 2; i < argc; i++) {
        if ((m = acemq__cli_option(CMD, argc, argv, &i, "--store", &v)) != 0) {
            if (m < 0) return usage_error();
            url = v;
        } else if ((m = acemq__cli_operand(CMD, sub, argv[i], takes_ids, ids, &n_ids, 256)) !=
                   ACEMQ__CLI_TAKEN) {
            if (m == ACEMQ__CLI_HELP) help();
            return m == ACEMQ__CLI_HELP ? ACEMQ_CLI_OK : usage_error();
        }
    }
    if (!url) {
        fprintf(stderr, "acemq idem %s: --store URL is required\n", sub);
        return usage_error();
    }
    if (takes_ids && n_ids == 0) {
        fprintf(stderr, "acemq idem %s: name an id\n", sub);
        return usage_error();
    }
    if (strcmp(sub, "show") == 0 && n_ids > 1) {
        fputs("acemq idem show: name one id\n", stderr);
        return usage_error();
    }
    acemq_idem *h = NULL;
    if (acemq_idem_open(&h, url, NULL) != 0) {
        fprintf(stderr, "acemq idem: %s: %s\n", url, acemq_idem_errmsg(NULL));
        return ACEMQ_CLI_FAIL;
    }
    int status;
    if (strcmp(sub, "status") == 0)
        status = status_cmd(h);
    else if (strcmp(sub, "show") == 0)
        status = ids[0] ? show_cmd(h, ids[0]) : ACEMQ_CLI_USAGE; /* ids[0]: checked above */
    else if (strcmp(sub, "forget") == 0)
        status = forget_cmd(h, ids, n_ids);
    else
        status = purge_cmd(h);
    acemq_idem_close(h);
    return status;
}
