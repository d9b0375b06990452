/*
 * flashattn — exact FlashAttention as a C library.
 *
 * This header is the whole public API. Every function validates its arguments,
 * returns a status, and on failure writes nothing to any output and leaves a
 * message naming the offending argument in fa_last_error().
 *
 * ---------------------------------------------------------------------------
 * What is computed
 * ---------------------------------------------------------------------------
 * Tensors follow the flash-attn layout (batch, seqlen, heads, head_dim) with
 * strides in elements; only the last dimension must be contiguous, so PyTorch
 * tensors pass through without a copy.
 *
 *   q   (B, Sq, Hq, D)      k (B, Sk, Hk, D)      v (B, Sk, Hk, Dv)
 *   out (B, Sq, Hq, Dv) in q's dtype (bf16 for float8)  lse (B, Hq, Sq) float32
 *
 * Hq % Hk == 0; query head h reads kv head h / (Hq / Hk) (MQA, GQA).
 *
 *   s_ij = scale * <q_i, k_j>                 scale defaults to 1/sqrt(D)
 *   softcap c > 0:  s_ij = c * tanh(s_ij / c)
 *   ALiBi:          s_ij -= slope[b][h] * |i + off - j|
 *   P = softmax_j(s) over the unmasked keys,  out_i = sum_j P_ij v_j
 *   lse_i = m_i + log(l_i)  (natural log of the softmax denominator)
 *
 * off is the mask alignment: Sk - Sq for the default bottom-right alignment
 * (flash-attn >= 2.1), 0 for top-left (PyTorch's is_causal). A window
 * (left, right) keeps keys with  i + off - left <= j <= i + off + right,
 * -1 meaning unbounded on that side; causal is the window (-1, 0).
 *
 * A row with no unmasked key (a window, causal with Sq > Sk, Sk == 0) gets
 * out = 0, lse = -inf and zero gradients; no NaN is ever produced.
 *
 * Dropout p: P'_ij = P_ij * keep_ij / (1 - p); keep is fa_dropout_keep()
 * below, the same bits on every backend and every tile size. lse is the
 * log-denominator of the undropped softmax.
 *
 * Accumulation is float32 everywhere. Storage: float32, float16, bfloat16 on
 * the CPU; float16, bfloat16 on CUDA (plus float8 e4m3 forward on Hopper).
 * Any head dimension from 1 to 256 on every backend (D and Dv independent).
 *
 * ---------------------------------------------------------------------------
 * Execution: contexts
 * ---------------------------------------------------------------------------
 * Every call takes an fa_context (NULL means the process default: automatic
 * backend, all CPU cores, the default CUDA stream, library-managed workspace).
 * A context is not thread-safe; use one per thread. The backend is chosen
 * from the tensors' device unless the context forces one.
 */
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(FLASHATTN_BUILDING)
#define FA_API __declspec(dllexport)
#elif defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#else
#define FA_API
#endif

#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 1
#define FA_VERSION_PATCH 0

/* Largest supported head dimension (D and Dv). */
#define FA_MAX_HEAD_DIM 256

/* ------------------------------------------------------------------------- */
/* Status codes                                                               */
/* ------------------------------------------------------------------------- */
typedef enum fa_status {
    FA_OK = 0,
    FA_ERR_NULL_POINTER = 1,   /* a required pointer (tensor or its data) is NULL */
    FA_ERR_SHAPE = 2,          /* shapes disagree, or a dimension is negative / zero where not allowed */
    FA_ERR_STRIDE = 3,         /* last dim not contiguous, or a stride is negative */
    FA_ERR_DTYPE = 4,          /* dtype mismatch, or a dtype the chosen backend does not support */
    FA_ERR_HEAD_DIM = 5,       /* head dimension outside 1..FA_MAX_HEAD_DIM */
    FA_ERR_OPTION = 6,         /* an option value is out of range (dropout p, window, softcap, scale, ...) */
    FA_ERR_SEQLENS = 7,        /* cu_seqlens not monotone / inconsistent, cache_seqlens out of range */
    FA_ERR_BLOCK_TABLE = 8,    /* a block table entry is out of range */
    FA_ERR_OVERFLOW = 9,       /* a size whose element or byte count overflows */
    FA_ERR_DEVICE = 10,        /* tensors on different devices, or a device the backend cannot use */
    FA_ERR_BACKEND = 11,       /* the requested backend is not built or not usable here */
    FA_ERR_UNSUPPORTED = 12,   /* valid input, but this combination is not implemented by the backend */
    FA_ERR_WORKSPACE = 13,     /* the caller's workspace is too small */
    FA_ERR_OUT_OF_MEMORY = 14, /* an allocation failed */
    FA_ERR_CUDA = 15,          /* the CUDA runtime reported an error (message has the detail) */
    FA_ERR_INTERNAL = 16
} fa_status;

