/*
 * Hopper forward: a consumer's steps on one kv block: the Q K^T and P V
 * issues, the masks, the online softmax (row maxima, exponentials, O's
 * rescale) and P's packing for the P V GEMM.
 */
#ifndef FA_SM90_FWD_SOFTMAX_CUH
#define FA_SM90_FWD_SOFTMAX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>

#include "sm90_fwd_schedule.cuh"
#include "sm90_ptx.cuh"
#include "sm90_wgmma.cuh"

/* Descriptors of the Q buffers and K stages (K-major), of the V stages and
 * of P in shared memory (P_SMEM). V is [key][d], an MN-major B operand whose
 * column slabs (QK_SW bytes: 64 columns, 32 at head dim 96) lie KV_SLAB
 * bytes apart (the LBO); for e4m3, V^T is
 * [d][key], K-major like K. A consumer builds each buffer's or ring's
 * first one once and steps to the others with one add (DescSw::shifted),
 * instead of a mask, a shift and an or from the address between a stage's
 * wait and its first wgmma. */
template <class Cfg> using Sm90QKDesc = DescSw<Cfg::QK_SW>;
template <class Cfg> using Sm90VDesc = DescSw<Cfg::FP8 ? Cfg::VT_SLAB_KEYS : Cfg::QK_SW>;
template <class Cfg> __device__ __forceinline__ Sm90QKDesc<Cfg> sm90_qk_desc(uint32_t addr) {
    return Sm90QKDesc<Cfg>(addr, 16);
}
template <class Cfg> __device__ __forceinline__ Sm90VDesc<Cfg> sm90_v_desc(uint32_t v_addr) {
    return Sm90VDesc<Cfg>(v_addr, Cfg::FP8 ? 16 : Cfg::KV_SLAB);
}

/* Issue S = Q K^T for this warpgroup's 64 rows (one commit group). */
template <class Cfg>
__device__ __forceinline__ void sm90_issue_qk(float *S, const Sm90QKDesc<Cfg> &qd, const Sm90QKDesc<Cfg> &kd) {
    fence_regs<Cfg::BN / 2>(S);
    constexpr int STEPS = Cfg::QK_SW / 32; /* k-steps per slab */
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < Cfg::D * Cfg::ES / 32; ++k) {
        /* k-step k: slab k / STEPS, 32 bytes (16 elements, 32 for e4m3) per step inside the slab */
        uint32_t off = (k % STEPS) * 32;
        wgmma_ss<Cfg::BN, Cfg::BF16, Cfg::FP8>(S, qd.at((k / STEPS) * Cfg::Q_SLAB + off),
                                               kd.at((k / STEPS) * Cfg::KV_SLAB + off),
                                               k > 0);
    }
    wgmma_commit();
    fence_regs<Cfg::BN / 2>(S);
}

/* LAG_MAX: the descriptor of the block of ones (Sm90FwdConfig::ONES_BYTES)
 * that P is multiplied by for its row sums. No swizzle; its two core
 * matrices (8 rows of 16 bytes) lie 128 bytes apart, given as both the
 * leading and the stride offset, so that every byte read is a one. */
__device__ __forceinline__ uint64_t sm90_ones_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(128 >> 4) << 32);
}

/* Issue O (+)= P V (one commit group). P comes from registers, or with
 * P_SMEM from this warpgroup's buffer (pd: K-major like Q, one 128-byte slab).
 * LAG_MAX: in the same group, L (+)= P times the block of ones (ones_desc):
 * each row's sum of its packed P, in every column of the m64n8 accumulator
 * (L[0], L[1]: the thread's row g; L[2], L[3]: row g + 8). */
