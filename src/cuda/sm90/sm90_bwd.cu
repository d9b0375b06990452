/*
 * Host side of the Hopper backward, and its two small companion kernels:
 *   preprocess  lse2 = lse * log2(e) and Delta = rowsum(dO * O) per query row,
 *               in whole BM-row blocks (padding rows: lse2 = +inf, Delta = 0),
 *               so the main kernel copies them with aligned bulk copies;
 *   main        sm90_bwd_kernel.cuh (dK, dV, and dQ into a float32 accumulator);
 *   convert     dq = the accumulator, in the storage type.
 * Problems the kernel does not take (D != Dv, dropout, ALiBi, softcap, the
 * deterministic mode, KV caches) go to the portable backward.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "../bwd_rows.cuh"
#include "../smem_limit.cuh"
#include "sm90.h"
#include "sm90_bwd_kernel.cuh"
#include "sm90_host.cuh"

template <bool BF16> using Sm90BwdCfgD64 = Sm90BwdConfig<64, 128, BF16>;
template <bool BF16> using Sm90BwdCfgD96 = Sm90BwdConfig<96, 64, BF16>;
template <bool BF16> using Sm90BwdCfgD128 = Sm90BwdConfig<128, 64, BF16>;
template <bool BF16> using Sm90BwdCfgD192 = Sm90BwdConfig<192, 64, BF16>;
template <bool BF16> using Sm90BwdCfgD256 = Sm90BwdConfig<256, 64, BF16>;

/* What the host needs of the kernel a problem runs (the same for both
 * dtypes), read from its config rather than restated. */
struct Sm90BwdShape {
    int d;      /* the kernel's head dim (the dQ accumulator's row) */
    int bm, bn; /* query rows per block, keys per CTA */
    int sw;     /* the tiles' swizzle span in bytes (Sm90BwdConfig::SW) */
};
template <class Cfg> static Sm90BwdShape bwd_shape_of() { return {Cfg::D, Cfg::BM, Cfg::BN, Cfg::SW}; }
static Sm90BwdShape bwd_shape(const fa_problem *p) {
    switch (sm90_kernel_head_dim(p->D)) {
    case 64: return bwd_shape_of<Sm90BwdCfgD64<true>>();
    case 96: return bwd_shape_of<Sm90BwdCfgD96<true>>();
    case 128: return bwd_shape_of<Sm90BwdCfgD128<true>>();
    case 192: return bwd_shape_of<Sm90BwdCfgD192<true>>();
    default: return bwd_shape_of<Sm90BwdCfgD256<true>>();
    }
}
static int bwd_padded_head_dim(const fa_problem *p) { return bwd_shape(p).d; }
static int bwd_block_m(const fa_problem *p) { return bwd_shape(p).bm; }
/* query rows rounded up to whole blocks */
static int64_t bwd_sq_pad(const fa_problem *p) {
    return (p->Sq + bwd_block_m(p) - 1) / bwd_block_m(p) * bwd_block_m(p);
}

/* Workspace: lse2 and Delta (B, Hq, sq_pad), then the dQ accumulator (B, Hq,
 * sq_pad, D padded), from the first 256-byte boundary of the buffer (a
 * caller's buffer may start anywhere; the bulk copies need 16 bytes). */
static size_t bwd_round(size_t x) { return (x + 255) & ~(size_t)255; }
static size_t bwd_rows(const fa_problem *p) { return (size_t)p->B * (size_t)p->Hq * (size_t)bwd_sq_pad(p); }
static size_t bwd_accum_bytes(const fa_problem *p) { return bwd_rows(p) * (size_t)bwd_padded_head_dim(p) * 4; }

/* ---- companion kernels ----------------------------------------------------- */

/* Lanes per row of the companion kernels: enough for a row's 16-byte chunks
 * (chunk_cols columns each), a power of two up to a warp. One warp per row
 * left three quarters of it idle at head dim 64 (eight chunks a row), and the
 * pass ran at half the rate of head dim 128's. */
static int bwd_lanes_log2(int64_t cols, int chunk_cols) {
    int l = 0;
    while (l < 5 && ((int64_t)1 << l) * chunk_cols < cols) ++l;
    return l;
}

/* The row of (row, head, batch) this lane works on in a companion kernel,
 * where eight warps a CTA each take 32 >> lanes_log2 rows of 1 << lanes_log2
 * lanes (bwd_row_grid); *sub: the lane's place in its row's group. */
