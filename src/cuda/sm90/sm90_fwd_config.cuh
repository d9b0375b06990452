/*
 * Hopper forward: what a launch passes (Sm90FwdParams) and each
 * specialisation's compile-time plan (Sm90FwdConfig: tile shape, shared
 * memory, register split, and which code paths an instance compiles), with
 * the instance wrappers and the named barriers' ids. The kernel is described
 * in sm90_fwd_kernel.cuh.
 */
#ifndef FA_SM90_FWD_CONFIG_CUH
#define FA_SM90_FWD_CONFIG_CUH

#include <cuda.h>
#include <stdint.h>

/* Whether the consumers zero their P V accumulators before the first tile
 * (sm90_consumer): needed by the ptxas of CUDA 12.8 and older, which else
 * serialise the kernels' wgmmas. Defined on the command line to force it. */
#ifndef FA_SM90_ZERO_ACCUMULATORS
#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ < 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ < 9))
#define FA_SM90_ZERO_ACCUMULATORS 1
#else
#define FA_SM90_ZERO_ACCUMULATORS 0
#endif
#endif

/* Division by a divisor fixed per launch, for 0 <= x < 2^31: a multiply-high
 * and a shift instead of the ~20 instructions of an integer division
 * (round-up reciprocal: magic = 2^32 (2^shift - d) / d + 1, 2^shift >= d). */
struct Sm90FastDiv {
    uint32_t magic, shift;
    int d;
};

__host__ __forceinline__ Sm90FastDiv sm90_fastdiv(int d) {
    if (d < 1) d = 1; /* no tiles to decode */
    uint32_t shift = 0;
    while (((int64_t)1 << shift) < d) ++shift;
    const uint64_t magic = (((uint64_t)1 << 32) * (((uint64_t)1 << shift) - (uint64_t)d)) / (uint64_t)d + 1;
    return Sm90FastDiv{(uint32_t)magic, shift, d};
}

/* q = x / div.d, returns x % div.d. (Host builds: the schedule's test.) */
__host__ __device__ __forceinline__ int sm90_divmod(int x, const Sm90FastDiv &div, int *q) {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi((uint32_t)x, div.magic);
#else
    const uint32_t hi = (uint32_t)(((uint64_t)(uint32_t)x * div.magic) >> 32);
#endif
    *q = (int)((hi + (uint32_t)x) >> div.shift);
    return x - *q * div.d;
}

/* Most tiles the paired order's tail deals out one by one (2 KB of the
 * kernel parameters). */
enum { SM90_PAIR_TAIL_MAX = 1024 };

/* Everything the kernel needs, passed by value as a __grid_constant__. */
struct Sm90FwdParams {
    CUtensorMap tm_q, tm_k, tm_v, tm_o; /* 4-D (D, S, H, B) maps, 128B swizzle */
    void *out;                          /* for direct stores of empty tiles */
    int64_t out_sb, out_ss, out_sh;     /* elements */
    float *lse;                         /* NULL: not wanted */
    int64_t lse_sb, lse_sh, lse_ss;
    /* Varlen: first packed row of each sequence (B + 1 entries, device memory);
     * NULL for batched problems. The maps then span the packed rows (B = 1). */
    const int *cu_seqlens_q, *cu_seqlens_k;
    int sq, sk, hq, batch, q_per_kv;    /* lengths (varlen: maxima); q_per_kv = Hq / Hk */
    int head_dim;                       /* real D <= Cfg::D: TMA zero-fills and clips the rest */
    int num_m_blocks;                   /* query blocks per head (varlen: of the longest sequence) */
    Sm90FastDiv m_div, h_div;           /* by num_m_blocks and by hq (sm90_decode_tile) */
    int num_tiles;                      /* tile indices (paired: two per pair, see sm90_decode_tile) */
    int paired;                         /* tile order for causal-like masks (sm90_decode_tile) */
    int top_left;                       /* diagonal alignment: 0, else Sk - Sq of each sequence */
    /* Relative to the diagonal, clamped to +-(sq + sk) (the same masks: no
     * row's keys reach past that), so that the kernel's key bounds take
     * 32-bit arithmetic (sq + sk < 2^30). */
    int window_left, window_right;
    float scale_log2;                   /* multiplies S to give base-2 logits */
    float softcap_pre;                  /* softcap: S = tanh(S * softcap_pre); 0 = off */
    /* e4m3: per (batch, kv head) dequantisation factors, (B, Hk) contiguous;
     * NULL means 1. */
    const float *q_descale, *k_descale, *v_descale;
    int hk;
    /* Split tail (sm90_split_piece): tiles from tail_first on (= num_tiles
     * when off) are the last, partial wave; their kv blocks, split_blocks per
     * tile laid end to end (split_work in all), are shared out evenly to the
     * CTAs. Each piece leaves its unnormalised O and row statistics in
     * split_partial; the last piece of a tile to finish (split_count) merges
     * them and writes the tile. */
    int tail_first, split_blocks;
    uint32_t split_work;
    float4 *split_partial;
    int *split_count; /* per (tail tile, consumer), zero at launch */
    /* Paired order's balanced tail (sm90_tile_after): units from pair_tail
     * on go out as single tiles, tile indices 2 pair_tail + pair_tail_tile[k]
     * for k < pair_tail_count, largest first; num_tiles is then
     * 2 pair_tail + 2 pair_tail_count. pair_tail_count = 0: no such tail. */
    int pair_tail, pair_tail_count;
    uint16_t pair_tail_tile[SM90_PAIR_TAIL_MAX];
    /* Short last query blocks (Sm90ShortSplit, non-paired order; only
     * where short_split is 1, which launches that instance): tiles from
     * short_first on are each head's last query block, which holds at most
     * 64 rows; the tiles before them are the other query blocks,
     * num_m_blocks - 1 per head (m_div_long). */
    int short_split, short_first;
    Sm90FastDiv m_div_long;
    /* Packed row groups (Sm90PackedRows; only where packed_rows is 1, which
     * launches that instance): tile t holds the 64-row groups 3t .. 3t + 2
     * of all heads' groups laid end to end, rg_div.d groups a head, so no
     * tile is short; a tile across two heads walks both heads' kv blocks. */
    int packed_rows;
    Sm90FastDiv rg_div;
    /* Rows of phantom queries before each head's first (ROW_SHIFT kernels,
     * batched problems under a causal-like mask; else 0): the tiles then
     * start at row -row_shift, so a head's one short tile is its first,
     * which holds the fewest keys, rather than its last, which holds the
     * most (sm90_fwd_seq). */
    int row_shift;
};