/* Short name of a status, e.g. "FA_ERR_SHAPE". Never NULL. */
FA_API const char *fa_status_name(fa_status s);

/* Message describing the last failure on the calling thread, naming the
 * argument ("q: last dimension must be contiguous (stride 1), got 2").
 * Empty string if the last call succeeded. Thread-local; valid until the
 * next flashattn call on this thread. */
FA_API const char *fa_last_error(void);

/* "0.1.0" */
FA_API const char *fa_version(void);

/* ------------------------------------------------------------------------- */
/* Tensors                                                                    */
/* ------------------------------------------------------------------------- */
typedef enum fa_dtype {
    FA_F32 = 0,
    FA_F16 = 1,
    FA_BF16 = 2,
    FA_F8_E4M3 = 3, /* forward inputs (CPU; Hopper: head dims 16..256 in steps of 16), bf16 out */
    FA_I32 = 4,     /* index tensors: cu_seqlens, cache_seqlens, block_table */
    FA_U8 = 5       /* dropout masks */
} fa_dtype;

/* Bytes per element of a dtype (0 for an unknown value). */
FA_API size_t fa_dtype_size(fa_dtype t);
FA_API const char *fa_dtype_name(fa_dtype t);

typedef enum fa_device_type {
    FA_DEVICE_CPU = 0,
    FA_DEVICE_CUDA = 1
} fa_device_type;

typedef struct fa_tensor {
    void *data;               /* first element; NULL marks an absent optional tensor */
    fa_dtype dtype;
    fa_device_type device;    /* where data lives */
    int device_index;         /* CUDA ordinal; ignored on the CPU */
    int ndim;                 /* 1..4 */
    int64_t shape[4];
    int64_t stride[4];        /* in elements; stride[ndim-1] must be 1 */
} fa_tensor;

/* Contiguous row-major tensors on the CPU (set .device/.device_index after
 * for CUDA memory). Unused trailing dims are ignored. */
FA_API fa_tensor fa_tensor_1d(void *data, fa_dtype t, int64_t n0);
FA_API fa_tensor fa_tensor_2d(void *data, fa_dtype t, int64_t n0, int64_t n1);
FA_API fa_tensor fa_tensor_3d(void *data, fa_dtype t, int64_t n0, int64_t n1, int64_t n2);
FA_API fa_tensor fa_tensor_4d(void *data, fa_dtype t, int64_t n0, int64_t n1, int64_t n2, int64_t n3);

/* ------------------------------------------------------------------------- */
/* Options                                                                    */
/* ------------------------------------------------------------------------- */
typedef enum fa_mask_align {
    FA_ALIGN_BOTTOM_RIGHT = 0, /* flash-attn >= 2.1: query i sees key i + Sk - Sq */
    FA_ALIGN_TOP_LEFT = 1      /* PyTorch is_causal: query i sees key i */
} fa_mask_align;

/* A zero-initialised fa_options means plain softmax(Q K^T / sqrt(D)) V. */
typedef struct fa_options {
    float scale;             /* 0: 1/sqrt(D). Must be finite and >= 0. */
    int causal;              /* nonzero: window (-1, 0) (combined with use_window by intersection) */
    int use_window;          /* nonzero: apply window_left / window_right */
    int64_t window_left;     /* keys this far before the diagonal; -1: unbounded */
    int64_t window_right;    /* keys this far after the diagonal; -1: unbounded */
    fa_mask_align align;     /* diagonal alignment of causal, window and ALiBi */
    float softcap;           /* > 0: s = softcap * tanh(s / softcap); 0: off */
    fa_tensor alibi_slopes;  /* float32 (Hq) or (B, Hq); data NULL: off. Same device as q. */
    float dropout_p;         /* in [0, 1); 0: off */
    uint64_t dropout_seed;
    uint64_t dropout_offset;
    int deterministic;       /* nonzero: backward is bitwise reproducible run to run */
    /* float8 forward (Hopper): per-(batch, kv head) float32 factors (B, Hk) that
     * multiply q, k, v back to their real scale (varlen: B is the number of
     * sequences); data NULL means 1. */
    fa_tensor q_descale, k_descale, v_descale;
} fa_options;

/* ------------------------------------------------------------------------- */
/* Dropout mask: the normative definition                                     */
/* ------------------------------------------------------------------------- */
/*
 * keep_ij for batch b, query head h, query row i, key column j:
 *   key     k0 = low32(seed),            k1 = high32(seed)
 *   counter c0 = (uint32) (j >> 2),      c1 = (uint32) i,
 *           c2 = (uint32) h | (uint32) b << 16,
 *           c3 = low32(offset) + high32(offset) * 0x9E3779B9  (mod 2^32)
 *   r = Philox4x32-10(c, k), word r[j & 3]
 *   keep = r[j & 3] >= threshold(p),  threshold(p) = (uint32) floor(p * 2^32)
 * Philox4x32-10 uses the multipliers 0xD2511F53, 0xCD9E8D57 and the key
 * increments 0x9E3779B9, 0xBB67AE85 (Salmon et al., SC'11). i and j are row and
 * column within the sequence (for varlen and KV cache, within each sequence).
 * Dropout requires B <= 65536 and Hq <= 65536. Returns 1 to keep, 0 to drop.
 */