template <class Cfg>
__device__ __forceinline__ void sm90_issue_pv(float *O, uint32_t *P, const DescSw128 &pd, const Sm90VDesc<Cfg> &vd,
                                              int accumulate, float *L = nullptr, uint64_t ones_desc = 0) {
    fence_regs<Cfg::D / 2>(O);
    if constexpr (Cfg::LAG_MAX) fence_regs<4>(L);
    if (!Cfg::P_SMEM) fence_regs<Cfg::P_REGS>(P);
    wgmma_fence();
    if constexpr (Cfg::FP8) {
        /* V^T: 32 keys (32 B) per k-step */
        constexpr int STEPS = Cfg::VT_SLAB_KEYS / 32; /* k-steps per slab */
#pragma unroll
        for (int k = 0; k < Cfg::BN / 32; ++k) {
            const uint64_t vk = vd.at((k / STEPS) * Cfg::VT_SLAB + (k % STEPS) * 32);
            if constexpr (Cfg::P_SMEM)
                wgmma_ss<Cfg::D, Cfg::BF16, true>(O, pd.at(k * 32), vk, accumulate || k > 0);
            else
                wgmma_rs<Cfg::D, Cfg::BF16, true>(O, P + 4 * k, vk, accumulate || k > 0);
        }
    } else {
#pragma unroll
        for (int k = 0; k < Cfg::BN / 16; ++k) /* 16 keys (rows of a V slab) per k-step */
            wgmma_rs<Cfg::D, Cfg::BF16, false>(O, P + 4 * k, vd.at(k * 16 * Cfg::QK_SW), accumulate || k > 0);
        if constexpr (Cfg::LAG_MAX)
#pragma unroll
            for (int k = 0; k < Cfg::BN / 16; ++k)
                wgmma_rs_k<8, Cfg::BF16>(L, P + 4 * k, ones_desc, accumulate || k > 0);
    }
    wgmma_commit();
    fence_regs<Cfg::D / 2>(O);
    if constexpr (Cfg::LAG_MAX) fence_regs<4>(L);
}

/* True when block n holds a key hidden from one of this thread's two rows
 * (a thread-local decision: the masking below is per element anyway). */
template <class Cfg>
__device__ __forceinline__ bool sm90_block_masked(int n, const int *key_lo, const int *key_hi) {
    return n * Cfg::BN < max(key_lo[0], key_lo[1]) || (n + 1) * Cfg::BN > min(key_hi[0], key_hi[1]);
}

/* How many of this thread's scores of a row half lie in the first `cols`
 * columns of a block (any count above the row half's, for cols past it):
 * its k-th score lies in column 8 (k / 2) + k % 2 (counted from quad_col),
 * so a row's visible keys, a run of columns, are a run of k. */
__device__ __forceinline__ uint32_t sm90_scores_below(int cols) {
    cols = max(cols, 0);
    return 2 * (cols >> 3) + min(cols & 7, 2);
}

/* Mask one S block in place (raw scores -> -inf where hidden). CHECK_LO:
 * some key of the block lies below a row's first visible key; without it
 * (causal diagonals, the sequence end) one key bound does.
 *
 * With MASK_BITS, a row's visible keys [key_lo, key_hi) make a bit set of
 * two prefixes (one without CHECK_LO), whose bits ptxas moves to predicates
 * seven at a time (R2P): a select a score. Else a compare per score and key
 * bound, and a select. */
template <class Cfg, bool CHECK_LO, int SCORES = Cfg::BN / 4, int FIRST = 0>
__device__ __forceinline__ void sm90_mask_block(float *S, int n, const int *key_lo, const int *key_hi, int quad_col) {
    if constexpr (Cfg::MASK_BITS) {
        const int col0 = n * Cfg::BN + quad_col; /* key of the thread's score k = 0 */
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            /* bit k: the thread's k-th score of row half h is visible */
            uint32_t visible = low_bits_u32(sm90_scores_below(key_hi[h] - col0));
            if (CHECK_LO) visible &= ~low_bits_u32(sm90_scores_below(key_lo[h] - col0));
#pragma unroll
            for (int k = FIRST; k < SCORES; ++k) /* (scores [FIRST, SCORES) of a row half only) */
                if (!(visible & (1u << k))) S[4 * (k / 2) + 2 * h + k % 2] = -INFINITY;
        }
    } else {
#pragma unroll
        for (int i = 0; i < Cfg::BN / 2; ++i) {
            int j = n * Cfg::BN + 8 * (i / 4) + quad_col + (i % 2);
            int h = (i / 2) % 2;
            if ((CHECK_LO && j < key_lo[h]) || j >= key_hi[h]) S[i] = -INFINITY;
        }
    }
}

