/*
 * Host side of the Hopper forward: which problems it takes, TMA tensor maps,
 * tile configuration per head dim, launch. The kernel is sm90_fwd_kernel.cuh.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <math.h>
#include <string.h>

#include "sm90.h"
#include "sm90_fwd_kernel.cuh"

/* Specialisations: (head dim, keys per block, K/V stages, consumer
 * warpgroups = query rows / 64). Head dim 64 is softmax-bound, so three
 * consumers share the tensor cores there, except for short masked problems
 * where 192-row tiles leave the machine unbalanced. */
enum sm90_variant { SM90_D64_M192, SM90_D64_M128, SM90_D128, SM90_D256 };
template <bool BF16> using Sm90CfgD64M192 = Sm90FwdConfig<64, 128, 3, BF16, 3>;
template <bool BF16> using Sm90CfgD64M128 = Sm90FwdConfig<64, 128, 3, BF16, 2>;
template <bool BF16> using Sm90CfgD128 = Sm90FwdConfig<128, 128, 2, BF16, 2>;
template <bool BF16> using Sm90CfgD256 = Sm90FwdConfig<256, 64, 2, BF16, 2>; /* O staged in the Q buffer */

/* cuTensorMapEncodeTiled, reached through the runtime so nothing links -lcuda. */
static PFN_cuTensorMapEncodeTiled_v12000 sm90_encode_fn(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    static int tried = 0;
    if (!tried) {
        void *ptr = NULL;
        cudaDriverEntryPointQueryResult qres;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &qres) ==
                cudaSuccess &&
            qres == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)ptr;
        else
            (void)cudaGetLastError(); /* do not leave a sticky error for the caller */
        tried = 1;
    }
    return fn;
}

/* 4-D map over a (B, S, H, D) view (strides in elements), boxes of 64 columns
 * (128 bytes, one swizzle span) x box_rows rows. Returns 0 if TMA cannot
 * address the view (alignment, stride limits). */
