/*
 * Host side of the Hopper forward: which problems it takes, tile
 * configuration per head dim, launch. The kernel is sm90_fwd_kernel.cuh, the
 * TMA maps come from sm90_host.cuh.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <math.h>
#include <string.h>

#include "../smem_limit.cuh"
#include "sm90.h"
#include "sm90_fwd_kernel.cuh"
#include "sm90_host.cuh"

/* Specialisations: (head dim, keys per block, K/V stages, bf16, consumer
 * warpgroups = query rows / 64, e4m3, joined tile boundaries). Head dim 64 is
 * softmax-bound, so three consumers share the tensor cores there, except for
 * short masked problems where 192-row tiles leave the machine unbalanced; only
 * with three consumers does joining tile boundaries pay. e4m3 takes 224-key
 * blocks (an e4m3 key costs half the shared memory of a 16-bit one, and the
 * per-block softmax work amortises over more keys), except for short masked
 * problems, where a causal tile's last block would be mostly hidden
 * (docs/perf/sm90.md, item 36). */
enum sm90_variant { SM90_D64_M192, SM90_D64_M128, SM90_D128, SM90_D256, SM90_F8_N224, SM90_F8_N128, SM90_F8_D64 };
template <bool BF16> using Sm90CfgD64M192 = Sm90FwdConfig<64, 128, 3, BF16, 3, false, true>; /* joined tile boundaries */
template <bool BF16> using Sm90CfgD64M128 = Sm90FwdConfig<64, 128, 3, BF16, 2>;
/* SPLIT: the kernel with the split tail (sm90_split_plan) */
template <bool BF16, bool SPLIT> using Sm90CfgD128 = Sm90FwdConfig<128, 128, 2, BF16, 2, false, false, SPLIT>;
template <bool BF16, bool SPLIT> /* O staged in the last K/V stage */
using Sm90CfgD256 = Sm90FwdConfig<256, 64, 2, BF16, 2, false, false, SPLIT>;
/* e4m3 in, bf16 out. Head dims up to 64 have a kernel of their own (64-byte
 * Q and K rows, so no zero columns are multiplied) with three consumers and
 * joined tile boundaries: like bf16 at head dim 64, it is bound by the
 * exponentials, not the tensor cores (docs/perf/sm90.md, item 38). */
using Sm90CfgF8N224 = Sm90FwdConfig<128, 224, 2, true, 2, true>;
using Sm90CfgF8N128 = Sm90FwdConfig<128, 128, 2, true, 2, true>;
using Sm90CfgF8D64 = Sm90FwdConfig<64, 128, 3, true, 3, true, true>;

static sm90_variant sm90_pick(const fa_problem *p) {
    if (p->dtype == FA_F8_E4M3) {
        if (p->D <= 64) return SM90_F8_D64;
        return p->has_mask && p->Sq <= 1024 ? SM90_F8_N128 : SM90_F8_N224;
    }
    switch (sm90_padded_head_dim(p->D)) {
    case 64: return p->has_mask && p->Sq <= 2048 ? SM90_D64_M128 : SM90_D64_M192; /* docs/perf/sm90.md, items 30, 41 */
    case 128: return SM90_D128;
    default: return SM90_D256;
    }
}

/* The tile shape of a variant's kernel, as the host needs it for the tensor
 * maps and the tile count: read from its Sm90FwdConfig. */
struct Sm90Shape {
    int bm, bn;       /* query rows per tile, keys per block */
    int qk_box;       /* bytes of a Q or K row per TMA box (and its swizzle): QK_SW */
    int vt_slab_keys; /* e4m3: keys per V^T box (VT_SLAB_KEYS) */
    int vt_rows;      /* e4m3: head-dim rows per V^T box (the kernel's D) */
};

template <class Cfg> static Sm90Shape sm90_shape_of() {
    return Sm90Shape{Cfg::BM, Cfg::BN, Cfg::QK_SW, Cfg::VT_SLAB_KEYS, Cfg::D};
}

