/*
 * The CPU backend's entry points: what it supports, the workspace each
 * operation needs, and dispatch to the forward, backward, KV-cache and
 * merge passes.
 */
#include <stdlib.h>

#include "cpu_attn.h"

/* float8 e4m3 inputs: the forward only, each row widened and times its
 * descale (the exact values the caller quantised), bfloat16 out. */
static fa_status cpu_supports(const fa_problem *p, fa_op op) {
    if (p->dtype == FA_F8_E4M3 && op != FA_OP_FWD)
        return fa_set_error(FA_ERR_DTYPE, "q: float8_e4m3 is a forward input (the CPU backend has no float8 %s)",
                            op == FA_OP_BWD ? "backward" : "KV cache");
    if (p->dtype != FA_F32 && p->dtype != FA_F16 && p->dtype != FA_BF16 && p->dtype != FA_F8_E4M3)
        return fa_set_error(FA_ERR_DTYPE, "q: dtype %s is not supported by the CPU backend", fa_dtype_name(p->dtype));
    return FA_OK;
}

static size_t cpu_workspace_size(const fa_problem *p, fa_op op, const fa_exec *x) {
    switch (op) {
    case FA_OP_FWD: return cpu_forward_workspace(p, x, cpu_forward_splits(p, x, 0));
    case FA_OP_BWD: return cpu_backward_workspace(p, x);
    case FA_OP_KVCACHE: return cpu_kvcache_workspace(p, x);
    }
    return 0;
}

static fa_status cpu_fwd(const fa_problem *p, const fa_exec *x) {
    return cpu_forward(p, x, cpu_forward_splits(p, x, 0));
}

static void *cpu_alloc(size_t bytes, const fa_exec *x) {
    (void)x;
    return aligned_alloc(CPU_ALIGN, cpu_align_up(bytes ? bytes : 1));
}

static void cpu_release(void *ptr, const fa_exec *x) {
    (void)x;
    free(ptr);
}

const fa_backend_ops fa_cpu_backend = {
    .name = "cpu",
    .supports = cpu_supports,
    .workspace_size = cpu_workspace_size,
    .fwd = cpu_fwd,
    .bwd = cpu_backward,
    .kvcache = cpu_kvcache,
    .merge = cpu_merge,
    .alloc = cpu_alloc,
    .release = cpu_release,
};