FA_API int fa_dropout_keep(uint64_t seed, uint64_t offset, float p,
                           int64_t b, int64_t h, int64_t i, int64_t j);

/* Fill mask, a CPU uint8 tensor (B, Hq, Sq, Sk), with fa_dropout_keep(). */
FA_API fa_status fa_dropout_mask(uint64_t seed, uint64_t offset, float p, fa_tensor *mask);

/* The raw Philox4x32-10 block, exposed for tests. */
FA_API void fa_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* ------------------------------------------------------------------------- */
/* Contexts: backend, threads, stream, workspace                             */
/* ------------------------------------------------------------------------- */
typedef enum fa_backend {
    FA_BACKEND_AUTO = 0,      /* CPU tensors -> CPU; CUDA tensors -> best CUDA kernels */
    FA_BACKEND_REFERENCE = 1, /* float64 reference, CPU tensors only; slow, for checking */
    FA_BACKEND_CPU = 2,
    FA_BACKEND_CUDA = 3,      /* best kernels for the device (Hopper kernels on sm_90) */
    FA_BACKEND_CUDA_SM80 = 4  /* force the portable Ampere-class kernels */
} fa_backend;

FA_API const char *fa_backend_name(fa_backend b);

/* Nonzero if the backend was built and can run on this machine. */
FA_API int fa_backend_available(fa_backend b);

typedef struct fa_context fa_context;

FA_API fa_status fa_context_create(fa_context **ctx);
FA_API void fa_context_destroy(fa_context *ctx); /* NULL is fine */

FA_API fa_status fa_context_set_backend(fa_context *ctx, fa_backend b);
/* CPU worker threads; 0 (default) uses every online core. */
FA_API fa_status fa_context_set_num_threads(fa_context *ctx, int n);
/* cudaStream_t to run on; NULL is the default stream. */
FA_API fa_status fa_context_set_cuda_stream(fa_context *ctx, void *stream);
/*
 * Workspace. By default the library allocates what a call needs (and keeps it
 * in the context for reuse). A caller who wants no allocation in the hot path
 * gives a buffer on the device of the tensors: the library then never
 * allocates and returns FA_ERR_WORKSPACE if it is too small. ptr NULL reverts
 * to library-managed workspace.
 */
FA_API fa_status fa_context_set_workspace(fa_context *ctx, void *ptr, size_t bytes);
/*
 * Workspace queries: with dry_run set, every operation validates its arguments,
 * records the workspace it would need and returns FA_OK without reading data
 * or writing anything. fa_context_workspace_needed() gives the largest
 * requirement recorded since dry_run was last switched on.
 */
FA_API fa_status fa_context_set_dry_run(fa_context *ctx, int dry_run);
FA_API size_t fa_context_workspace_needed(const fa_context *ctx);

/* ------------------------------------------------------------------------- */
/* Forward and backward                                                      */
/* ------------------------------------------------------------------------- */
/*
 * out (B, Sq, Hq, Dv) in q's dtype (bfloat16 for float8 inputs); lse (B, Hq, Sq) float32, may be NULL.
 * Sq or Sk may be 0.
 */
FA_API fa_status fa_fwd(fa_context *ctx,
                        const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                        const fa_options *opts,
                        fa_tensor *out, fa_tensor *lse);

/*
 * Gradients of sum(dout * out) with respect to q, k, v. out and lse are the
 * forward's (lse is required). dq, dk, dv have the shapes and dtype of q, k, v;
 * dk and dv are summed over the query heads that share a kv head.
 * With dropout the same options (seed, offset) as the forward must be given.
 */
FA_API fa_status fa_bwd(fa_context *ctx,
                        const fa_tensor *dout,
                        const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                        const fa_tensor *out, const fa_tensor *lse,
                        const fa_options *opts,
                        fa_tensor *dq, fa_tensor *dk, fa_tensor *dv);