/* The 16-bit output type does not change the shape: the bf16 instances stand for both. */
static Sm90Shape sm90_shape(sm90_variant v) {
    switch (v) {
    case SM90_D64_M192: return sm90_shape_of<Sm90CfgD64M192<true>>();
    case SM90_D64_M128: return sm90_shape_of<Sm90CfgD64M128<true>>();
    case SM90_D128: return sm90_shape_of<Sm90CfgD128<true, false>>();
    case SM90_D256: return sm90_shape_of<Sm90CfgD256<true, false>>();
    case SM90_F8_N224: return sm90_shape_of<Sm90CfgF8N224>();
    case SM90_F8_N128: return sm90_shape_of<Sm90CfgF8N128>();
    case SM90_F8_D64: return sm90_shape_of<Sm90CfgF8D64>();
    }
    return Sm90Shape{};
}

/* Whether the variant has a kernel with the split tail (sm90_split_plan):
 * not head dim 64's (its three-consumer kernel spills with the merge) nor
 * e4m3's (with 224-key blocks the split kernel spilled and ran slower than
 * whole tiles; docs/perf/sm90.md, items 35 and 36). */
static int sm90_has_split_tail(sm90_variant v) { return v == SM90_D128 || v == SM90_D256; }

/* e4m3: V^T in the workspace, (B, Hk, D, keys padded to whole 32-key chunks). */
static int64_t sm90_fp8_vt_keys(const fa_problem *p) { return (p->Sk + 31) / 32 * 32; }
static size_t sm90_fp8_vt_bytes(const fa_problem *p) {
    return (size_t)p->B * (size_t)p->Hk * (size_t)p->D * (size_t)sm90_fp8_vt_keys(p);
}

/* Builds every field of the kernel parameters; 0 if the problem is not
 * TMA-addressable. encode = 0: only check that (no tensor map is encoded).
 * vt: the e4m3 V^T buffer (a stand-in address when only checking). */
