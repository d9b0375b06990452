/*
 * Shared pieces of the CPU forward, KV-cache and backward passes: tile
 * sizes, per-thread scratch layout, and the score options applied between
 * Q.K^T and the softmax.
 */
#ifndef FA_CPU_ATTN_H
#define FA_CPU_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_kernels.h"

/* Queries per block (the SIMD-lane dimension) and keys per tile. */
#define CPU_BM 64
#define CPU_BN 96
/* Query blocks per work item: they share each key tile while it is in cache. */
#define CPU_QGROUP 8
/* Blocks of at most this many rows (decode) take the few-row path of the forward. */
#define CPU_FEW_ROWS 8

/* Bytes are handed out from the workspace in 64-byte aligned pieces. */
#define CPU_ALIGN 64

static inline size_t cpu_align_up(size_t n) {
    return (n + CPU_ALIGN - 1) & ~(size_t)(CPU_ALIGN - 1);
}

static inline int64_t cpu_round_up(int64_t n, int64_t m) {
    return (n + m - 1) / m * m;
}

/* Bump allocator over a workspace slice. */
typedef struct cpu_arena {
    char *next;
} cpu_arena;

static inline void *cpu_take(cpu_arena *a, size_t bytes) {
    void *p = a->next;
    a->next += cpu_align_up(bytes);
    return p;
}

/* n bf16 values of a row as (n + 1) / 2 pair words, word k at dst[k * stride]: value
 * 2k in the low half, 2k + 1 in the high half (zero past the row's end). */
static inline void cpu_pair_row(const uint16_t *src, int64_t n, uint32_t *dst, int64_t stride) {
    for (int64_t k = 0; k < n / 2; ++k) dst[k * stride] = (uint32_t)src[2 * k] | (uint32_t)src[2 * k + 1] << 16;
    if (n % 2) dst[n / 2 * stride] = src[n - 1];
}

/* Whether the bf16 pair kernels compute this problem (bf16 storage and a
 * native bf16 dot product); otherwise every operand is widened to f32. */
static inline int cpu_use_bf16(const fa_problem *p, const cpu_kernels *kr) {
    return p->dtype == FA_BF16 && kr->gemm_bf16 != NULL;
}

/* Widens n elements of a storage row to f32. */
void cpu_load_row_f32(const cpu_kernels *kr, fa_dtype t, const void *src, float *dst, int64_t n);
/* dst[0 .. n) = src * scale in dtype t (an output row). */
void cpu_store_row(const cpu_kernels *kr, fa_dtype t, void *dst, const float *src, int64_t n, float scale);

/*
 * Score options other than the plain scale (softcap, ALiBi) are applied to a
 * transposed score tile s[j][c] (keys j0 + j, columns c = query rows with
 * head head[c] and row index row[c]): afterwards s holds the final natural-log
 * scores, so the softmax uses the factor log2(e) alone. Returns that factor,
 * or scale * log2(e) when no option is on and s was left untouched.
 */
float cpu_score_options(const fa_problem *p, int64_t b, int64_t sq, int64_t sk, int64_t j0, int64_t nj,
                        int64_t ncols, int64_t nrows, const int32_t *head, const int32_t *row,
                        float *s, float *softcap_grad);

/* Dropout on a P^T tile: p *= keep / (1 - p_drop) for the nrows real columns. */
void cpu_apply_dropout(const fa_problem *p, int64_t b, int64_t j0, int64_t nj, int64_t ncols,
                       int64_t nrows, const int32_t *head, const int32_t *row, float *pt);

/* Threads-aware forward over [key_begin, key_end) chunks, shared by fwd and kvcache. */
fa_status cpu_forward(const fa_problem *p, const fa_exec *x, int num_splits);
size_t cpu_forward_workspace(const fa_problem *p, const fa_exec *x, int num_splits);
int cpu_forward_splits(const fa_problem *p, const fa_exec *x, int requested);

fa_status cpu_backward(const fa_problem *p, const fa_exec *x);
size_t cpu_backward_workspace(const fa_problem *p, const fa_exec *x);

fa_status cpu_merge(const fa_merge_problem *m, const fa_exec *x);
fa_status cpu_kvcache(const fa_problem *p, const fa_exec *x);
size_t cpu_kvcache_workspace(const fa_problem *p, const fa_exec *x);

#endif /* FA_CPU_ATTN_H */