/* ------------------------------------------------------------------------- */
/* Variable-length (packed) sequences                                        */
/* ------------------------------------------------------------------------- */
/*
 * q (total_q, Hq, D), k (total_k, Hk, D), v (total_k, Hk, Dv), out (total_q, Hq, Dv),
 * lse (Hq, total_q) float32 or NULL. cu_seqlens_q / cu_seqlens_k are int32 (B + 1),
 * on the tensors' device, starting at 0, non-decreasing, ending at total_q / total_k.
 * Sequence b is rows [cu[b], cu[b+1]) and is its own problem (its own mask
 * alignment). max_seqlen_q / max_seqlen_k bound the lengths; 0 lets the library
 * compute them (on CUDA this copies cu_seqlens to the host and synchronises).
 * cu_seqlens in CPU memory are always checked; on a GPU they are checked when
 * the library reads them (max_seqlen 0).
 */
FA_API fa_status fa_varlen_fwd(fa_context *ctx,
                               const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                               const fa_tensor *cu_seqlens_q, const fa_tensor *cu_seqlens_k,
                               int max_seqlen_q, int max_seqlen_k,
                               const fa_options *opts,
                               fa_tensor *out, fa_tensor *lse);

FA_API fa_status fa_varlen_bwd(fa_context *ctx,
                               const fa_tensor *dout,
                               const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                               const fa_tensor *out, const fa_tensor *lse,
                               const fa_tensor *cu_seqlens_q, const fa_tensor *cu_seqlens_k,
                               int max_seqlen_q, int max_seqlen_k,
                               const fa_options *opts,
                               fa_tensor *dq, fa_tensor *dk, fa_tensor *dv);

/* ------------------------------------------------------------------------- */
/* KV cache (inference)                                                       */
/* ------------------------------------------------------------------------- */
/*
 * q (B, Sq, Hq, D). The cache is either
 *   contiguous: k_cache (B, S_cache, Hk, D), v_cache (B, S_cache, Hk, Dv), block_table NULL;
 *   paged:      k_cache (num_blocks, block_size, Hk, D), v_cache likewise, block_table
 *               int32 (B, max_blocks): key j of sequence b is row j % block_size of
 *               block block_table[b][j / block_size]. Any block_size >= 1.
 * cache_seqlens int32 (B): keys already in the cache for each sequence; NULL means
 * every sequence holds S_cache keys (contiguous cache only).
 * k_new (B, S_new, Hk, D), v_new (B, S_new, Hk, Dv), optional (both or neither):
 * appended in place at cache_seqlens[b] before attending; the caller updates
 * cache_seqlens afterwards. Sequence b then attends over cache_seqlens[b] + S_new
 * keys, with masks aligned to that length. The cache must have room.
 * num_splits: split the keys into this many chunks processed in parallel and
 * merged exactly (Flash-Decoding); 0 chooses by a heuristic, 1 disables.
 * out (B, Sq, Hq, Dv), lse (B, Hq, Sq) or NULL. Dropout is not allowed here.
 */
FA_API fa_status fa_fwd_kvcache(fa_context *ctx,
                                const fa_tensor *q,
                                fa_tensor *k_cache, fa_tensor *v_cache,
                                const fa_tensor *cache_seqlens,
                                const fa_tensor *block_table,
                                const fa_tensor *k_new, const fa_tensor *v_new,
                                int num_splits,
                                const fa_options *opts,
                                fa_tensor *out, fa_tensor *lse);

/* ------------------------------------------------------------------------- */
/* Merging partial results                                                    */
/* ------------------------------------------------------------------------- */
/*
 * Exact merge of n attention results over disjoint key sets:
 *   lse = log(sum_i exp(lse_i)),  out = sum_i exp(lse_i - lse) * out_i.
 * outs[i] (B, S, H, Dv) in any float dtype, lses[i] (B, H, S) float32; out and
 * lse have the same shapes (out in any float dtype). A part with lse -inf
 * contributes nothing; all -inf gives out 0, lse -inf. out may be the same
 * memory as outs[0] and lse as lses[0] (the merge is element-wise).
 * Used by split-KV decoding, cascade and ring attention.
 */
FA_API fa_status fa_merge(fa_context *ctx, int n,
                          const fa_tensor *outs, const fa_tensor *lses,
                          fa_tensor *out, fa_tensor *lse);

/* ------------------------------------------------------------------------- */
/* Introspection                                                              */
/* ------------------------------------------------------------------------- */
/* Space-separated CPU features the library detected and uses ("avx2 fma f16c avx512f avx512bf16"). */
FA_API const char *fa_cpu_features(void);
/* Number of usable CUDA devices (0 without a driver or without the CUDA backend). */
FA_API int fa_cuda_device_count(void);
/* Name and compute capability of CUDA device idx. */
FA_API fa_status fa_cuda_device_info(int idx, char *name, size_t name_len, int *cc_major, int *cc_minor);

/* FLOPs of one forward call by the project's convention (4*B*Hq*Sq*Sk*D, halved
 * for causal when Sq == Sk); backward is 2.5x this. */
FA_API double fa_fwd_flops(int64_t B, int64_t Hq, int64_t Sq, int64_t Sk, int64_t D, int causal);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_H */
