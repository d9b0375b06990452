/*
 * Internal to src/api: the context object, backend selection, validation
 * helpers and workspace provisioning shared by the public entry points.
 */
#ifndef FA_FRONTEND_H
#define FA_FRONTEND_H

#include "backend.h"

struct fa_context {
    fa_backend backend;
    int num_threads;       /* 0: every online core */
    void *stream;
    void *user_workspace;  /* caller's buffer; NULL: library-managed */
    size_t user_workspace_bytes;
    int dry_run;
    size_t workspace_needed;
    /* Library-managed workspace kept for reuse, with what allocated it. */
    void *cached;
    size_t cached_bytes;
    const fa_backend_ops *cached_ops;
    fa_exec cached_exec;
};

/* Clear the thread's last error; every public entry point calls it first. */
void fa_clear_error(void);

/* The settings of a NULL context. */
const fa_context *fa_default_context(void);

/* Pick the backend for tensors on (device, index), honouring ctx->backend. */
fa_status fa_select_backend(const fa_context *ctx, fa_device_type device, int index,
                            const fa_backend_ops **ops);

/* Execution resources for a call (threads, stream, device), workspace unset. */
void fa_exec_init(const fa_context *ctx, int device_index, fa_exec *x);

/*
 * Shared tail of every operation: ask `ops` whether it computes the problem,
 * how much workspace it needs, honour a dry run, provide the workspace, and
 * call `run`. `run` is one of the ops' entry points.
 */
typedef fa_status (*fa_run_fn)(const fa_backend_ops *ops, const void *problem, const fa_exec *x);
fa_status fa_execute(fa_context *ctx, const fa_backend_ops *ops, const fa_problem *p, fa_op op,
                     const void *problem, fa_run_fn run, fa_exec *x);

/* --- validation helpers (validate.c); each names the argument on failure --- */

/* Structural checks of one tensor: non-NULL, ndim, non-negative shape and
 * strides, unit last stride, known dtype and device, data present when it has
 * elements, byte extent without overflow. */
fa_status fa_check_tensor(const fa_tensor *t, const char *name, int ndim);
/* t is on the same device as ref. */
fa_status fa_check_same_device(const fa_tensor *t, const char *name, const fa_tensor *ref, const char *ref_name);
fa_status fa_check_dtype(const fa_tensor *t, const char *name, fa_dtype want);
/* t->shape[dim] == want. */
fa_status fa_check_dim(const fa_tensor *t, const char *name, int dim, int64_t want, const char *what);
/* Head dimension in 1..FA_MAX_HEAD_DIM. */
fa_status fa_check_head_dim(int64_t d, const char *name);
/* A float storage dtype (f32, f16, bf16). */
int fa_is_float_storage(fa_dtype t);

/* Resolve and check fa_options into p (scale needs p->D; alibi/descale need
 * p->B, p->Hq, p->Hk). q is the reference tensor for devices. */
fa_status fa_resolve_options(const fa_options *opts, const fa_tensor *q, fa_problem *p);

/* 3-D view of a 4-D (b, s, h, d) tensor, or of a 3-D packed (row, h, d) tensor. */
fa_view fa_view_of4(const fa_tensor *t);
fa_view fa_view_of3(const fa_tensor *t);

#endif /* FA_FRONTEND_H */
