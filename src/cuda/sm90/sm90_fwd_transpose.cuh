/*
 * Hopper forward, e4m3: V^T made in shared memory from V as TMA loaded it
 * (Sm90FwdConfig::VT_IN_SMEM), by warps 2 and 3 of the producer warpgroup.
 *
 * The P V wgmma of e4m3 takes its B operand K-major only: V^T, a head-dim
 * row of BN keys. Each kv block's V (BN = 128 keys of D = 64 or 128 bytes,
 * swizzled as K comes: a key's 16-byte chunk c at position c ^ (key % 8)
 * of its 128-byte row, or at head dim 64 c ^ (key / 2 % 4) of its 64-byte
 * row) is rewritten into the V ring exactly as the V^T map's TMA load
 * would have left it: head-dim row d at d * 128, its 16-key groups in
 * 16-byte pieces at position (group ^ d % 8), each group's keys in the P
 * fragment order (sm90_fp8_key_of_slot).
 *
 * A pair of bytes of one key is a 16-bit element to ldmatrix and stmatrix:
 * an 8 x 8 matrix of them is 8 keys x 16 head-dim bytes. Loaded transposed,
 * lane 4c + j of a warp holds keys 2j and 2j + 1 at head-dim bytes 2c and
 * 2c + 1 of such a matrix; with the same lane's register from the 8 keys
 * after them, two byte permutes give head-dim byte 2c (and 2c + 1) at keys
 * 2j, 2j + 1, 2j + 8, 2j + 9: slots 4j .. 4j + 3 of the 16-key group in
 * the P fragment order, which is the word stmatrix stores for row 2c
 * (2c + 1) from that lane. One ldmatrix.x4, four permutes and one
 * stmatrix.x4 move 16 keys x 32 head-dim bytes; D / 8 of them a warp a
 * kv block.
 */
#ifndef FA_SM90_FWD_TRANSPOSE_CUH
#define FA_SM90_FWD_TRANSPOSE_CUH

#include "sm90_fwd_config.cuh"
#include "sm90_ptx.cuh"

/* The ring of V as loaded (VT_IN_SMEM): vraw_full[VRAW_STAGES] (the V
 * loader's TMA), then vraw_empty[VRAW_STAGES] (the transposer's 64
 * threads), after the store warp's barriers; then the end word. */
template <class Cfg> __device__ __forceinline__ uint64_t *sm90_vraw_bars(uint64_t *bars) {
    return bars + 2 * Cfg::Q_BARS + 4 * Cfg::STAGES + 2 * Cfg::MAILBOXES;
}
/* The ring position after the V loader's last (SM90_VRAW_NO_END until it
 * has none left): the transposer follows the ring, not the tile schedule,
 * so that it holds no tile state beside its loads (walking the tiles, it
 * spilled with two loads in flight under the producer's 32 registers). */
template <class Cfg> __device__ __forceinline__ volatile uint32_t *sm90_vraw_end(uint64_t *bars) {
    return reinterpret_cast<volatile uint32_t *>(sm90_vraw_bars<Cfg>(bars) + 2 * Cfg::VRAW_STAGES);
}
enum : uint32_t { SM90_VRAW_NO_END = 0xffffffffu };

/* The V loader, past its last block at ring position it: once the
 * transposer has read that position's stage, the end word, then that
 * stage's full barrier completed by a plain arrive (no bytes), which the
 * transposer reads as the end. */
template <class Cfg> __device__ __forceinline__ void sm90_vraw_post_end(uint64_t *bars, uint32_t it) {
    uint64_t *vraw_full = sm90_vraw_bars<Cfg>(bars), *vraw_empty = vraw_full + Cfg::VRAW_STAGES;
    const uint32_t raw = it % Cfg::VRAW_STAGES;
    mbar_wait(&vraw_empty[raw], ((it / Cfg::VRAW_STAGES) & 1) ^ 1);
    *sm90_vraw_end<Cfg>(bars) = it;
    mbar_arrive(&vraw_full[raw]); /* releases the word to the transposer's wait */
}

/* Ring position it's V (in V-as-loaded stage it % VRAW_STAGES, which has
 * come) into V^T (in V stage it % STAGES), once the consumers have freed
 * that V stage; then hands both stages on. src_lane, dst_lane: this lane's
 * ldmatrix and stmatrix addresses for the first stages, 16-key group w and
 * head-dim group 0 (see sm90_transposer), swizzle bits included: the other
 * groups' differ only in bits that are zero in the rows' starts, so an XOR
 * moves a lane's address to them (no address register a group). */
