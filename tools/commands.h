/*
 * The subcommands of the flashattn command. Each returns the process exit
 * status: 0 success, 1 a failed call or check, 2 a bad command line.
 */
#ifndef FA_CLI_COMMANDS_H
#define FA_CLI_COMMANDS_H

int cli_bench_main(int argc, char **argv);
int cli_check_main(int argc, char **argv);
int cli_info_main(int argc, char **argv);

#endif /* FA_CLI_COMMANDS_H */