/* e4m3 varlen: V^T column of sequence b's first key, whose first packed row
 * is k_row0. On a 32-key boundary, since the transpose permutes keys within
 * 32-key chunks counted from a sequence's first; the b extra chunks keep each
 * sequence's columns clear of the one before (their span,
 * 32 (ceil(end / 32) - ceil(start / 32) + 1), is at least its length). With
 * k_row0 = total_k and b = B it is the number of V^T columns. */
__host__ __device__ __forceinline__ int64_t sm90_fp8_vt_col0(int64_t k_row0, int64_t b) {
    return 32 * ((k_row0 + 31) / 32 + b);
}

/* A consumer's mailbox for the store warp (STORE_THREAD, Sm90Mailbox): the
 * store's coordinates, the logit scale, and its 64 rows' max and sum, from
 * which the store warp writes their lse. */
constexpr int SM90_MAILBOX_BYTES = 16 + 16 + 64 * 8;

/* Bytes of shared memory a plan takes: its Q buffers, the K and V rings, O's
 * staging buffer (none when O is staged in Q's), the P buffers (P_SMEM), the
 * store warp's mailboxes (STORE_THREAD: one a consumer), the block
 * of ones the row sums are taken with (LAG_MAX), q_bars
 * q_full/q_empty pairs per Q buffer (Q_HALVES: one a consumer), four
 * barriers per ring stage and an o_full/o_empty pair per mailbox, and 1 KB
 * to align the base to the swizzle atom. */
constexpr int sm90_fwd_smem_bytes(int q_bufs, int q_bytes, int stages, int kv_bytes, int o_stage_bytes, int p_bytes,
                                  int mailboxes = 0, int ones_bytes = 0, int q_bars = 1) {
    return q_bufs * q_bytes + 2 * stages * kv_bytes + o_stage_bytes + p_bytes + SM90_MAILBOX_BYTES * mailboxes +
           ones_bytes + (2 * q_bufs * q_bars + 4 * stages + 2 * mailboxes) * 8 + 1024;
}

/* Compile-time tile shape and shared-memory plan of one specialisation. */
template <int D_, int BN_, int STAGES_, bool BF16_, int CONSUMERS_ = 2, bool FP8_ = false, bool JOIN_ = false,
          bool SPLIT_TAIL_ = false, bool TOP_SKIP_ = true>
struct Sm90FwdConfig {
    static constexpr int D = D_;           /* head dim (= Dv) */
    static constexpr int CONSUMERS = CONSUMERS_; /* consumer warpgroups, 64 query rows each */
    static constexpr int BM = 64 * CONSUMERS;    /* query rows per tile */
    static constexpr int BN = BN_;         /* keys per kv block */
    static constexpr int STAGES = STAGES_; /* K/V ring depth */
    /* FP8: q, k, v in e4m3 (V given transposed, see sm90_fp8_transpose_v),
     * output bf16; else all in bf16 (BF16) or f16. */
    static constexpr bool FP8 = FP8_;
    static constexpr bool BF16 = BF16_ || FP8_; /* the 16-bit output type */
    static constexpr int ES = FP8 ? 1 : 2;      /* bytes per input element */
    /* Q, K and (16-bit) V rows in slabs of QK_SW bytes, swizzled by as
     * much: 128, or 64 where a row is not whole 128-byte slabs (e4m3 at head
     * dim 64, a 64-byte row; 16-bit head dim 96, three 64-byte slabs) */
    static constexpr int QK_SW = D * ES % 128 == 0 ? 128 : 64;
    static_assert(D * ES % 64 == 0, "rows in whole 64-byte slabs");
    static constexpr int BOX_COLS = QK_SW / ES;   /* input elements per slab */
    static constexpr int SLABS = D * ES / QK_SW;  /* column slabs of a Q or K row */
    /* 128-byte slabs of an output row (16-bit; at head dim 96 the second is
     * half used, and the store's map clips the rest) */
    static constexpr int O_SLABS = (D + 63) / 64;
    /* Head dims 96 and 128 (16-bit): two P buffers, the softcap in an
     * instance of its own, the S-first join (the paths measured at 128). */
    static constexpr bool MID = !FP8 && D > 64 && D <= 128;
    /* The wide head dims, 192 and 256 (16-bit): 64-key blocks, one Q
     * buffer, and the paths below that were measured at head dim 256
     * (TOP_SKIP, Q_HALVES, LATE_PV_RETIRE, LAG_MAX, the larger producer). */
    static constexpr bool WIDE = D > 128 && !FP8;
    /* Varlen support (packed sequences, the tile's lengths and first rows
     * read from cu_seqlens). At head dims 192 and 256 it is a kernel instance of its
     * own (Sm90Varlen<Cfg>): its per-tile code would sit among the batched
     * kernel's, whose registers it nearly fills. So too in the two-consumer
     * kernels at head dims 64 and 128, whose short tiles run the per-tile
     * code often (docs/perf/sm90.md, items 98 and 101). e4m3 runs varlen
     * problems only on its two-consumer kernels, as instances of their own
     * (its three-consumer kernels have no registers to spare). */
    static constexpr bool VARLEN_OWN_KERNEL = WIDE || (CONSUMERS_ == 2 && (D <= 128 || FP8));
    static constexpr bool VARLEN = !FP8 && !VARLEN_OWN_KERNEL;
    /* e4m3: the head dims of its kernels (a Q or K row of 64, 128, 192 or
     * 256 bytes), whole V^T slabs a kv block; above 128 two consumers only
     * (O takes D / 2 registers a thread) */
    static_assert(!FP8 || ((D == 64 || D == 128 || D == 192 || D == 256) && BN % 32 == 0 &&
                           (D <= 128 || CONSUMERS == 2)),
                  "e4m3: head dim 64, 128, 192 or 256, whole V^T slabs");
    /* e4m3 V^T (D head-dim rows of BN keys) in slabs of VT_SLAB_KEYS keys,
     * since a swizzled TMA box row spans one swizzle row at most: the widest
     * of 128, 64 and 32 bytes (the swizzle span) that divides BN. */
    static constexpr int VT_SLAB_KEYS = BN % 128 == 0 ? 128 : BN % 64 == 0 ? 64 : 32;
    static constexpr int VT_SLAB = D * VT_SLAB_KEYS; /* bytes */

