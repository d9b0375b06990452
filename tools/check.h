/*
 * Comparison of a backend's results with the float64 reference (run through
 * the public API as FA_BACKEND_REFERENCE on float32 copies of the inputs) and,
 * for float16/bfloat16 and float8, with a naive attention in the same precision.
 *
 * Pass rules (DESIGN.md §3):
 *   float32:        max |x - ref| <= 1e-4 * max(1, max |ref|)
 *   float16/bf16:   max |x - ref| <= k * max |naive - ref| + u / 2
 *                   with k = 2 for the forward, 3 for gradients, and u the
 *                   dtype's unit roundoff (2^-8 bf16, 2^-11 f16); u / 2 is about
 *                   twice the error of storing a value near 0.3, flash-attn's floor.
 *   float8 e4m3:    forward only, out in bf16; the naive attention models an
 *                   e4m3 kernel (float32 scores and softmax, P rounded to e4m3,
 *                   bf16 out). out: max |x - ref| <= 2 * max |naive - ref| + u / 2
 *                   with bf16's u. lse, row by row (as tests/test_fp8.c):
 *                   |x_i - ref_i| <= 2 * max |naive - ref| + 2^-12 * max(1, D / 128)
 *                   * scale * max_j sum_d |q_d k_d| + 1e-4 (j over the row's
 *                   visible keys).
 *   every element written: no NaN (outputs are poisoned with NaN first).
 * Big problems are checked on a slice that starts at batch 0, head 0 (so
 * dropout draws the same bits): the first batch, the leading heads (whole GQA
 * groups when the backward fits), and when that is still too long a block of
 * query rows: the last ones under bottom-right alignment, the first ones under
 * top-left alignment or when Sq == Sk. Outputs and dq are row-local and are
 * checked exactly on such a block; dk and dv are compared only when the slice
 * holds every query row of their groups. The scope says what was checked.
 */
#ifndef FA_CLI_CHECK_H
#define FA_CLI_CHECK_H

#include "workload.h"

typedef enum cli_check_status {
    CLI_CHECK_OFF = 0,   /* not asked for */
    CLI_CHECK_PASS,
    CLI_CHECK_FAIL,
    CLI_CHECK_SKIPPED    /* too big for the reference; scope says why */
} cli_check_status;

/* One compared output (out, lse, dq, dk, dv). */
typedef struct cli_quantity {
    const char *name;
    double err;          /* max |x - ref| over the checked slice (inf on a mismatched -inf or NaN);
                          * per_row: |x - ref| of the row nearest its own bound */
    double ref_max;      /* max |ref| */
    double naive_err;    /* max |naive - ref|; -1 where no naive baseline is used */
    double bound;        /* passes when err <= bound (per_row: that row's bound) */
    int per_row;         /* each row has its own bound (the float8 lse) */
    long long nan_count; /* NaN (unwritten or broken) elements in the whole output */
    int pass;
} cli_quantity;

typedef struct cli_check {
    cli_check_status status;
    char scope[256];     /* "all", "batch 0, heads 0-1, ..." or why it was skipped */
    int n;
    cli_quantity q[3];
} cli_check;

/* Float32 slices of the inputs and the reference results; opaque to callers. */
typedef struct cli_reference cli_reference;

/* Choose the slice for this workload (with_backward: whole GQA groups and
 * every query row) and copy the inputs. Returns NULL when out of memory. */
cli_reference *cli_reference_create(const cli_workload *w, int with_backward);
void cli_reference_destroy(cli_reference *r);

/* Compare the forward outputs in w's host copies (downloaded by the caller).
 * Returns 0 if the reference itself failed (message in err). */
int cli_check_fwd(cli_reference *r, const cli_workload *w, cli_check *c, char *err, size_t err_len);
/* Compare dq, dk, dv; needs cli_check_fwd first. */
int cli_check_bwd(cli_reference *r, const cli_workload *w, cli_check *c, char *err, size_t err_len);

/* The quantity with the largest err / bound, for one-line summaries. */
const cli_quantity *cli_check_worst(const cli_check *c);

#endif /* FA_CLI_CHECK_H */
