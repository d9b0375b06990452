/*
 * The validated, fully resolved description of one attention call, as the
 * front end hands it to a backend. Backends never re-validate: every pointer
 * here is usable, every index below is in range, options carry their defaults.
 *
 * Batched, varlen and KV-cache calls share one shape of problem:
 *   - element (b, i, h, d) of q lives at
 *         q.data + b*q.sb + (q_row0(b) + i)*q.ss + h*q.sh + d
 *     where q_row0(b) = cu_seqlens_q[b] for varlen (q.sb is then 0), else 0;
 *   - key j of sequence b lives at
 *         paged:   blk = block_table[b*block_table_stride + j / block_size]
 *                  k.data + blk*k.sb + (j % block_size)*k.ss + h*k.sh
 *         else:    k.data + b*k.sb + (k_row0(b) + j)*k.ss + h*k.sh
 *   - lse (b, h, i) lives at lse + b*lse_sb + h*lse_sh + (q_row0(b) + i)*lse_ss.
 * Use the inline helpers at the bottom rather than repeating these formulas.
 */
#ifndef FA_PROBLEM_H
#define FA_PROBLEM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One 3-D view (batch, seq, head) of a (.., D)-shaped tensor; last dim contiguous. */
typedef struct fa_view {
    void *data;
    int64_t sb, ss, sh; /* strides in elements */
} fa_view;

/* Window bound meaning "unbounded" after resolution (fits int64 arithmetic). */
#define FA_UNBOUNDED ((int64_t)1 << 60)

typedef struct fa_problem {
    fa_dtype dtype;  /* dtype of q, k, v, out (and dout, dq, dk, dv) */
    int64_t B;
    int64_t Sq, Sk;  /* batched: the lengths; varlen/kvcache: the maxima */
    int64_t Hq, Hk;
    int64_t D, Dv;

    fa_view q, k, v, out;        /* forward operands */
    fa_view dout, dq, dk, dv;    /* backward operands (zeroed views in a forward) */
    float *lse;                  /* NULL: not wanted (forward only) */
    int64_t lse_sb, lse_sh, lse_ss;

    /* Varlen: NULL for batched calls; in the tensors' memory (host or device). */
    const int32_t *cu_seqlens_q, *cu_seqlens_k;
    int64_t total_q, total_k;    /* varlen: packed rows of q and of k/v */
    /* KV cache: keys already cached per sequence (NULL otherwise); sequence b
     * attends over seqlens_k[b] + S_new keys, the new ones appended at
     * seqlens_k[b] (the backend copies k_new / v_new into the cache first). */
    const int32_t *seqlens_k;
    fa_view k_new, v_new;        /* data NULL: nothing to append */
    int64_t S_new;
    /* Paged KV cache: NULL when the cache is contiguous. */
    const int32_t *block_table;
    int64_t block_table_stride, block_size;

    /* Resolved options. Window bounds are relative to the aligned diagonal;
     * FA_UNBOUNDED where unbounded. Causal is folded in (right = 0). */
    float scale;
    float softcap;             /* 0: off */
    int64_t window_left, window_right;
    int has_mask;              /* causal or any bounded window side */
    int top_left;              /* alignment offset is 0 instead of Sk - Sq */
    const float *alibi;        /* NULL: off; slope(b, h) = alibi[b*alibi_sb + h] */
    int64_t alibi_sb;
    float dropout_p;           /* 0: off */
    uint64_t dropout_seed, dropout_offset;
    int deterministic;
    const float *q_descale, *k_descale, *v_descale; /* fp8 only; (B, Hk) contiguous */

    int num_splits;            /* KV cache: 0 = heuristic */
} fa_problem;

/* Execution resources for one call. */
typedef struct fa_exec {
    int num_threads;          /* CPU threads, resolved (>= 1) */
    void *stream;             /* cudaStream_t */
    int device_index;         /* CUDA ordinal of the tensors */
    void *workspace;          /* NULL if none was needed */
    size_t workspace_bytes;
} fa_exec;

/* --- indexing helpers (host and device) ---------------------------------- */
#if defined(__CUDACC__)
#define FA_HD __host__ __device__ __forceinline__
#else
#define FA_HD static inline
#endif

/* The output's dtype for inputs of dtype `in`: the inputs', except that
 * float8 inputs produce bfloat16. */
FA_HD fa_dtype fa_out_dtype(fa_dtype in) { return in == FA_F8_E4M3 ? FA_BF16 : in; }

