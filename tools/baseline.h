/*
 * Naive attention computed in the storage precision, the yardstick of the
 * half-precision check (DESIGN.md §3, flash-attn's rule): every intermediate a
 * framework would materialise (q * scale, scores, softcap, probabilities,
 * v / (1 - p), outputs, gradients) is rounded to the storage dtype, sums
 * accumulate in float32. Its error against the float64 reference says how
 * much error the precision itself brings; a kernel may have at most a small
 * multiple of it.
 *
 * float8 e4m3 follows what an e4m3 kernel does instead: scores, softcap and
 * softmax in float32 from the (exactly dequantised) inputs, the unnormalised
 * probabilities rounded to e4m3 before P V, O accumulated in float32 and
 * stored as bfloat16.
 */
#ifndef FA_CLI_BASELINE_H
#define FA_CLI_BASELINE_H

#include <stdint.h>

#include "flashattn.h"

/* A batched problem on contiguous float arrays (values exactly representable
 * in `dtype`; float8 ones times their descales): q (B, Sq, Hq, D),
 * k (B, Sk, Hk, D), v (B, Sk, Hk, Dv), dout (B, Sq, Hq, Dv). b and h are the
 * true batch and head indices (the slice starts at 0), so dropout draws the
 * same bits as the full problem. */
typedef struct cli_attention {
    int64_t B, Sq, Sk, Hq, Hk, D, Dv;
    fa_dtype dtype;
    float scale;                  /* resolved, > 0 */
    float softcap;                /* 0: off */
    int64_t window_left, window_right; /* -1: unbounded; causal folded in */
    int top_left;
    const float *alibi;           /* (Hq) slopes or NULL */
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;
    const float *q, *k, *v, *dout;
} cli_attention;

/* out (B, Sq, Hq, Dv), lse (B, Hq, Sq). score_abs (B, Hq, Sq), may be NULL:
 * each row's largest scale * sum_d |q_d k_d| over its visible keys, the size
 * of the float8 lse bound. Work is split over `threads`. */
void cli_naive_fwd(const cli_attention *a, float *out, float *lse, float *score_abs, int threads);

/* dq (B, Sq, Hq, D), dk (B, Sk, Hk, D), dv (B, Sk, Hk, Dv). */
void cli_naive_bwd(const cli_attention *a, float *dq, float *dk, float *dv, int threads);

#endif /* FA_CLI_BASELINE_H */
