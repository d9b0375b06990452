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
 * short masked problems where 192-row tiles leave the machine unbalanced.
 * Joining tile boundaries pays only with three consumers, and not for e4m3 at
 * head dim 128. e4m3 at head dim 128 has three consumers too, with P in shared
 * memory (Sm90FwdConfig::P_SMEM), except for short masked problems, where
 * it keeps two and 128-row tiles (docs/perf/sm90.md, items 36, 87, 88).
 * Both three-consumer kernels have an instance whose tiles are 64-row
 * groups packed across heads (Sm90PackedRows, sm90_packed_rows). */
enum sm90_variant {
    SM90_D64_M192, SM90_D64_M128, SM90_D96, SM90_D128, SM90_D192, SM90_D256, SM90_F8_M192, SM90_F8_N128, SM90_F8_D64,
    SM90_F8_D192, SM90_F8_D256
};
template <bool BF16> using Sm90CfgD64M192 = Sm90FwdConfig<64, 128, 3, BF16, 3, false, true>; /* joined tile boundaries */
template <bool BF16> using Sm90CfgD64M128 = Sm90FwdConfig<64, 128, 3, BF16, 2>;
/* SPLIT: the kernel with the split tail (sm90_split_plan). Head dim 96:
 * the head-dim-128 kernel's paths over rows of three 64-byte slabs. */
template <bool BF16, bool SPLIT> using Sm90CfgD128 = Sm90FwdConfig<128, 128, 2, BF16, 2, false, false, SPLIT>;
template <bool BF16, bool SPLIT> using Sm90CfgD96 = Sm90FwdConfig<96, 128, 2, BF16, 2, false, false, SPLIT>;
/* The wide head dims (Sm90FwdConfig::WIDE), 64-key blocks. At head dim 256
 * O is staged in the last K/V stage (consumer 0's in a buffer of its own
 * where it may skip a tile's top block); at 192 in a buffer of its own.
 * TOP_SKIP false: the instance for long problems with no mask, which never
 * skip (sm90_launch_wide). */
template <int D, bool BF16, bool SPLIT, bool TOP_SKIP = true>
using Sm90CfgWide = Sm90FwdConfig<D, 64, 2, BF16, 2, false, false, SPLIT, TOP_SKIP>;
/* e4m3 in, bf16 out. Head dims up to 64 have a kernel of their own (64-byte
 * Q and K rows, so no zero columns are multiplied) with three consumers and
 * joined tile boundaries: like bf16 at head dim 64, it is bound by the
 * exponentials, not the tensor cores (docs/perf/sm90.md, item 38). */
template <bool SPLIT> using Sm90CfgF8M192 = Sm90FwdConfig<128, 128, 2, true, 3, true, false, SPLIT>;
using Sm90CfgF8N128 = Sm90FwdConfig<128, 128, 2, true, 2, true>;
/* e4m3's packed row groups (Sm90PackedRows, sm90_packed_rows): the
 * three-consumer kernel with a third K/V stage. A tile across two heads
 * has each kv block twice in the ring, and a consumer reads every other
 * position: with two stages each head's consumers would have one stage,
 * and every load would wait for the block before it to be read. No mask
 * (packed problems have none) and no softcap code. */
using Sm90CfgF8M192Packed = Sm90PackedRows<Sm90SteadyUnmasked<Sm90FwdConfig<128, 128, 3, true, 3, true>>>;
using Sm90CfgF8D64 = Sm90FwdConfig<64, 128, 3, true, 3, true, true>;
/* e4m3 at head dims 144-256: two consumers (O takes 96 or 128 registers a
 * thread), 128-key blocks, batched and varlen instances. Head dim 192: rows
 * of three 64-byte slabs, two Q buffers. Head dim 256: one Q buffer, so
 * that O's staging buffer fits beside two 32 KB K and V^T stages (225 KB):
 * +7..+21% over 64-key blocks (docs/perf/sm90.md, item 170). */
using Sm90CfgF8D192 = Sm90FwdConfig<192, 128, 2, true, 2, true>;
using Sm90CfgF8D256 = Sm90FwdConfig<256, 128, 2, true, 2, true>;

static sm90_variant sm90_pick(const fa_problem *p) {
    if (p->dtype == FA_F8_E4M3) {
        if (p->D > 192) return SM90_F8_D256;
        if (p->D > 128) return SM90_F8_D192;
        if (p->cu_seqlens_q) return SM90_F8_N128; /* up to 128, the e4m3 kernel with a varlen instance */
        if (p->D <= 64) return SM90_F8_D64;
        return p->has_mask && p->Sq <= 1024 ? SM90_F8_N128 : SM90_F8_M192;
    }
    switch (sm90_kernel_head_dim(p->D)) {
    case 64: return p->has_mask && p->Sq <= 2048 ? SM90_D64_M128 : SM90_D64_M192; /* docs/perf/sm90.md, items 30, 41, 144 */
    case 96: return SM90_D96;
    case 128: return SM90_D128;
    case 192: return SM90_D192;
    default: return SM90_D256;
    }
}

/* Row-group packing (Sm90PackedRows): the three-consumer kernels (16-bit
 * head dim 64, e4m3 head dim 128) on batched problems without a mask whose
 * query rows are not a whole number of their 192-row tiles. Its tiles then
 * count 64-row groups of all heads, which must stay in int
 * (sm90_decode_packed). A tile spans at most two heads, so a head must have
 * two groups at least (up to 64 rows the short-tile split takes them:
 * sm90_short_split_plan). Taken where it cuts a head's tiles (a short one
 * counted whole) by SM90_PACK_MIN_SAVED_PCT % or more: at head dim 64, 512
 * and 1k (-11%) it gained 7-8%, at 2k and 4k (-3%) it measured level, at
 * 8k and 16k (-0.8%) 1-2% slower, about the A/B's own spread
 * (docs/perf/sm90.md, item 114). e4m3 (its own three-stage kernel,
 * Sm90CfgF8M192Packed) packs only where the split tail (sm90_split_plan),
 * which a packed problem cannot have, would never be taken: a tile of fewer
 * than twice SM90_SPLIT_MIN_SAVED kv blocks saves less than that even with
 * a single tile in the last wave. There it gained 5-6% at 1k and ~1% at
 * 512 (item 118). Its packed instance has no softcap code
 * (SOFTCAP_OWN_KERNEL), so problems with a softcap are not packed. */
enum { SM90_PACK_MIN_SAVED_PCT = 5, SM90_SPLIT_MIN_SAVED = 12 /* see sm90_split_plan */ };

/* Kv blocks of bn keys over a row of all Sk keys (a non-causal tile's). */
static int64_t sm90_key_blocks(const fa_problem *p, int bn) { return (p->Sk + bn - 1) / bn; }

