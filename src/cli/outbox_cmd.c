/* outbox_cmd.c — `acemq outbox status|dead|retry|purge`: what a person needs to
 * look at and mend an outbox. docs/cli.md is the user's page. */
#include "cli/cli.h"

#include <acemq/outbox.h>

#include <stdio.h>
#include <string.h>

#define CMD "outbox"

static void usage_line(FILE *f)
{
    fputs("usage: acemq outbox status --outbox URL\n"
          "       acemq outbox dead   --outbox URL [--limit N]\n"
          "       acemq outbox retry  --outbox URL ID...\n"
          "       acemq outbox purge  --outbox URL --older-than SECONDS\n",
          f);
}

static void help(void)
{
    usage_line(stdout);
    fputs("\n"
          "  status  what waits: unclaimed, claimed, dead, and the age of the oldest\n"
          "          record still to publish, one \"name value\" per line\n"
          "  dead    dead records, oldest first: id, attempts and last error, tab-separated\n"
          "          (--limit N, default 100)\n"
          "  retry   makes each dead record ID due again, its attempts reset\n"
          "  purge   deletes records published at least SECONDS ago; prints how many.\n"
          "          Batches of 5,000, each its own transaction, so the application\n"
          "          keeps writing meanwhile\n"
          "\n"
          "  --outbox URL  sqlite:/path/app.db or postgres://user@host:port/db\n"
          "\n"
          "Exit status: 0 done; 1 failed (a retried ID that is not dead, a database\n"
          "error); 2 usage error.\n"
          "\n"
          "Examples:\n"
          "  acemq outbox status --outbox sqlite:/var/lib/shop/shop.db\n"
          "  acemq outbox dead --outbox postgres://ops@db/shop\n"
          "  acemq outbox retry --outbox postgres://ops@db/shop 0190f5c2-...\n"
          "  acemq outbox purge --outbox sqlite:/var/lib/shop/shop.db --older-than 604800\n",
          stdout);
}

static int usage_error(void)
{
    usage_line(stderr);
    fputs("Try 'acemq outbox --help'.\n", stderr);
    return ACEMQ_CLI_USAGE;
}

static int status_cmd(acemq_outbox *h)
{
    acemq_outbox_pending p;
    int rc = acemq_outbox_pending_count(h, &p);
    if (rc != 0) {
        fprintf(stderr, "acemq outbox status: %s\n", acemq_outbox_errmsg(h));
        return ACEMQ_CLI_FAIL;
    }
    printf("unclaimed %llu\nclaimed %llu\ndead %llu\noldest_pending_age_ms %lld\n",
           (unsigned long long)p.unclaimed, (unsigned long long)p.claimed,
           (unsigned long long)p.dead, (long long)p.oldest_age_ms);
    return ACEMQ_CLI_OK;
}

static int dead_cmd(acemq_outbox *h, uint32_t limit)
{
    const acemq_outbox_msg *m;
    size_t n;
    if (acemq_outbox_list_dead(h, limit, &m, &n) != 0) {
        fprintf(stderr, "acemq outbox dead: %s\n", acemq_outbox_errmsg(h));
        return ACEMQ_CLI_FAIL;
    }
    for (size_t i = 0; i < n; i++) {
        printf("%s\t%d\t", m[i].id, m[i].attempts);
        /* One record, one line: the reason's own line breaks become spaces. */
        for (const char *c = m[i].last_error ? m[i].last_error : ""; *c; c++)
            putchar(*c == '\n' || *c == '\t' ? ' ' : *c);
        putchar('\n');
    }
    return ACEMQ_CLI_OK;
}

int acemq__cli_outbox(int argc, char **argv)
{
    static const char *const subs[] = {"status", "dead", "retry", "purge", NULL};
    const char *sub = NULL;
    int m = acemq__cli_subcommand(CMD, argc, argv, subs, &sub);
    if (m != ACEMQ__CLI_TAKEN) {
        if (m == ACEMQ__CLI_HELP) help();
        return m == ACEMQ__CLI_HELP ? ACEMQ_CLI_OK : usage_error();
    }
    int takes_ids = strcmp(sub, "retry") == 0;
    const char *url = NULL, *v = NULL;
    uint32_t limit = 100, older = 0;
    int have_older = 0;
    const char *ids[256];
    int n_ids = 0;
    for (int i = 2; i < argc; i++) {
        if ((m = acemq__cli_option(CMD, argc, argv, &i, "--outbox", &v)) != 0) {
            if (m < 0) return usage_error();
            url = v;
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--limit", &v)) != 0) {
            if (m < 0 || acemq__cli_parse_u32(CMD, "--limit", v, 1, 100000, &limit) != 0)
                return usage_error();
        } else if ((m = acemq__cli_option(CMD, argc, argv, &i, "--older-than", &v)) != 0) {
            if (m < 0 ||
                acemq__cli_parse_u32(CMD, "--older-than", v, 0, 100u * 365 * 86400, &older) != 0)
                return usage_error();
            have_older = 1;
        } else if ((m = acemq__cli_operand(CMD, sub, argv[i], takes_ids, ids, &n_ids, 256)) !=
                   ACEMQ__CLI_TAKEN) {
            if (m == ACEMQ__CLI_HELP) help();
            return m == ACEMQ__CLI_HELP ? ACEMQ_CLI_OK : usage_error();
        }
    }
    if (!url) {
        fprintf(stderr, "acemq outbox %s: --outbox URL is required\n", sub);
        return usage_error();
    }
    if (strcmp(sub, "purge") == 0 && !have_older) {
        fputs("acemq outbox purge: --older-than SECONDS is required\n", stderr);
        return usage_error();
    }
    if (strcmp(sub, "retry") == 0 && n_ids == 0) {
        fputs("acemq outbox retry: name at least one record id\n", stderr);
        return usage_error();
    }
    acemq_outbox *h = NULL;
    if (acemq_outbox_open(&h, url, NULL) != 0) {
        fprintf(stderr, "acemq outbox: %s: %s\n", url, acemq_outbox_errmsg(NULL));
        return ACEMQ_CLI_FAIL;
    }
    int status = ACEMQ_CLI_OK;
    if (strcmp(sub, "status") == 0) {
        status = status_cmd(h);
    } else if (strcmp(sub, "dead") == 0) {
        status = dead_cmd(h, limit);
    } else if (strcmp(sub, "retry") == 0) {
        for (int i = 0; i < n_ids; i++) {
            if (acemq_outbox_retry(h, ids[i]) != 0) {
                fprintf(stderr, "acemq outbox retry: %s\n", acemq_outbox_errmsg(h));
                status = ACEMQ_CLI_FAIL;
            } else {
                printf("retried %s\n", ids[i]);
            }
        }
    } else {
        uint64_t purged = 0;
        if (acemq_outbox_purge(h, (int64_t)older * 1000, &purged) != 0) {
            fprintf(stderr, "acemq outbox purge: %s\n", acemq_outbox_errmsg(h));
            status = ACEMQ_CLI_FAIL;
        } else {
            printf("purged %llu\n", (unsigned long long)purged);
        }
    }
    acemq_outbox_close(h);
    return status;
}
