/*
 * The machine's own ceilings, measured in the same run as the benchmark so
 * that each result can be given as a fraction of them (clock speeds on shared
 * machines drift; a ratio measured together does not).
 */
#ifndef FA_CLI_MACHINE_H
#define FA_CLI_MACHINE_H

typedef struct cli_machine {
    int threads;          /* threads the probes ran on */
    double peak_f32;      /* f32 FMA GFLOP/s; 0: not measured */
    double peak_bf16;     /* bf16 dot-product GFLOP/s; 0: not measured or no such instruction */
    double read_gbs;      /* memory read GB/s; 0: not measured */
    double copy_gbs;      /* GPU device-to-device copy GB/s (read + write); 0: not measured */
} cli_machine;

/* Measure the CPU's peaks on `threads` threads (bf16: also the bf16 peak;
 * bandwidth: also the read bandwidth). Leaves zeros where the probes are not
 * part of this build. */
void cli_machine_probe(cli_machine *m, int threads, int bf16, int bandwidth);

/* m = the higher of m and other, figure by figure. */
void cli_machine_keep_max(cli_machine *m, const cli_machine *other);

/* Space-separated CPU features the library uses. */
const char *cli_machine_features(void);

#endif /* FA_CLI_MACHINE_H */