static int sm90_packed_rows(const fa_problem *p) {
    const sm90_variant v = sm90_pick(p);
    if ((v != SM90_D64_M192 && v != SM90_F8_M192) || p->has_mask || p->cu_seqlens_q) return 0;
    constexpr int f8_bn = Sm90CfgF8M192<false>::BN; /* keys a kv block of the e4m3 kernel */
    if (v == SM90_F8_M192 && (p->softcap > 0.f || sm90_key_blocks(p, f8_bn) >= 2 * SM90_SPLIT_MIN_SAVED)) return 0;
    const int64_t groups_per_head = (p->Sq + 63) / 64, tiles_per_head = (p->Sq + 191) / 192;
    if (p->Sq <= 64 || groups_per_head * 100 > 3 * tiles_per_head * (100 - SM90_PACK_MIN_SAVED_PCT)) return 0;
    return groups_per_head * p->Hq * p->B < ((int64_t)1 << 31) - 3;
}

/* A window bound (relative to the diagonal) within +-reach = Sq + Sk: past
 * that it hides the same keys, none or all (Sm90FwdParams::window_left). */
static int sm90_clamp_window(int64_t w, int64_t reach) { return (int)(w < -reach ? -reach : w > reach ? reach : w); }

/* The tile shape of a variant's kernel, as the host needs it for the tensor
 * maps and the tile count: read from its Sm90FwdConfig. */
struct Sm90Shape {
    int bm, bn;       /* query rows per tile, keys per block */
    int qk_box;       /* bytes of a Q or K row per TMA box (and its swizzle): QK_SW */
    int vt_slab_keys; /* e4m3: keys per V^T box (VT_SLAB_KEYS) */
    int d;            /* the kernel's head dim (e4m3: head-dim rows per V^T box) */
    int pair_tail;    /* the kernel deals a paired order's tail (PAIR_TAIL) */
    int split_unmasked_only; /* its split-tail kernel takes only unmasked, uncapped problems */
    int split_slot_f4s;      /* float4s a consumer thread leaves per tail piece (sm90_split_slot_f4s) */
    int short_split;         /* it has an instance that splits short last tiles (Sm90ShortSplit) */
    int row_shift;           /* it can move a head's short tile first (ROW_SHIFT) */
    int steady_unmasked;     /* it has an instance without the steady loop's masks (STEADY_UNMASKED_OWN_KERNEL) */
    int q_box_rows;          /* rows of its Q loads' box (Q_BOX_ROWS: 64 where each consumer's rows load alone) */
};

template <class Cfg> static Sm90Shape sm90_shape_of() {
    return Sm90Shape{Cfg::BM,
                     Cfg::BN,
                     Cfg::QK_SW,
                     Cfg::VT_SLAB_KEYS,
                     Cfg::D,
                     Cfg::PAIR_TAIL,
                     Cfg::SPLIT_UNMASKED_ONLY,
                     sm90_split_slot_f4s<Cfg>(),
                     Cfg::HAS_SHORT_SPLIT,
                     Cfg::ROW_SHIFT || Cfg::ROW_SHIFT_OWN_KERNEL,
                     Cfg::STEADY_UNMASKED_OWN_KERNEL,
                     Cfg::Q_BOX_ROWS};
}

/* The 16-bit output type does not change the shape: the bf16 instances stand for both. */
static Sm90Shape sm90_shape(sm90_variant v) {
    switch (v) {
    case SM90_D64_M192: return sm90_shape_of<Sm90CfgD64M192<true>>();
    case SM90_D64_M128: return sm90_shape_of<Sm90CfgD64M128<true>>();
    case SM90_D96: return sm90_shape_of<Sm90CfgD96<true, false>>();
    case SM90_D128: return sm90_shape_of<Sm90CfgD128<true, false>>();
    case SM90_D192: return sm90_shape_of<Sm90CfgWide<192, true, false>>();
    case SM90_D256: return sm90_shape_of<Sm90CfgWide<256, true, false>>();
    case SM90_F8_M192: return sm90_shape_of<Sm90CfgF8M192<false>>();
    case SM90_F8_N128: return sm90_shape_of<Sm90CfgF8N128>();
    case SM90_F8_D64: return sm90_shape_of<Sm90CfgF8D64>();
    case SM90_F8_D192: return sm90_shape_of<Sm90CfgF8D192>();
    case SM90_F8_D256: return sm90_shape_of<Sm90CfgF8D256>();
    }
    return Sm90Shape{};
}

/* Whether the variant has a kernel with the split tail (sm90_split_plan):
 * not head dim 64's (its three-consumer kernel spills with the merge, in
 * 16-bit and e4m3 alike), nor e4m3's 128-key kernel (masked problems only). */
static int sm90_has_split_tail(sm90_variant v) {
    return v == SM90_D96 || v == SM90_D128 || v == SM90_D192 || v == SM90_D256 || v == SM90_F8_M192;
}

/* e4m3: V^T in the workspace, (B, Hk, D, keys padded to whole 32-key
 * chunks); varlen (1, Hk, D, columns), sequence b's keys from column
 * sm90_fp8_vt_col0(cu_seqlens_k[b], b) on. */
static int64_t sm90_fp8_vt_cols(const fa_problem *p) {
    return p->cu_seqlens_k ? sm90_fp8_vt_col0(p->total_k, p->B) : (p->Sk + 31) / 32 * 32;
}
static size_t sm90_fp8_vt_bytes(const fa_problem *p) {
    if (p->dtype != FA_F8_E4M3) return 0; /* only e4m3 reads V^T */
    const int64_t map_b = p->cu_seqlens_k ? 1 : p->B;
    return (size_t)map_b * (size_t)p->Hk * (size_t)p->D * (size_t)sm90_fp8_vt_cols(p);
}

/* Phantom rows before each head's first (Sm90FwdParams::row_shift): under
 * a causal-like mask a query block's keys grow with its index, so the
 * short tile goes first (Sm90FwdConfig::ROW_SHIFT), where it holds the
 * fewest. A multiple of 64, so that a consumer's rows are all phantom or
 * all real; what is left short (under 64 rows) stays in the last tile's
 * last consumer. Batched problems only, and not on the instances without
 * the steady loop's masks, which have no shift (a window reaching past
 * every key makes a paired problem one of theirs; sm90_launch picks them
 * by the unshifted tiles, whose rows start together: no ROW_SHIFT kernel
 * has TOP_SKIP). */