static int sm90_fill_params(const fa_problem *p, Sm90FwdParams *k, void *vt, int encode) {
    memset(k, 0, sizeof(*k));
    const int64_t D = p->D;
    /* Varlen: the maps span the packed rows as one batch; each tile adds its
     * sequence's first row to the row coordinate. */
    const int varlen = p->cu_seqlens_q != NULL;
    const int64_t map_b = varlen ? 1 : p->B;
    const int64_t rows_q = varlen ? p->total_q : p->Sq, rows_k = varlen ? p->total_k : p->Sk;
    const Sm90Shape shape = sm90_shape(sm90_pick(p));
    if (!sm90_make_map(encode ? &k->tm_q : NULL, &p->q, p->dtype, map_b, rows_q, p->Hq, D, shape.bm, shape.qk_box))
        return 0;
    if (!sm90_make_map(encode ? &k->tm_k : NULL, &p->k, p->dtype, map_b, rows_k, p->Hk, D, shape.bn, shape.qk_box))
        return 0;
    if (p->dtype == FA_F8_E4M3) {
        /* V^T (B, Hk, D, keys): the map's "rows" are head-dim rows, its "columns" keys */
        const int64_t keys = sm90_fp8_vt_keys(p);
        fa_view vt_view = {vt ? vt : (void *)(uintptr_t)1024, p->Hk * D * keys, keys, D * keys};
        /* boxes of the kernel's whole head dim (64 or 128 rows): rows past D
         * are zero-filled and count towards the transaction bytes the
         * producer expects (KV_BYTES); a box is one V^T slab wide
         * (Sm90FwdConfig::VT_SLAB_KEYS) */
        if (!sm90_make_map(encode ? &k->tm_v : NULL, &vt_view, FA_F8_E4M3, p->B, D, p->Hk, keys, shape.vt_rows,
                           shape.vt_slab_keys))
            return 0;
        k->q_descale = p->q_descale;
        k->k_descale = p->k_descale;
        k->v_descale = p->v_descale;
    } else if (!sm90_make_map(encode ? &k->tm_v : NULL, &p->v, p->dtype, map_b, rows_k, p->Hk, D, shape.bn)) {
        return 0;
    }
    /* the output is bf16 for e4m3 inputs */
    const fa_dtype out_dt = p->dtype == FA_F8_E4M3 ? FA_BF16 : p->dtype;
    if (!sm90_make_map(encode ? &k->tm_o : NULL, &p->out, out_dt, map_b, rows_q, p->Hq, D, 64)) return 0;
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
    k->hk = (int)p->Hk;
    k->num_m_blocks = (int)((p->Sq + shape.bm - 1) / shape.bm);
    k->m_div = sm90_fastdiv(k->num_m_blocks);
    k->h_div = sm90_fastdiv(k->hq);
    /* Causal-like masks make late query blocks heavier: balance the CTAs with
     * pairs of query blocks (sm90_decode_tile), two tile indices per pair. */
    k->paired = p->window_right < FA_UNBOUNDED;
    const int64_t heads = p->Hq * p->B, m = k->num_m_blocks;
    int64_t tiles = k->paired ? 2 * m * ((heads + 1) / 2) : m * heads;
    if (tiles >= ((int64_t)1 << 30)) return 0;
    k->num_tiles = (int)tiles;
    k->tail_first = k->num_tiles; /* no split tail unless fa_sm90_fwd plans one */
    k->top_left = p->top_left;
    k->window_left = p->window_left;
    k->window_right = p->window_right;
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

/* The split tail (sm90_split_piece). With uniform tiles (non-causal, no
 * window, batched) the last wave of a persistent grid of G CTAs holds
 * R = tiles mod G of them: G - R CTAs idle while the others run a whole
 * tile. Sharing the last wave's kv blocks out evenly and merging the parts
 * ends every CTA at about the same time, for a fixed cost (zeroing the
 * counters, a second tile start per CTA, the merge at the end). Taken when
 * the idle time it saves, (G - R) / G of a tile, is at least
 * SM90_SPLIT_MIN_SAVED kv blocks of 128 keys at head dim 128 (measured on
 * the H200: -0.5..-8% where it saves 2 to 8 such blocks, +1..+5% from 16
 * up; docs/perf/sm90.md, item 35), and each CTA's share holds at least two
 * kv blocks. */
enum { SM90_SPLIT_MIN_SAVED = 12, SM90_SPLIT_MIN_SHARE = 2 };

struct Sm90SplitPlan {
    int tail_tiles;      /* R: 0 = no split */
    int blocks;          /* kv blocks per tile */
    uint32_t work;       /* R * blocks */
    size_t count_bytes;  /* per (tail tile, consumer) counters, zeroed per launch */
    size_t partial_bytes;
};

static size_t sm90_align256(size_t n) { return (n + 255) / 256 * 256; }

static Sm90SplitPlan sm90_split_plan(const fa_problem *p, const Sm90FwdParams &k, int grid) {
    Sm90SplitPlan s;
    memset(&s, 0, sizeof s);
    if (k.paired || p->window_left < FA_UNBOUNDED || p->cu_seqlens_q) return s; /* tiles of unequal work */
    const sm90_variant v = sm90_pick(p);
    if (!sm90_has_split_tail(v)) return s;
    const int tail = k.num_tiles % grid;
    if (k.num_tiles <= grid || tail == 0) return s;
    const Sm90Shape shape = sm90_shape(v);
    const int64_t blocks = (p->Sk + shape.bn - 1) / shape.bn;
    const int64_t work = (int64_t)tail * blocks;
    if (work < (int64_t)SM90_SPLIT_MIN_SHARE * grid || work * grid >= ((int64_t)1 << 32)) return s;
    const int consumers = shape.bm / 64;
    const int d = sm90_padded_head_dim(p->D);
    /* idle time saved, in blocks of 128 keys x head dim 128 */
    const int64_t saved = (int64_t)(grid - tail) * blocks * shape.bn * d; /* x grid * 128 * 128 */
    if (saved < (int64_t)SM90_SPLIT_MIN_SAVED * grid * 128 * 128) return s;
    s.tail_tiles = tail;
    s.blocks = (int)blocks;
    s.work = (uint32_t)work;
    s.count_bytes = sm90_align256((size_t)tail * consumers * sizeof(int));
    /* one slot per piece: pieces are numbered c + r < grid + tail - 1 (sm90_split_slot) */
    s.partial_bytes = (size_t)(grid + tail - 1) * consumers * (d / 8 + 1) * 128 * sizeof(float4);
    return s;
}

/* Workspace: e4m3's V^T, or the split tail's counters and parts. */
static size_t sm90_workspace_bytes(const fa_problem *p, const Sm90SplitPlan &s) {
    return p->dtype == FA_F8_E4M3 ? sm90_fp8_vt_bytes(p) : s.count_bytes + s.partial_bytes;
}

extern "C" int fa_sm90_fwd_supports(const fa_problem *p) {
    if (p->dtype != FA_BF16 && p->dtype != FA_F16 && p->dtype != FA_F8_E4M3) return 0;
    if (p->D != p->Dv || !sm90_head_dim_ok(p->D)) return 0;
    /* e4m3: head dims up to 128 in steps of 16 (on the head-dim-64 or 128
     * kernel; TMA zero-fills the columns past D and clips them from the
     * stores), batched only (the V transpose walks (B, Sk) rows). */
    if (p->dtype == FA_F8_E4M3 && (p->D % 16 || p->D > 128 || p->cu_seqlens_q || p->B > 65535)) return 0; /* B: grid z */
    /* ... and the transpose reads V in 16-byte chunks */
    if (p->dtype == FA_F8_E4M3 && (((uintptr_t)p->v.data) % 16 || p->v.ss % 16 || p->v.sh % 16 || p->v.sb % 16))
        return 0;
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
    return sm90_fill_params(p, &k, NULL, 0);
}

extern "C" size_t fa_sm90_fwd_workspace(const fa_problem *p, const fa_exec *x) {
    Sm90FwdParams k;
    if (!sm90_fill_params(p, &k, NULL, 0)) return 0;
    return sm90_workspace_bytes(p, sm90_split_plan(p, k, sm90_num_sms(x->device_index)));
}

/* e4m3: writes V^T (B, Hk, D, keys) with each 32-key chunk's keys permuted
 * to the P fragment order (sm90_fp8_key_of_slot); keys past Sk are zero.
 * One CTA per (64 keys, kv head, batch): 64 rows of V through shared memory. */
__global__ void __launch_bounds__(256) sm90_fp8_transpose_v(const uint8_t *v, int64_t v_sb, int64_t v_ss,
                                                            int64_t v_sh, int sk, int d, int keys,
                                                            uint8_t *vt) {
    __shared__ __align__(16) uint8_t tile[64][128 + 16]; /* + 16: rows start on different banks */
    const int key0 = blockIdx.x * 64, h = blockIdx.y, b = blockIdx.z;
    const int chunks = d / 16; /* 16-byte chunks per V row */
    for (int c = threadIdx.x; c < 64 * chunks; c += blockDim.x) {
        int r = c / chunks, ch = c % chunks, key = key0 + r;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (key < sk) val = *reinterpret_cast<const uint4 *>(v + b * v_sb + key * v_ss + h * v_sh + ch * 16);
        *reinterpret_cast<uint4 *>(&tile[r][ch * 16]) = val;
    }
    __syncthreads();
    /* output: d rows of (up to) 64 slots; 4 slots (one 32-bit store) per step */
    const int slots = min(64, keys - key0);
    for (int c = threadIdx.x; c < d * (slots / 4); c += blockDim.x) {
        int row = c / (slots / 4), s0 = (c % (slots / 4)) * 4;
        uint32_t word = 0;
        for (int i = 0; i < 4; ++i) {
            int s = s0 + i;
            int key = (s / 32) * 32 + sm90_fp8_key_of_slot(s % 32); /* key held by slot s */
            word |= (uint32_t)tile[key][row] << (8 * i);
        }
        *reinterpret_cast<uint32_t *>(vt + (((int64_t)b * gridDim.y + h) * d + row) * keys + key0 + s0) = word;
    }
}

template <class Cfg>
static fa_status sm90_launch(const Sm90FwdParams &k, const fa_exec *x) {
    static unsigned long long smem_set = 0; /* devices this instance was configured on */
    cudaError_t e = smem_limit_once(sm90_fwd_kernel<Cfg>, Cfg::SMEM_BYTES, x->device_index, &smem_set);
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm90 forward: %s", cudaGetErrorString(e));
    int grid = sm90_num_sms(x->device_index);
    const int units = k.paired ? k.num_tiles / 2 : k.num_tiles; /* pairs are handed out whole */
    if (grid > units) grid = units;
    sm90_fwd_kernel<Cfg><<<grid, Cfg::THREADS, Cfg::SMEM_BYTES, (cudaStream_t)x->stream>>>(k);
    e = cudaGetLastError();
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm90 forward launch: %s", cudaGetErrorString(e));
    return FA_OK;
}

/* The SPLIT_TAIL kernel where the plan in k shares the last wave out, else
 * the plain one. */
template <class Plain, class Split>
static fa_status sm90_launch_tail(const Sm90FwdParams &k, const fa_exec *x) {
    return k.tail_first < k.num_tiles ? sm90_launch<Split>(k, x) : sm90_launch<Plain>(k, x);
}

template <bool BF16>
static fa_status sm90_dispatch(const fa_problem *p, const Sm90FwdParams &k, const fa_exec *x) {
    switch (sm90_pick(p)) {
    case SM90_D64_M192: return sm90_launch<Sm90CfgD64M192<BF16>>(k, x);
    case SM90_D64_M128: return sm90_launch<Sm90CfgD64M128<BF16>>(k, x);
    case SM90_D128: return sm90_launch_tail<Sm90CfgD128<BF16, false>, Sm90CfgD128<BF16, true>>(k, x);
    case SM90_D256: return sm90_launch_tail<Sm90CfgD256<BF16, false>, Sm90CfgD256<BF16, true>>(k, x);
    case SM90_F8_N224:
    case SM90_F8_N128:
    case SM90_F8_D64: break; /* launched by fa_sm90_fwd */
    }
    return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: no kernel for head dim %lld", (long long)p->D);
}

extern "C" fa_status fa_sm90_fwd(const fa_problem *p, const fa_exec *x) {
    Sm90FwdParams k;
    const int fp8 = p->dtype == FA_F8_E4M3;
    if (fp8 && (!x->workspace || x->workspace_bytes < sm90_fp8_vt_bytes(p)))
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: float8 needs %zu bytes of workspace", sm90_fp8_vt_bytes(p));
    if (!sm90_fill_params(p, &k, fp8 ? x->workspace : NULL, 1))
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: problem is not addressable by TMA");
    if (k.num_tiles == 0) return FA_OK;
    /* The split tail, where the workspace has room for it (a caller of this
     * function without one gets whole tiles). */
    const int ctas = sm90_num_sms(x->device_index); /* the persistent grid (sm90_launch) */
    const Sm90SplitPlan split = sm90_split_plan(p, k, ctas);
    if (split.tail_tiles && x->workspace && x->workspace_bytes >= sm90_workspace_bytes(p, split)) {
        uint8_t *ws = (uint8_t *)x->workspace;
        k.split_count = (int *)ws;
        k.split_partial = (float4 *)(ws + split.count_bytes);
        k.tail_first = k.num_tiles - split.tail_tiles;
        k.num_tiles = k.tail_first + 2 * ctas; /* two pieces per CTA (sm90_tile_after) */
        k.split_blocks = split.blocks;
        k.split_work = split.work;
        cudaError_t e = cudaMemsetAsync(k.split_count, 0, split.count_bytes, (cudaStream_t)x->stream);
        if (e != cudaSuccess)
            return fa_set_error(FA_ERR_CUDA, "sm90 forward: split counters: %s", cudaGetErrorString(e));
    }
    if (fp8) {
        const int keys = (int)sm90_fp8_vt_keys(p);
        dim3 grid((unsigned)((keys + 63) / 64), (unsigned)p->Hk, (unsigned)p->B);
        sm90_fp8_transpose_v<<<grid, 256, 0, (cudaStream_t)x->stream>>>(
            (const uint8_t *)p->v.data, p->v.sb, p->v.ss, p->v.sh, (int)p->Sk, (int)p->D, keys,
            (uint8_t *)x->workspace);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm90 forward: V transpose: %s", cudaGetErrorString(e));
        switch (sm90_pick(p)) {
        case SM90_F8_N224: return sm90_launch<Sm90CfgF8N224>(k, x);
        case SM90_F8_D64: return sm90_launch<Sm90CfgF8D64>(k, x);
        default: return sm90_launch<Sm90CfgF8N128>(k, x);
        }
    }
    return p->dtype == FA_BF16 ? sm90_dispatch<true>(p, k, x) : sm90_dispatch<false>(p, k, x);
}
