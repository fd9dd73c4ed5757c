/* cli.h — what the commands of the `acemq` tool share: the shape of a command,
 * the exit statuses every command keeps, and the option helpers (args.c).
 * One file per command; main.c lists them in one table.
 */
#ifndef ACEMQ_CLI_H
#define ACEMQ_CLI_H

#include <signal.h>
#include <stdint.h>

/* Exit statuses, the same for every command so scripts can rely on them:
 * 0 the job was done; 1 it was done badly or not at all (bad input, I/O,
 * memory); 2 the command line was wrong and nothing was done. */
enum { ACEMQ_CLI_OK = 0, ACEMQ_CLI_FAIL = 1, ACEMQ_CLI_USAGE = 2 };

/* A command gets argv with argv[0] its own name ("audit") and returns an
 * exit status. `--help` is each command's own business. */
typedef struct acemq__cli_command {
    const char *name;
    const char *summary; /* one line for `acemq --help` */
    int (*run)(int argc, char **argv);
} acemq__cli_command;

/* The commands (one file each). */
int acemq__cli_audit(int argc, char **argv);
int acemq__cli_relay(int argc, char **argv);
int acemq__cli_outbox(int argc, char **argv);
int acemq__cli_idem(int argc, char **argv);
int acemq__cli_consume(int argc, char **argv);
int acemq__cli_route(int argc, char **argv);

/* Matches argv[*i] against option `name` ("--depth") given as "--depth VALUE"
 * or "--depth=VALUE". 0: not this option. 1: matched, *value set, *i moved past
 * a separate value. -1: matched but the value is missing (said on stderr,
 * prefixed with cmd). */
int acemq__cli_option(const char *cmd, int argc, char **argv, int *i, const char *name,
                      const char **value);

/* Parses text as a decimal number in [lo, hi] into *out: 0, or -1 after saying
 * why on stderr, prefixed with cmd and opt. Digits only: no sign, no spaces. */
int acemq__cli_parse_u32(const char *cmd, const char *opt, const char *text, uint32_t lo,
                         uint32_t hi, uint32_t *out);

/* Seconds with decimals ("0.05") into milliseconds within [lo, hi]: 0, or
 * -1 after saying why on stderr, prefixed with cmd and opt. */
int acemq__cli_parse_seconds(const char *cmd, const char *opt, const char *text, int64_t lo,
                             int64_t hi, int64_t *ms);

/* signals.c: set by SIGTERM and SIGINT once acemq__cli_catch_stop_signals
 * ran (which also ignores SIGPIPE). */
extern volatile sig_atomic_t acemq__cli_stop_requested;
void acemq__cli_catch_stop_signals(void);
/* Calls attempt(ctx) until it answers anything but ACEMQ_EIO (a broker that
 * cannot be reached yet), waiting 100 ms doubling to 10 s between tries with
 * a broker_unavailable log line giving why(); a stop signal ends the wait
 * (ACEMQ_EIO, acemq__cli_stop_requested set). Refusals (ACEMQ_EAUTH, a bad
 * URL) are a setting to fix: answered at once. */
int acemq__cli_wait_for_broker(int (*attempt)(void *ctx), const char *(*why)(void), void *ctx);

/* What the helpers for commands with subcommands found. */
enum { ACEMQ__CLI_HELP = 0, ACEMQ__CLI_TAKEN = 1, ACEMQ__CLI_WRONG = -1 };

/* argv[1] of `acemq CMD SUB ...`: TAKEN with *sub set when it is one of
 * subs (NULL-terminated); HELP for "--help" or "-h"; WRONG, said on stderr
 * when argv[1] is there, otherwise. */
int acemq__cli_subcommand(const char *cmd, int argc, char **argv, const char *const *subs,
                          const char **sub);

/* An argument of `acemq CMD SUB` that no option took: HELP for "--help";
 * TAKEN when it is an operand and SUB takes them (takes_operands), kept in
 * operands[*n] while *n < max; WRONG, said on stderr, for an unknown option,
 * an operand SUB does not take, or one past max. */
int acemq__cli_operand(const char *cmd, const char *sub, const char *arg, int takes_operands,
                       const char **operands, int *n, int max);

#endif