static int sm90_row_shift(const fa_problem *p, const Sm90Shape &shape) {
    if (!shape.row_shift || p->window_right >= FA_UNBOUNDED || p->cu_seqlens_q) return 0;
    if (shape.steady_unmasked && fa_only_top_block_masked(p, shape.bm, shape.bn)) return 0;
    return (int)((shape.bm - p->Sq % shape.bm) % shape.bm / 64 * 64);
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
    const int packed = sm90_packed_rows(p);
    const int row_shift = sm90_row_shift(p, shape);
    /* packed or shifted rows: Q comes in a 64-row box per consumer */
    if (!sm90_make_map(encode ? &k->tm_q : NULL, &p->q, p->dtype, map_b, rows_q, p->Hq, D,
                       packed || row_shift ? 64 : shape.q_box_rows, shape.qk_box))
        return 0;
    if (!sm90_make_map(encode ? &k->tm_k : NULL, &p->k, p->dtype, map_b, rows_k, p->Hk, D, shape.bn, shape.qk_box))
        return 0;
    if (p->dtype == FA_F8_E4M3) {
        /* V^T (B, Hk, D, keys), varlen (1, Hk, D, columns): the map's "rows"
         * are head-dim rows, its "columns" keys */
        const int64_t cols = sm90_fp8_vt_cols(p);
        fa_view vt_view = {vt ? vt : (void *)(uintptr_t)1024, p->Hk * D * cols, cols, D * cols};
        /* boxes of the kernel's whole head dim (64 or 128 rows): rows past D
         * are zero-filled and count towards the transaction bytes the
         * producer expects (KV_BYTES); a box is one V^T slab wide
         * (Sm90FwdConfig::VT_SLAB_KEYS) */
        if (!sm90_make_map(encode ? &k->tm_v : NULL, &vt_view, FA_F8_E4M3, map_b, D, p->Hk, cols, shape.d,
                           shape.vt_slab_keys))
            return 0;
        k->q_descale = p->q_descale;
        k->k_descale = p->k_descale;
        k->v_descale = p->v_descale;
    } else if (!sm90_make_map(encode ? &k->tm_v : NULL, &p->v, p->dtype, map_b, rows_k, p->Hk, D, shape.bn,
                              shape.qk_box)) { /* V in K's slabs */
        return 0;
    }
    const fa_dtype out_dt = fa_out_dtype(p->dtype); /* bf16 for e4m3 inputs */
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
    k->row_shift = row_shift;
    const int64_t heads = p->Hq * p->B, m = k->num_m_blocks;
    int64_t tiles = k->paired ? 2 * m * ((heads + 1) / 2) : m * heads;
    k->packed_rows = packed;
    if (packed) { /* three row groups a tile */
        k->rg_div = sm90_fastdiv((int)((p->Sq + 63) / 64));
        tiles = ((p->Sq + 63) / 64 * heads + 2) / 3;
    }
    if (tiles >= ((int64_t)1 << 30)) return 0;
    k->num_tiles = (int)tiles;
    k->tail_first = k->num_tiles; /* no split tail unless fa_sm90_fwd plans one */
    k->pair_tail = k->num_tiles / 2; /* nor a paired one (sm90_pair_tail_plan) */
    k->pair_tail_count = 0;
    k->short_split = 0; /* nor split short tiles (sm90_short_split_plan) */
    k->short_first = k->num_tiles;
    k->m_div_long = k->m_div;
    k->top_left = p->top_left;
    /* clamped where they hide nothing more (fa_sm90_fwd_supports: Sq + Sk < 2^30) */
    k->window_left = sm90_clamp_window(p->window_left, p->Sq + p->Sk);
    k->window_right = sm90_clamp_window(p->window_right, p->Sq + p->Sk);
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
 * up; docs/perf/sm90.md, item 35), twice that for e4m3, whose blocks take
 * about half the time (-1..-2% where it saves 16 such blocks, +1..+2% from
 * 31 up; item 56), and each CTA's share holds at least two kv blocks. */
enum { SM90_SPLIT_MIN_SHARE = 2 }; /* (SM90_SPLIT_MIN_SAVED is defined above, where packing needs it) */

struct Sm90SplitPlan {
    int tail_tiles;      /* R: 0 = no split */
    int blocks;          /* kv blocks per tile */
    uint32_t work;       /* R * blocks */
    size_t count_bytes;  /* per (tail tile, consumer) counters, zeroed per launch */
    size_t partial_bytes;
};

static size_t sm90_align256(size_t n) { return (n + 255) / 256 * 256; }

/* True when only the highest kv block of a problem can hide a key (the
 * sequence end): every row sees keys [0, Sk) (no causal mask, no window
 * that cuts), batched. That block is the first a tile or tail piece takes
 * (a tail piece may start at any block, so the split tail's instance without
 * the steady loop's masks needs this, not fa_only_top_block_masked). A
 * row's bounds grow with the row, so the last row's lower bound and the
 * first row's upper one decide. */
static bool sm90_only_last_block_masked(const fa_problem *p) {
    if (p->cu_seqlens_q) return false;
    int64_t first_lo, first_hi, last_lo, last_hi;
    fa_key_range(p, p->Sq, p->Sk, 0, &first_lo, &first_hi);
    fa_key_range(p, p->Sq, p->Sk, p->Sq - 1, &last_lo, &last_hi);
    return last_lo == 0 && first_hi == p->Sk;
}

static Sm90SplitPlan sm90_split_plan(const fa_problem *p, const Sm90FwdParams &k, int grid) {
    Sm90SplitPlan s;
    memset(&s, 0, sizeof s);
    if (k.paired || p->window_left < FA_UNBOUNDED || p->cu_seqlens_q) return s; /* tiles of unequal work */
    if (k.packed_rows) return s; /* packed tiles have no split instance (sm90_packed_rows) */
    const sm90_variant v = sm90_pick(p);
    if (!sm90_has_split_tail(v)) return s;
    const Sm90Shape shape = sm90_shape(v);
    if (shape.split_unmasked_only && (k.softcap_pre != 0.f || !sm90_only_last_block_masked(p))) return s;
    const int tail = k.num_tiles % grid;
    if (k.num_tiles <= grid || tail == 0) return s;
    const int64_t blocks = sm90_key_blocks(p, shape.bn);
    const int64_t work = (int64_t)tail * blocks;
    if (work < (int64_t)SM90_SPLIT_MIN_SHARE * grid || work * grid >= ((int64_t)1 << 32)) return s;
    const int consumers = shape.bm / 64;
    /* idle time saved, in blocks of 128 keys x head dim 128 */
    const int64_t saved = (int64_t)(grid - tail) * blocks * shape.bn * shape.d; /* x grid * 128 * 128 */
    const int64_t min_saved = p->dtype == FA_F8_E4M3 ? 2 * SM90_SPLIT_MIN_SAVED : SM90_SPLIT_MIN_SAVED;
    if (saved < min_saved * grid * 128 * 128) return s;
    s.tail_tiles = tail;
    s.blocks = (int)blocks;
    s.work = (uint32_t)work;
    s.count_bytes = sm90_align256((size_t)tail * consumers * sizeof(int));
    /* one slot per piece: pieces are numbered c + r < grid + tail - 1 (sm90_split_slot) */
    s.partial_bytes = (size_t)(grid + tail - 1) * consumers * shape.split_slot_f4s * 128 * sizeof(float4);
    return s;
}

