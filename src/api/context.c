/* Contexts: the execution settings a caller chooses, and workspace provisioning. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend.h"

static const fa_context default_context = {FA_BACKEND_AUTO, 0, NULL, NULL, 0, 0, 0, NULL, 0, NULL, {0, NULL, 0, NULL, 0}};

const fa_context *fa_default_context(void) { return &default_context; }

fa_status fa_context_create(fa_context **ctx) {
    fa_clear_error();
    if (!ctx) return fa_set_error(FA_ERR_NULL_POINTER, "ctx: pointer is NULL");
    fa_context *c = (fa_context *)calloc(1, sizeof *c);
    if (!c) return fa_set_error(FA_ERR_OUT_OF_MEMORY, "ctx: allocation failed");
    *c = default_context;
    *ctx = c;
    return FA_OK;
}

/* Host memory for CPU backends: 64-byte aligned for the SIMD kernels. */
static void *host_alloc(size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, rounded ? rounded : 64);
}

static void workspace_free(const fa_backend_ops *ops, void *ptr, const fa_exec *x) {
    if (!ptr) return;
    if (ops && ops->release)
        ops->release(ptr, x);
    else
        free(ptr);
}

void fa_context_destroy(fa_context *ctx) {
    if (!ctx) return;
    workspace_free(ctx->cached_ops, ctx->cached, &ctx->cached_exec);
    free(ctx);
}

fa_status fa_context_set_backend(fa_context *ctx, fa_backend b) {
    fa_clear_error();
    if (!ctx) return fa_set_error(FA_ERR_NULL_POINTER, "ctx: context is NULL");
    if ((int)b < FA_BACKEND_AUTO || (int)b > FA_BACKEND_CUDA_SM80)
        return fa_set_error(FA_ERR_OPTION, "backend: unknown backend %d", (int)b);
    ctx->backend = b;
    return FA_OK;
}

fa_status fa_context_set_num_threads(fa_context *ctx, int n) {
    fa_clear_error();
    if (!ctx) return fa_set_error(FA_ERR_NULL_POINTER, "ctx: context is NULL");
    if (n < 0) return fa_set_error(FA_ERR_OPTION, "n: thread count must be >= 0, got %d", n);
    ctx->num_threads = n;
    return FA_OK;
}

fa_status fa_context_set_cuda_stream(fa_context *ctx, void *stream) {
    fa_clear_error();
    if (!ctx) return fa_set_error(FA_ERR_NULL_POINTER, "ctx: context is NULL");
    ctx->stream = stream;
    return FA_OK;
}

fa_status fa_context_set_workspace(fa_context *ctx, void *ptr, size_t bytes) {
    fa_clear_error();
    if (!ctx) return fa_set_error(FA_ERR_NULL_POINTER, "ctx: context is NULL");
    ctx->user_workspace = ptr;
    ctx->user_workspace_bytes = ptr ? bytes : 0;
    return FA_OK;
}

fa_status fa_context_set_dry_run(fa_context *ctx, int dry_run) {
    fa_clear_error();
    if (!ctx) return fa_set_error(FA_ERR_NULL_POINTER, "ctx: context is NULL");
    if (dry_run && !ctx->dry_run) ctx->workspace_needed = 0;
    ctx->dry_run = dry_run != 0;
    return FA_OK;
}

size_t fa_context_workspace_needed(const fa_context *ctx) { return ctx ? ctx->workspace_needed : 0; }

void fa_exec_init(const fa_context *ctx, int device_index, fa_exec *x) {
    memset(x, 0, sizeof *x);
    int n = ctx->num_threads;
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (int)cores : 1;
    }
    x->num_threads = n;
    x->stream = ctx->stream;
    x->device_index = device_index;
}

fa_status fa_execute(fa_context *ctx, const fa_backend_ops *ops, const fa_problem *p, fa_op op,
                     const void *problem, fa_run_fn run, fa_exec *x) {
    if (p && ops->supports) {
        fa_status s = ops->supports(p, op);
        if (s != FA_OK) return s;
    }
    size_t need = (p && ops->workspace_size) ? ops->workspace_size(p, op, x) : 0;
    if (ctx && ctx->dry_run) {
        if (need > ctx->workspace_needed) ctx->workspace_needed = need;
        return FA_OK;
    }

    void *owned = NULL; /* allocated for this call only (NULL context) */
    if (need > 0) {
        if (ctx && ctx->user_workspace) {
            if (ctx->user_workspace_bytes < need)
                return fa_set_error(FA_ERR_WORKSPACE, "workspace: this call needs %zu bytes, the context's buffer has %zu",
                                    need, ctx->user_workspace_bytes);
            x->workspace = ctx->user_workspace;
        } else if (ctx) {
            int same_place = ctx->cached_ops == ops && ctx->cached_exec.device_index == x->device_index;
            if (!ctx->cached || !same_place || ctx->cached_bytes < need) {
                workspace_free(ctx->cached_ops, ctx->cached, &ctx->cached_exec);
                ctx->cached = NULL;
                ctx->cached_bytes = 0;
                void *ptr = ops->alloc ? ops->alloc(need, x) : host_alloc(need);
                if (!ptr) return fa_set_error(FA_ERR_OUT_OF_MEMORY, "workspace: allocating %zu bytes failed", need);
                ctx->cached = ptr;
                ctx->cached_bytes = need;
                ctx->cached_ops = ops;
                ctx->cached_exec = *x;
            }
            x->workspace = ctx->cached;
        } else {
            owned = ops->alloc ? ops->alloc(need, x) : host_alloc(need);
            if (!owned) return fa_set_error(FA_ERR_OUT_OF_MEMORY, "workspace: allocating %zu bytes failed", need);
            x->workspace = owned;
        }
        x->workspace_bytes = need;
    }
    fa_status s = run(ops, problem, x);
    workspace_free(ops, owned, x);
    return s;
}
