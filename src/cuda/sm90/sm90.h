/*
 * Entry points of the Hopper (sm_90a) kernels, called by the CUDA backend
 * (src/cuda) on compute capability 9.0 devices. Everything these kernels do
 * not cover falls back to the portable sm80 kernels.
 */
#ifndef FA_SM90_H
#define FA_SM90_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nonzero if the Hopper forward computes this problem (dtype, head dims, options). */
int fa_sm90_fwd_supports(const fa_problem *p);
/* Bytes of device workspace the Hopper forward needs (0 for none). */
size_t fa_sm90_fwd_workspace(const fa_problem *p, const fa_exec *x);
/* Run the Hopper forward on x->stream. Precondition: fa_sm90_fwd_supports(p). */
fa_status fa_sm90_fwd(const fa_problem *p, const fa_exec *x);

/* Nonzero if the Hopper backward computes this problem. */
int fa_sm90_bwd_supports(const fa_problem *p);
/* Bytes of device workspace the Hopper backward needs. */
size_t fa_sm90_bwd_workspace(const fa_problem *p);
/* Run the Hopper backward on x->stream. Precondition: fa_sm90_bwd_supports(p). */
fa_status fa_sm90_bwd(const fa_problem *p, const fa_exec *x);

#ifdef __cplusplus
}
#endif

#endif /* FA_SM90_H */