/* The paired order's balanced tail (sm90_tile_after). With U units (pairs
 * of query blocks of equal work) on G CTAs, the last round holds U mod G of
 * them and the other CTAs idle for a unit's time: 3% of the time on every
 * causal cell of the standard grid (2048 units on 132 CTAs: 15.5 rounds).
 * The last X = U mod G + kk G units go out as single tiles instead, largest
 * first, in a snake; kk (0..3) is the one that ends first by a cost model in
 * which a tile costs its kv blocks plus SM90_TILE_BOUNDARY_TENTHS / 10 of
 * one (its start and end: docs/perf/sm90.md, item 59), if that beats whole
 * units round-robin. kk > 0 only while the tail's heads' K and V fit
 * SM90_PAIR_TAIL_L2 bytes: the tail interleaves its heads, which should then
 * still read their K/V from L2. With fewer units than CTAs every tile is in
 * the tail. Batched problems only (the host does not know a varlen
 * sequence's length), up to SM90_PAIR_TAIL_MAX query blocks a head (the
 * plan's cost table), and only for kernels with Sm90FwdConfig::PAIR_TAIL. */
enum { SM90_TILE_BOUNDARY_TENTHS = 17 };
static const int64_t SM90_PAIR_TAIL_L2 = (int64_t)32 << 20;

/* Grid of the launch: one persistent CTA per SM, fewer for small problems.
 * The paired order hands out whole units, then its tail's single tiles
 * (the tail starts after whole rounds of the grid). */
static int sm90_grid(const Sm90FwdParams &k, int sms) {
    int work = k.num_tiles;
    if (k.paired) work = !k.pair_tail_count ? k.num_tiles / 2 : k.pair_tail ? sms : k.pair_tail_count;
    return work < sms ? work : sms;
}

/* Deals the tail of units [first, units) on G CTAs: tiles by query block,
 * last first (a causal-like mask's work grows with it), and within one by
 * unit. Adds each tile's cost to its CTA's load; writes the tile list when
 * `tiles` is given. Returns the number of tiles. */
static int sm90_pair_tail_deal(const Sm90FwdParams *k, int first, int units, int G, const int *cost, int64_t *load,
                               uint16_t *tiles) {
    const int M = k->num_m_blocks, heads = k->hq * k->batch;
    int n = 0;
    for (int m = M - 1; m >= 0; --m)
        for (int h = 0; h < 2; ++h) {
            const int j = h ? m : M - 1 - m; /* the units whose half h is block m: block M-1-j (h = 0) or j (h = 1) */
            for (int u = first + (j - first % M + M) % M; u < units; u += M) { /* the first such unit from `first` on */
                if (h == 0 && 2 * (u / M) + 1 >= heads) continue; /* past the last head */
                const int pass = n / G, c = pass % 2 ? G - 1 - n % G : n % G;
                load[c] += cost[m];
                if (tiles) tiles[n] = (uint16_t)(2 * (u - first) + h);
                ++n;
            }
        }
    return n;
}

static void sm90_pair_tail_plan(const fa_problem *p, Sm90FwdParams *k, int sms) {
    enum { MAX_SMS = 1024 };
    const int units = k->num_tiles / 2, M = k->num_m_blocks;
    if (!k->paired || p->cu_seqlens_q || units == 0 || M > SM90_PAIR_TAIL_MAX || sms > MAX_SMS) return;
    const Sm90Shape shape = sm90_shape(sm90_pick(p));
    if (!shape.pair_tail) return;
    int cost[SM90_PAIR_TAIL_MAX]; /* a tile's cost in tenths of a kv block, by query block (as sm90_decode_tile) */
    for (int m = 0; m < M; ++m) {
        /* the block's real rows [i0, i1] (the first block starts row_shift rows early) */
        const int64_t r0 = (int64_t)m * shape.bm - k->row_shift, i0 = r0 > 0 ? r0 : 0;
        const int64_t i1 = (r0 + shape.bm < p->Sq ? r0 + shape.bm : p->Sq) - 1;
        int64_t lo, hi, lo1, hi1; /* a band mask: the first row's lower bound, the last row's upper one */
        fa_key_range(p, p->Sq, p->Sk, i0, &lo, &hi1);
        fa_key_range(p, p->Sq, p->Sk, i1, &lo1, &hi);
        const int64_t blocks = hi <= lo ? 0 : (hi + shape.bn - 1) / shape.bn - lo / shape.bn;
        cost[m] = (int)(blocks < (1 << 20) ? blocks : (1 << 20)) * 10 + SM90_TILE_BOUNDARY_TENTHS;
    }
    int64_t group = 0; /* the cost of M units: both halves of every query block */
    for (int m = 0; m < M; ++m) group += 2 * cost[m];
    const int64_t heads = (int64_t)k->hq * k->batch;
    const int64_t head_kv_bytes = 2 * p->Sk * p->D * (p->dtype == FA_F8_E4M3 ? 1 : 2);
    const int dead = heads % 2 ? M : 0; /* odd heads: the last pair's first halves do not exist */
    /* Round-robin whole units, the plan to beat: ceil(U / G) units of average cost. */
    const int plain_g = units < sms ? units : sms;
    const int64_t plain_span = (int64_t)((units + plain_g - 1) / plain_g) * group / M;
    int64_t load[MAX_SMS], best_span = plain_span;
    int best_first = -1, best_g = 0;
    for (int kk = 0; kk < 4; ++kk) {
        int first, G;
        if (units <= sms) { /* every tile in the tail */
            if (kk) break;
            first = 0;
            G = 2 * units - dead < sms ? 2 * units - dead : sms;
        } else {
            const int r = units % sms;
            if (r == 0) return; /* whole rounds already */
            first = units - r - kk * sms;
            G = sms;
        }
        if (first < 0 || 2 * (units - first) > SM90_PAIR_TAIL_MAX) break;
        const int64_t tail_heads = 2 * ((units - 1) / M - first / M + 1);
        if (kk && tail_heads * head_kv_bytes > SM90_PAIR_TAIL_L2) break;
        int64_t full = (int64_t)(first / M) * group; /* the whole units before the tail, shared out evenly */
        for (int j = 0; j < first % M; ++j) full += cost[M - 1 - j] + cost[j];
        memset(load, 0, (size_t)G * sizeof load[0]);
        sm90_pair_tail_deal(k, first, units, G, cost, load, NULL);
        int64_t most = 0;
        for (int c = 0; c < G; ++c) most = load[c] > most ? load[c] : most;
        const int64_t span = full / G + most;
        if (span < best_span) best_span = span, best_first = first, best_g = G;
    }
    if (best_first < 0) return;
    memset(load, 0, (size_t)best_g * sizeof load[0]);
    const int n = sm90_pair_tail_deal(k, best_first, units, best_g, cost, load, k->pair_tail_tile);
    k->pair_tail = best_first;
    k->pair_tail_count = n;
    k->num_tiles = 2 * best_first + 2 * n; /* tail positions carry their pass's parity (sm90_tile_after) */
    k->tail_first = k->num_tiles; /* (no split tail) */
}