    static constexpr int Q_SLAB = BM * QK_SW; /* bytes of one slab of the Q tile */
    static constexpr int KV_SLAB = BN * QK_SW;
    static constexpr int Q_BYTES = BM * D * ES;
    static constexpr int KV_BYTES = BN * D * ES; /* a K tile, or a V (V^T for e4m3) tile */
    static constexpr int O_BYTES = BM * O_SLABS * 128; /* O staged: whole 128-byte slabs */
    /* O is staged in its own buffer when it fits. Else (16-bit head dim 256)
     * each consumer stages its 64 rows in a K/V stage of the tile's last kv
     * block, consumer 0 in the K buffer, consumer 1 in the V buffer, and
     * frees that stage once its store has read it; the next tile's first
     * block uses the other stage, so only its second load waits for the
     * store. e4m3 always has a buffer of its own (at head dim 256 beside
     * one Q buffer). */
    static constexpr bool O_IN_RING = !FP8 && (Q_BYTES + O_BYTES + 2 * STAGES * KV_BYTES) > 200 * 1024;
    static_assert(!O_IN_RING || (CONSUMERS == 2 && STAGES >= 2 && BN == 64 && 64 * D * 2 == KV_BYTES),
                  "O staged in the ring: one consumer's 64 rows fill a K or V stage exactly");
    /* With O staged in the ring, consumer 0 stages its 64 rows in a buffer
     * of its own where the plan has room for one (head dim 256: 32 KB
     * beside one Q buffer, two stages and LAG_MAX's 256-byte block of
     * ones). Its store then holds no stage, so the next tile's second K
     * load (into the stage of this tile's last block) goes out once both
     * consumers' last S is done rather than once consumer 0's store has
     * read its rows; consumer 0's first S reads that stage when it skips
     * the tile's top block (TOP_SKIP). Laid out as a K stage
     * (O_SLAB_STRIDE apart). Only beside TOP_SKIP: not in the split-tail
     * kernel, which runs long non-causal problems only, nor in the instance
     * for long problems with no causal mask or window (TOP_SKIP_ false),
     * where the buffer measured 0.5-2.4% slower at 2k keys (it gained 2.1%
     * at 512: docs/perf/sm90.md, items 115 and 120). */
    static constexpr bool O0_OWN_BUF =
        O_IN_RING && !SPLIT_TAIL_ && TOP_SKIP_ &&
        sm90_fwd_smem_bytes(1, Q_BYTES, STAGES, KV_BYTES, 64 * D * 2, 0, 0, 256) <= 227 * 1024;
    static constexpr bool O0_IN_RING = O_IN_RING && !O0_OWN_BUF; /* consumer 0 stages in the last K stage */
    static constexpr int O_STAGE_BYTES = O_IN_RING ? (O0_OWN_BUF ? 64 * D * 2 : 0) : O_BYTES;
    static constexpr int O_SLAB_STRIDE = O_IN_RING ? KV_SLAB : BM * 128; /* bytes between staged O's slabs */
    /* Consumer 0 skips the tile's highest kv block where its rows see none
     * of its keys (sm90_top_skip): with 128-row tiles of 64-key blocks
     * (head dims 192 and 256) under a causal mask, that is the tile's first block,
     * half of the diagonal. It then passes its first turn of the tile
     * (so the rounds stay in step and both consumers read each block in
     * consecutive turns), arrives for the skipped stage (which only
     * consumer 1 reads) and starts a ring position later: the tensor cores
     * run one S and one P V less a tile: +1.5..+4.6% at causal 512-4k.
     * Passed at the tile's end instead, the consumers ran a block apart,
     * both stages held blocks being read and every load waited: 8-15%
     * slower (docs/perf/sm90.md, item 115). Not in the split-tail
     * kernels, which run only problems without a causal mask or window,
     * nor where TOP_SKIP_ is false (the instance for such problems). */
    static constexpr bool TOP_SKIP = WIDE && CONSUMERS == 2 && !SPLIT_TAIL_ && TOP_SKIP_;
    /* Q's loads and O's stores marked evict-first in L2 (sm90_fwd_l2.cuh),
     * so that the K and V blocks a head's other tiles read again stay.
     * In the head-dim-256 instance with TOP_SKIP, whose short and masked
     * problems lean on the memory (on an H100 the causal 512-key cell
     * keeps the DRAM 75-77% busy): that cell's DRAM reads 207 -> 204 MB and
     * +2.0..+2.3% settled, causal 1k +1.2..+1.4%, non-causal 512 and 1k
     * +0.1..+1.0%, causal 16k level (two H100s). Not elsewhere: head dim
     * 64 causal 512 lost 2.4% with it, and head dim 256's instance for
     * long unmasked problems 0.7% at 16k (docs/perf/sm90.md, item 160). */
    static constexpr bool QO_EVICT_FIRST = TOP_SKIP;
    /* Two Q buffers where they fit: the next tile's Q loads while this tile
     * runs. JOIN: the next tile's first Q K^T then goes out in the turn of
     * this tile's last P V (docs/perf/sm90.md, item 17: a gain with three
     * consumers only). */
    static constexpr bool JOIN = JOIN_;
    /* P through shared memory: the P V GEMM takes P from a swizzled buffer
     * of the warpgroup's (64 rows of BN e4m3 keys) rather than from
     * registers. For e4m3 at head dim 128 with three consumers, whose 160
     * registers hold O (64) and S (64) but not P beside them. */
    static constexpr bool P_SMEM = FP8 && D == 128 && CONSUMERS == 3;
    static_assert(!P_SMEM || BN == 128, "a P row is one 128-byte swizzle row");
    static constexpr int P_BYTES = P_SMEM ? CONSUMERS * 64 * BN : 0;
    static constexpr int Q_BUFS =
        sm90_fwd_smem_bytes(2, Q_BYTES, STAGES, KV_BYTES, O_STAGE_BYTES, P_BYTES) <= 227 * 1024 ? 2 : 1;
    static_assert(!JOIN || Q_BUFS == 2, "the tile-boundary join needs two Q buffers");
    /* Q_HALVES: each consumer's 64 rows of Q are loaded, waited for and
     * freed on barriers of their own. With one Q buffer (head dims 192, 256) the
     * next tile's Q can only load once this tile's last block has read it;
     * in halves, a consumer's rows go out once its own last block is done,
     * and its first S waits for half the bytes. +0.8..+1.6% at non-causal
     * 1k-2k, level at 512 and causal (two H100s, docs/perf/sm90.md, item
     * 154). Q_BARS: q_full/q_empty pairs, one a Q buffer or one a buffer
     * and consumer. */
    static constexpr bool Q_HALVES = WIDE && Q_BUFS == 1 && CONSUMERS == 2;
    static constexpr int Q_BARS = Q_BUFS * (Q_HALVES ? CONSUMERS : 1);
    static constexpr int Q_BOX_ROWS = Q_HALVES ? 64 : BM; /* rows of a Q load's box (the host's map) */
    /* FIRST_K_BETWEEN_Q: the Q/K loader takes a tile's first K right after
     * consumer 0's rows of Q, not after consumer 1's, which it frees a turn
     * later: that K's stage was freed a turn before. Only beside consumer
     * 0's own O buffer (O0_OWN_BUF): there +1.2..+3.4% at non-causal 1k and
     * level at 512 and causal 512-2k, where in the instances that stage O
     * in the ring (long problems with no mask, the split tail) it was
     * 1.0-1.8% slower at non-causal 2k-4k (three runs on one H100,
     * docs/perf/sm90.md, item 155). */
    static constexpr bool FIRST_K_BETWEEN_Q = Q_HALVES && O0_OWN_BUF;
    /* Where O is rescaled to a moved max: inside the next turn, after its Q K^T
     * is issued and before its P V (the FMULs then run under Q K^T), or right
     * after the softmax. e4m3's Q K^T is too short to cover them (item 18). */
    static constexpr bool RESCALE_IN_TURN = !FP8;
    /* Where a P V is waited for (and P repacked): at the start of the next
     * iteration, behind its K wait, so that the softmax overlaps that P V
     * (head dim 256: +2-5%); or right after the softmax, where ptxas hoists
     * the wait above the softmax. The late wait measured -3% at head dim 128
     * on 512-key tiles (+1% elsewhere), -3..-5% for e4m3 (ptxas then sinks
     * the e4m3 packing into the turn), and spills with three consumers
     * (the fp32 probabilities live across the turn); item 30. With P in
     * shared memory (e4m3, three consumers) it measured -1.7..-3.3% (item 147). */
    static constexpr bool LATE_PV_RETIRE = WIDE;
    /* P in two register buffers (16-bit head dim 128 and the two-consumer
     * head-dim-64 kernel): block n's probabilities are packed into the buffer
     * the P V in flight does not read, so nothing in the softmax waits for
     * that P V; it is waited for right before the next turn, when it has long
     * finished. With one buffer the pack must wait for it, and ptxas hoists
     * that wait above the softmax, which then no longer overlaps its own P V
     * (docs/perf/sm90.md, items 30, 37 and 39). Not with three consumers (160
     * registers); not for e4m3, where a second P fits only with shorter
     * blocks, which lose more than the wait costs (item 40). */
    static constexpr int P_BUFS = MID || (!FP8 && D == 64 && CONSUMERS == 2) ? 2 : 1;
    /* A second ring of named barriers, meant to make the exponentials a
     * turn of their own: a consumer syncs on it after its row max and
     * hands it on after its exp2s. ptxas moves register-only instructions
     * across bar.sync and bar.arrive, and the SASS has the arrive a few
     * instructions after the sync, so what runs is a second handshake
     * between the consumers once per block, the exponentials outside it.
     * Measured +0.2..+2.3% for the two-consumer head-dim-64 kernel (masked
     * problems up to 2k queries), level or worse for the others; holding
     * the exponentials inside it (a shared-memory load and store pinning
     * them) measured 0.8-1.6% slower (docs/perf/sm90.md, items 53, 83, 84). */
    static constexpr bool EXP_TURN = !FP8 && D == 64 && CONSUMERS == 2;
    static_assert(P_BUFS == 1 || (RESCALE_IN_TURN && !LATE_PV_RETIRE && !JOIN),
                  "double-buffered P: the P V is waited for before the turn, O rescaled inside it");
    /* The Q descriptors sit in uniform registers, so a Q K^T k-step costs
     * one uniform add per operand in the turn (items 32, 102). At head dim
     * 256 (16 k-steps) holding them across the tile loop spills in the
     * instances with mask code: there the Q buffer's descriptor is made
     * opaque once a tile, so the compiler derives the k-steps' from it in
     * each block instead of holding them. */
    static constexpr bool Q_DESC_UNIFORM = D != 256;
    /* The split tail (sm90_split_piece), compiled into a kernel of its own:
     * the code it adds to every tile start and end cost the head-dim-128
     * kernel 1-2% on short sequences, where the host never splits
     * (docs/perf/sm90.md, item 35). Not with JOIN: there the next tile's S
     * is in flight through the epilogue, and the merge made ptxas spill. */
    static constexpr bool SPLIT_TAIL = SPLIT_TAIL_;
    static_assert(!SPLIT_TAIL || !JOIN, "the split tail's merge does not fit beside a joined S");
    /* The epilogue's steps that need no O (the rows' sums, normalisers and
     * lse; the claim of the staging buffer) run while the tile's last P V
     * is on the tensor cores: +0.6..+2.8% at head dim 128 causal 512-2k in
     * the kernel harness, +0.4..+0.6% through the library.
     * Not in the split-tail kernels (there a tail piece takes them after its
     * merge, and the head-dim-128 one spilled with the normalisers live
     * across the wait), nor in the two-consumer head-dim-64 kernel, which
     * measured 0.3-1.6% slower with them there (docs/perf/sm90.md, item 92). */
    static constexpr bool EARLY_FINISH = !SPLIT_TAIL && !EXP_TURN;
    /* O's TMA store issued by a thread of its own (sm90_store_warp: lane 0
     * of warp 2 of the producer warpgroup, idle otherwise). A consumer stages
     * its rows, posts the store's coordinates in its mailbox and arrives on
     * o_full; the store thread issues the store, waits until it has read
     * the staging rows and arrives on o_empty, which the consumer waits for
     * before its next tile's staging. The consumer's epilogue then holds no
     * barrier between its warps: before, a named barrier claimed the rows
     * (behind the last store's read) and a second one handed the staged rows
     * to the thread that issued the store. The two-consumer kernels with O
     * in a buffer of its own, but not their split-tail instances (there a
     * tail piece merges and may stage nothing): +0.5..+1.5% up to 2k
     * queries (head dim 64 causal, head dim 128, e4m3 causal 1k); the
     * three-consumer kernels measured 0.7% slower with it
     * (docs/perf/sm90.md, item 93). The whole of that warp also writes the
     * rows' lse from the max and sum each consumer leaves in its mailbox,
     * which takes the lse's logarithm, address and store off the consumer's
     * path from one tile to the next (item 176). */
    static constexpr bool STORE_THREAD = CONSUMERS == 2 && !SPLIT_TAIL && !O_IN_RING;
    /* The S-first tile join, in an instance of its own (Sm90Joined<Cfg>;
     * HAS_JOINED: this config has one; S_JOIN: this instance joins). The
     * turn that issues a tile's last P V first issues the next tile's first
     * S = Q K^T (its Q is in the other buffer); the rows' sums and lse run
     * while both are on the tensor cores, the next tile's first softmax
     * while that P V is, and the finished tile's epilogue after it. A tile
     * boundary then takes no turn of its own and its first softmax does not
     * wait alone behind its S. Unlike JOIN (the S behind the P V, the
     * epilogue before the softmax: -4..-7% with two consumers,
     * docs/perf/sm90.md, items 17 and 57) the consumer's next wait is for
     * the S. The 16-bit head-dim-128 kernel, for problems with no causal
     * mask, window, softcap or varlen and tiles of up to
     * SM90_JOIN_MAX_BLOCKS kv blocks (with Q_OWN_THREAD): +3.6..+5.3% at
     * 512 keys; at 1k-2k -1..+0.7%, 1.1-1.6% slower at 32 blocks a tile
     * (why is not established) and 1% slower at causal 512, so those keep
     * the plain instance (items 152, 153). */
    static constexpr bool HAS_JOINED = MID && P_BUFS == 2 && !SPLIT_TAIL_;
    static constexpr bool S_JOIN = false;
    /* Q loaded by a producer thread of its own (lane 0 of warp 3 of the
     * producer warpgroup) as soon as its buffer is free: with two Q buffers
     * a whole tile ahead, where the Q/K thread issues it after the tile's
     * last K, about two kv blocks ahead of its use. The joined S wants it a
     * softmax and an epilogue earlier still: the join gained 1.6% at 512
     * keys without it, 3.8% with it (item 152). */
    static constexpr bool Q_OWN_THREAD = false;
    /* The paired order's balanced tail (sm90_tile_after). Not in e4m3's
     * two-consumer kernels: in the head-dim-128 one (short masked
     * problems) it measured level (docs/perf/sm90.md, items 66 and 73),
     * and those for head dims 192 and 256 were measured without it; the
     * two-consumer head-dim-64 kernel gains 1-2% with it at causal 1k and
     * 2k and loses 1-4% at 512, where its tiles hold 1-4 kv blocks, the
     * tile boundary is the largest share of the run and the tail's code
     * costs about 1% (items 73, 75).
     * Nor in the split-tail kernels, which only run unmasked problems
     * (paired ones are never split), so their code stays as it was. */
    static constexpr bool PAIR_TAIL = !SPLIT_TAIL && !(FP8 && CONSUMERS == 2);
    /* Masks as bit sets (sm90_mask_block): the 16-bit kernels with two
     * consumers, whose short causal tiles start on a masked diagonal block
     * (head dim 64 up to 2k queries +1-2%, head dim 128 at 512 +1-2%, level
     * elsewhere). The e4m3 kernels keep the compare per score: with the bit
     * sets they measured about 1% slower where each tile has a masked block
     * (non-causal, whose last block is partial; three runs). The
     * three-consumer kernel measured level with them against a control, so
     * it keeps the compare too (docs/perf/sm90.md, items 67 and 71). */
    static constexpr bool MASK_BITS = CONSUMERS == 2 && !FP8;
    static_assert(!MASK_BITS || BN <= 128, "a row half's scores (BN / 4) as the bits of one word");
    /* The softcap in a kernel instance of its own (Sm90Softcap<Cfg>; SOFTCAP
     * says whether this instance has its code). Its accurate tanh is ~3 000
     * instructions (three inlined copies of a block's), laid out among the
     * code that runs; the e4m3 kernels measured +2-3% without it, the
     * head-dim-128 ones +1%, the others level, so only those pay a second
     * instance (docs/perf/sm90.md, item 72). */
    static constexpr bool SOFTCAP_OWN_KERNEL = FP8 || MID;
    static constexpr bool SOFTCAP = !SOFTCAP_OWN_KERNEL;
    /* The steady loop without mask code, in an instance of its own
     * (Sm90SteadyUnmasked<Cfg>; STEADY_MASKS says whether this instance
     * masks past a tile's first block). For problems with no causal mask
     * and no window only the highest kv block can hold a hidden key (past
     * the sequence end), and it is each tile's (or tail piece's) first:
     * the loop never runs the masked paths, which were ~20% of the code of
     * e4m3's earlier 224-key kernel; without them it measured +0.1..+0.8%
     * on such problems (docs/perf/sm90.md, item 74). The same holds for
     * causal problems whose diagonal meets the tiles on block edges (128-row
     * tiles of 128-key blocks, the diagonal's offset a multiple of 128, no
     * window): there each tile's first block is its diagonal and the rest
     * are seen whole, which is every causal problem with Sq = Sk at head
     * dims 64 and 128 (docs/perf/sm90.md, items 96 and 97). The 16-bit
     * two-consumer kernels have that instance too, but not their split-tail
     * instances, and so does e4m3's head-dim-192 kernel: +0..+8% at
     * non-causal 16k, level elsewhere. At e4m3 head dim 256 it measured
     * 1-5% slower at non-causal 16k, and e4m3's two-consumer head-dim-128
     * kernel runs only varlen problems (item 171). */
    static constexpr bool STEADY_UNMASKED_OWN_KERNEL =
        P_SMEM || (CONSUMERS == 2 && (!FP8 || D == 192) && !SPLIT_TAIL_);
    static constexpr bool STEADY_MASKS = true;
    /* A tile's first block split at its middle key where a warp's rows allow
     * it (the causal diagonal on block edges): where no row of the warp sees
     * the upper half (consumer 0), masked, maxed and exponentiated over the
     * lower half only, zeros packed for the rest (sm90_first_probs_half);
     * where every row sees the lower half (consumer 1), masked over the
     * upper half only (sm90_first_probs_upper). The two-consumer
     * head-dim-64 kernel's instance without the steady loop's masks
     * (docs/perf/sm90.md, item 136). */
    static constexpr bool HALF_DIAG = false;
    /* The split-tail kernel only as its instance without the steady loop's
     * masks and without the softcap: the other two spill with the merge
     * (4 bytes). The host splits only problems that instance takes. */
    static constexpr bool SPLIT_UNMASKED_ONLY = P_SMEM;
    /* Short last tiles' keys split among the consumers: the instance
     * Sm90ShortSplit (HAS_SHORT_SPLIT: this config has one). */
    static constexpr bool SHORT_SPLIT = false;
    static constexpr bool HAS_SHORT_SPLIT = CONSUMERS == 3 && D == 64 && !FP8;
    /* Row groups of consecutive heads packed into whole tiles: the instance
     * Sm90PackedRows (HAS_PACKED_ROWS: this config has one; e4m3's packed
     * kernel has a config of its own, Sm90CfgF8M192Packed). */
    static constexpr bool PACKED_ROWS = false;
    static constexpr bool HAS_PACKED_ROWS = HAS_SHORT_SPLIT;
    /* Where a head's rows are not a whole number of tiles, one tile is
     * short; a short tile takes as long as a whole one (a tile's pace is
     * one consumer's chain per kv block), and under a causal-like mask the
     * last tile holds the most kv blocks. The three-consumer kernels (192-row
     * tiles, so most lengths leave a short tile) can take a problem's rows
     * shifted down by Sm90FwdParams::row_shift phantom rows, which makes the
     * short tile the head's first, over its fewest keys (sm90_fwd_seq):
     * at 2048 queries a head's tiles then walk 96 kv blocks instead of 101,
     * at 4096 363 instead of 384. The 16-bit kernel has it in an instance
     * of its own (Sm90RowShift<Cfg>), so that its code for the problems
     * without a mask stays as it was; the e4m3 ones in theirs (their
     * unmasked problems mostly run Sm90SteadyUnmasked, which has none). */
    static constexpr bool ROW_SHIFT_OWN_KERNEL = CONSUMERS == 3 && !FP8 && !SPLIT_TAIL_;
    static constexpr bool ROW_SHIFT = CONSUMERS == 3 && FP8 && !SPLIT_TAIL_;
    static constexpr int MERGE_F4S = D / 8 + 1; /* float4s a thread leaves: O, then (max, max, sum, sum) */
    static constexpr int OFF_MERGE = 0;         /* (the merge buffer: Sm90ShortSplit) */
    /* A lagging max (sm90_softmax_max): the max that a row's P and O are
     * taken against moves only when a block's scores pass it by more than
     * MAX_LAG (base-2 logits), so P stays below 2^MAX_LAG and O's rescale
     * (128 multiplies a thread where a max moved, at head dim 256) runs on a
     * tile's first block and seldom after. The row's largest P is then no
     * longer exactly 1 but rounded when packed; O is therefore divided by
     * the sum of the packed P (taken by the tensor cores: P times a block of
     * ones, beside each P V), under which that rounding cancels, while the
     * lse keeps the float sum of the exact P (the split tail's merge
     * carries both sums). The 16-bit head-dim-256 kernels: +3..+4.5% at
     * non-causal 512-2k, +2..+2.6% causal 1k-2k. Head dim 128
     * measured 4-6% slower with it: there the sums take eight m64n8k16 a
     * block for half the multiplies saved (docs/perf/sm90.md, item 105). */
    static constexpr bool LAG_MAX = WIDE;
    static constexpr float MAX_LAG = 8.f;
    /* the B operand of the row sums: 8 rows of 16 ones (two 8 x 8 core
     * matrices, K-major, no swizzle) */
    static constexpr int ONES_BYTES = LAG_MAX ? 256 : 0;