/* The k-th of this thread's scores of row half h in an S block (register
 * 4c + 2h + e holds row half h's score 2c + e), as its bit pattern. */
template <class Cfg>
__device__ __forceinline__ int sm90_score_bits(const float *S, int h, int k) {
    return __float_as_int(S[4 * (k / 2) + 2 * h + k % 2]);
}

/* This thread's max of each of its two rows over an S block and the running
 * max, in four independent chains per row and a tree (short dependency
 * chains). For masked blocks, whose hidden scores are -inf. */
template <class Cfg, int REGS = Cfg::BN / 2>
__device__ __forceinline__ void sm90_thread_row_max_masked(const float *S, const float *row_max, float *mx) {
    float part[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 4; ++j) part[h][j] = row_max[h];
#pragma unroll
    for (int i = 0; i < REGS; ++i) part[(i / 2) % 2][(i / 4) % 4] = fmaxf(part[(i / 2) % 2][(i / 4) % 4], S[i]);
#pragma unroll
    for (int h = 0; h < 2; ++h) mx[h] = fmaxf(fmaxf(part[h][0], part[h][1]), fmaxf(part[h][2], part[h][3]));
}

/* The signed max (MIN: min) of init and the bit patterns of this thread's
 * scores of row half h in an S block, three at a time (VIMNMX3), in four
 * independent chains: part[0..3], to be combined by the caller. */
template <class Cfg, bool MIN>
__device__ __forceinline__ void sm90_row_ichains(const float *S, int h, int init, int *part) {
    constexpr int PER_ROW = Cfg::BN / 4; /* this thread's scores of one row */
    static_assert(PER_ROW % 2 == 0, "scores of a row taken in pairs");
#pragma unroll
    for (int j = 0; j < 4; ++j) part[j] = init;
#pragma unroll
    for (int k = 0; k < PER_ROW; k += 2) {
        const int a = sm90_score_bits<Cfg>(S, h, k), b = sm90_score_bits<Cfg>(S, h, k + 1);
        part[(k / 2) % 4] = MIN ? __vimin3_s32(part[(k / 2) % 4], a, b) : __vimax3_s32(part[(k / 2) % 4], a, b);
    }
}

/* The same maxima at half the instructions, as three-input integer maxima of
 * the bit patterns (sm_90 has no three-input float max): over a set of
 * floats with one value >= +0, signed-int order of the bits is float order
 * on the values that can be the max, so the int max is the float max. Where
 * a row's set is all negative (sign bits set, int order reversed), the int
 * min is its float max: a second pass, in a warp-uniform branch that
 * unmasked blocks seldom take (a thread sees 16 to 56 keys of a row, all
 * negative only on rows that score nearly every key below zero). NaN
 * scores win the int max (not the float one): that row's output is NaN
 * either way. Called by whole warps (the vote). */
template <class Cfg>
__device__ __forceinline__ void sm90_thread_row_max(const float *S, const float *row_max, float *mx) {
    int part[4], imx[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        sm90_row_ichains<Cfg, false>(S, h, __float_as_int(row_max[h]), part);
        imx[h] = max(max(part[0], part[1]), max(part[2], part[3]));
    }
    if (__any_sync(0xffffffffu, (imx[0] | imx[1]) < 0)) { /* some row set all negative */
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            sm90_row_ichains<Cfg, true>(S, h, __float_as_int(row_max[h]), part);
            if (imx[h] < 0) imx[h] = min(min(part[0], part[1]), min(part[2], part[3]));
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) mx[h] = __int_as_float(imx[h]);
}

