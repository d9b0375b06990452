/*
 * flashattn: benchmark, check and describe the library from the command line.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "flashattn.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: flashattn <command> [flags]\n\n"
            "commands:\n"
            "  bench    time forward and backward on the best backend and check them against\n"
            "           the float64 reference (default: batch 2, 16 heads, seqlen 1024,\n"
            "           head dim 64, causal, bf16)\n"
            "  check    compare a backend with the reference (and with another backend)\n"
            "  info     version, backends, CPU features, threads, GPUs\n\n"
            "flashattn <command> --help describes each command's flags.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("flashattn %s\n", fa_version());
        return 0;
    }
    if (strcmp(cmd, "bench") == 0) return cli_bench_main(argc - 2, argv + 2);
    if (strcmp(cmd, "check") == 0) return cli_check_main(argc - 2, argv + 2);
    if (strcmp(cmd, "info") == 0) return cli_info_main(argc - 2, argv + 2);
    fprintf(stderr, "flashattn: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