    static constexpr int OFF_Q = 0;
    static constexpr int OFF_K = OFF_Q + Q_BUFS * Q_BYTES;
    static constexpr int OFF_V = OFF_K + STAGES * KV_BYTES;
    static constexpr int OFF_O = OFF_V + STAGES * KV_BYTES; /* staged O (with O_IN_RING: consumer 0's, O0_OWN_BUF) */
    static constexpr int OFF_P = OFF_O + O_STAGE_BYTES; /* P buffers (P_SMEM), 64 rows per consumer */
    static constexpr int MAILBOXES = STORE_THREAD ? CONSUMERS : 0;
    static constexpr int OFF_MAIL = OFF_P + P_BYTES; /* STORE_THREAD: a mailbox per consumer */
    static constexpr int OFF_ONES = OFF_MAIL + SM90_MAILBOX_BYTES * MAILBOXES; /* LAG_MAX: the block of ones */
    /* EXP_TURN: a word per consumer thread (its first block's row sums) and
     * a zero word, which pin a tile's first exponentials inside their turn
     * (sm90_exp_turn) */
    static constexpr int PIN_BYTES = EXP_TURN ? CONSUMERS * 128 * 4 + 16 : 0;
    static constexpr int OFF_PIN = OFF_ONES + ONES_BYTES;
    static constexpr int OFF_BAR = OFF_PIN + PIN_BYTES;
    /* q_full[Q_BARS], q_empty[Q_BARS], the K/V ring's, then o_full[], o_empty[] (STORE_THREAD) */
    static constexpr int NUM_BARS = 2 * Q_BARS + 4 * STAGES + 2 * MAILBOXES;
    static constexpr int SMEM_BYTES =
        sm90_fwd_smem_bytes(Q_BUFS, Q_BYTES, STAGES, KV_BYTES, O_STAGE_BYTES, P_BYTES, MAILBOXES,
                            ONES_BYTES + PIN_BYTES, Q_BARS / Q_BUFS);
    static_assert(SMEM_BYTES == OFF_BAR + NUM_BARS * 8 + 1024, "the offsets above and the plan's size agree");
    static_assert(SMEM_BYTES <= 227 * 1024, "shared memory plan exceeds the per-CTA limit of sm_90");