static int sm90_make_map(CUtensorMap *map, const fa_view *v, fa_dtype dt, int64_t B, int64_t S, int64_t H,
                         int64_t D, int box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = sm90_encode_fn();
    if (!encode) return 0;
    const int64_t es = 2;
    if (((uintptr_t)v->data) % 16) return 0;
    int64_t dims[4] = {D, S, H, B};
    int64_t strides[3] = {v->ss * es, v->sh * es, v->sb * es};
    /* A dimension of extent 1 is never stepped over: give it any legal stride. */
    int64_t extent = D * es;
    for (int i = 0; i < 3; ++i) extent = extent > strides[i] * dims[i + 1] ? extent : strides[i] * dims[i + 1];
    extent = (extent + 15) / 16 * 16;
    for (int i = 0; i < 3; ++i)
        if (dims[i + 1] == 1) strides[i] = extent;
    cuuint64_t gdim[4];
    cuuint64_t gstride[3];
    for (int i = 0; i < 4; ++i) {
        if (dims[i] <= 0 || dims[i] > ((int64_t)1 << 31)) return 0;
        gdim[i] = (cuuint64_t)dims[i];
    }
    for (int i = 0; i < 3; ++i) {
        if (strides[i] <= 0 || strides[i] % 16 || strides[i] >= ((int64_t)1 << 40)) return 0;
        gstride[i] = (cuuint64_t)strides[i];
    }
    cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
    cuuint32_t estride[4] = {1, 1, 1, 1};
    CUresult r = encode(map, dt == FA_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                        v->data, gdim, gstride, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

/* Head dims run on the kernel of the next size up (64, 128, 256): TMA
 * zero-fills the missing columns on load and clips them on store. A multiple
 * of 8 keeps rows 16-byte aligned. */
static int sm90_head_dim_ok(int64_t d) { return d >= 8 && d <= 256 && d % 8 == 0; }
static int sm90_padded_head_dim(int64_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

static sm90_variant sm90_pick(const fa_problem *p) {
    switch (sm90_padded_head_dim(p->D)) {
    case 64: return p->has_mask && p->Sq <= 1024 ? SM90_D64_M128 : SM90_D64_M192;
    case 128: return SM90_D128;
    default: return SM90_D256;
    }
}

/* Query rows per tile (the tile's BM) and keys per block (BN). */
static int sm90_block_m(const fa_problem *p) { return sm90_pick(p) == SM90_D64_M192 ? 192 : 128; }
static int sm90_block_n(const fa_problem *p) { return sm90_pick(p) == SM90_D256 ? 64 : 128; }

/* Builds every field of the kernel parameters; 0 if the problem is not TMA-addressable. */
static int sm90_fill_params(const fa_problem *p, Sm90FwdParams *k) {
    memset(k, 0, sizeof(*k));
    const int64_t D = p->D;
    /* Varlen: the maps span the packed rows as one batch; each tile adds its
     * sequence's first row to the row coordinate. */
    const int varlen = p->cu_seqlens_q != NULL;
    const int64_t map_b = varlen ? 1 : p->B;
    const int64_t rows_q = varlen ? p->total_q : p->Sq, rows_k = varlen ? p->total_k : p->Sk;
    if (!sm90_make_map(&k->tm_q, &p->q, p->dtype, map_b, rows_q, p->Hq, D, sm90_block_m(p))) return 0;
    if (!sm90_make_map(&k->tm_k, &p->k, p->dtype, map_b, rows_k, p->Hk, D, sm90_block_n(p))) return 0;
    if (!sm90_make_map(&k->tm_v, &p->v, p->dtype, map_b, rows_k, p->Hk, D, sm90_block_n(p))) return 0;
    if (!sm90_make_map(&k->tm_o, &p->out, p->dtype, map_b, rows_q, p->Hq, D, 64)) return 0;
    k->cu_seqlens_q = p->cu_seqlens_q;
    k->cu_seqlens_k = p->cu_seqlens_k;
    if (((uintptr_t)p->out.data) % 16) return 0;
    k->out = p->out.data;
    k->out_sb = p->out.sb;
    k->out_ss = p->out.ss;
    k->out_sh = p->out.sh;
    k->lse = p->lse;
    k->lse_sb = p->lse_sb;
    k->lse_sh = p->lse_sh;
    k->lse_ss = p->lse_ss;
    k->sq = (int)p->Sq;
    k->sk = (int)p->Sk;
    k->hq = (int)p->Hq;
    k->batch = (int)p->B;
    k->head_dim = (int)p->D;
    k->q_per_kv = (int)(p->Hq / p->Hk);
    k->num_m_blocks = (int)((p->Sq + sm90_block_m(p) - 1) / sm90_block_m(p));
    int64_t tiles = (int64_t)k->num_m_blocks * p->Hq * p->B;
    if (tiles >= ((int64_t)1 << 31)) return 0;
    k->num_tiles = (int)tiles;
    k->top_left = p->top_left;
    k->window_left = p->window_left;
    k->window_right = p->window_right;
    /* Causal-like masks make late query blocks heavier: schedule those first. */
    k->longest_first = p->window_right < FA_UNBOUNDED;
    const float log2e = 1.4426950408889634f;
    if (p->softcap > 0.f) {
        k->softcap_pre = p->scale / p->softcap; /* s = c * tanh(scale * qk / c) */
        k->scale_log2 = p->softcap * log2e;
    } else {
        k->softcap_pre = 0.f;
        k->scale_log2 = p->scale * log2e;
    }
    return 1;
}

extern "C" int fa_sm90_fwd_supports(const fa_problem *p) {
    if (p->dtype != FA_BF16 && p->dtype != FA_F16) return 0;
    if (p->D != p->Dv || !sm90_head_dim_ok(p->D)) return 0;
    if (p->seqlens_k || p->block_table || p->k_new.data) return 0;
    if (!p->cu_seqlens_q != !p->cu_seqlens_k) return 0;
    if (p->cu_seqlens_q) {
        /* The head-dim-256 kernel has no registers left for the varlen tile fields. */
        if (sm90_padded_head_dim(p->D) == 256) return 0;
        /* Packed row coordinates (first row + offset in the sequence) stay in int. */
        if (p->total_q < 1 || p->total_k < 1 || p->total_q >= ((int64_t)1 << 30) || p->total_k >= ((int64_t)1 << 30))
            return 0;
    }
    if (p->alibi || p->dropout_p != 0.f) return 0;
    if (!(p->scale > 0.f)) return 0; /* the running max assumes logits grow with q.k */
    if (p->B < 1 || p->Sq < 1 || p->Sk < 1 || p->Sq >= ((int64_t)1 << 30) || p->Sk >= ((int64_t)1 << 30)) return 0;
    if (p->Hq > 65535 || p->Hq % p->Hk) return 0;
    Sm90FwdParams k;
    return sm90_fill_params(p, &k);
}

extern "C" size_t fa_sm90_fwd_workspace(const fa_problem *p, const fa_exec *x) {
    (void)p;
    (void)x;
    return 0;
}

/* Multiprocessor count of a device, cached (the persistent grid size). */
static int sm90_num_sms(int device) {
    static int cached[64];
    if (device < 0 || device >= 64) device = 0;
    if (!cached[device]) {
        int n = 0;
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) n = 132;
        cached[device] = n;
    }
    return cached[device];
}

template <class Cfg>
static fa_status sm90_launch(const Sm90FwdParams &k, const fa_exec *x) {
    cudaError_t e = cudaFuncSetAttribute(sm90_fwd_kernel<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Cfg::SMEM_BYTES);
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm90 forward: %s", cudaGetErrorString(e));
    int grid = sm90_num_sms(x->device_index);
    if (grid > k.num_tiles) grid = k.num_tiles;
    sm90_fwd_kernel<Cfg><<<grid, Cfg::THREADS, Cfg::SMEM_BYTES, (cudaStream_t)x->stream>>>(k);
    e = cudaGetLastError();
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm90 forward launch: %s", cudaGetErrorString(e));
    return FA_OK;
}

template <bool BF16>
static fa_status sm90_dispatch(const fa_problem *p, const Sm90FwdParams &k, const fa_exec *x) {
    switch (sm90_pick(p)) {
    case SM90_D64_M192: return sm90_launch<Sm90CfgD64M192<BF16>>(k, x);
    case SM90_D64_M128: return sm90_launch<Sm90CfgD64M128<BF16>>(k, x);
    case SM90_D128: return sm90_launch<Sm90CfgD128<BF16>>(k, x);
    case SM90_D256: return sm90_launch<Sm90CfgD256<BF16>>(k, x);
    }
    return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: no kernel for head dim %lld", (long long)p->D);
}

extern "C" fa_status fa_sm90_fwd(const fa_problem *p, const fa_exec *x) {
    Sm90FwdParams k;
    if (!sm90_fill_params(p, &k))
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: problem is not addressable by TMA");
    if (k.num_tiles == 0) return FA_OK;
    return p->dtype == FA_BF16 ? sm90_dispatch<true>(p, k, x) : sm90_dispatch<false>(p, k, x);
}
