/*
 * Command-line flags of `flashattn bench` and `flashattn check`.
 */
#ifndef FA_CLI_ARGS_H
#define FA_CLI_ARGS_H

#include <stdio.h>

#include "config.h"

typedef enum cli_command {
    CLI_BENCH = 1,
    CLI_CHECK = 2
} cli_command;

/* Exit status for a bad command line. */
#define CLI_EXIT_USAGE 2

typedef enum cli_parse_result {
    CLI_PARSED = 0,   /* c holds the resolved case */
    CLI_HELP_SHOWN,   /* --help was given and printed */
    CLI_BAD_FLAG      /* a message naming the flag went to stderr */
} cli_parse_result;

/* Parse argv[0..argc) (the words after the subcommand) into c. */
cli_parse_result cli_parse_args(cli_command cmd, int argc, char **argv, cli_config *c);

/* The --help text of a subcommand. */
void cli_print_usage(cli_command cmd, FILE *f);

/* "cpu", "cuda", ... -> backend; returns 0 if the name is unknown. */
int cli_parse_backend(const char *s, fa_backend *b);

#endif /* FA_CLI_ARGS_H */