/* First packed row of sequence b (0 for batched). */
FA_HD int64_t fa_q_row0(const fa_problem *p, int64_t b) {
    return p->cu_seqlens_q ? (int64_t)p->cu_seqlens_q[b] : 0;
}
FA_HD int64_t fa_k_row0(const fa_problem *p, int64_t b) {
    return p->cu_seqlens_k ? (int64_t)p->cu_seqlens_k[b] : 0;
}
/* Number of query rows / keys of sequence b. */
FA_HD int64_t fa_seqlen_q(const fa_problem *p, int64_t b) {
    return p->cu_seqlens_q ? (int64_t)(p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b]) : p->Sq;
}
FA_HD int64_t fa_seqlen_k(const fa_problem *p, int64_t b) {
    if (p->seqlens_k) return (int64_t)p->seqlens_k[b] + p->S_new;
    return p->cu_seqlens_k ? (int64_t)(p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b]) : p->Sk;
}
/* Element offset of (b, row i, head h) in a query-side view (q, out, dout, dq). */
FA_HD int64_t fa_q_offset(const fa_problem *p, const fa_view *x, int64_t b, int64_t i, int64_t h) {
    return b * x->sb + (fa_q_row0(p, b) + i) * x->ss + h * x->sh;
}
/* Element offset of (b, key j, kv head h) in a key-side view (k, v, dk, dv). */
FA_HD int64_t fa_k_offset(const fa_problem *p, const fa_view *x, int64_t b, int64_t j, int64_t h) {
    if (p->block_table) {
        int64_t blk = p->block_table[b * p->block_table_stride + j / p->block_size];
        return blk * x->sb + (j % p->block_size) * x->ss + h * x->sh;
    }
    return b * x->sb + (fa_k_row0(p, b) + j) * x->ss + h * x->sh;
}
FA_HD int64_t fa_lse_offset(const fa_problem *p, int64_t b, int64_t h, int64_t i) {
    return b * p->lse_sb + h * p->lse_sh + (fa_q_row0(p, b) + i) * p->lse_ss;
}
/* Diagonal offset for sequence b: key j sits on query i's diagonal when j == i + off. */
FA_HD int64_t fa_diag_offset(const fa_problem *p, int64_t sq, int64_t sk) {
    return p->top_left ? 0 : sk - sq;
}
/* Key range [lo, hi) visible to query i of a sequence of sq queries over sk keys. */
FA_HD void fa_key_range(const fa_problem *p, int64_t sq, int64_t sk, int64_t i, int64_t *lo, int64_t *hi) {
    int64_t c = i + fa_diag_offset(p, sq, sk);
    int64_t l = p->window_left >= FA_UNBOUNDED ? 0 : c - p->window_left;
    int64_t h = p->window_right >= FA_UNBOUNDED ? sk : c + p->window_right + 1;
    if (l < 0) l = 0;
    if (h > sk) h = sk;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}
/* True when, cut into tiles of bm query rows and kv blocks of bn keys, only
 * a tile's highest kv block can hide a key from a row of the tile: no key
 * below a row's first is hidden, and the blocks under the highest are seen
 * whole by the tile's first row, so by every row (a row's upper bound grows
 * with the row). Problems with no mask, or causal ones whose diagonal meets
 * the tiles on block edges, say. A kernel may then run the blocks under the
 * highest without mask code. Batched problems only (varlen: false). */
FA_HD int fa_only_top_block_masked(const fa_problem *p, int64_t bm, int64_t bn) {
    if (p->cu_seqlens_q) return 0;
    int64_t lo, hi, last_lo, last_hi;
    fa_key_range(p, p->Sq, p->Sk, p->Sq - 1, &last_lo, &last_hi);
    if (last_lo != 0) return 0;
    for (int64_t r0 = 0; r0 < p->Sq; r0 += bm) {
        const int64_t r1 = (r0 + bm < p->Sq ? r0 + bm : p->Sq) - 1; /* the tile's last row */
        fa_key_range(p, p->Sq, p->Sk, r1, &last_lo, &last_hi);
        fa_key_range(p, p->Sq, p->Sk, r0, &lo, &hi);
        const int64_t n_hi = (last_hi + bn - 1) / bn; /* the tile's kv blocks: [0, n_hi) */
        if (n_hi > 1 && (n_hi - 1) * bn > hi) return 0;
    }
    return 1;
}
/* Query head h reads kv head h / (Hq / Hk). */
FA_HD int64_t fa_kv_head(const fa_problem *p, int64_t h) {
    return h / (p->Hq / p->Hk);
}
FA_HD float fa_alibi_slope(const fa_problem *p, int64_t b, int64_t h) {
    return p->alibi ? p->alibi[b * p->alibi_sb + h] : 0.0f;
}

#ifdef __cplusplus
}
#endif

#endif /* FA_PROBLEM_H */