    /* registers of P (the P V GEMM's A fragments): 2 or 4 values per register */
    static constexpr int P_REGS = FP8 ? BN / 8 : BN / 4;

    static constexpr int THREADS = 128 * (1 + CONSUMERS);
    /* Register split: setmaxnreg only moves registers inside what the CTA got
     * at launch (65536 / THREADS per thread, rounded down to 8), so the sum
     * must stay within it or setmaxnreg.inc waits forever. The consumers hold
     * O, S and P; the 3- and 4-slab producers of D = 192 and 256 need a few more than 24. */
    static constexpr int LAUNCH_REGS = 65536 / THREADS / 8 * 8;
    static constexpr int PRODUCER_REGS = CONSUMERS == 3 ? 32 : WIDE ? 40 : 24;
    static constexpr int CONSUMER_REGS = CONSUMERS == 3 ? 160 : WIDE ? 232 : 240;
    static_assert(PRODUCER_REGS + CONSUMERS * CONSUMER_REGS <= (1 + CONSUMERS) * LAUNCH_REGS,
                  "register split exceeds the launch allocation");
};

/* A config whose kernel applies the softcap (see SOFTCAP_OWN_KERNEL). */
template <class Cfg> struct Sm90Softcap : Cfg {
    static constexpr bool SOFTCAP = true;
};

