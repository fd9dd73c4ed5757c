/* args.c — option helpers shared by the acemq commands: "--name VALUE" and
 * "--name=VALUE", strict decimal numbers with a range, so every command
 * refuses "--depth 12x" or "--depth -1" the same way instead of guessing, and
 * the subcommand and operands of `acemq CMD SUB`.
 */
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int acemq__cli_option(const char *cmd, int argc, char **argv, int *i, const char *name,
                      const char **value)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) return 0;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0') return 0; /* "--depths" is another option */
    if (*i + 1 >= argc) {
        fprintf(stderr, "acemq %s: %s needs a value\n", cmd, name);
        return -1;
    }
    *i += 1;
    *value = argv[*i];
    return 1;
}

int acemq__cli_parse_u32(const char *cmd, const char *opt, const char *text, uint32_t lo,
                         uint32_t hi, uint32_t *out)
{
    /* strtoul alone would take " 7", "+7" and "-7" (as a huge number): only
     * plain digits are a number here. */
    int ok = text[0] != '\0' && strspn(text, "0123456789") == strlen(text);
    unsigned long long v = 0;
    if (ok) {
        errno = 0;
        v = strtoull(text, NULL, 10);
        ok = errno == 0 && v >= lo && v <= hi;
    }
    if (!ok) {
        fprintf(stderr, "acemq %s: %s: want a number from %lu to %lu, got '%s'\n", cmd, opt,
                (unsigned long)lo, (unsigned long)hi, text);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int acemq__cli_subcommand(const char *cmd, int argc, char **argv, const char *const *subs,
                          const char **sub)
{
    if (argc < 2) return ACEMQ__CLI_WRONG;
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return ACEMQ__CLI_HELP;
    for (; *subs; subs++)
        if (strcmp(argv[1], *subs) == 0) {
            *sub = *subs;
            return ACEMQ__CLI_TAKEN;
        }
    fprintf(stderr, "acemq %s: unknown subcommand '%s'\n", cmd, argv[1]);
    return ACEMQ__CLI_WRONG;
}

int acemq__cli_operand(const char *cmd, const char *sub, const char *arg, int takes_operands,
                       const char **operands, int *n, int max)
{
    if (strcmp(arg, "--help") == 0) return ACEMQ__CLI_HELP;
    if (arg[0] == '-' && arg[1]) {
        fprintf(stderr, "acemq %s: unknown option '%s'\n", cmd, arg);
        return ACEMQ__CLI_WRONG;
    }
    if (!takes_operands || *n >= max) {
        fprintf(stderr, "acemq %s %s: unexpected argument '%s'\n", cmd, sub, arg);
        return ACEMQ__CLI_WRONG;
    }
    operands[(*n)++] = arg;
    return ACEMQ__CLI_TAKEN;
}

int acemq__cli_parse_seconds(const char *cmd, const char *opt, const char *text, int64_t lo,
                             int64_t hi, int64_t *ms)
{
    char *end = NULL;
    double v = strtod(text, &end);
    if (!*text || *end || !(v * 1000 >= (double)lo && v * 1000 <= (double)hi)) {
        fprintf(stderr, "acemq %s: %s: want seconds from %.3f to %.0f, got '%s'\n", cmd, opt,
                (double)lo / 1000, (double)hi / 1000, text);
        return -1;
    }
    *ms = (int64_t)(v * 1000 + 0.5);
    return 0;
}