/* Short last tiles (Sm90ShortSplit): where a head's last query block holds
 * at most 64 rows on the three-consumer head-dim-64 kernel (1024 = 5 x 192
 * + 64 queries, 4096 = 21 x 192 + 64, or every tile for up to 64), those
 * tiles can go after all others with their kv blocks split among the
 * consumers. Taken where that ends the run sooner by a cost model: on G
 * CTAs the whole tiles go round-robin, then the short ones from the CTA
 * after the last whole tile; a short tile costs SM90_SHORT_TENTHS / 10 of
 * a whole one split (1 unsplit, as dealt now), and the instance's own cost
 * (no joined tile boundary, its checks) is SM90_SHORT_OVERHEAD_PCT % of
 * the run (docs/perf/sm90.md, item 109). Unmasked-order problems (not
 * paired), batched, with at least a kv block per consumer. */
enum { SM90_SHORT_TENTHS = 7, SM90_SHORT_OVERHEAD_PCT = 3 };

static void sm90_short_split_plan(const fa_problem *p, Sm90FwdParams *k, int sms) {
    const Sm90Shape shape = sm90_shape(sm90_pick(p));
    const int64_t rows_left = p->Sq % shape.bm;
    if (!shape.short_split || k->paired || k->packed_rows || p->cu_seqlens_q || rows_left == 0 || rows_left > 64)
        return;
    if (p->Sk <= 2 * (int64_t)shape.bn) return; /* fewer blocks than consumers: nothing to split */
    const int64_t heads = p->Hq * p->B, whole = (k->num_m_blocks - 1) * heads;
    const int64_t G = k->num_tiles < sms ? k->num_tiles : sms;
    const int64_t now = (k->num_tiles + G - 1) / G * 10; /* tenths of a whole tile */
    const int64_t whole_each = whole / G, whole_left = whole % G, short_each = heads / G, short_left = heads % G;
    int64_t split = 0; /* the busiest CTA's time, split */
    for (int64_t c = 0; c < G; ++c) {
        const int64_t own_whole = whole_each + (c < whole_left);
        const int64_t own_short = short_each + ((c - whole_left + G) % G < short_left);
        const int64_t span = own_whole * 10 + own_short * SM90_SHORT_TENTHS;
        split = span > split ? span : split;
    }
    if (split * (100 + SM90_SHORT_OVERHEAD_PCT) >= now * 100) return;
    k->short_split = 1;
    k->short_first = (int)whole;
    k->m_div_long = sm90_fastdiv(k->num_m_blocks - 1);
}

/* Workspace: e4m3's V^T first, then the split tail's counters and parts
 * (where the plan splits). */
static size_t sm90_split_offset(const fa_problem *p) {
    return sm90_align256(sm90_fp8_vt_bytes(p));
}
static size_t sm90_workspace_bytes(const fa_problem *p, const Sm90SplitPlan &s) {
    if (!s.tail_tiles) return sm90_fp8_vt_bytes(p);
    return sm90_split_offset(p) + s.count_bytes + s.partial_bytes;
}

/* Whether the Hopper forward takes the problem, the driver's tensor-map
 * encoder aside (fa_sm90_fwd_supports). */
static int sm90_fwd_takes(const fa_problem *p) {
    if (p->dtype != FA_BF16 && p->dtype != FA_F16 && p->dtype != FA_F8_E4M3) return 0;
    if (p->D != p->Dv || !sm90_head_dim_ok(p->D)) return 0;
    /* e4m3: head dims up to 256 in steps of 16 (on the head-dim-64, 128,
     * 192 or 256 kernel; TMA zero-fills the columns past D and clips them
     * from the stores). */
    if (p->dtype == FA_F8_E4M3 && (p->D % 16 || p->D > 256)) return 0;
    /* ... and V, which the transpose reads in 32-bit words, aligned as TMA wants the others */
    if (p->dtype == FA_F8_E4M3 && (((uintptr_t)p->v.data) % 16 || p->v.ss % 16 || p->v.sh % 16 || p->v.sb % 16))
        return 0;
    if (p->seqlens_k || p->block_table || p->k_new.data) return 0;
    if (!p->cu_seqlens_q != !p->cu_seqlens_k) return 0;
    if (p->cu_seqlens_q) {
        /* Packed row coordinates (first row + offset in the sequence) stay in int. */
        if (p->total_q < 1 || p->total_k < 1 || p->total_q >= ((int64_t)1 << 30) || p->total_k >= ((int64_t)1 << 30))
            return 0;
    }
    if (p->alibi || p->dropout_p != 0.f) return 0;
    if (!(p->scale > 0.f)) return 0; /* the running max assumes logits grow with q.k */
    /* Sq + Sk < 2^30: the kernel's key bounds in 32 bits (Sm90FwdParams::window_left) */
    if (p->B < 1 || p->Sq < 1 || p->Sk < 1 || p->Sq + p->Sk >= ((int64_t)1 << 30)) return 0;
    if (p->Hq > 65535 || p->Hq % p->Hk) return 0;
    Sm90FwdParams k;
    return sm90_fill_params(p, &k, NULL, 0);
}

extern "C" int fa_sm90_fwd_supports(const fa_problem *p) { return sm90_encode_fn() && sm90_fwd_takes(p); }

extern "C" size_t fa_sm90_fwd_workspace(const fa_problem *p, const fa_exec *x) {
    Sm90FwdParams k;
    if (!sm90_encode_fn() || !sm90_fill_params(p, &k, NULL, 0)) return 0;
    return sm90_workspace_bytes(p, sm90_split_plan(p, k, sm90_num_sms(x->device_index)));
}

