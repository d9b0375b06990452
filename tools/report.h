/*
 * Results of one case and how they are printed: an aligned table for people,
 * or one JSON object per line for scripts (--json).
 */
#ifndef FA_CLI_REPORT_H
#define FA_CLI_REPORT_H

#include <stdio.h>

#include "check.h"
#include "config.h"
#include "machine.h"

typedef struct cli_result {
    const char *direction;  /* "fwd", "bwd" or "decode" */
    const char *backend;
    int on_gpu;
    int timed;              /* time and rates are meaningful */
    double ms;              /* median time of one call */
    int runs;               /* timed runs behind the median */
    double flops;           /* per call, by the project's convention */
    double bytes;           /* decode: K and V bytes read per call; 0 otherwise */
    double frac_peak;       /* of the f32 FMA peak; < 0 unknown */
    double frac_peak_bf16;  /* of the bf16 dot-product peak; < 0 unknown */
    double frac_bandwidth;  /* decode: of the measured read bandwidth; < 0 unknown */
    cli_check check;
    char error[320];        /* nonempty when the call failed */
} cli_result;

/* "B=2 Hq=16 Hk=16 Sq=1024 Sk=1024 D=64 bf16 causal" */
void cli_describe_case(const cli_config *c, char *buf, size_t len);

/* Table: a header once per case, then one row per result. */
void cli_print_case_header(FILE *f, const cli_config *c);
void cli_print_result_row(FILE *f, const cli_result *r);
/* The per-output detail of a check (used by `flashattn check`). */
void cli_print_check_detail(FILE *f, const cli_result *r);

/* One JSON object on one line. */
void cli_print_result_json(FILE *f, const cli_config *c, const cli_result *r, const cli_machine *m);

/* 1 if the result is a failure (call failed or check failed). */
int cli_result_failed(const cli_result *r);

#endif /* FA_CLI_REPORT_H */
