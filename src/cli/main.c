/* main.c — the `acemq` tool's entry point: `acemq <command> [args]` finds the
 * command in the table below and hands it the rest of the line. A new command
 * is one file (declared in cli.h) and one row here.
 */
#include "cli/cli.h"

#include <acemq/acemq.h>

#include <stdio.h>
#include <string.h>

static const acemq__cli_command commands[] = {
    {"audit", "check a file of message ids for redeliveries, as the message audit would",
     acemq__cli_audit},
    {"relay", "publish committed outbox records to the broker, with confirms", acemq__cli_relay},
    {"consume", "run a command for each message, its effect once however often it comes",
     acemq__cli_consume},
    {"route", "run Camel-style YAML routes, with an idempotent_consumer step", acemq__cli_route},
    {"outbox", "look at and mend an outbox: status, dead, retry, purge", acemq__cli_outbox},
    {"idem", "look at and mend an idempotency store: status, show, forget, purge", acemq__cli_idem},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fputs("usage: acemq <command> [args]\n"
          "       acemq --help | --version\n"
          "       acemq help <command>\n"
          "\n"
          "commands:\n",
          f);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs("\n'acemq <command> --help' describes one command.\n"
          "\n"
          "Examples:\n"
          "  acemq relay --outbox sqlite:/var/lib/shop/shop.db"
          " --broker amqp://guest:guest@127.0.0.1:5672/\n"
          "  acemq consume --broker amqp://guest:guest@127.0.0.1:5672/ --queue orders \\\n"
          "                --store sqlite:/var/lib/shop/idem.db --exec -- ./apply-order.sh\n"
          "  acemq outbox status --outbox postgres://ops@db/shop\n"
          "  acemq idem status --store sqlite:/var/lib/shop/idem.db\n"
          "  acemq route examples/idempotent-consumer/route.yaml\n"
          "  acemq audit ids.txt\n",
          f);
}

static const acemq__cli_command *find(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return ACEMQ_CLI_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        usage(stdout);
        return ACEMQ_CLI_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("acemq %s\n", acemq_version());
        return ACEMQ_CLI_OK;
    }
    if (strcmp(name, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return ACEMQ_CLI_OK;
        }
        const acemq__cli_command *c = find(argv[2]);
        if (!c) {
            fprintf(stderr, "acemq: unknown command '%s'\n\n", argv[2]);
            usage(stderr);
            return ACEMQ_CLI_USAGE;
        }
        char help[] = "--help";
        char *args[] = {argv[2], help, NULL};
        return c->run(2, args);
    }
    const acemq__cli_command *c = find(name);
    if (!c) {
        fprintf(stderr, "acemq: unknown command '%s'\n\n", name);
        usage(stderr);
        return ACEMQ_CLI_USAGE;
    }
    return c->run(argc - 1, argv + 1);
}
