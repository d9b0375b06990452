/*
 * flashattn bench: time one case (or the standard grid) on the best backend,
 * check it against the float64 reference, report a table or JSON lines.
 */
#include <stdio.h>

#include "commands.h"
#include "run.h"

/* The standard GPU grid (DESIGN.md §4): hidden 2048, head dim 64/128/256,
 * (batch, seqlen) from (32, 512) to (1, 16k), causal and not. Other flags
 * (dtype, --fwd-only, --no-check, --repeat, ...) apply to every case. */
static int grid_cases(const cli_config *base, cli_config *out, int max) {
    static const int64_t dims[] = {64, 128, 256};
    static const int64_t batch_seqlen[][2] = {{32, 512}, {16, 1024}, {8, 2048}, {4, 4096}, {2, 8192}, {1, 16384}};
    int n = 0;
    for (size_t d = 0; d < 3; ++d)
        for (size_t p = 0; p < 6; ++p)
            for (int causal = 0; causal <= 1 && n < max; ++causal) {
                cli_config c = *base;
                c.head_dim = c.head_dim_v = dims[d];
                c.heads = c.kv_heads = 2048 / dims[d];
                c.batch = batch_seqlen[p][0];
                c.seqlen_q = c.seqlen_k = batch_seqlen[p][1];
                c.causal = causal;
                c.use_window = 0;
                out[n++] = c;
            }
    return n;
}

#define MAX_CASES 64

int cli_bench_main(int argc, char **argv) {
    cli_config c;
    cli_target t;
    cli_machine m;
    int rc = cli_run_prepare(CLI_BENCH, argc, argv, &c, &t, &m);
    if (rc >= 0) return rc;

    static cli_config cases[MAX_CASES];
    static cli_result results[MAX_CASES][2];
    int n = c.grid ? grid_cases(&c, cases, MAX_CASES) : 1;
    if (!c.grid) cases[0] = c;
    int have_bwd = !c.fwd_only;
    for (int i = 0; i < n; ++i) {
        if (n > 1) {
            char desc[256];
            cli_describe_case(&cases[i], desc, sizeof desc);
            fprintf(stderr, "[%d/%d] %s\n", i + 1, n, desc);
        }
        cli_case_run cr;
        cli_run_case(&cases[i], &t, &cr);
        results[i][0] = cr.fwd;
        results[i][1] = cr.bwd;
        cli_case_free(&cr);
    }
    if (!t.on_gpu) {
        /* Probe again after the run and keep the higher figures: the peak is a
         * ceiling, and other work on a shared machine only ever lowers a probe. */
        cli_machine again;
        cli_machine_probe(&again, m.threads, c.dtype == FA_BF16, c.kvcache);
        cli_machine_keep_max(&m, &again);
    }
    if (!c.json) cli_print_machine(stdout, &t, &m);
    int failed = 0;
    for (int i = 0; i < n; ++i) {
        if (!c.json) cli_print_case_header(stdout, &cases[i]);
        for (int dir = 0; dir < 1 + have_bwd; ++dir) {
            cli_result *r = &results[i][dir];
            cli_fill_fractions(r, &cases[i], &m);
            if (c.json) cli_print_result_json(stdout, &cases[i], r, &m);
            else cli_print_result_row(stdout, r);
            failed |= cli_result_failed(r);
        }
    }
    return failed ? 1 : 0;
}

