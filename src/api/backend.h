/*
 * The small interface between the front end (src/api) and a backend.
 * The front end validates and resolves everything into an fa_problem, asks the
 * backend how much workspace it needs, provides it, and calls one entry point.
 * A backend never re-validates arguments; it reports only what it cannot do
 * (FA_ERR_DTYPE / FA_ERR_UNSUPPORTED from `supports`) and runtime failures.
 */
#ifndef FA_BACKEND_H
#define FA_BACKEND_H

#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fa_op {
    FA_OP_FWD = 0,      /* batched or varlen forward */
    FA_OP_BWD = 1,      /* batched or varlen backward */
    FA_OP_KVCACHE = 2   /* append k_new/v_new (if any), then split-KV forward */
} fa_op;

/* One partial result for fa_merge. */
typedef struct fa_merge_part {
    fa_view o;               /* (B, S, H, Dv) */
    fa_dtype dtype;
    const float *lse;        /* (B, H, S) */
    int64_t lse_sb, lse_sh, lse_ss;
} fa_merge_part;

typedef struct fa_merge_problem {
    int n;
    int64_t B, S, H, Dv;
    const fa_merge_part *parts;
    fa_view out;
    fa_dtype out_dtype;
    float *lse;
    int64_t lse_sb, lse_sh, lse_ss;
} fa_merge_problem;

typedef struct fa_backend_ops {
    const char *name;
    /* FA_OK if the backend computes this problem; otherwise a status with
     * fa_set_error() naming what it lacks (e.g. "q: dtype float32 is not
     * supported by the CUDA backend"). */
    fa_status (*supports)(const fa_problem *p, fa_op op);
    /* Bytes of scratch the call needs on the tensors' device (0 for none). */
    size_t (*workspace_size)(const fa_problem *p, fa_op op, const fa_exec *x);
    fa_status (*fwd)(const fa_problem *p, const fa_exec *x);
    fa_status (*bwd)(const fa_problem *p, const fa_exec *x);
    fa_status (*kvcache)(const fa_problem *p, const fa_exec *x);
    fa_status (*merge)(const fa_merge_problem *m, const fa_exec *x);
    /* Device memory for a library-managed workspace (CUDA: stream-ordered). */
    void *(*alloc)(size_t bytes, const fa_exec *x);
    void (*release)(void *ptr, const fa_exec *x);
} fa_backend_ops;

/* Backends, each defined in its own directory. NULL when not built. */
extern const fa_backend_ops fa_ref_backend;   /* src/ref */
extern const fa_backend_ops fa_cpu_backend;   /* src/cpu */
/* src/cuda: returns NULL when the CUDA backend is not built or no device is
 * usable; `which` is FA_BACKEND_CUDA (best for the device) or FA_BACKEND_CUDA_SM80. */
const fa_backend_ops *fa_cuda_backend(fa_backend which, int device_index);

/* CUDA runtime queries for fa_cuda_device_count / fa_cuda_device_info and the
 * front end (src/cuda/runtime.cu; stubs in src/api/cuda_stub.c without CUDA). */
int fa_cuda_runtime_device_count(void);
fa_status fa_cuda_runtime_device_info(int idx, char *name, size_t name_len, int *cc_major, int *cc_minor);
/* Copy bytes from device memory to the host on the exec's stream and wait. */
fa_status fa_cuda_runtime_copy_to_host(void *dst, const void *src, size_t bytes, const fa_exec *x);

/* Record a failure for fa_last_error(); returns s so callers can
 * `return fa_set_error(FA_ERR_SHAPE, "q: ...", ...)`. Thread-local. */
fa_status fa_set_error(fa_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif /* FA_BACKEND_H */