__device__ __forceinline__ int bwd_row_of_lane(int lanes_log2, int *sub) {
    const int lane = threadIdx.x % 32;
    *sub = lane & ((1 << lanes_log2) - 1);
    return (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * (32 >> lanes_log2) + (lane >> lanes_log2);
}

/* Rows of (padded row, head, batch), 1 << lanes_log2 lanes each, several to
 * a warp. vec: Dv % 8 == 0 and out / dout rows on 16 bytes, so each lane
 * reads eight columns at a time (else lanes_log2 is 5: a warp a row). */
template <typename T>
__global__ void sm90_bwd_preprocess(const __grid_constant__ fa_problem p, float *lse2, float *delta, int sq_pad,
                                    int vec, int lanes_log2) {
    int sub;
    const int i = bwd_row_of_lane(lanes_log2, &sub), lanes = 1 << lanes_log2;
    const int h = blockIdx.y, b = blockIdx.z;
    grid_launch_dependents(); /* the main kernel may launch; it waits for these rows */
    grid_dependency_wait();   /* launched early (bwd_run): the work ahead must be done */
    /* no lane leaves before the group sums: every lane of the warp takes part */
    const bool inside = i < fa_seqlen_q(&p, b); /* (seqlen_q <= Sq <= sq_pad) */
    const float dot = bwd_group_sum(inside ? bwd_row_dot<T>(p, b, h, i, sub, lanes, vec) : 0.f, lanes);
    if (sub != 0 || i >= sq_pad) return;
    const int64_t slot = ((int64_t)b * p.Hq + h) * sq_pad + i;
    if (inside)
        bwd_row_store(p, b, h, i, dot, &lse2[slot], &delta[slot]);
    else { /* padding rows (and a varlen sequence's rows past its end): P = 0 */
        lse2[slot] = INFINITY;
        delta[slot] = 0.f;
    }
}

/* Rows of (row, head, batch), 1 << lanes_log2 lanes each: dq = accumulator
 * (already scaled). vec: D % 4 == 0 and dq's rows on 8 bytes, so each lane
 * converts four columns at a time (one 16-byte load of the accumulator, whose
 * rows are whole 256-byte lines). */
template <typename T>
__global__ void sm90_bwd_convert(const __grid_constant__ fa_problem p, const float *dq_accum, int sq_pad, int dpad,
                                 int vec, int lanes_log2) {
    int sub;
    const int i = bwd_row_of_lane(lanes_log2, &sub), lanes = 1 << lanes_log2;
    const int h = blockIdx.y, b = blockIdx.z;
    grid_launch_dependents(); /* whatever follows in the stream may launch and wait */
    grid_dependency_wait();   /* launched early (bwd_run): every dQ sum must be done */
    if (i >= fa_seqlen_q(&p, b)) return; /* also rows past Sq: seqlen_q <= Sq */
    const float *src = dq_accum + (((int64_t)b * p.Hq + h) * sq_pad + i) * dpad;
    T *dst = (T *)p.dq.data + fa_q_offset(&p, &p.dq, b, i, h);
    if (vec) {
        for (int d = sub * 4; d < p.D; d += lanes * 4) {
            const float4 v = *reinterpret_cast<const float4 *>(src + d);
            union { uint2 u; T e[4]; } out;
            out.e[0] = from_f32<T>(v.x);
            out.e[1] = from_f32<T>(v.y);
            out.e[2] = from_f32<T>(v.z);
            out.e[3] = from_f32<T>(v.w);
            *reinterpret_cast<uint2 *>(dst + d) = out.u;
        }
    } else {
        for (int d = sub; d < p.D; d += lanes) dst[d] = from_f32<T>(src[d]);
    }
}

/* ---- host ------------------------------------------------------------------- */

/* A companion kernel's grid over `rows` rows of every (head, batch): eight
 * warps a CTA, each on 32 >> lanes_log2 rows (bwd_row_of_lane). */
static dim3 bwd_row_grid(const fa_problem *p, int64_t rows, int lanes_log2) {
    const int64_t per_cta = 8 * (32 >> lanes_log2);
    return dim3((unsigned)((rows + per_cta - 1) / per_cta), (unsigned)p->Hq, (unsigned)p->B);
}

static int bwd_view_aligned(const fa_view *v) {
    return (uintptr_t)v->data % 16 == 0 && v->sb % 8 == 0 && v->ss % 8 == 0 && v->sh % 8 == 0;
}

/* 2-D map over the dQ accumulator: (D padded) columns x (B * Hq * sq_pad)
 * rows of float32, boxes of 32 columns (128 bytes) x 64 rows, 128B swizzle.
 * map NULL: only check the shape. */
static int bwd_make_dq_map(CUtensorMap *map, const fa_problem *p, float *accum) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = sm90_encode_fn();
    if (!encode) return 0;
    const int dpad = bwd_padded_head_dim(p);
    cuuint64_t gdim[2] = {(cuuint64_t)dpad, (cuuint64_t)bwd_rows(p)};
    cuuint64_t gstride[1] = {(cuuint64_t)dpad * 4};
    cuuint32_t box[2] = {32, 64}, estride[2] = {1, 1};
    if (bwd_rows(p) >= ((size_t)1 << 31)) return 0;
    if (!map) return 1;
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, accum, gdim, gstride, box, estride,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* Builds the kernel parameters; 0 if the problem is not TMA-addressable.
 * x NULL: only check that (no tensor map is encoded, no workspace yet). */
static int bwd_fill_params(const fa_problem *p, const fa_exec *x, Sm90BwdParams *k) {
    memset(k, 0, sizeof(*k));
    const Sm90BwdShape shape = bwd_shape(p);
    const int bm = shape.bm, bn = shape.bn;
    /* Varlen: the maps span the packed rows as one batch; each CTA adds its
     * sequence's first row to the row coordinate. */
    const int varlen = p->cu_seqlens_q != NULL;
    const int64_t map_b = varlen ? 1 : p->B;
    const int64_t rows_q = varlen ? p->total_q : p->Sq, rows_k = varlen ? p->total_k : p->Sk;
    const int sw = shape.sw;
    if (!sm90_make_map(x ? &k->tm_q : NULL, &p->q, p->dtype, map_b, rows_q, p->Hq, p->D, bm, sw)) return 0;
    if (!sm90_make_map(x ? &k->tm_do : NULL, &p->dout, p->dtype, map_b, rows_q, p->Hq, p->D, bm, sw)) return 0;
    if (!sm90_make_map(x ? &k->tm_k : NULL, &p->k, p->dtype, map_b, rows_k, p->Hk, p->D, bn, sw)) return 0;
    if (!sm90_make_map(x ? &k->tm_v : NULL, &p->v, p->dtype, map_b, rows_k, p->Hk, p->D, bn, sw)) return 0;
    char *w = x ? (char *)bwd_round((uintptr_t)x->workspace) : NULL;
    const size_t rows = bwd_rows(p);
    k->lse2 = (const float *)w;
    k->delta = (const float *)(w ? w + bwd_round(rows * 4) : NULL);
    k->dq_accum = (float *)(w ? w + 2 * bwd_round(rows * 4) : NULL);
    if (!bwd_make_dq_map(x ? &k->tm_dq : NULL, p, k->dq_accum)) return 0;
    k->dk = p->dk.data;
    k->dv = p->dv.data;
    k->dk_sb = p->dk.sb;
    k->dk_ss = p->dk.ss;
    k->dk_sh = p->dk.sh;
    k->dv_sb = p->dv.sb;
    k->dv_ss = p->dv.ss;
    k->dv_sh = p->dv.sh;
    k->sq = (int)p->Sq;
    k->sk = (int)p->Sk;
    k->sq_pad = (int)bwd_sq_pad(p);
    k->hq = (int)p->Hq;
    k->hk = (int)p->Hk;
    k->q_per_kv = (int)(p->Hq / p->Hk);
    k->head_dim = (int)p->D;
    k->cu_seqlens_q = p->cu_seqlens_q;
    k->cu_seqlens_k = p->cu_seqlens_k;
    k->top_left = p->top_left;
    k->window_left = p->window_left;
    k->window_right = p->window_right;
    k->scale = p->scale;
    k->scale_log2 = p->scale * 1.4426950408889634f;
    return 1;
}

extern "C" int fa_sm90_bwd_supports(const fa_problem *p) {
    if (p->dtype != FA_BF16 && p->dtype != FA_F16) return 0;
    if (p->D != p->Dv || !sm90_head_dim_ok(p->D)) return 0;
    if (p->seqlens_k || p->block_table || p->k_new.data) return 0;
    if (!p->cu_seqlens_q != !p->cu_seqlens_k) return 0;
    /* varlen: packed row coordinates (first row + offset in the sequence) stay in int */
    if (p->cu_seqlens_q && (p->total_q < 1 || p->total_k < 1 || p->total_q >= ((int64_t)1 << 30) ||
                            p->total_k >= ((int64_t)1 << 30)))
        return 0;
    if (p->alibi || p->dropout_p != 0.f || p->softcap > 0.f || p->deterministic) return 0;
    if (p->B < 1 || p->B > 65535 || p->Hk > 65535 || p->Hq % p->Hk) return 0;
    if (p->Sq < 1 || p->Sk < 1 || p->Sq >= ((int64_t)1 << 30) || p->Sk >= ((int64_t)1 << 30)) return 0;
    if (p->Hq * bwd_sq_pad(p) >= ((int64_t)1 << 31)) return 0;
    /* dK and dV are stored as column pairs (4 bytes) */
    if (!bwd_view_aligned(&p->dk) || !bwd_view_aligned(&p->dv)) return 0;
    Sm90BwdParams k;
    return sm90_encode_fn() && bwd_fill_params(p, NULL, &k); /* (the maps are encoded at launch) */
}

extern "C" size_t fa_sm90_bwd_workspace(const fa_problem *p) {
    return 256 + 2 * bwd_round(bwd_rows(p) * 4) + bwd_accum_bytes(p);
}

template <class Cfg, typename T>
static fa_status bwd_run(const fa_problem *p, const fa_exec *x, const Sm90BwdParams &k) {
    cudaStream_t stream = (cudaStream_t)x->stream;
    static unsigned long long smem_set = 0; /* devices this instance was configured on */
    cudaError_t e = smem_limit_once(sm90_bwd_kernel<Cfg>, Cfg::SMEM_BYTES, x->device_index, &smem_set);
    if (e == cudaSuccess) e = cudaMemsetAsync(k.dq_accum, 0, bwd_accum_bytes(p), stream);
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm90 backward: %s", cudaGetErrorString(e));
    /* Three kernels, each launched early (sm90_launch_kernel): each lets the next
     * start at once and waits for the one before it, so no launch gap
     * separates them (docs/perf/sm90.md, item 110) */
    const int vec = p->Dv % 8 == 0 && bwd_view_aligned(&p->out) && bwd_view_aligned(&p->dout);
    const int stat_lanes = vec ? bwd_lanes_log2(p->Dv, 8) : 5;
    const int dq_vec = p->D % 4 == 0 && bwd_view_aligned(&p->dq);
    const int dq_lanes = dq_vec ? bwd_lanes_log2(p->D, 4) : 5;
    const dim3 stat_grid = bwd_row_grid(p, k.sq_pad, stat_lanes), dq_grid = bwd_row_grid(p, p->Sq, dq_lanes);
    const dim3 kv_grid((unsigned)((p->Sk + Cfg::BN - 1) / Cfg::BN), (unsigned)p->Hk, (unsigned)p->B);
    e = sm90_launch_kernel(sm90_bwd_preprocess<T>, stat_grid, dim3(256), 0, stream, true, *p, (float *)k.lse2,
                           (float *)k.delta, k.sq_pad, vec, stat_lanes);
    if (e == cudaSuccess)
        e = sm90_launch_kernel(sm90_bwd_kernel<Cfg>, kv_grid, dim3(Cfg::THREADS), Cfg::SMEM_BYTES, stream, true, k);
    if (e == cudaSuccess)
        e = sm90_launch_kernel(sm90_bwd_convert<T>, dq_grid, dim3(256), 0, stream, true, *p,
                               (const float *)k.dq_accum, k.sq_pad, (int)Cfg::D, dq_vec, dq_lanes);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm90 backward launch: %s", cudaGetErrorString(e));
    return FA_OK;
}

extern "C" fa_status fa_sm90_bwd(const fa_problem *p, const fa_exec *x) {
    Sm90BwdParams k;
    if (!x->workspace || x->workspace_bytes < fa_sm90_bwd_workspace(p))
        return fa_set_error(FA_ERR_INTERNAL, "sm90 backward: needs %zu bytes of workspace", fa_sm90_bwd_workspace(p));
    if (!bwd_fill_params(p, x, &k))
        return fa_set_error(FA_ERR_INTERNAL, "sm90 backward: problem is not addressable by TMA");
    const int d = bwd_padded_head_dim(p);
    if (p->dtype == FA_BF16) {
        if (d == 64) return bwd_run<Sm90BwdCfgD64<true>, __nv_bfloat16>(p, x, k);
        if (d == 96) return bwd_run<Sm90BwdCfgD96<true>, __nv_bfloat16>(p, x, k);
        if (d == 128) return bwd_run<Sm90BwdCfgD128<true>, __nv_bfloat16>(p, x, k);
        if (d == 192) return bwd_run<Sm90BwdCfgD192<true>, __nv_bfloat16>(p, x, k);
        return bwd_run<Sm90BwdCfgD256<true>, __nv_bfloat16>(p, x, k);
    }
    if (d == 64) return bwd_run<Sm90BwdCfgD64<false>, __half>(p, x, k);
    if (d == 96) return bwd_run<Sm90BwdCfgD96<false>, __half>(p, x, k);
    if (d == 128) return bwd_run<Sm90BwdCfgD128<false>, __half>(p, x, k);
    if (d == 192) return bwd_run<Sm90BwdCfgD192<false>, __half>(p, x, k);
    return bwd_run<Sm90BwdCfgD256<false>, __half>(p, x, k);
}