template <class Cfg>
__device__ __forceinline__ void sm90_transpose_v_block(uint64_t *bars, uint32_t it, uint32_t src_lane,
                                                       uint32_t dst_lane) {
    uint64_t *v_full = bars + 2 * Cfg::Q_BARS + 2 * Cfg::STAGES, *v_empty = v_full + Cfg::STAGES;
    uint64_t *vraw_empty = sm90_vraw_bars<Cfg>(bars) + Cfg::VRAW_STAGES;
    const uint32_t stage = it % Cfg::STAGES, raw = it % Cfg::VRAW_STAGES;
    /* a fresh barrier counts as having completed the phase before phase 0 */
    mbar_wait(&v_empty[stage], ((it / Cfg::STAGES) & 1) ^ 1);
    const uint32_t src = src_lane + raw * Cfg::KV_BYTES, dst = dst_lane + stage * Cfg::KV_BYTES;
#pragma unroll 1
    for (int e = 0; e < Cfg::D / 32; ++e) { /* 32-byte head-dim group: chunks 2e, 2e + 1 */
        const uint32_t src_e = src ^ (e << 5), dst_e = dst + e * 32 * 128;
        /* the group's four loads before their stores, so that their
         * latencies overlap (one at a time, each waited for by its store,
         * the kernel measured 4-8% slower than beside the transpose kernel:
         * item 179) */
        uint32_t a[4][4];
#pragma unroll
        for (int gi = 0; gi < 4; ++gi) /* keys 32 gi on: groups 2 gi + w */
            ldmatrix_x4_trans(src_e + gi * 32 * Cfg::D, a[gi][0], a[gi][1], a[gi][2], a[gi][3]);
#pragma unroll
        for (int gi = 0; gi < 4; ++gi) /* group g's piece at position g ^ (row % 8) */
            stmatrix_x4(dst_e ^ (gi << 5), __byte_perm(a[gi][0], a[gi][1], 0x6420),
                        __byte_perm(a[gi][0], a[gi][1], 0x7531), __byte_perm(a[gi][2], a[gi][3], 0x6420),
                        __byte_perm(a[gi][2], a[gi][3], 0x7531));
    }
    fence_proxy_async_smem(); /* the V^T stores, before the consumers' wgmma reads them */
    mbar_arrive(&v_full[stage]);
    mbar_arrive(&vraw_empty[raw]); /* every ldmatrix of this lane has returned */
}

/* Warps 2 and 3 of the producer warpgroup: every block the V loader brings,
 * in ring order, until its end word. */
template <class Cfg> __device__ __forceinline__ void sm90_transposer(uint8_t *smem, uint64_t *bars) {
    static_assert(Cfg::VT_IN_SMEM && (Cfg::D == 64 || Cfg::D == 128) && Cfg::QK_SW == Cfg::D && Cfg::BN == 128 &&
                      Cfg::VT_SLAB_KEYS == 128,
                  "a key's V is one swizzle row (64 or 128 bytes), a head-dim row of V^T one of 128 bytes");
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32 - 2;
    const int m = lane / 8, r = lane % 8; /* the matrix and its row this lane addresses */
    /* Loaded matrices: keys 16g..16g+7 and 16g+8..16g+15 of head-dim bytes
     * 32e..32e+15 (chunk 2e), then the same keys of chunk 2e + 1; this warp
     * takes the 16-key groups g = 2 gi + w. key % 8 = r, so chunk c of a
     * key sits at position c ^ r of its row (c ^ (r / 2) in 64-byte rows):
     * chunk 2e + m / 2 at (m / 2 ^ swizzle) ^ 2e. */
    const uint32_t key_swizzle = Cfg::D == 128 ? r : r / 2;
    const uint32_t src_lane = smem_addr(smem + Cfg::OFF_VRAW) + (16 * w + 8 * (m & 1) + r) * Cfg::D +
                              (((m >> 1) ^ key_swizzle) << 4);
    /* Stored matrices: the even head-dim rows 32e + 2c, the odd ones, then
     * the same 16 rows on; group g's 16-byte piece of row d at position
     * g ^ (d % 8), g = 2 gi + w: (w ^ d % 8) ^ 2 gi. */
    const uint32_t row = 16 * (m >> 1) + 2 * r + (m & 1);
    const uint32_t dst_lane = smem_addr(smem + Cfg::OFF_V) + row * 128 + ((w ^ (row % 8)) << 4);
    uint64_t *vraw_full = sm90_vraw_bars<Cfg>(bars);
#pragma unroll 1
    for (uint32_t it = 0;; ++it) {
        mbar_wait(&vraw_full[it % Cfg::VRAW_STAGES], (it / Cfg::VRAW_STAGES) & 1);
        if (it == *sm90_vraw_end<Cfg>(bars)) break;
        sm90_transpose_v_block<Cfg>(bars, it, src_lane, dst_lane);
    }
}

#endif /* FA_SM90_FWD_TRANSPOSE_CUH */