/* A config whose kernel joins its tiles' boundaries (see HAS_JOINED). */
template <class Cfg> struct Sm90Joined : Cfg {
    static_assert(Cfg::HAS_JOINED && !Cfg::PACKED_ROWS && !Cfg::ROW_SHIFT,
                  "no joined instance for this config (Q's own loader loads whole Q boxes)");
    static constexpr bool S_JOIN = true;
    static constexpr bool Q_OWN_THREAD = true;
};

/* A config whose steady loop has no mask code (see STEADY_UNMASKED_OWN_KERNEL). */
template <class Cfg> struct Sm90SteadyUnmasked : Cfg {
    static constexpr bool STEADY_MASKS = false;
    /* the three-consumer instances take no causal mask or window, so no shift */
    static constexpr bool ROW_SHIFT = false;
    static constexpr bool HALF_DIAG = Cfg::EXP_TURN;
    /* without the mask code there is room for uniform Q descriptors at head dim 256 too */
    static constexpr bool Q_DESC_UNIFORM = true;
};

/* A config whose kernel splits the keys of short last tiles among its
 * consumers (sm90_tile_split). Where a sequence's length leaves at most 64
 * rows in its last query block, two of the three consumers have no rows
 * there, yet that tile takes as long as a whole one: the pace of a tile is
 * one consumer's chain per kv block. Here every consumer takes the short
 * tile's rows (warpgroup 0's), consumer c the kv blocks c, c + 3, ... of it
 * (counted from the highest); consumers 1 and 2 leave their unnormalised O
 * and row statistics in a merge buffer and consumer 0 merges and writes the
 * rows. The host also moves these tiles after all others
 * (Sm90FwdParams::short_first), so that the CTAs the whole tiles leave
 * short are the ones that take them. Each tile's first S then has a turn
 * of its own (JOIN off), in the split tiles at each consumer's first
 * block. */