/* e4m3: writes V^T (B, Hk, D, keys), or for varlen problems (cu_seqlens_k
 * given) (1, Hk, D, cols), with each 32-key chunk's keys permuted to the P
 * fragment order (sm90_fp8_key_of_slot). A (batch, kv head) pair's keys
 * fill its span of columns from the first, and the span's columns past its
 * keys are zero: batched, keys past Sk up to the next 32; varlen, sequence
 * b's span is the columns from sm90_fp8_vt_col0(cu_seqlens_k[b], b) to
 * sequence b + 1's first, so every column is written. A CTA takes tiles of
 * 128 columns of a span (blockIdx.x, + gridDim.x, ...) of the pairs
 * blockIdx.y, blockIdx.y + gridDim.y, ..., 128 head-dim columns at a
 * time. Warp w loads keys 16w..16w+15 of the tile, lane l columns
 * 4l..4l+3 of the 128, one 32-bit word per key (so each load instruction
 * reads a key's row, or its 128 columns of it above head dim 128), moves the
 * bytes into V^T order with byte permutes and stores 16 slots of each of
 * its 4 V^T rows to shared memory; the CTA then writes those V^T rows with
 * 16-byte stores, whole rows at a time. */
__global__ void __launch_bounds__(256) sm90_fp8_transpose_v(const uint8_t *v, int64_t v_sb, int64_t v_ss,
                                                            int64_t v_sh, int sk, int d, int cols, int hk,
                                                            int pairs, const int *cu_seqlens_k, uint8_t *vt) {
    __shared__ __align__(16) uint8_t vt_tile[128][128 + 16]; /* + 16: a warp's rows start 4 banks apart */
    const int lane = threadIdx.x % 32, part = threadIdx.x / 32; /* part: keys 16 part .. 16 part + 15 */
    const int col_tiles = (d + 127) / 128;                        /* 128-column groups of the head dim */
    grid_launch_dependents(); /* the attention kernel may start; it waits before reading V^T */
    for (int bh = blockIdx.y; bh < pairs; bh += gridDim.y) { /* bh = b * hk + h */
        const int b = bh / hk, h = bh % hk;
        const uint8_t *src; /* the pair's first key, column 4 lane */
        uint8_t *dst;       /* its first V^T column, head-dim row 0 */
        int keys, span;
        if (cu_seqlens_k) {
            const int k0 = cu_seqlens_k[b], k1 = cu_seqlens_k[b + 1];
            const int64_t c0 = sm90_fp8_vt_col0(k0, b);
            src = v + (int64_t)k0 * v_ss + (int64_t)h * v_sh + 4 * lane;
            dst = vt + (int64_t)h * d * cols + c0;
            keys = k1 - k0;
            span = (int)(sm90_fp8_vt_col0(k1, b + 1) - c0);
        } else {
            src = v + (int64_t)b * v_sb + (int64_t)h * v_sh + 4 * lane;
            dst = vt + (int64_t)bh * d * cols;
            keys = sk;
            span = cols;
        }
        const int key_tiles = (span + 127) / 128;
        for (int tile = blockIdx.x; tile < key_tiles * col_tiles; tile += gridDim.x) {
            /* the tile's first key and first head-dim column */
            const int key0 = tile % key_tiles * 128, col0 = tile / key_tiles * 128;
            const int tile_keys = min(128, span - key0); /* a multiple of 32 */
            const int rows = min(128, d - col0);          /* the tile's V^T rows */
            if (4 * lane < rows && 16 * part < tile_keys) {
                uint32_t w[16]; /* w[k]: key key0 + 16 part + k, columns col0 + 4 lane .. col0 + 4 lane + 3 */
#pragma unroll
                for (int k = 0; k < 16; ++k) {
                    const int key = key0 + 16 * part + k;
                    w[k] = key < keys ? *reinterpret_cast<const uint32_t *>(src + key * v_ss + col0) : 0u;
                }
#pragma unroll
                for (int r = 0; r < 4; ++r) {              /* V^T row col0 + 4 lane + r: byte r of every key */
                    const uint32_t sel = r | (4 + r) << 4; /* byte r of the first word, byte r of the second */
                    uint32_t out[4];                       /* slots 4q .. 4q + 3 of the 16 */
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        /* each 16-key half of a chunk is permuted within itself: slot a < 16
                         * of a half holds key sm90_fp8_key_of_slot(a) of that half */
                        const uint32_t lo =
                            __byte_perm(w[sm90_fp8_key_of_slot(4 * q)], w[sm90_fp8_key_of_slot(4 * q + 1)], sel);
                        const uint32_t hi =
                            __byte_perm(w[sm90_fp8_key_of_slot(4 * q + 2)], w[sm90_fp8_key_of_slot(4 * q + 3)], sel);
                        out[q] = __byte_perm(lo, hi, 0x5410);
                    }
                    *reinterpret_cast<uint4 *>(&vt_tile[4 * lane + r][16 * part]) =
                        make_uint4(out[0], out[1], out[2], out[3]);
                }
            }
            __syncthreads();
            const int pieces = tile_keys / 16; /* 16-byte pieces of a V^T row in this tile */
            for (int c = threadIdx.x; c < rows * pieces; c += blockDim.x) {
                const int row = c / pieces, piece = c % pieces;
                *reinterpret_cast<uint4 *>(dst + (int64_t)(col0 + row) * cols + key0 + 16 * piece) =
                    *reinterpret_cast<const uint4 *>(&vt_tile[row][16 * piece]);
            }
            __syncthreads(); /* the tile buffer is free for the next tile */
        }
    }
}

/* The rows that start their kv blocks together: a tile's, or with TOP_SKIP
 * each consumer's 64 (consumer 0 then starts at its own highest block), so
 * that the instance without the steady loop's masks takes every problem
 * where only each such group's highest block hides a key: with TOP_SKIP
 * at head dims 192 and 256 every causal problem with Sq = Sk. */
template <class Cfg> static constexpr int64_t sm90_mask_rows() {
    return Cfg::TOP_SKIP ? 64 : Cfg::BM;
}

#ifdef FA_SM90_SCHEDULE_TEST
/* tests/test_sm90_schedule.cu: walks an instance's tiles on the host, as
 * its CTAs would, instead of launching it. */
template <class Cfg>
static fa_status sm90_schedule_test_walk(const fa_problem *p, const Sm90FwdParams &k, const fa_exec *x);
#endif

