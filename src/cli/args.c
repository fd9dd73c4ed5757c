/* args.c — option helpers shared by the acemq commands: "--name VALUE" and
 * "--name=VALUE", and strict decimal numbers with a range, so every command
 * refuses "--depth 12x" or "--depth -1" the same way instead of guessing.
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
