/*
 * Entry points of the portable (Ampere-class, mma.sync) kernels, called by
 * the CUDA backend (src/cuda/backend.cu). Every function runs on x->stream,
 * allocates nothing and never synchronises; workspace comes from the caller.
 */
#ifndef FA_SM80_H
#define FA_SM80_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Forward (batched or varlen). */
fa_status sm80_fwd(const fa_problem *p, const fa_exec *x);
/* Forward over `splits` chunks of the keys: splits == 1 writes out and lse;
 * otherwise each split writes its normalised float32 partial output
 * o_part (splits, B, Hq, Sq, Dv) and lse_part (splits, B, Hq, Sq). */
fa_status sm80_fwd_launch(const fa_problem *p, const fa_exec *x, int splits, float *o_part, float *lse_part);
/* Nonzero if the forward packs the query heads of a GQA group into one tile
 * (few query rows per kv head, e.g. decoding); FA_SM80_PACK=0/1 overrides. */
int sm80_fwd_packs_gqa(const fa_problem *p);

/* KV cache: number of key splits actually used (resolves p->num_splits == 0
 * with the Flash-Decoding heuristic for a device of num_sms SMs). */
int sm80_kvcache_splits(const fa_problem *p, int num_sms);
/* Workspace for the split partials (0 when splits == 1). */
size_t sm80_kvcache_workspace(const fa_problem *p, int splits);
/* Append k_new / v_new into the cache, then split-KV forward and combine. */
fa_status sm80_kvcache(const fa_problem *p, const fa_exec *x, int splits);

/* Backward: workspace for Delta, lse, the float32 dq accumulator (and the
 * ordering semaphores of the deterministic mode). */
size_t sm80_bwd_workspace(const fa_problem *p);
fa_status sm80_bwd(const fa_problem *p, const fa_exec *x);

/* Exact merge of partial results. */
fa_status sm80_merge(const fa_merge_problem *m, const fa_exec *x);

#ifdef __cplusplus
}
#endif

#endif /* FA_SM80_H */