template <class Cfg>
static fa_status sm90_launch_instance(const fa_problem *p, const Sm90FwdParams &k, const fa_exec *x) {
    /* an instance without the softcap's code would ignore it, one without
     * the steady loop's masks would show hidden keys, the short-tile split's
     * would leave rows unwritten: only sm90_launch picks */
    if (!Cfg::SOFTCAP && k.softcap_pre != 0.f)
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: softcap given to a kernel compiled without it");
    if (!Cfg::STEADY_MASKS && !fa_only_top_block_masked(p, sm90_mask_rows<Cfg>(), Cfg::BN))
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: a masked problem given to a kernel without masks");
    if (!Cfg::VARLEN && p->cu_seqlens_q)
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: a varlen problem given to a kernel without varlen");
    /* the split instance writes only the first 64 rows of each last query block */
    if (Cfg::SHORT_SPLIT && !k.short_split)
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: short-tile split without its plan");
    /* a kernel without the shift would put the rows where they were */
    if (!Cfg::ROW_SHIFT && k.row_shift)
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: shifted rows given to a kernel without the shift");
    /* packed tiles and the others number their tiles differently */
    if (Cfg::PACKED_ROWS != (k.packed_rows != 0))
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: row-group packing and the kernel disagree");
#ifdef FA_SM90_SCHEDULE_TEST
    return sm90_schedule_test_walk<Cfg>(p, k, x);
#endif
    static unsigned long long smem_set = 0; /* devices this instance was configured on */
    cudaError_t e = smem_limit_once(sm90_fwd_kernel<Cfg>, Cfg::SMEM_BYTES, x->device_index, &smem_set);
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm90 forward: %s", cudaGetErrorString(e));
    const int grid = sm90_grid(k, sm90_num_sms(x->device_index));
    /* e4m3: the kernel may start while the V transpose ahead of it finishes
     * (its CTAs take the SMs the transpose leaves, and load Q and K); its V
     * loader waits for the transpose (grid_dependency_wait). The 16-bit
     * kernels launch as usual: launched early too, they measured level at
     * best (docs/perf/sm90.md, item 110). */
    e = sm90_launch_kernel(sm90_fwd_kernel<Cfg>, dim3((unsigned)grid), dim3(Cfg::THREADS), Cfg::SMEM_BYTES,
                           (cudaStream_t)x->stream, Cfg::FP8, k);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm90 forward launch: %s", cudaGetErrorString(e));
    return FA_OK;
}

/* Tiles of at most this many kv blocks take the joined instance (Sm90Joined):
 * at 4 (512 keys, head dim 128) it measured +3.6..+5.3% on four H100s; at
 * 8 0.990-1.007, at 16 0.977-0.999 and at 32 0.989 (docs/perf/sm90.md,
 * items 152 and 153). */
enum { SM90_JOIN_MAX_BLOCKS = 4 };

/* Cfg's kernel, or its instance that splits short last tiles where the
 * plan in k has them (sm90_short_split_plan), or its instance with the
 * rows shifted where it has one and k shifts them (Sm90RowShift), or its
 * softcap instance where it has one and the problem has a softcap, or its
 * joined instance without the steady loop's masks where it has one and the
 * problem has no causal mask or window and short tiles (Sm90Joined,
 * SM90_JOIN_MAX_BLOCKS), or its instance without
 * the steady loop's masks where it has one and the problem needs none (the
 * only instance of a split-tail kernel with SPLIT_UNMASKED_ONLY), or its
 * varlen instance (with the softcap, where Cfg has a softcap instance and
 * the problem a softcap) where it has one and the problem is varlen (never
 * split: sm90_split_plan). */
template <class Cfg>
static fa_status sm90_launch(const fa_problem *p, const Sm90FwdParams &k, const fa_exec *x) {
    if constexpr (Cfg::SPLIT_TAIL && Cfg::SPLIT_UNMASKED_ONLY) {
        return sm90_launch_instance<Sm90SteadyUnmasked<Cfg>>(p, k, x); /* the only problems split (sm90_split_plan) */
    } else {
        if constexpr (Cfg::VARLEN_OWN_KERNEL && !Cfg::SPLIT_TAIL) {
            if constexpr (Cfg::SOFTCAP_OWN_KERNEL) /* the varlen instance without the softcap, and with it */
                if (p->cu_seqlens_q && k.softcap_pre != 0.f)
                    return sm90_launch_instance<Sm90Varlen<Sm90Softcap<Cfg>>>(p, k, x);
            if (p->cu_seqlens_q) return sm90_launch_instance<Sm90Varlen<Cfg>>(p, k, x);
        }
        if constexpr (Cfg::HAS_PACKED_ROWS && !Cfg::PACKED_ROWS)
            if (k.packed_rows) return sm90_launch_instance<Sm90PackedRows<Cfg>>(p, k, x);
        if constexpr (Cfg::HAS_SHORT_SPLIT && !Cfg::SHORT_SPLIT)
            if (k.short_split) return sm90_launch_instance<Sm90ShortSplit<Cfg>>(p, k, x);
        if constexpr (Cfg::ROW_SHIFT_OWN_KERNEL && !Cfg::ROW_SHIFT)
            if (k.row_shift) return sm90_launch_instance<Sm90RowShift<Cfg>>(p, k, x);
        if constexpr (Cfg::SOFTCAP_OWN_KERNEL)
            if (k.softcap_pre != 0.f) return sm90_launch_instance<Sm90Softcap<Cfg>>(p, k, x);
        if constexpr (Cfg::HAS_JOINED)
            if (!p->has_mask && sm90_key_blocks(p, Cfg::BN) <= SM90_JOIN_MAX_BLOCKS &&
                fa_only_top_block_masked(p, sm90_mask_rows<Cfg>(), Cfg::BN))
                return sm90_launch_instance<Sm90SteadyUnmasked<Sm90Joined<Cfg>>>(p, k, x);
        if constexpr (Cfg::STEADY_UNMASKED_OWN_KERNEL)
            if (fa_only_top_block_masked(p, sm90_mask_rows<Cfg>(), Cfg::BN))
                return sm90_launch_instance<Sm90SteadyUnmasked<Cfg>>(p, k, x);
        return sm90_launch_instance<Cfg>(p, k, x);
    }
}

/* The SPLIT_TAIL kernel where the plan in k shares the last wave out, else
 * the plain one. */
template <class Plain, class Split>
static fa_status sm90_launch_tail(const fa_problem *p, const Sm90FwdParams &k, const fa_exec *x) {
    return k.tail_first < k.num_tiles ? sm90_launch<Split>(p, k, x) : sm90_launch<Plain>(p, k, x);
}

/* The wide head dims (192, 256): the split-tail kernel where the plan
 * splits (as sm90_launch_tail). Else batched problems with no causal mask or
 * window, over more than SM90_WIDE_TOP_SKIP_MAX_BLOCKS kv blocks, run an
 * instance without TOP_SKIP (at head dim 256 also without consumer 0's own
 * O buffer), and without the steady loop's masks (only a tile's highest kv
 * block can hold a hidden key). The skip never applies to them; at head dim
 * 256 the buffer shortens the tile boundary but gives the steady loop a
 * slower schedule: without it 2k keys ran 0.5-2.4% faster (two H200s), 1k
 * level and 512 2.1% slower (docs/perf/sm90.md, item 120). */