/* Online softmax on one S block, in two steps (a caller may put work between
 * them). The max is the row's true running max, so the row's largest score
 * gives P = 1 exactly, as in a plain softmax. With LAG_MAX, row_max is the
 * max P and O are taken against, which moves to the running max only when
 * the block's passes it by more than `lag` (MAX_LAG in raw score units):
 * P <= 2^MAX_LAG, and the largest P is rounded when packed (see LAG_MAX).
 *
 * Step one, given this thread's row maxima over the block and row_max
 * (thread_max): updates row_max, returns the factor that rescales the old O
 * and row sums (exactly 1 where row_max did not move) and what each score's
 * exponent subtracts (sub). */
template <class Cfg>
__device__ __forceinline__ void sm90_softmax_max(const float *thread_max, float *row_max, float *rescale, float *sub,
                                                 float scale_log2, float lag) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = thread_max[h];
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)); /* quad owns the row */
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* false while the row is all hidden; with LAG_MAX an all-hidden
         * row's -inf plus the lag stays -inf: its first seen key moves it */
        const bool move = mx > (Cfg::LAG_MAX ? row_max[h] + lag : row_max[h]);
        /* the new reference: mx (>= row_max, which thread_max started from), unless it lags */
        const float ref = Cfg::LAG_MAX && !move ? row_max[h] : mx;
        sub[h] = ref == -INFINITY ? 0.f : ref * scale_log2;   /* fully hidden row: avoid inf - inf */
        rescale[h] = move ? fast_exp2(row_max[h] * scale_log2 - sub[h]) : 1.f; /* old -inf gives 0 */
        row_max[h] = ref;
    }
}

/* Step two: exp2 into S, and the row sums rescaled and grown by the block's
 * (per-thread partial sums, two chains per row; the quad is reduced once in
 * the epilogue). */
template <class Cfg, int REGS = Cfg::BN / 2>
__device__ __forceinline__ void sm90_softmax_exp(float *S, const float *sub, const float *rescale, float *row_sum,
                                                 float scale_log2) {
    float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int i = 0; i < REGS; ++i) {
        int h = (i / 2) % 2;
        S[i] = fast_exp2(fmaf(S[i], scale_log2, -sub[h]));
        sum[h][(i / 4) % 2] += S[i];
    }
    row_sum[0] = row_sum[0] * rescale[0] + (sum[0][0] + sum[0][1]);
    row_sum[1] = row_sum[1] * rescale[1] + (sum[1][0] + sum[1][1]);
}

/* O to a row max that moved: rescale[h] multiplies the rows of half h (the
 * thread's rows g and g + 8). Skipped for a half of the warp's rows (8 rows)
 * where no max moved: once the first blocks have passed, a max rarely moves.
 * LAG_MAX: the packed P's row sums (L) with O. */
template <class Cfg>
__device__ __forceinline__ void sm90_rescale_o(float *O, const float *rescale, float *L = nullptr) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
        if (__any_sync(0xffffffffu, rescale[h] != 1.f)) {
#pragma unroll
            for (int i = 2 * h; i < Cfg::D / 2; i += 4) {
                O[i] *= rescale[h];
                O[i + 1] *= rescale[h];
            }
            if constexpr (Cfg::LAG_MAX) {
                L[2 * h] *= rescale[h];
                L[2 * h + 1] *= rescale[h];
            }
        }
}

/* One consumer's arrival on a stage's "empty" barrier, or with for_all
 * (a block that only this consumer reads: Sm90ShortSplit) every consumer's. */
template <class Cfg>
__device__ __forceinline__ void sm90_release(uint64_t *empty, bool for_all, uint32_t packed_count = 1) {
    if (for_all)
        mbar_arrive_cnt(empty, Cfg::CONSUMERS);
    else if (Cfg::PACKED_ROWS) /* Sm90PackedRows: also for the consumers that do not read this stage */
        mbar_arrive_cnt(empty, packed_count);
    else
        mbar_arrive(empty);
}