template <class Cfg> struct Sm90ShortSplit : Cfg {
    static constexpr bool SHORT_SPLIT = true;
    /* not joined: the merge has no room beside the next tile's S in flight
     * (ptxas spilled 108 bytes), so each tile's first S has a turn of its
     * own, as in the kernels without JOIN */
    static constexpr bool JOIN = false;
    static constexpr int OFF_MERGE = (Cfg::OFF_BAR + Cfg::NUM_BARS * 8 + 15) / 16 * 16;
    static constexpr int MERGE_BYTES = (Cfg::CONSUMERS - 1) * Cfg::MERGE_F4S * 128 * 16; /* slots of consumers 1, 2 */
    static constexpr int SMEM_BYTES = OFF_MERGE + MERGE_BYTES + 1024;
    static_assert(Cfg::CONSUMERS == 3 && Cfg::P_BUFS == 1 && !Cfg::SPLIT_TAIL && !Cfg::O_IN_RING &&
                      !Cfg::STORE_THREAD && !Cfg::LAG_MAX && !Cfg::EXP_TURN && !Cfg::ROW_SHIFT,
                  "the short-tile split is written for the three-consumer kernel (unshifted: unmasked problems)");
    static_assert(SMEM_BYTES <= 227 * 1024, "shared memory plan exceeds the per-CTA limit of sm_90");
};