enum { SM90_WIDE_TOP_SKIP_MAX_BLOCKS = 16 };
template <int D, bool BF16>
static fa_status sm90_launch_wide(const fa_problem *p, const Sm90FwdParams &k, const fa_exec *x) {
    if (k.tail_first < k.num_tiles) return sm90_launch<Sm90CfgWide<D, BF16, true>>(p, k, x);
    using Unskipped = Sm90CfgWide<D, BF16, false, false>;
    if (!p->has_mask && !p->cu_seqlens_q && sm90_key_blocks(p, Unskipped::BN) > SM90_WIDE_TOP_SKIP_MAX_BLOCKS)
        return sm90_launch_instance<Sm90SteadyUnmasked<Unskipped>>(p, k, x);
    return sm90_launch<Sm90CfgWide<D, BF16, false>>(p, k, x);
}

template <bool BF16>
static fa_status sm90_dispatch(const fa_problem *p, const Sm90FwdParams &k, const fa_exec *x) {
    switch (sm90_pick(p)) {
    case SM90_D64_M192: return sm90_launch<Sm90CfgD64M192<BF16>>(p, k, x);
    case SM90_D64_M128: return sm90_launch<Sm90CfgD64M128<BF16>>(p, k, x);
    case SM90_D96: return sm90_launch_tail<Sm90CfgD96<BF16, false>, Sm90CfgD96<BF16, true>>(p, k, x);
    case SM90_D128: return sm90_launch_tail<Sm90CfgD128<BF16, false>, Sm90CfgD128<BF16, true>>(p, k, x);
    case SM90_D192: return sm90_launch_wide<192, BF16>(p, k, x);
    case SM90_D256: return sm90_launch_wide<256, BF16>(p, k, x);
    case SM90_F8_M192:
    case SM90_F8_N128:
    case SM90_F8_D64:
    case SM90_F8_D192:
    case SM90_F8_D256: break; /* launched by fa_sm90_fwd */
    }
    return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: no kernel for head dim %lld", (long long)p->D);
}

/* The tile plan of a launch on `ctas` CTAs, in k: the paired order's tail,
 * the short-tile split and the split tail, the last where the workspace
 * (workspace_bytes at workspace) has room for it; a caller without one gets
 * whole tiles. Returns the bytes of split-tail counters the launch must
 * zero (at k->split_count; 0: no split tail). */
static size_t sm90_plan_tiles(const fa_problem *p, Sm90FwdParams *k, int ctas, void *workspace,
                              size_t workspace_bytes) {
    sm90_pair_tail_plan(p, k, ctas);
    sm90_short_split_plan(p, k, ctas);
    const Sm90SplitPlan split = sm90_split_plan(p, *k, ctas);
    if (!split.tail_tiles || !workspace || workspace_bytes < sm90_workspace_bytes(p, split)) return 0;
    uint8_t *ws = (uint8_t *)workspace + sm90_split_offset(p);
    k->split_count = (int *)ws;
    k->split_partial = (float4 *)(ws + split.count_bytes);
    k->tail_first = k->num_tiles - split.tail_tiles;
    k->num_tiles = k->tail_first + 2 * ctas; /* two pieces per CTA (sm90_tile_after) */
    k->split_blocks = split.blocks;
    k->split_work = split.work;
    return split.count_bytes;
}

/* The kernel of the problem's variant (sm90_pick) and plan. */
static fa_status sm90_launch_variant(const fa_problem *p, const Sm90FwdParams &k, const fa_exec *x) {
    if (p->dtype == FA_F8_E4M3) {
        switch (sm90_pick(p)) {
        case SM90_F8_M192:
            if (k.packed_rows) return sm90_launch_instance<Sm90CfgF8M192Packed>(p, k, x);
            return sm90_launch_tail<Sm90CfgF8M192<false>, Sm90CfgF8M192<true>>(p, k, x);
        case SM90_F8_D64: return sm90_launch<Sm90CfgF8D64>(p, k, x);
        case SM90_F8_D192: return sm90_launch<Sm90CfgF8D192>(p, k, x);
        case SM90_F8_D256: return sm90_launch<Sm90CfgF8D256>(p, k, x);
        default: return sm90_launch<Sm90CfgF8N128>(p, k, x);
        }
    }
    return p->dtype == FA_BF16 ? sm90_dispatch<true>(p, k, x) : sm90_dispatch<false>(p, k, x);
}

extern "C" fa_status fa_sm90_fwd(const fa_problem *p, const fa_exec *x) {
    Sm90FwdParams k;
    const int fp8 = p->dtype == FA_F8_E4M3;
    if (fp8 && (!x->workspace || x->workspace_bytes < sm90_fp8_vt_bytes(p)))
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: float8 needs %zu bytes of workspace", sm90_fp8_vt_bytes(p));
    if (!sm90_fill_params(p, &k, fp8 ? x->workspace : NULL, 1))
        return fa_set_error(FA_ERR_INTERNAL, "sm90 forward: problem is not addressable by TMA");
    if (k.num_tiles == 0) return FA_OK;
    /* the persistent grid's CTAs (sm90_launch) */
    const size_t count_bytes = sm90_plan_tiles(p, &k, sm90_num_sms(x->device_index), x->workspace, x->workspace_bytes);
    if (count_bytes) {
        cudaError_t e = cudaMemsetAsync(k.split_count, 0, count_bytes, (cudaStream_t)x->stream);
        if (e != cudaSuccess)
            return fa_set_error(FA_ERR_CUDA, "sm90 forward: split counters: %s", cudaGetErrorString(e));
    }
    if (fp8) {
        const int cols = (int)sm90_fp8_vt_cols(p);
        const int pairs = (int)(p->B * p->Hk); /* (batch, kv head) pairs: grid rows, looped past 65535 */
        /* a pair's span: batched, all columns; varlen, at most 63 past its
         * sequence's keys (Sk: the longest; the CTAs loop past that) */
        const int64_t span = p->cu_seqlens_k ? p->Sk + 63 : cols;
        const int64_t tiles = (span + 127) / 128 * ((p->D + 127) / 128); /* of 128 keys x 128 head-dim columns */
        const dim3 grid((unsigned)tiles, (unsigned)(pairs < 65535 ? pairs : 65535));
        sm90_fp8_transpose_v<<<grid, 256, 0, (cudaStream_t)x->stream>>>(
            (const uint8_t *)p->v.data, p->v.sb, p->v.ss, p->v.sh, (int)p->Sk, (int)p->D, cols, (int)p->Hk, pairs,
            p->cu_seqlens_k, (uint8_t *)x->workspace);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm90 forward: V transpose: %s", cudaGetErrorString(e));
    }
    return sm90_launch_variant(p, k, x);
}