/* This warpgroup's S of a block is done: free its K stage. O_IN_RING:
 * consumer 0 keeps the tile's last K stage for its O (see the epilogue),
 * unless it has a buffer of its own (O0_OWN_BUF). */
template <class Cfg>
__device__ __forceinline__ void sm90_free_k_stage(uint64_t *k_empty, bool last_block, int wg, int tid,
                                                  bool for_all = false, uint32_t packed_count = 1) {
    if (tid == 0 && !(Cfg::O0_IN_RING && wg == 0 && last_block))
        sm90_release<Cfg>(k_empty, for_all, packed_count);
}

/* Two floats to two e4m3 bytes, lo in the low byte (saturating to +-448). */
__device__ __forceinline__ uint32_t pack2_e4m3(float lo, float hi) {
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

/* S (f32 accumulator) -> P (A fragments of the P V GEMM).
 * 16-bit: registers 8c..8c+7 of S are exactly k-step c's fragment.
 * e4m3: a k32 fragment register holds 4 consecutive columns (4q..4q+3, and
 * 16+4q.. in the second pair), the accumulator holds pairs (2q, 2q+1) of each
 * 8 columns. Rather than move bytes between threads, each 32-key chunk of
 * V^T is stored with its keys permuted (sm90_fp8_key_of_slot) so that slot
 * 4q+r multiplies exactly the key whose score this thread already holds. */
template <class Cfg>
__device__ __forceinline__ void sm90_pack_p(uint32_t *P, const float *S) {
    if constexpr (Cfg::FP8) {
#pragma unroll
        for (int c = 0; c < Cfg::BN / 32; ++c) {
            const float *s = S + 16 * c;
            /* row g: columns 2q, 2q+1, 8+2q, 9+2q (and +16); row g+8: the odd pairs */
            P[4 * c + 0] = pack2_e4m3(s[0], s[1]) | pack2_e4m3(s[4], s[5]) << 16;
            P[4 * c + 1] = pack2_e4m3(s[2], s[3]) | pack2_e4m3(s[6], s[7]) << 16;
            P[4 * c + 2] = pack2_e4m3(s[8], s[9]) | pack2_e4m3(s[12], s[13]) << 16;
            P[4 * c + 3] = pack2_e4m3(s[10], s[11]) | pack2_e4m3(s[14], s[15]) << 16;
        }
    } else {
#pragma unroll
        for (int i = 0; i < Cfg::BN / 4; ++i) P[i] = pack2<elem16_t<Cfg::BF16>>(S[2 * i], S[2 * i + 1]);
    }
}

/* P_SMEM: this warpgroup's packed P (sm90_pack_p's fragments) into its
 * buffer at p_addr, in the layout Q has (64 rows of 128 bytes, 128-byte
 * swizzle: row r's 16-byte unit u at u ^ (r % 8)). A k32 fragment's four
 * registers are the four 8 x 16-byte matrices of one stmatrix: rows g and
 * g + 8 of the warp's 16, bytes 0-15 and 16-31 of the 32-key chunk; lane l
 * gives the address of row l % 8 of matrix l / 8. Then the stores are made
 * visible to the tensor cores (async proxy); the next turn's barrier, which
 * all 128 threads pass, orders them before the P V is issued. */
template <class Cfg>
__device__ __forceinline__ void sm90_store_p(const uint32_t *P, uint32_t p_addr, int tid) {
    const int lane = tid % 32;
    const int row = (tid / 32) * 16 + lane % 8 + 8 * ((lane / 8) % 2); /* row % 8 == lane % 8 */
    const uint32_t row_addr = p_addr + row * 128;
#pragma unroll
    for (int c = 0; c < Cfg::BN / 32; ++c) {
        const uint32_t unit = 2 * c + lane / 16; /* this matrix's 16 bytes of the row */
        stmatrix_x4(row_addr + ((unit ^ (lane % 8)) << 4), P[4 * c], P[4 * c + 1], P[4 * c + 2], P[4 * c + 3]);
    }
    fence_proxy_async_smem();
}

/* e4m3 V^T: key (within its 32-key chunk) stored at slot a of the chunk;
 * inverse of the fragment order in sm90_pack_p: slot 16h + 4q + r holds key
 * 16h + 8(r/2) + 2q + r%2. */
__host__ __device__ __forceinline__ int sm90_fp8_key_of_slot(int a) {
    int h = a / 16, q = (a % 16) / 4, r = a % 4;
    return 16 * h + 8 * (r / 2) + 2 * q + (r % 2);
}

/* What the softmax of one tile needs per thread: the visible keys
 * [key_lo, key_hi) of the thread's two rows, and the logit scales. */
struct Sm90RowSetup {
    int key_lo[2], key_hi[2];
    float s_log2, cap_pre; /* S * s_log2: base-2 logits; softcap: tanh(S * cap_pre) first (0: off) */
    float lag;             /* LAG_MAX: MAX_LAG in S's units (finite, so that -inf + lag is -inf) */
};

template <class Cfg>
__device__ __forceinline__ Sm90RowSetup sm90_row_setup(const Sm90FwdParams &p, const Sm90Tile &tile, int wg,
                                                       int tid) {
    Sm90RowSetup r;
    /* keys past the sequence end (another sequence's, in a varlen block) are hidden */
    const int row0 = sm90_first_row<Cfg>(tile, wg, tid); /* rows row0, row0 + 8 of the sequence */
    for (int h = 0; h < 2; ++h) {
        const int c = row0 + 8 * h + tile.seq.diag; /* 32-bit: see Sm90FwdParams::window_left */
        r.key_lo[h] = max(0, min(tile.seq.seq_k, c - p.window_left));
        r.key_hi[h] = max(0, min(tile.seq.seq_k, c + p.window_right + 1));
    }
    r.s_log2 = p.scale_log2;
    r.cap_pre = Cfg::SOFTCAP ? p.softcap_pre : 0.f; /* 0: no softcap code in this instance */
    if constexpr (Cfg::FP8) { /* e4m3: the q and k descales scale the logits (inside the softcap) */
        int i = tile.batch * p.hk + tile.head / p.q_per_kv;
        float qk = (p.q_descale ? p.q_descale[i] : 1.f) * (p.k_descale ? p.k_descale[i] : 1.f);
        if (r.cap_pre != 0.f)
            r.cap_pre *= qk;
        else
            r.s_log2 *= qk;
    }
    r.lag = Cfg::LAG_MAX ? fminf(Cfg::MAX_LAG * fast_rcp(r.s_log2), 1e30f) : 0.f;
    return r;
}

/* Softcap, mask and the softmax's first step (sm90_softmax_max) on kv block
 * n, whose raw scores are in S. MAY_MASK = false: the caller knows block n
 * hides no key, and no mask code is compiled. */
template <class Cfg, bool MAY_MASK = true>
__device__ __forceinline__ void sm90_scores_to_max(float *S, const Sm90FwdParams &p, const Sm90RowSetup &r, int n,
                                                   float *row_max, float *rescale, float *sub, int quad_col) {
    if (r.cap_pre != 0.f)
        for (int i = 0; i < Cfg::BN / 2; ++i) S[i] = tanhf(S[i] * r.cap_pre);
    /* Masked blocks (a warp-uniform choice: the integer max votes) take the
     * float max; their hidden -inf scores would send most rows of a diagonal
     * block through the integer max's second pass. Not so in the e4m3
     * kernel without the steady loop's masks, whose one masked block hides
     * only keys past the sequence end. */
    float thread_max[2];
    if (MAY_MASK && __any_sync(0xffffffffu, sm90_block_masked<Cfg>(n, r.key_lo, r.key_hi))) {
        if constexpr (!Cfg::STEADY_MASKS) {
            /* the instance's problems hide no key below a row's first */
            sm90_mask_block<Cfg, false>(S, n, r.key_lo, r.key_hi, quad_col);
            if constexpr (Cfg::FP8) /* every row sees some of the block's keys: the integer max */
                sm90_thread_row_max<Cfg>(S, row_max, thread_max);
            else /* a causal diagonal (rows that see none of its keys), or the sequence end */
                sm90_thread_row_max_masked<Cfg>(S, row_max, thread_max);
        } else {
            if (n * Cfg::BN >= max(r.key_lo[0], r.key_lo[1]))
                sm90_mask_block<Cfg, false>(S, n, r.key_lo, r.key_hi, quad_col);
            else
                sm90_mask_block<Cfg, true>(S, n, r.key_lo, r.key_hi, quad_col);
            sm90_thread_row_max_masked<Cfg>(S, row_max, thread_max);
        }
    } else {
        sm90_thread_row_max<Cfg>(S, row_max, thread_max);
    }
    sm90_softmax_max<Cfg>(thread_max, row_max, rescale, sub, r.s_log2, r.lag);
}

/* EXP_TURN: what pins a tile's first block's exponentials inside their
 * turn (sm90_exp_turn). */
struct Sm90ExpPin {
    float *sum;       /* this thread's word */
    const int *zero;  /* a word that holds 0 */
};

/* The exponentials (sm90_softmax_exp over the first REGS registers) inside
 * the consumers' exponentials' turn (EXP_TURN). pin: held inside it. ptxas
 * moves register-only work across bar.sync and bar.arrive, and where a
 * tile's first block lets its exponentials out of the turn both consumers
 * issue theirs at once at every tile boundary and stall on the MIO queue
 * the exp unit is fed from (docs/perf/sm90.md, item 130): a load made after
 * the sync is or'ed into what they subtract (it is zero), and their sums
 * are stored before the hand-on. */
template <class Cfg, int REGS = Cfg::BN / 2>
__device__ __forceinline__ void sm90_exp_turn(float *S, float *sub, const float *rescale, float *row_sum,
                                              float scale_log2, int my_exp, int next_exp, const Sm90ExpPin *pin) {
    /* HALF_DIAG: a tile's first block takes one of three paths chosen per
     * warp, so the warps of a warpgroup reach this barrier from different
     * instructions, which the aligned bar.sync does not allow (synccheck) */
    if constexpr (Cfg::EXP_TURN) {
        if constexpr (Cfg::HALF_DIAG)
            named_bar_sync_apart(my_exp, TURN_THREADS);
        else
            named_bar_sync(my_exp, TURN_THREADS);
    }
    if (Cfg::EXP_TURN && pin) {
        const int zero = *reinterpret_cast<volatile const int *>(pin->zero);
        sub[0] = __int_as_float(__float_as_int(sub[0]) | zero);
        sub[1] = __int_as_float(__float_as_int(sub[1]) | zero);
    }
    sm90_softmax_exp<Cfg, REGS>(S, sub, rescale, row_sum, scale_log2);
    if (Cfg::EXP_TURN && pin) *reinterpret_cast<volatile float *>(pin->sum) = row_sum[0] + row_sum[1];
    if constexpr (Cfg::EXP_TURN) {
        if constexpr (Cfg::HALF_DIAG)
            named_bar_arrive_apart(next_exp, TURN_THREADS);
        else
            named_bar_arrive(next_exp, TURN_THREADS);
    }
}

/* Block n's scores to probabilities: softcap, mask, the online softmax; with
 * EXP_TURN a handshake between the consumers (sync on my_exp, arrive on
 * next_exp) brackets the exponentials in the source, though ptxas does not
 * keep them inside it (see EXP_TURN) unless pinned; the ids are made once,
 * outside the loop. */
template <class Cfg, bool MAY_MASK = true>
__device__ __forceinline__ void sm90_scores_to_probs(float *S, const Sm90FwdParams &p, const Sm90RowSetup &r, int n,
                                                     float *row_max, float *row_sum, float *rescale, int quad_col,
                                                     int my_exp, int next_exp, const Sm90ExpPin *pin = nullptr) {
    float sub[2];
    sm90_scores_to_max<Cfg, MAY_MASK>(S, p, r, n, row_max, rescale, sub, quad_col);
    sm90_exp_turn<Cfg>(S, sub, rescale, row_sum, r.s_log2, my_exp, next_exp, pin);
}

/* HALF_DIAG: a tile's first block n (the row maxima and sums start afresh)
 * on the causal diagonal on block edges, in one of two halves
 * (docs/perf/sm90.md, item 136). The mask's selects cover the scores
 * [MASK_FIRST, MASK_END) of a row half, the row max and the exponentials
 * the first REGS registers of S. No softcap (the caller checks). */
template <class Cfg, int MASK_FIRST, int MASK_END, int REGS>
__device__ __forceinline__ void sm90_first_probs_part(float *S, const Sm90RowSetup &r, int n, float *row_max,
                                                      float *row_sum, float *rescale, int quad_col, int my_exp,
                                                      int next_exp, const Sm90ExpPin *pin) {
    sm90_mask_block<Cfg, false, MASK_END, MASK_FIRST>(S, n, r.key_lo, r.key_hi, quad_col);
    float thread_max[2], sub[2];
    sm90_thread_row_max_masked<Cfg, REGS>(S, row_max, thread_max);
    sm90_softmax_max<Cfg>(thread_max, row_max, rescale, sub, r.s_log2, r.lag);
    sm90_exp_turn<Cfg, REGS>(S, sub, rescale, row_sum, r.s_log2, my_exp, next_exp, pin);
}

/* HALF_DIAG, where every row of this warp sees the block's whole lower half
 * and no key below the block (consumer 1): the selects of the mask cover the
 * upper half's scores only. */
template <class Cfg>
__device__ __forceinline__ void sm90_first_probs_upper(float *S, const Sm90RowSetup &r, int n, float *row_max,
                                                       float *row_sum, float *rescale, int quad_col, int my_exp,
                                                       int next_exp, const Sm90ExpPin *pin) {
    sm90_first_probs_part<Cfg, Cfg::BN / 8, Cfg::BN / 4, Cfg::BN / 2>(S, r, n, row_max, row_sum, rescale, quad_col,
                                                                        my_exp, next_exp, pin);
}

/* HALF_DIAG, where no row of this warp sees a key of the block's upper half
 * (consumer 0): the lower half's scores (registers 0 .. BN/4 - 1) are
 * masked, maxed and exponentiated, and P packed from them, with zeros for
 * the upper half, whose exponentials would all be 0 (only an exponential not
 * issued spares the exp unit: docs/perf/sm90.md, item 132). */
template <class Cfg>
__device__ __forceinline__ void sm90_first_probs_half(float *S, uint32_t *P, const Sm90RowSetup &r, int n,
                                                      float *row_max, float *row_sum, float *rescale, int quad_col,
                                                      int my_exp, int next_exp, const Sm90ExpPin *pin) {
    constexpr int REGS = Cfg::BN / 4; /* the lower half's registers */
    sm90_first_probs_part<Cfg, 0, Cfg::BN / 8, REGS>(S, r, n, row_max, row_sum, rescale, quad_col, my_exp, next_exp,
                                                     pin);
#pragma unroll
    for (int i = 0; i < Cfg::BN / 4; ++i) P[i] = i < REGS / 2 ? pack2<elem16_t<Cfg::BF16>>(S[2 * i], S[2 * i + 1]) : 0u;
}

#endif /* FA_SM90_FWD_SOFTMAX_CUH */
