/*
 * The float64 reference: attention written the naive way, in double, as the
 * yardstick every other backend is measured against.
 *
 * Two layers:
 *   - a math core on plain double arrays for one (batch, query head) problem
 *     with explicit options (ref_core.c), reachable from tests;
 *   - the backend entry points (ref_backend.c, ref_kvcache.c, ref_merge.c)
 *     that gather storage dtypes into doubles, call the core, and scatter,
 *     with independent (sequence, head) items spread over threads
 *     (ref_threads.c).
 *
 * Internal header: not part of the public API.
 */
#ifndef FA_REF_H
#define FA_REF_H

#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Everything that shapes the scores and probabilities of one head. */
typedef struct fa_ref_head_opts {
    double scale;                /* s = scale * <q_i, k_j> */
    double softcap;              /* > 0: s = softcap * tanh(s / softcap); 0: off */
    double alibi_slope;          /* s -= slope * |i + off - j|; 0: off */
    int64_t window_left;         /* keys this far before the aligned diagonal; FA_UNBOUNDED: no limit */
    int64_t window_right;        /* keys this far after it; FA_UNBOUNDED: no limit (causal is 0) */
    int top_left;                /* diagonal offset 0 instead of sk - sq */
    double dropout_p;            /* in [0, 1); 0: off */
    uint64_t dropout_seed, dropout_offset;
    int64_t dropout_b, dropout_h; /* batch and query head coordinates of the Philox counter */
} fa_ref_head_opts;

/* Options of plain softmax(scale * Q K^T) V: no mask, no softcap, no ALiBi, no dropout. */
fa_ref_head_opts fa_ref_head_opts_plain(double scale);

/*
 * Forward of one head. Row-major contiguous arrays:
 *   q (sq, d), k (sk, d), v (sk, dv)  ->  out (sq, dv), lse (sq) (lse may be NULL).
 * A row with no visible key gets out 0 and lse -INFINITY.
 * Returns FA_OK, or FA_ERR_OUT_OF_MEMORY (with fa_set_error) if its one row of
 * scratch cannot be allocated.
 */
fa_status fa_ref_attention_fwd_f64(const fa_ref_head_opts *o, int64_t sq, int64_t sk, int64_t d, int64_t dv,
                                   const double *q, const double *k, const double *v,
                                   double *out, double *lse);

/*
 * Backward of one head: the exact gradient of sum(dout * out) of the forward
 * above, recomputed from q, k, v in double (no stored out or lse is used).
 *   dout (sq, dv)  ->  dq (sq, d) is overwritten;
 *                      dk (sk, d) and dv_grad (sk, dv) are ADDED to, so the
 *                      caller sums the query heads that share a kv head by
 *                      zeroing them once and calling this for each head.
 * Fully masked rows contribute nothing (their dq row is 0).
 */
fa_status fa_ref_attention_bwd_f64(const fa_ref_head_opts *o, int64_t sq, int64_t sk, int64_t d, int64_t dv,
                                   const double *q, const double *k, const double *v, const double *dout,
                                   double *dq, double *dk, double *dv_grad);

/*
 * Run items 0 .. count-1 on up to `threads` threads: fn(arg, first, step,
 * count) handles items first, first + step, ... < count. Returns the first
 * failing status of any share (ref_threads.c).
 */
typedef fa_status (*fa_ref_worker_fn)(void *arg, int64_t first, int64_t step, int64_t count);
fa_status fa_ref_run_threads(int threads, int64_t count, fa_ref_worker_fn fn, void *arg);

/* The reference backend's entry points (see fa_ref_backend in ref_backend.c). */
fa_status fa_ref_fwd(const fa_problem *p, const fa_exec *x);
fa_status fa_ref_bwd(const fa_problem *p, const fa_exec *x);
fa_status fa_ref_kvcache(const fa_problem *p, const fa_exec *x);
fa_status fa_ref_merge(const fa_merge_problem *m, const fa_exec *x);

#ifdef __cplusplus
}
#endif

#endif /* FA_REF_H */