/* A config whose tiles are three 64-row groups of consecutive heads
 * (Sm90FwdParams::packed_rows), for batched problems without masks. Where a
 * head's rows are not a whole number of 192-row tiles (512 = 2 x 192 + 128)
 * its last tile would leave a consumer without rows, and a tile's time is
 * one consumer's chain per kv block, whatever the others do (docs/perf/
 * sm90.md, item 55); packed, every consumer has rows. Each consumer decodes
 * its own group (sm90_decode_packed). A tile across two heads is walked as
 * both heads' kv blocks in turn in the ring (the first head's block n, the
 * second's, then block n - 1 of each), each consumer reading every other
 * ring position, so every consumer still takes one turn a kv block. Q
 * comes as one 64-row box per consumer; no varlen code. */
template <class Cfg> struct Sm90PackedRows : Cfg {
    static constexpr bool PACKED_ROWS = true;
    /* each consumer's rows are a tile of their own (sm90_decode_packed);
     * the plan (Q_BYTES: the three groups' buffer) stays the base's */
    static constexpr int BM = 64;
    static constexpr bool VARLEN = false;
    static_assert(Cfg::CONSUMERS == 3 && Cfg::P_BUFS == 1 && Cfg::SLABS == 1 && !Cfg::SPLIT_TAIL &&
                      !Cfg::O_IN_RING && !Cfg::STORE_THREAD && !Cfg::LAG_MAX && !Cfg::EXP_TURN && !Cfg::SHORT_SPLIT &&
                      !Cfg::ROW_SHIFT,
                  "row-group packing is written for three-consumer kernels with one slab a Q or K row (unshifted)");
};

/* A config whose kernel takes its rows shifted (see ROW_SHIFT_OWN_KERNEL). */
template <class Cfg> struct Sm90RowShift : Cfg {
    static constexpr bool ROW_SHIFT = true;
};

/* A config whose kernel runs varlen problems (see VARLEN_OWN_KERNEL). */
template <class Cfg> struct Sm90Varlen : Cfg {
    static constexpr bool VARLEN = true;
};

/* Whether consumer wg stages its O in a stage of the ring (O_IN_RING),
 * not in a buffer of its own. */
template <class Cfg> __device__ __forceinline__ bool sm90_o_in_ring(int wg) {
    return wg == 0 ? Cfg::O0_IN_RING : Cfg::O_IN_RING;
}

/* A P buffer's index as a type (see Sm90FwdConfig::P_BUFS). */
template <int B> struct PBuf {
    static constexpr int value = B;
};

/* Named barrier ids (0 is __syncthreads): one "turn" barrier per consumer
 * warpgroup (ids 1..3), one epilogue barrier per consumer (4..6), with O
 * staged in the ring "the other consumer has read the last K / V stage"
 * (7, 8), with EXP_TURN one exponentials' turn per consumer (9..11), and
 * with SHORT_SPLIT "consumers 1 and 2 have left their parts" (12). */
enum { BAR_TURN0 = 1, BAR_EPI0 = 4, BAR_K_READ = 7, BAR_V_READ = 8, BAR_EXP0 = 9, BAR_MERGE = 12 };
/* Threads at a turn barrier: the warpgroup waiting + the one handing over. */
constexpr int TURN_THREADS = 256;

#endif /* FA_SM90_FWD_CONFIG_CUH */
