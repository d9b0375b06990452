/*
 * Running one case on one backend: choosing where it runs, timing the calls,
 * checking the results, and the machine line printed above the results.
 */
#ifndef FA_CLI_RUN_H
#define FA_CLI_RUN_H

#include <stdio.h>

#include "args.h"
#include "machine.h"
#include "report.h"
#include "workload.h"

/* Where a case runs. */
typedef struct cli_target {
    fa_backend backend;
    int on_gpu;
} cli_target;

/* A case run on one target: its workload (kept for comparisons) and results. */
typedef struct cli_case_run {
    cli_workload w;
    int have_workload;
    cli_result fwd, bwd;
    int have_bwd;
} cli_case_run;

/* Parse the flags, pick the target, probe the machine (bench on a CPU or a
 * decode on a GPU). Returns -1 to go on, else the exit status to return. */
int cli_run_prepare(cli_command cmd, int argc, char **argv, cli_config *c, cli_target *t, cli_machine *m);

/* AUTO becomes CUDA when a device is there (and this build can reach it), else
 * CPU. Returns 0 with a message on stderr if the backend cannot run here. */
int cli_pick_target(fa_backend requested, cli_target *t);

/* Run, time and check the case; results and errors land in cr. */
void cli_run_case(const cli_config *c, const cli_target *t, cli_case_run *cr);
void cli_case_free(cli_case_run *cr);

/* Fill the fractions of a timed result from the machine's ceilings. */
void cli_fill_fractions(cli_result *r, const cli_config *c, const cli_machine *m);

/* "flashattn 0.1.0, backend cpu, 2 threads, ..." and the measured ceilings. */
void cli_print_machine(FILE *f, const cli_target *t, const cli_machine *m);

#endif /* FA_CLI_RUN_H */
