/*
 * Hopper forward attention kernel: TMA loads, wgmma, warp specialisation.
 *
 * One CTA = 1 + C warpgroups (C = 2 or 3 consumers), persistent over output
 * tiles of 64*C query rows of one (batch, head):
 *   warpgroup 0    producer: one thread issues TMA loads of Q and K, another
 *                  those of V, into 128B-swizzled shared memory through
 *                  mbarrier rings (Q double-buffered where it fits);
 *   warpgroups 1..C consumers: each owns 64 of the tile's query rows.
 *
 * Per kv block (walked from the last block down, so the masked diagonal
 * block comes first) a consumer issues S = Q K^T (SS wgmma) and, in the same
 * turn, O += P V for the previous block (RS wgmma, P straight from registers),
 * then does the online softmax of S while P V is still running on the tensor
 * cores. O's rescale to a moved max is done inside the turn, between the two
 * issues, so it runs under Q K^T. The consumers take turns issuing (one named
 * barrier each, passed round), so one warpgroup's softmax hides under the
 * others' GEMMs. The epilogue stages O in swizzled shared memory and writes it
 * with a TMA store; with JOIN (three consumers) the next tile's first Q K^T is
 * issued in the turn of this tile's last P V, ahead of the epilogue.
 *
 * wgmma m64nN accumulator layout (f32), thread t of the warpgroup, warp
 * w = t/32, g = (t%32)/4, q = t%4: register i holds
 *     row 16w + g + 8*((i/2)%2),  column 8*(i/4) + 2q + (i%2).
 * The four threads of a quad own whole rows (row reductions: shuffles 1, 2),
 * and the registers 8c..8c+7 of S are exactly the A fragment of the P V
 * k-step c once packed pairwise to 16 bits.
 */
#ifndef FA_SM90_FWD_KERNEL_CUH
#define FA_SM90_FWD_KERNEL_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>

#include "sm90_ptx.cuh"
#include "sm90_wgmma.cuh"

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

/* q = x / div.d, returns x % div.d. */
__device__ __forceinline__ int sm90_divmod(int x, const Sm90FastDiv &div, int *q) {
    *q = (int)((__umulhi((uint32_t)x, div.magic) + (uint32_t)x) >> div.shift);
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
    int64_t window_left, window_right;  /* relative to the diagonal; huge when unbounded */
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
};

/* Bytes of shared memory a plan takes: its Q buffers, the K and V rings, O's
 * staging buffer (none when O is staged in Q's), the P buffers (P_SMEM), the
 * store thread's mailboxes (STORE_THREAD: 16 bytes a consumer), one
 * q_full/q_empty pair per Q buffer, four barriers per ring stage and an
 * o_full/o_empty pair per mailbox, and 1 KB to align the base to the
 * swizzle atom. */
constexpr int sm90_fwd_smem_bytes(int q_bufs, int q_bytes, int stages, int kv_bytes, int o_stage_bytes, int p_bytes,
                                  int mailboxes = 0) {
    return q_bufs * q_bytes + 2 * stages * kv_bytes + o_stage_bytes + p_bytes + 16 * mailboxes +
           (2 * q_bufs + 4 * stages + 2 * mailboxes) * 8 + 1024;
}

#ifndef SM90_DIAG_ONLY
#define SM90_DIAG_ONLY 1 /* see STEADY_UNMASKED_OWN_KERNEL; 0 builds the kernels without it */
#endif

/* Compile-time tile shape and shared-memory plan of one specialisation. */
template <int D_, int BN_, int STAGES_, bool BF16_, int CONSUMERS_ = 2, bool FP8_ = false, bool JOIN_ = false,
          bool SPLIT_TAIL_ = false>
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
    /* Q and K rows in slabs of QK_SW bytes, swizzled by as much: 128, or 64
     * for e4m3 at head dim 64 (a 64-byte row) */
    static constexpr int QK_SW = D * ES < 128 ? D * ES : 128;
    static constexpr int BOX_COLS = QK_SW / ES;   /* input elements per slab */
    static constexpr int SLABS = D * ES / QK_SW;  /* column slabs of a Q or K row */
    static constexpr int O_SLABS = D / 64;        /* 128-byte slabs of an output row (16-bit) */
    /* Varlen support (packed sequences, the tile's lengths and first rows
     * read from cu_seqlens). At head dim 256 it is a kernel instance of its
     * own (Sm90Varlen<Cfg>): its per-tile code would sit among the batched
     * kernel's, whose registers it nearly fills. e4m3 is batched only. */
    static constexpr bool VARLEN_OWN_KERNEL = D == 256 && !FP8;
    static constexpr bool VARLEN = !FP8 && !VARLEN_OWN_KERNEL;
    static_assert(!FP8 || ((D == 128 || D == 64) && BN % 32 == 0), "e4m3: one slab per Q/K row, whole V^T slabs");
    /* e4m3 V^T (D head-dim rows of BN keys) in slabs of VT_SLAB_KEYS keys,
     * since a swizzled TMA box row spans one swizzle row at most: the widest
     * of 128, 64 and 32 bytes (the swizzle span) that divides BN. */
    static constexpr int VT_SLAB_KEYS = BN % 128 == 0 ? 128 : BN % 64 == 0 ? 64 : 32;
    static constexpr int VT_SLAB = D * VT_SLAB_KEYS; /* bytes */

    static constexpr int Q_SLAB = BM * QK_SW; /* bytes of one slab of the Q tile */
    static constexpr int KV_SLAB = BN * QK_SW;
    static constexpr int Q_BYTES = BM * D * ES;
    static constexpr int KV_BYTES = BN * D * ES; /* a K tile, or a V (V^T for e4m3) tile */
    static constexpr int O_BYTES = BM * D * 2;
    /* O is staged in its own buffer when it fits. Else (head dim 256) each
     * consumer stages its 64 rows in a K/V stage of the tile's last kv block,
     * consumer 0 in the K buffer, consumer 1 in the V buffer, and frees that
     * stage once its store has read it; the next tile's first block uses the
     * other stage, so only its second load waits for the store. */
    static constexpr bool O_IN_RING = (Q_BYTES + O_BYTES + 2 * STAGES * KV_BYTES) > 200 * 1024;
    static_assert(!O_IN_RING || (CONSUMERS == 2 && STAGES >= 2 && BN == 64 && 64 * D * 2 == KV_BYTES),
                  "O staged in the ring: one consumer's 64 rows fill a K or V stage exactly");
    static constexpr int O_STAGE_BYTES = O_IN_RING ? 0 : O_BYTES;
    static constexpr int O_SLAB_STRIDE = O_IN_RING ? KV_SLAB : BM * 128; /* bytes between staged O's slabs */
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
     * (the fp32 probabilities live across the turn); item 30. */
    static constexpr bool LATE_PV_RETIRE = D == 256;
    /* P in two register buffers (16-bit head dim 128 and the two-consumer
     * head-dim-64 kernel): block n's probabilities are packed into the buffer
     * the P V in flight does not read, so nothing in the softmax waits for
     * that P V; it is waited for right before the next turn, when it has long
     * finished. With one buffer the pack must wait for it, and ptxas hoists
     * that wait above the softmax, which then no longer overlaps its own P V
     * (docs/perf/sm90.md, items 30, 37 and 39). Not with three consumers (160
     * registers); not for e4m3, where a second P fits only with shorter
     * blocks, which lose more than the wait costs (item 40). */
    static constexpr int P_BUFS = !FP8 && (D == 128 || (D == 64 && CONSUMERS == 2)) ? 2 : 1;
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
    /* The Q buffer's address kept warp-uniform, so the Q descriptors sit in
     * uniform registers and a Q K^T k-step costs a few uniform-datapath
     * instructions in the turn (item 32). At head dim 256 (16 k-steps)
     * holding them spills: there the address is made opaque and the
     * descriptors are rebuilt per tile. */
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
    /* O's TMA store issued by a thread of its own (sm90_store_thread: lane 0
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
     * (docs/perf/sm90.md, item 93). */
    static constexpr bool STORE_THREAD = CONSUMERS == 2 && !SPLIT_TAIL && !O_IN_RING;
    /* The paired order's balanced tail (sm90_tile_after). Not in e4m3's
     * 128-key kernel (short masked problems), where it measured level
     * (docs/perf/sm90.md, items 66 and 73); the two-consumer head-dim-64
     * kernel gains 1-2% with it at causal 1k and 2k and loses 1-4% at 512,
     * where its tiles hold 1-4 kv blocks, the tile boundary is the largest
     * share of the run and the tail's code costs about 1% (items 73, 75).
     * Nor in the split-tail kernels, which only run unmasked problems
     * (paired ones are never split), so their code stays as it was. */
    static constexpr bool PAIR_TAIL = !SPLIT_TAIL && !(FP8 && CONSUMERS == 2 && BN == 128);
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
    static constexpr bool SOFTCAP_OWN_KERNEL = FP8 || D == 128;
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
     * instances. */
    static constexpr bool STEADY_UNMASKED_OWN_KERNEL =
        P_SMEM || (SM90_DIAG_ONLY && CONSUMERS == 2 && !FP8 && !SPLIT_TAIL_);
    static constexpr bool STEADY_MASKS = true;
    /* The split-tail kernel only as its instance without the steady loop's
     * masks and without the softcap: the other two spill with the merge
     * (4 bytes). The host splits only problems that instance takes. */
    static constexpr bool SPLIT_UNMASKED_ONLY = P_SMEM;

    static constexpr int OFF_Q = 0;
    static constexpr int OFF_K = OFF_Q + Q_BUFS * Q_BYTES;
    static constexpr int OFF_V = OFF_K + STAGES * KV_BYTES;
    static constexpr int OFF_O = OFF_V + STAGES * KV_BYTES; /* staged O (not with O_IN_RING) */
    static constexpr int OFF_P = OFF_O + O_STAGE_BYTES; /* P buffers (P_SMEM), 64 rows per consumer */
    static constexpr int MAILBOXES = STORE_THREAD ? CONSUMERS : 0;
    static constexpr int OFF_MAIL = OFF_P + P_BYTES; /* STORE_THREAD: an int4 per consumer */
    static constexpr int OFF_BAR = OFF_MAIL + 16 * MAILBOXES;
    /* q_full[], q_empty[], the K/V ring's, then o_full[], o_empty[] (STORE_THREAD) */
    static constexpr int NUM_BARS = 2 * Q_BUFS + 4 * STAGES + 2 * MAILBOXES;
    static constexpr int SMEM_BYTES =
        sm90_fwd_smem_bytes(Q_BUFS, Q_BYTES, STAGES, KV_BYTES, O_STAGE_BYTES, P_BYTES, MAILBOXES);
    static_assert(SMEM_BYTES == OFF_BAR + NUM_BARS * 8 + 1024, "the offsets above and the plan's size agree");
    static_assert(SMEM_BYTES <= 227 * 1024, "shared memory plan exceeds the per-CTA limit of sm_90");

    /* registers of P (the P V GEMM's A fragments): 2 or 4 values per register */
    static constexpr int P_REGS = FP8 ? BN / 8 : BN / 4;

    static constexpr int THREADS = 128 * (1 + CONSUMERS);
    /* Register split: setmaxnreg only moves registers inside what the CTA got
     * at launch (65536 / THREADS per thread, rounded down to 8), so the sum
     * must stay within it or setmaxnreg.inc waits forever. The consumers hold
     * O, S and P; the 4-slab producer of D = 256 needs a few more than 24. */
    static constexpr int LAUNCH_REGS = 65536 / THREADS / 8 * 8;
    static constexpr int PRODUCER_REGS = CONSUMERS == 3 ? 32 : D == 256 ? 40 : 24;
    static constexpr int CONSUMER_REGS = CONSUMERS == 3 ? 160 : D == 256 ? 232 : 240;
    static_assert(PRODUCER_REGS + CONSUMERS * CONSUMER_REGS <= (1 + CONSUMERS) * LAUNCH_REGS,
                  "register split exceeds the launch allocation");
};

/* A config whose kernel applies the softcap (see SOFTCAP_OWN_KERNEL). */
template <class Cfg> struct Sm90Softcap : Cfg {
    static constexpr bool SOFTCAP = true;
};

/* A config whose steady loop has no mask code (see STEADY_UNMASKED_OWN_KERNEL). */
template <class Cfg> struct Sm90SteadyUnmasked : Cfg {
    static constexpr bool STEADY_MASKS = false;
};

/* A config whose kernel runs varlen problems (see VARLEN_OWN_KERNEL). */
template <class Cfg> struct Sm90Varlen : Cfg {
    static constexpr bool VARLEN = true;
};

/* A P buffer's index as a type (see Sm90FwdConfig::P_BUFS). */
template <int B> struct PBuf {
    static constexpr int value = B;
};

/* Named barrier ids (0 is __syncthreads): one "turn" barrier per consumer
 * warpgroup (ids 1..3), one epilogue barrier per consumer (4..6), with O
 * staged in the ring "the other consumer has read the last K / V stage"
 * (7, 8), and with EXP_TURN one exponentials' turn per consumer (9..11). */
enum { BAR_TURN0 = 1, BAR_EPI0 = 4, BAR_K_READ = 7, BAR_V_READ = 8, BAR_EXP0 = 9 };
/* Threads at a turn barrier: the warpgroup waiting + the one handing over. */
constexpr int TURN_THREADS = 256;

/* ---- tile scheduling ------------------------------------------------------ */

struct Sm90Tile {
    int m_block, head, batch;
    int seq_q, seq_k;   /* this sequence's lengths */
    int q_row0, k_row0; /* its first row in the maps' row dimension (0 when batched) */
    int map_b;          /* its coordinate in the maps' batch dimension (0 for varlen) */
    int diag_off;       /* key j is on row i's diagonal when j == i + diag_off */
    int n_lo, n_hi;     /* kv blocks [n_lo, n_hi) hold every visible key */
};

/* Tiles that do not exist are skipped by every warpgroup alike: one past the
 * last head (paired order), and a varlen sequence's surplus query blocks (it
 * has fewer than the longest sequence). */
template <class Cfg>
__device__ __forceinline__ bool sm90_tile_live(const Sm90FwdParams &p, const Sm90Tile &t) {
    return t.batch < p.batch && (!Cfg::VARLEN || t.m_block * Cfg::BM < t.seq_q);
}

/* Tile order. Consecutive tiles share a head, so the CTAs working at the same
 * time read the same K/V blocks and those come from L2, not memory (walking
 * heads in any other order measured up to 17% slower, docs/perf/sm90.md).
 *
 * Under a causal-like mask a query block's work grows with its index, so
 * there (paired) a CTA takes query blocks in pairs of equal total work: unit
 * j (0 <= j < M = num_m_blocks) of heads 2g and 2g + 1 is block M-1-j of head
 * 2g + 1, then block j of head 2g. The CTAs stay balanced while all query
 * blocks of two heads run at the same time. Tile t = 2u + h is unit u's first
 * (h = 0) or second block; with an odd number of heads the last unit's first
 * block does not exist (sm90_tile_live).
 *
 * Units go out round-robin, so with U units on G CTAs the last round holds
 * U mod G of them while the other CTAs idle for a unit's time. Where the
 * host plans it (sm90_pair_tail_plan), the units from pair_tail on (the
 * last round, and up to three before it) go out as single tiles instead,
 * largest first (pair_tail_tile), dealt in a snake: in even passes CTA c
 * takes list position pass * G + c, in odd ones pass * G + G - 1 - c, so
 * the CTAs end within about a small tile of each other. A CTA's position
 * k in the list is tile index 2 pair_tail + 2 k + (pass odd), the pass's
 * parity giving the step to its next position without a division. */
__device__ __forceinline__ int sm90_pair_tail_start(const Sm90FwdParams &p) {
    const int c = (int)blockIdx.x;
    return c < p.pair_tail_count ? 2 * p.pair_tail + 2 * c : p.num_tiles;
}

template <class Cfg>
__device__ __forceinline__ int sm90_first_tile(const Sm90FwdParams &p) {
    if constexpr (Cfg::PAIR_TAIL)
        if (p.paired && (int)blockIdx.x >= p.pair_tail) return sm90_pair_tail_start(p);
    return p.paired ? 2 * (int)blockIdx.x : (int)blockIdx.x;
}

template <class Cfg>
__device__ __forceinline__ int sm90_tile_after(const Sm90FwdParams &p, int t) {
    if (p.paired) {
        if constexpr (Cfg::PAIR_TAIL) {
            if (t >= 2 * p.pair_tail) { /* a tail position */
                const int k = (t - 2 * p.pair_tail) >> 1, odd = t & 1, c = (int)blockIdx.x;
                const int next = k + (odd ? 2 * c + 1 : 2 * (grid_ctas() - c) - 1); /* the next pass's position */
                return next < p.pair_tail_count ? 2 * p.pair_tail + 2 * next + (odd ^ 1) : p.num_tiles;
            }
            if (t % 2 != 0 && t / 2 + grid_ctas() >= p.pair_tail) /* this CTA's next unit is in the tail */
                return sm90_pair_tail_start(p);
        }
        return t % 2 == 0 ? t + 1 : 2 * (t / 2 + grid_ctas());
    }
    if (!Cfg::SPLIT_TAIL) return t + grid_ctas();
    if (t < p.tail_first) { /* whole tiles, then this CTA's two tail pieces */
        t += grid_ctas();
        return t < p.tail_first ? t : p.tail_first + 2 * (int)blockIdx.x;
    }
    return (t - p.tail_first) & 1 ? p.num_tiles : t + 1;
}

/* Tail piece t (t >= p.tail_first; non-paired order, every tile with the
 * same split_blocks kv blocks): CTA c = (t - tail_first) / 2 owns positions
 * [c W / G, (c + 1) W / G) of the W = split_work tail blocks laid end to end,
 * which fall in at most two tiles (a CTA's share is under one tile); its
 * k-th piece (k = (t - tail_first) % 2) is the part in its k-th tile. Returns
 * that tile's index within the tail and sets the piece's kv blocks [*lo, *hi)
 * (empty when the share lies in one tile only). */
__device__ __forceinline__ int sm90_split_piece(const Sm90FwdParams &p, int t, int *lo, int *hi) {
    const uint32_t c = (uint32_t)(t - p.tail_first) >> 1, g = (uint32_t)grid_ctas(), nb = (uint32_t)p.split_blocks;
    const uint32_t a = c * p.split_work / g, b = (c + 1) * p.split_work / g; /* host: split_work * G < 2^32 */
    const int r = (int)(a / nb) + ((t - p.tail_first) & 1);
    *lo = max((int)a - r * (int)nb, 0);
    *hi = min((int)b - r * (int)nb, (int)nb);
    return r;
}

/* Just the tile of tail piece t (its index within the tail). */
__device__ __forceinline__ int sm90_split_tile(const Sm90FwdParams &p, int t) {
    int lo, hi;
    return sm90_split_piece(p, t, &lo, &hi);
}

/* The CTA whose tail share holds position x (inverse of the shares above). */
__device__ __forceinline__ int sm90_split_owner(const Sm90FwdParams &p, uint32_t x) {
    return (int)(((x + 1) * (uint32_t)grid_ctas() - 1) / p.split_work);
}

template <class Cfg>
__device__ __forceinline__ Sm90Tile sm90_decode_tile(const Sm90FwdParams &p, int t) {
    Sm90Tile tile;
    int hb, split_lo = 0, split_hi = 0;
    const bool piece = Cfg::SPLIT_TAIL && !p.paired && t >= p.tail_first;
    if (piece) t = p.tail_first + sm90_split_piece(p, t, &split_lo, &split_hi); /* decoded as its tile */
    if (p.paired) {
        if constexpr (Cfg::PAIR_TAIL) /* a tail position: its tile from the list */
            if (t >= 2 * p.pair_tail) t = 2 * p.pair_tail + p.pair_tail_tile[(t - 2 * p.pair_tail) >> 1];
        const int u = t >> 1, h = t & 1; /* t >= 0 */
        int g;
        const int j = sm90_divmod(u, p.m_div, &g); /* unit j of head pair g */
        hb = 2 * g + 1 - h;
        tile.m_block = h ? j : p.num_m_blocks - 1 - j;
    } else {
        tile.m_block = sm90_divmod(t, p.m_div, &hb);
    }
    /* batch = p.batch: past the last head (paired order, odd head count) */
    tile.head = sm90_divmod(hb, p.h_div, &tile.batch);
    if (Cfg::VARLEN && p.cu_seqlens_q) {
        const int b = min(tile.batch, p.batch - 1); /* a tile past the last head is not live */
        tile.q_row0 = __ldg(&p.cu_seqlens_q[b]);
        tile.k_row0 = __ldg(&p.cu_seqlens_k[b]);
        tile.seq_q = __ldg(&p.cu_seqlens_q[b + 1]) - tile.q_row0;
        tile.seq_k = __ldg(&p.cu_seqlens_k[b + 1]) - tile.k_row0;
        tile.map_b = 0;
    } else {
        tile.q_row0 = tile.k_row0 = 0;
        tile.seq_q = p.sq;
        tile.seq_k = p.sk;
        tile.map_b = tile.batch;
    }
    tile.diag_off = p.top_left ? 0 : tile.seq_k - tile.seq_q;
    int64_t i0 = (int64_t)tile.m_block * Cfg::BM;
    int64_t i1 = min(i0 + Cfg::BM, (int64_t)tile.seq_q) - 1;
    int64_t lo = max((int64_t)0, i0 + tile.diag_off - p.window_left);
    int64_t hi = min((int64_t)tile.seq_k, i1 + tile.diag_off + p.window_right + 1);
    if (hi <= lo) {
        tile.n_lo = tile.n_hi = 0;
    } else {
        tile.n_lo = (int)(lo / Cfg::BN);
        tile.n_hi = (int)((hi + Cfg::BN - 1) / Cfg::BN);
    }
    if (piece) { /* a tail piece: its own kv blocks; an empty one is no tile */
        tile.n_lo = split_lo;
        tile.n_hi = split_hi;
        if (split_hi <= split_lo) tile.batch = p.batch;
    }
    return tile;
}


/* ---- producer -------------------------------------------------------------- */

/* Two producer threads walk the same tiles and kv blocks: one loads Q and K,
 * the other V. Each waits only on its own ring, so a K load is never queued
 * behind a V load that waits for a P V to finish: K is needed a turn before
 * V (a turn issues Q K_n^T and P_{n+1} V_{n+1}). */
enum { LOAD_Q_K = 0, LOAD_V = 1 };

template <class Cfg, int ROLE>
__device__ __forceinline__ void sm90_producer(const Sm90FwdParams &p, uint8_t *smem, uint64_t *bars) {
    uint64_t *q_full = bars, *q_empty = bars + Cfg::Q_BUFS;
    uint64_t *k_full = bars + 2 * Cfg::Q_BUFS, *k_empty = k_full + Cfg::STAGES;
    uint64_t *v_full = k_empty + Cfg::STAGES, *v_empty = v_full + Cfg::STAGES;
    if constexpr (ROLE == LOAD_Q_K) {
        tma_prefetch_map(&p.tm_q);
        tma_prefetch_map(&p.tm_k);
        tma_prefetch_map(&p.tm_o);
    } else {
        tma_prefetch_map(&p.tm_v);
        /* e4m3: V^T is written by the transpose launched just before this
         * kernel, which lets this one start early (sm90_launch); only V's
         * loads need it done */
        if constexpr (Cfg::FP8) grid_dependency_wait();
    }
    uint32_t it = 0, tile_iter = 0;
    for (int t = sm90_first_tile<Cfg>(p); t < p.num_tiles; t = sm90_tile_after<Cfg>(p, t)) {
        Sm90Tile tile = sm90_decode_tile<Cfg>(p, t);
        if (!sm90_tile_live<Cfg>(p, tile)) continue;
        if (tile.n_hi <= tile.n_lo) continue; /* no visible key: consumers write zeros */
        int kv_head = tile.head / p.q_per_kv;
        /* A fresh barrier counts as having completed the phase before phase 0,
         * so the first wait on an "empty" barrier uses parity 1 and passes. */
        if constexpr (ROLE == LOAD_Q_K) {
            const uint32_t qb = tile_iter % Cfg::Q_BUFS;
            mbar_wait(&q_empty[qb], ((tile_iter / Cfg::Q_BUFS) & 1) ^ 1);
            mbar_arrive_expect_tx(&q_full[qb], Cfg::Q_BYTES);
            for (int s = 0; s < Cfg::SLABS; ++s)
                tma_load_4d(smem + Cfg::OFF_Q + qb * Cfg::Q_BYTES + s * Cfg::Q_SLAB, &p.tm_q, &q_full[qb],
                            s * Cfg::BOX_COLS, tile.q_row0 + tile.m_block * Cfg::BM, tile.head, tile.map_b);
        }
        /* Varlen: a block straddling the sequence end also loads the next
         * sequence's first keys (or zeros past the tensor); the consumers mask
         * them, and their V rows meet P = 0. Not unrolled: the producer has
         * only PRODUCER_REGS registers. */
#pragma unroll 1
        for (int n = tile.n_hi - 1; n >= tile.n_lo; --n, ++it) {
            uint32_t stage = it % Cfg::STAGES, parity = ((it / Cfg::STAGES) & 1) ^ 1;
            if constexpr (ROLE == LOAD_Q_K) {
                mbar_wait(&k_empty[stage], parity);
                mbar_arrive_expect_tx(&k_full[stage], Cfg::KV_BYTES);
                uint8_t *k_dst = smem + Cfg::OFF_K + stage * Cfg::KV_BYTES;
                for (int s = 0; s < Cfg::SLABS; ++s)
                    tma_load_4d(k_dst + s * Cfg::KV_SLAB, &p.tm_k, &k_full[stage], s * Cfg::BOX_COLS,
                                tile.k_row0 + n * Cfg::BN, kv_head, tile.map_b);
            } else {
                mbar_wait(&v_empty[stage], parity);
                mbar_arrive_expect_tx(&v_full[stage], Cfg::KV_BYTES);
                uint8_t *v_dst = smem + Cfg::OFF_V + stage * Cfg::KV_BYTES;
                if constexpr (Cfg::FP8) { /* V^T: D head-dim rows of BN keys, VT_SLAB_KEYS per slab */
                    for (int s = 0; s < Cfg::BN / Cfg::VT_SLAB_KEYS; ++s)
                        tma_load_4d(v_dst + s * Cfg::VT_SLAB, &p.tm_v, &v_full[stage],
                                    n * Cfg::BN + s * Cfg::VT_SLAB_KEYS, 0, kv_head, tile.map_b);
                } else {
                    for (int s = 0; s < Cfg::SLABS; ++s)
                        tma_load_4d(v_dst + s * Cfg::KV_SLAB, &p.tm_v, &v_full[stage], s * 64,
                                    tile.k_row0 + n * Cfg::BN, kv_head, tile.map_b);
                }
            }
        }
        ++tile_iter;
    }
}

/* ---- consumer building blocks ---------------------------------------------- */

/* Issue S = Q K^T for this warpgroup's 64 rows (one commit group). */
template <class Cfg>
__device__ __forceinline__ void sm90_issue_qk(float *S, uint32_t q_addr, uint32_t k_addr) {
    fence_regs<Cfg::BN / 2>(S);
    const DescSw<Cfg::QK_SW> qd(q_addr, 16), kd(k_addr, 16);
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

/* Issue O (+)= P V (one commit group). V is [key][d] in smem: an MN-major B
 * operand whose 64-column slabs lie KV_SLAB bytes apart (the LBO). P comes
 * from registers, or with P_SMEM from this warpgroup's buffer at p_addr. */
template <class Cfg>
__device__ __forceinline__ void sm90_issue_pv(float *O, uint32_t *P, uint32_t p_addr, uint32_t v_addr,
                                              int accumulate) {
    fence_regs<Cfg::D / 2>(O);
    if (!Cfg::P_SMEM) fence_regs<Cfg::P_REGS>(P);
    wgmma_fence();
    if constexpr (Cfg::FP8) {
        /* V^T is [d][key]: a K-major B operand like K in Q K^T, 32 keys (32 B) per k-step */
        const DescSw<Cfg::VT_SLAB_KEYS> vd(v_addr, 16);
        const DescSw128 pd(p_addr, 16); /* P: K-major like Q, one 128-byte slab */
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
        const DescSw128 vd(v_addr, Cfg::KV_SLAB);
#pragma unroll
        for (int k = 0; k < Cfg::BN / 16; ++k) /* 16 keys = 2048 B per k-step */
            wgmma_rs<Cfg::D, Cfg::BF16, false>(O, P + 4 * k, vd.at(k * 16 * 128), accumulate || k > 0);
    }
    wgmma_commit();
    fence_regs<Cfg::D / 2>(O);
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
template <class Cfg, bool CHECK_LO>
__device__ __forceinline__ void sm90_mask_block(float *S, int n, const int *key_lo, const int *key_hi, int quad_col) {
    if constexpr (Cfg::MASK_BITS) {
        const int col0 = n * Cfg::BN + quad_col; /* key of the thread's score k = 0 */
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            /* bit k: the thread's k-th score of row half h is visible */
            uint32_t visible = low_bits_u32(sm90_scores_below(key_hi[h] - col0));
            if (CHECK_LO) visible &= ~low_bits_u32(sm90_scores_below(key_lo[h] - col0));
#pragma unroll
            for (int k = 0; k < Cfg::BN / 4; ++k)
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
template <class Cfg>
__device__ __forceinline__ void sm90_thread_row_max_masked(const float *S, const float *row_max, float *mx) {
    float part[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 4; ++j) part[h][j] = row_max[h];
#pragma unroll
    for (int i = 0; i < Cfg::BN / 2; ++i) part[(i / 2) % 2][(i / 4) % 4] = fmaxf(part[(i / 2) % 2][(i / 4) % 4], S[i]);
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
 * gives P = 1 exactly, as in a plain softmax (a max that lags, to skip more
 * rescales, rounds the dominant P: docs/perf/sm90.md).
 *
 * Step one, given this thread's row maxima over the block and the running
 * max (thread_max): updates the running max, returns the factor that
 * rescales the old O and row sums (exactly 1 where the max did not move) and
 * what each score's exponent subtracts (sub). */
template <class Cfg>
__device__ __forceinline__ void sm90_softmax_max(const float *thread_max, float *row_max, float *rescale, float *sub,
                                                 float scale_log2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = thread_max[h];
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)); /* quad owns the row */
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const bool move = mx > row_max[h];                  /* false while the row is all hidden */
        sub[h] = mx == -INFINITY ? 0.f : mx * scale_log2;   /* fully hidden row: avoid inf - inf */
        rescale[h] = move ? fast_exp2(row_max[h] * scale_log2 - sub[h]) : 1.f; /* old -inf gives 0 */
        row_max[h] = mx;
    }
}

/* Step two: exp2 into S, and the row sums rescaled and grown by the block's
 * (per-thread partial sums, two chains per row; the quad is reduced once in
 * the epilogue). */
template <class Cfg>
__device__ __forceinline__ void sm90_softmax_exp(float *S, const float *sub, const float *rescale, float *row_sum,
                                                 float scale_log2) {
    float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int i = 0; i < Cfg::BN / 2; ++i) {
        int h = (i / 2) % 2;
        S[i] = fast_exp2(fmaf(S[i], scale_log2, -sub[h]));
        sum[h][(i / 4) % 2] += S[i];
    }
    row_sum[0] = row_sum[0] * rescale[0] + (sum[0][0] + sum[0][1]);
    row_sum[1] = row_sum[1] * rescale[1] + (sum[1][0] + sum[1][1]);
}

/* O to a row max that moved: rescale[h] multiplies the rows of half h (the
 * thread's rows g and g + 8). Skipped for a half of the warp's rows (8 rows)
 * where no max moved: once the first blocks have passed, a max rarely moves. */
template <class Cfg>
__device__ __forceinline__ void sm90_rescale_o(float *O, const float *rescale) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
        if (__any_sync(0xffffffffu, rescale[h] != 1.f)) {
#pragma unroll
            for (int i = 2 * h; i < Cfg::D / 2; i += 4) {
                O[i] *= rescale[h];
                O[i + 1] *= rescale[h];
            }
        }
}

/* This warpgroup's S of a block is done: free its K stage. O_IN_RING:
 * consumer 0 keeps the tile's last K stage for its O (see the epilogue). */
template <class Cfg>
__device__ __forceinline__ void sm90_free_k_stage(uint64_t *k_empty, bool last_block, int wg, int tid) {
    if (tid == 0 && !(Cfg::O_IN_RING && wg == 0 && last_block)) mbar_arrive(k_empty);
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

/* Address of output row r (within the sequence) of a tile's head. */
__device__ __forceinline__ uint8_t *sm90_out_row(const Sm90FwdParams &p, const Sm90Tile &t, int r) {
    return (uint8_t *)p.out +
           2 * ((int64_t)t.batch * p.out_sb + (int64_t)(t.q_row0 + r) * p.out_ss + (int64_t)t.head * p.out_sh);
}

/* Rows of a tile with no visible key: zeros straight to global memory. */
template <class Cfg>
__device__ __forceinline__ void sm90_store_zero_rows(const Sm90FwdParams &p, const Sm90Tile &t, int wg, int tid) {
    const int chunks = p.head_dim / 8; /* 16-byte chunks per row */
    int row0 = t.m_block * Cfg::BM + wg * 64;
    for (int c = tid; c < 64 * chunks; c += 128) {
        int r = row0 + c / chunks;
        if (r >= t.seq_q) continue;
        *reinterpret_cast<uint4 *>(sm90_out_row(p, t, r) + (c % chunks) * 16) = make_uint4(0, 0, 0, 0);
    }
}

/* The first `rows` rows of a warpgroup's staged O (64 x head_dim, 128B
 * swizzled slabs) to global memory with ordinary 16-byte stores: used where a
 * TMA box would also write the next varlen sequence's rows. */
template <class Cfg>
__device__ __forceinline__ void sm90_store_staged_rows(const Sm90FwdParams &p, const Sm90Tile &t,
                                                       const uint8_t *o_stage, int row0, int rows, int tid) {
    const int chunks = p.head_dim / 8; /* 16-byte chunks per row */
    for (int c = tid; c < rows * chunks; c += 128) {
        int r = c / chunks, ch = c % chunks;
        /* 128B swizzle: 16-byte chunk index XOR (row mod 8) inside slab ch / 8 */
        const uint8_t *src = o_stage + (ch / 8) * Cfg::O_SLAB_STRIDE + r * 128 + (((ch % 8) ^ (r % 8)) * 16);
        *reinterpret_cast<uint4 *>(sm90_out_row(p, t, row0 + r) + ch * 16) = *reinterpret_cast<const uint4 *>(src);
    }
}

/* lse of row r (within the sequence) of a tile's head. */
__device__ __forceinline__ float *sm90_lse_at(const Sm90FwdParams &p, const Sm90Tile &t, int r) {
    return p.lse + (int64_t)t.batch * p.lse_sb + (int64_t)t.head * p.lse_sh + (int64_t)(t.q_row0 + r) * p.lse_ss;
}

/* ---- consumer ---------------------------------------------------------------- */

/* Query row (within the warpgroup's 64) of a consumer thread's first
 * accumulator row; its second is 8 below (see the layout at the top). */
__device__ __forceinline__ int sm90_row_in_wg(int tid) { return (tid / 32) * 16 + (tid % 32) / 4; }

/* The same row within the tile's sequence. */
template <class Cfg>
__device__ __forceinline__ int sm90_first_row(const Sm90Tile &tile, int wg, int tid) {
    return tile.m_block * Cfg::BM + wg * 64 + sm90_row_in_wg(tid);
}

/* The first tile at or after t (stepping by the grid) with a visible key, or
 * p.num_tiles; *found is that tile, decoded. Tiles passed on the way are
 * finished here: a varlen sequence's surplus tiles need nothing, tiles with
 * no visible key get zero rows and lse = -inf. The producer skips the same
 * tiles. */
template <class Cfg>
__device__ __forceinline__ int sm90_next_work_tile(const Sm90FwdParams &p, int t, int wg, int tid, Sm90Tile *found) {
    for (; t < p.num_tiles; t = sm90_tile_after<Cfg>(p, t)) {
        Sm90Tile tile = sm90_decode_tile<Cfg>(p, t);
        if (!sm90_tile_live<Cfg>(p, tile)) continue;
        if (tile.n_hi > tile.n_lo) {
            *found = tile;
            return t;
        }
        sm90_store_zero_rows<Cfg>(p, tile, wg, tid);
        const int row0 = sm90_first_row<Cfg>(tile, wg, tid);
        if (p.lse && tid % 4 == 0)
            for (int h = 0; h < 2; ++h)
                if (row0 + 8 * h < tile.seq_q) *sm90_lse_at(p, tile, row0 + 8 * h) = -INFINITY;
    }
    return p.num_tiles;
}

/* What the softmax of one tile needs per thread: the visible keys
 * [key_lo, key_hi) of the thread's two rows, and the logit scales. */
struct Sm90RowSetup {
    int key_lo[2], key_hi[2];
    float s_log2, cap_pre; /* S * s_log2: base-2 logits; softcap: tanh(S * cap_pre) first (0: off) */
};

template <class Cfg>
__device__ __forceinline__ Sm90RowSetup sm90_row_setup(const Sm90FwdParams &p, const Sm90Tile &tile, int wg,
                                                       int tid) {
    Sm90RowSetup r;
    /* keys past the sequence end (another sequence's, in a varlen block) are hidden */
    const int row0 = sm90_first_row<Cfg>(tile, wg, tid); /* rows row0, row0 + 8 of the sequence */
    for (int h = 0; h < 2; ++h) {
        int64_t c = (int64_t)row0 + 8 * h + tile.diag_off;
        r.key_lo[h] = (int)max((int64_t)0, min((int64_t)tile.seq_k, c - p.window_left));
        r.key_hi[h] = (int)max((int64_t)0, min((int64_t)tile.seq_k, c + p.window_right + 1));
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
    sm90_softmax_max<Cfg>(thread_max, row_max, rescale, sub, r.s_log2);
}

/* Block n's scores to probabilities: softcap, mask, the online softmax; with
 * EXP_TURN a handshake between the consumers (sync on my_exp, arrive on
 * next_exp) brackets the exponentials in the source, though ptxas does not
 * keep them inside it (see EXP_TURN); the ids are made once, outside the
 * loop. */
template <class Cfg, bool MAY_MASK = true>
__device__ __forceinline__ void sm90_scores_to_probs(float *S, const Sm90FwdParams &p, const Sm90RowSetup &r, int n,
                                                     float *row_max, float *row_sum, float *rescale, int quad_col,
                                                     int my_exp, int next_exp) {
    float sub[2];
    sm90_scores_to_max<Cfg, MAY_MASK>(S, p, r, n, row_max, rescale, sub, quad_col);
    if constexpr (Cfg::EXP_TURN) named_bar_sync(my_exp, TURN_THREADS);
    sm90_softmax_exp<Cfg>(S, sub, rescale, row_sum, r.s_log2);
    if constexpr (Cfg::EXP_TURN) named_bar_arrive(next_exp, TURN_THREADS);
}

/* The part of a tile's epilogue that needs no O, so that it can run while
 * the tile's last P V is on the tensor cores: the row sums over the quad,
 * the factors that normalise this thread's two rows of O (inv), and their
 * lse. */
template <class Cfg>
__device__ __forceinline__ void sm90_finish_rows(const Sm90FwdParams &p, const Sm90Tile &tile, const float *row_max,
                                                 const float *row_sum, float s_log2, int wg, int tid, float *inv) {
    const int lane = tid % 32;
    const int row0 = sm90_first_row<Cfg>(tile, wg, tid);
    for (int h = 0; h < 2; ++h) {
        float l = row_sum[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        /* row with no visible key: out 0; l >= 1 otherwise (the max's own P is
         * 1), so the approximate reciprocal and log2 are within 2 ulp */
        inv[h] = l > 0.f ? __fdividef(1.f, l) : 0.f;
        if constexpr (Cfg::FP8) /* e4m3: V's descale, applied once to the normalised row */
            if (p.v_descale) inv[h] *= p.v_descale[tile.batch * p.hk + tile.head / p.q_per_kv];
        int r = row0 + 8 * h;
        if (p.lse && lane % 4 == 0 && r < tile.seq_q) {
            float lse = l > 0.f ? (row_max[h] * s_log2 + __log2f(l)) * 0.69314718055994531f : -INFINITY;
            *sm90_lse_at(p, tile, r) = lse;
        }
    }
}

/* This warpgroup's O staging buffer (not O_IN_RING) is free once the
 * previous tile's store has read it. With STORE_THREAD the store thread
 * says so on o_empty (the k-th epilogue of this warpgroup waits for phase
 * k - 1; a fresh barrier passes the parity-1 wait). */
template <class Cfg>
__device__ __forceinline__ void sm90_claim_o_buf(uint64_t *o_empty, uint32_t k, int wg, int tid) {
    if constexpr (Cfg::STORE_THREAD) {
        mbar_wait(o_empty, (k & 1) ^ 1);
    } else {
        if (tid == 0) tma_store_wait_read();
        named_bar_sync(BAR_EPI0 + wg, 128);
    }
}

/* STORE_THREAD: what a consumer posts for the store thread with its staged
 * rows: the store's row coordinate, head and batch, and what to do. */
enum { SM90_MAIL_STORE = 0, SM90_MAIL_NONE = 1, SM90_MAIL_END = 2 };

__device__ __forceinline__ void sm90_post(int4 *mailbox, uint64_t *o_full, int row, int head, int batch, int what,
                                          int tid) {
    if (tid == 0) *mailbox = make_int4(row, head, batch, what);
    mbar_arrive(o_full); /* each thread: its staging writes (and thread 0's post) come first */
}

/* Lane 0 of warp 2 of the producer warpgroup (STORE_THREAD): the consumers'
 * O stores, in the order they come (every consumer ends every tile, so in
 * turn: 0, 1, .., 0, 1, ..). */
template <class Cfg>
__device__ __forceinline__ void sm90_store_thread(const Sm90FwdParams &p, uint8_t *smem, uint64_t *o_full,
                                                  uint64_t *o_empty) {
    const int4 *mail = reinterpret_cast<const int4 *>(smem + Cfg::OFF_MAIL);
    tma_prefetch_map(&p.tm_o);
    for (uint32_t k = 0;; ++k) {
        bool end = false;
        for (int c = 0; c < Cfg::CONSUMERS; ++c) {
            mbar_wait(&o_full[c], k & 1);
            const int4 m = mail[c];
            if (m.w == SM90_MAIL_END) {
                end = true;
                continue;
            }
            if (m.w == SM90_MAIL_STORE) {
                uint8_t *o_stage = smem + Cfg::OFF_O + c * 64 * 128;
                for (int s = 0; s < Cfg::O_SLABS; ++s)
                    tma_store_4d(&p.tm_o, o_stage + s * Cfg::O_SLAB_STRIDE, s * 64, m.x, m.y, m.z);
                tma_store_commit();
                tma_store_wait_read(); /* the rows are free once the store has read them */
            }
            mbar_arrive(&o_empty[c]);
        }
        if (end) break;
    }
    tma_store_wait_all(); /* shared memory must outlive the last store */
}

/* Normalise this warpgroup's 64 rows of O (by inv, from sm90_finish_rows),
 * stage them in swizzled shared memory and store them (TMA, or row by row at
 * the end of a varlen sequence). The staging buffer has been claimed
 * (sm90_claim_o_buf), except with O_IN_RING: there o_stage is a stage of the
 * tile's last kv block, freed (stage_empty) once the store has read it. */
template <class Cfg>
__device__ __forceinline__ void sm90_epilogue(const Sm90FwdParams &p, const Sm90Tile &tile, const float *O,
                                              const float *inv, uint8_t *o_stage, uint64_t *stage_empty,
                                              int4 *mailbox, uint64_t *o_full, int wg, int tid) {
    const int lane = tid % 32;
    /* the other consumer has finished its last S (K stage) or P V (V stage) */
    if constexpr (Cfg::O_IN_RING) named_bar_sync(wg == 0 ? BAR_K_READ : BAR_V_READ, 256);
    /* Each stmatrix stores the warp's 16 rows x 16 columns: matrices (rows
     * 0-7, 8-15) x (column blocks cb, cb + 1), O registers 4cb..4cb+7 (see
     * the layout at the top). Lane l addresses row l % 8 of matrix l / 8. */
    const int mat = lane / 8, mat_row = 16 * (tid / 32) + 8 * (mat % 2) + lane % 8;
    const uint32_t o_row = smem_addr(o_stage) + mat_row * 128;
#pragma unroll
    for (int cb = 0; cb < Cfg::D / 8; cb += 2) {
        const int c8 = cb + mat / 2; /* this lane's 8-column block */
        /* 128B swizzle: 16-byte chunk index XOR (row mod 8) */
        const uint32_t addr = o_row + (c8 / 8) * Cfg::O_SLAB_STRIDE + (((c8 % 8) ^ (lane % 8)) * 16);
        const float *o = O + 4 * cb;
        stmatrix_x4(addr, pack2<elem16_t<Cfg::BF16>>(o[0] * inv[0], o[1] * inv[0]),
                    pack2<elem16_t<Cfg::BF16>>(o[2] * inv[1], o[3] * inv[1]),
                    pack2<elem16_t<Cfg::BF16>>(o[4] * inv[0], o[5] * inv[0]),
                    pack2<elem16_t<Cfg::BF16>>(o[6] * inv[1], o[7] * inv[1]));
    }
    fence_proxy_async_smem(); /* generic writes -> visible to the TMA engine */
    const int wg_row0 = tile.m_block * Cfg::BM + wg * 64, wg_rows = min(64, tile.seq_q - wg_row0);
    const bool by_rows = Cfg::VARLEN && p.cu_seqlens_q && wg_rows < 64;
    if constexpr (Cfg::STORE_THREAD) {
        if (!by_rows) {
            sm90_post(mailbox, o_full, tile.q_row0 + wg_row0, tile.head, tile.map_b, SM90_MAIL_STORE, tid);
            return;
        }
    }
    named_bar_sync(BAR_EPI0 + wg, 128);
    if (by_rows) {
        /* Last rows of a varlen sequence: the map's row bound is the packed
         * tensor's, not the sequence's, so store row by row. */
        if (wg_rows > 0) sm90_store_staged_rows<Cfg>(p, tile, o_stage, wg_row0, wg_rows, tid);
        if constexpr (Cfg::O_IN_RING) {
            named_bar_sync(BAR_EPI0 + wg, 128); /* every thread has read its rows of the stage */
            if (tid == 0) mbar_arrive(stage_empty);
        }
        if constexpr (Cfg::STORE_THREAD) /* nothing to store; each thread's reads come before its arrive */
            sm90_post(mailbox, o_full, 0, 0, 0, SM90_MAIL_NONE, tid);
    } else if (tid == 0) {
        for (int s = 0; s < Cfg::O_SLABS; ++s)
            tma_store_4d(&p.tm_o, o_stage + s * Cfg::O_SLAB_STRIDE, s * 64, tile.q_row0 + wg_row0, tile.head,
                         tile.map_b);
        tma_store_commit();
        if (Cfg::O_IN_RING) {
            tma_store_wait_read(); /* the stage goes back to the producer once the store has read it */
            mbar_arrive(stage_empty);
        }
    }
}

/* Slot of the piece CTA c computes of tail tile r. In position order the
 * pieces are numbered c + r (a CTA's second piece lies in the tile after its
 * first, and CTA c + 1 starts where CTA c ends), so no two share a slot. Per
 * consumer warpgroup a slot holds D / 8 float4s of O and one of (row max,
 * row sum) per thread, thread-minor so that a warp's stores are contiguous. */
template <class Cfg>
__device__ __forceinline__ float4 *sm90_split_slot(const Sm90FwdParams &p, int slot, int wg, int tid) {
    return p.split_partial + (size_t)(slot * Cfg::CONSUMERS + wg) * (Cfg::D / 8 + 1) * 128 + tid;
}

/* The end of tail piece t: its O is one part of its tile's. Leaves the part
 * (unnormalised O, the row maxima and the thread's partial row sums) in its
 * slot; the tile's last piece to get here merges every part, in position
 * order (so the result does not depend on which piece that is), into O,
 * row_max and row_sum, and returns true: it writes the tile. */
template <class Cfg>
__device__ __forceinline__ bool sm90_split_merge(const Sm90FwdParams &p, int t, float *O, float *row_max,
                                                 float *row_sum, float s_log2, int wg, int tid) {
    constexpr int CHUNKS = Cfg::D / 8; /* float4s of O per thread */
    const int r = sm90_split_tile(p, t);
    float4 *mine = sm90_split_slot<Cfg>(p, ((t - p.tail_first) >> 1) + r, wg, tid);
#pragma unroll
    for (int j = 0; j < CHUNKS; ++j) mine[j * 128] = make_float4(O[4 * j], O[4 * j + 1], O[4 * j + 2], O[4 * j + 3]);
    mine[CHUNKS * 128] = make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]);
    __threadfence(); /* the part is visible GPU-wide before the count says it is there */
    named_bar_sync(BAR_EPI0 + wg, 128);
    const uint32_t nb = (uint32_t)p.split_blocks;
    const int first = sm90_split_owner(p, r * nb), last = sm90_split_owner(p, (r + 1) * nb - 1);
    bool tile_done = false;
    if (tid == 0) tile_done = atomicAdd(&p.split_count[r * Cfg::CONSUMERS + wg], 1) == last - first;
    if (!named_bar_sync_or(BAR_EPI0 + wg, 128, tile_done)) return false;
    __threadfence(); /* and read after the count */
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
    for (int c = first; c <= last; ++c) {
        const float4 *part = sm90_split_slot<Cfg>(p, c + r, wg, tid);
        const float4 stats = __ldcg(part + CHUNKS * 128);
        float keep[2], take[2]; /* factors of the merged rows so far and of this part */
        for (int h = 0; h < 2; ++h) {
            const float m = h ? stats.y : stats.x, l = h ? stats.w : stats.z;
            const float mx = fmaxf(row_max[h], m);
            const float sub = mx == -INFINITY ? 0.f : mx * s_log2; /* rows hidden in both: avoid inf - inf */
            keep[h] = fast_exp2(row_max[h] * s_log2 - sub);      /* 0 before the first part */
            take[h] = fast_exp2(m * s_log2 - sub);
            row_sum[h] = row_sum[h] * keep[h] + l * take[h];
            row_max[h] = mx;
        }
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) { /* O[4j], O[4j+1]: the thread's first row; O[4j+2], O[4j+3]: its second */
            const float4 v = __ldcg(part + j * 128);
            O[4 * j] = O[4 * j] * keep[0] + v.x * take[0];
            O[4 * j + 1] = O[4 * j + 1] * keep[0] + v.y * take[0];
            O[4 * j + 2] = O[4 * j + 2] * keep[1] + v.z * take[1];
            O[4 * j + 3] = O[4 * j + 3] * keep[1] + v.w * take[1];
        }
    }
    return true;
}

/*
 * A consumer warpgroup walks its CTA's tiles as one stream of kv blocks. Per
 * block it takes one turn at the tensor cores: S of this block and P V of the
 * block before. At a tile boundary the turn holds the old tile's last P V and
 * (with JOIN) the new tile's first S; the old tile's epilogue then
 * runs while that S is computed, so the tensor cores see no gap between tiles.
 */
template <class Cfg>
__device__ __forceinline__ void sm90_consumer(const Sm90FwdParams &p, uint8_t *smem, uint64_t *bars, int wg) {
    uint64_t *q_full = bars, *q_empty = bars + Cfg::Q_BUFS;
    uint64_t *k_full = bars + 2 * Cfg::Q_BUFS, *k_empty = k_full + Cfg::STAGES;
    uint64_t *v_full = k_empty + Cfg::STAGES, *v_empty = v_full + Cfg::STAGES;
    const int tid = threadIdx.x % 128;
    const int quad_col = 2 * (tid % 4);
    const uint32_t q_base = smem_addr(smem + Cfg::OFF_Q) + wg * 64 * Cfg::QK_SW; /* this warpgroup's rows */
    const uint32_t k_base = smem_addr(smem + Cfg::OFF_K), v_base = smem_addr(smem + Cfg::OFF_V);
    uint8_t *o_buf = smem + Cfg::OFF_O + wg * 64 * 128; /* O staging: this warpgroup's 64 rows of each slab */
    const uint32_t p_smem = smem_addr(smem + Cfg::OFF_P) + wg * 64 * 128; /* P_SMEM: this warpgroup's P */
    /* Consumers issue their GEMMs in a fixed round: wait for my turn, issue,
     * hand the turn to the next warpgroup. */
    const int my_turn = BAR_TURN0 + wg, next_turn = BAR_TURN0 + (wg + 1) % Cfg::CONSUMERS;
    const int my_exp = BAR_EXP0 + wg, next_exp = BAR_EXP0 + (wg + 1) % Cfg::CONSUMERS;
    /* STORE_THREAD: this warpgroup's mailbox and its barriers */
    int4 *mailbox = reinterpret_cast<int4 *>(smem + Cfg::OFF_MAIL) + wg;
    uint64_t *o_full = v_empty + Cfg::STAGES + wg, *o_empty = v_empty + Cfg::STAGES + Cfg::MAILBOXES + wg;
    uint32_t tiles_done = 0; /* this warpgroup's epilogues so far */

    Sm90Tile tile, next_tile;
    int t = sm90_next_work_tile<Cfg>(p, sm90_first_tile<Cfg>(p), wg, tid, &tile);
    if (t < p.num_tiles) {
        if (wg == Cfg::CONSUMERS - 1) named_bar_arrive(BAR_TURN0, TURN_THREADS); /* consumer 0 goes first */
        if (Cfg::EXP_TURN && wg == Cfg::CONSUMERS - 1) named_bar_arrive(BAR_EXP0, TURN_THREADS); /* and exps first */

        float O[Cfg::D / 2];
        float S[Cfg::BN / 2];
        uint32_t P[Cfg::P_BUFS][Cfg::P_REGS];
        float row_max[2], row_sum[2], rescale[2];
        uint32_t it = 0, tile_iter = 0; /* kv blocks and tiles consumed so far (ring positions) */
        Sm90RowSetup rows = sm90_row_setup<Cfg>(p, tile, wg, tid);

        /* Address of Q buffer qb (see Q_DESC_UNIFORM). */
        auto q_buffer = [&](uint32_t qb) -> uint32_t {
            const uint32_t a = q_base + qb * Cfg::Q_BYTES;
            return Cfg::Q_DESC_UNIFORM ? a : (uint32_t)opaque_int((int)a);
        };

        /* A tile's first S in a turn of its own: the CTA's first tile, and
         * every tile without JOIN. q_parity: the Q buffer's phase. */
        auto issue_first_s = [&](uint32_t qb, uint32_t q_parity) {
            mbar_wait(&q_full[qb], q_parity);
            mbar_wait(&k_full[it % Cfg::STAGES], (it / Cfg::STAGES) & 1);
            named_bar_sync(my_turn, TURN_THREADS);
            sm90_issue_qk<Cfg>(S, q_buffer(qb), k_base + (it % Cfg::STAGES) * Cfg::KV_BYTES);
            named_bar_arrive(next_turn, TURN_THREADS);
        };
        issue_first_s(0, 0);

        /* Retire the P V issued in the last turn (its V stage: pv_stage);
         * retire_pv_and_pack then packs the newest probabilities into P,
         * which that P V was reading. With LATE_PV_RETIRE this runs after a
         * barrier-wait loop, not straight after the softmax: in one basic
         * block with the softmax, ptxas hoists the wait above it (to pack P
         * early), and the softmax then waits for the P V it is meant to
         * overlap (docs/perf/sm90.md, item 30). */
        auto retire_pv = [&](uint32_t pv_stage, int pv_in_flight) {
            wgmma_wait<0>();
            fence_regs<Cfg::D / 2>(O);
            if (pv_in_flight && tid == 0) mbar_arrive(&v_empty[pv_stage]);
        };
        /* The newest probabilities into P (and with P_SMEM into the buffer). */
        auto pack_p = [&]() {
            sm90_pack_p<Cfg>(P[0], S);
            if constexpr (Cfg::P_SMEM) sm90_store_p<Cfg>(P[0], p_smem, tid);
        };
        /* (Two P buffers take retire_pv alone: the softmax has written the
         * other buffer.) */
        auto retire_pv_and_pack = [&](uint32_t pv_stage, int pv_in_flight) {
            retire_pv(pv_stage, pv_in_flight);
            if (!Cfg::RESCALE_IN_TURN && pv_in_flight) sm90_rescale_o<Cfg>(O, rescale);
            pack_p();
        };

        for (;;) {
            const uint32_t qb = tile_iter % Cfg::Q_BUFS;
            const uint32_t q_addr = q_buffer(qb);
            /* This tile's first (highest) kv block: its S was issued in an
             * earlier turn; nothing to overlap with until the next turn. */
            int n = tile.n_hi - 1;
            uint32_t stage = it % Cfg::STAGES, parity = (it / Cfg::STAGES) & 1;
            wgmma_wait<0>();
            fence_regs<Cfg::BN / 2>(S);
            sm90_free_k_stage<Cfg>(&k_empty[stage], n == tile.n_lo, wg, tid);
            row_max[0] = row_max[1] = -INFINITY;
            row_sum[0] = row_sum[1] = 0.f;
            sm90_scores_to_probs<Cfg>(S, p, rows, n, row_max, row_sum, rescale, quad_col, my_exp, next_exp);
            if (!Cfg::LATE_PV_RETIRE) pack_p(); /* no P V in flight yet */
            uint32_t prev_stage = stage, prev_parity = parity; /* block n + 1's stage: its P V comes next */
            uint32_t pv_stage = 0;                             /* the V stage of the P V in flight */
            ++it;
            int o_started = 0;
            /* two P buffers: the one holding the newest P (a variable of its own:
             * deriving it from the block count made the split-tail kernel spill) */
            int newest_p = 0;

            /* Steady state: S_n = Q K_n^T and O += P_{n+1} V_{n+1} in one turn; the
             * softmax of S_n runs while P V is still on the tensor cores. */
            if constexpr (Cfg::P_BUFS == 2) {
                /* BUF: the P buffer this turn's P V reads; block n's P goes to
                 * the other. The loop is unrolled by two, so that each turn's
                 * buffer is known at compile time. */
                auto steady_block = [&](auto buf) {
                    constexpr int BUF = decltype(buf)::value;
                    /* ring positions from `it` alone (block n), fewer live registers:
                     * block n + 1's P V is issued now, block n + 2's is in flight */
                    const uint32_t st = it % Cfg::STAGES, prev = it - 1, prev_st = prev % Cfg::STAGES;
                    mbar_wait(&k_full[st], (it / Cfg::STAGES) & 1);
                    retire_pv((it - 2) % Cfg::STAGES, o_started); /* the last turn's P V: long done */
                    named_bar_sync(my_turn, TURN_THREADS);
                    sm90_issue_qk<Cfg>(S, q_addr, k_base + st * Cfg::KV_BYTES);
                    /* O to the max of block n + 1 while Q K^T runs */
                    if (o_started) sm90_rescale_o<Cfg>(O, rescale);
                    mbar_wait(&v_full[prev_st], (prev / Cfg::STAGES) & 1);
                    sm90_issue_pv<Cfg>(O, P[BUF], p_smem, v_base + prev_st * Cfg::KV_BYTES, o_started);
                    named_bar_arrive(next_turn, TURN_THREADS);
                    wgmma_wait<1>(); /* S done; P V may still run */
                    fence_regs<Cfg::BN / 2>(S);
                    sm90_free_k_stage<Cfg>(&k_empty[st], n == tile.n_lo, wg, tid);
                    sm90_scores_to_probs<Cfg, Cfg::STEADY_MASKS>(S, p, rows, n, row_max, row_sum, rescale, quad_col,
                                                                 my_exp, next_exp);
                    sm90_pack_p<Cfg>(P[BUF ^ 1], S); /* the buffer no P V reads now */
                    o_started = 1;
                    --n;
                    ++it;
                };
                for (n = tile.n_hi - 2;;) {
                    if (n < tile.n_lo) break;
                    steady_block(PBuf<0>{});
                    newest_p = 1;
                    if (n < tile.n_lo) break;
                    steady_block(PBuf<1>{});
                    newest_p = 0;
                }
                /* as the single-buffer loop leaves them: the stage of the tile's
                 * last block (its P V comes next) and of the P V in flight */
                prev_stage = (it - 1) % Cfg::STAGES;
                prev_parity = ((it - 1) / Cfg::STAGES) & 1;
                pv_stage = (it - 2) % Cfg::STAGES;
            } else { /* one P buffer: the single-buffer kernels' code, unchanged (their SASS too) */
                for (n = tile.n_hi - 2; n >= tile.n_lo; --n, ++it) {
                    stage = it % Cfg::STAGES;
                    parity = (it / Cfg::STAGES) & 1;
                    mbar_wait(&k_full[stage], parity);
                    if (Cfg::LATE_PV_RETIRE) retire_pv_and_pack(pv_stage, o_started);
                    named_bar_sync(my_turn, TURN_THREADS);
                    sm90_issue_qk<Cfg>(S, q_addr, k_base + stage * Cfg::KV_BYTES);
                    /* O to the max of block n + 1 while Q K^T runs: off the path
                     * from the softmax to this turn */
                    if (Cfg::RESCALE_IN_TURN && o_started) sm90_rescale_o<Cfg>(O, rescale);
                    mbar_wait(&v_full[prev_stage], prev_parity);
                    sm90_issue_pv<Cfg>(O, P[0], p_smem, v_base + prev_stage * Cfg::KV_BYTES, o_started);
                    named_bar_arrive(next_turn, TURN_THREADS);
                    wgmma_wait<1>(); /* S done; P V may still run */
                    fence_regs<Cfg::BN / 2>(S);
                    sm90_free_k_stage<Cfg>(&k_empty[stage], n == tile.n_lo, wg, tid);
                    sm90_scores_to_probs<Cfg, Cfg::STEADY_MASKS>(S, p, rows, n, row_max, row_sum, rescale, quad_col,
                                                                 my_exp, next_exp);
                    if (!Cfg::LATE_PV_RETIRE) retire_pv_and_pack(prev_stage, 1);
                    o_started = 1;
                    pv_stage = prev_stage;
                    prev_stage = stage;
                    prev_parity = parity;
                }
            }

            /* Q's last reader, the tile's last S GEMM, has completed: free Q for
             * a later tile's load while this P V and the epilogue run. */
            if (tid == 0) mbar_arrive(&q_empty[qb]);
            /* O_IN_RING: consumer 0 may now stage its O in the last K stage */
            if (Cfg::O_IN_RING && wg == 1) named_bar_arrive(BAR_K_READ, 256);

            /* The last P V. With JOIN the next tile's first S joins the
             * turn (its Q is in the other buffer). After the CTA's last tile that
             * S runs on stale data and is dropped: the turn is then the same on
             * every path, as ptxas needs to keep the wgmma pipeline open. */
            int t_next = p.num_tiles;
            if constexpr (Cfg::JOIN)
                t_next = sm90_next_work_tile<Cfg>(p, sm90_tile_after<Cfg>(p, t), wg, tid, &next_tile);
            const uint32_t next_qb = (tile_iter + 1) % Cfg::Q_BUFS;
            const uint32_t next_q_parity = ((tile_iter + 1) / Cfg::Q_BUFS) & 1;
            mbar_wait(&v_full[prev_stage], prev_parity);
            if (Cfg::LATE_PV_RETIRE) retire_pv_and_pack(pv_stage, o_started);
            if constexpr (Cfg::P_BUFS == 2) {
                /* the last turn's P V, then the newest P into buffer 0 (the last
                 * P V's buffer is then the same on every path) */
                retire_pv(pv_stage, o_started);
                if (newest_p)
#pragma unroll
                    for (int i = 0; i < Cfg::P_REGS; ++i) P[0][i] = P[1][i];
            }
            if (Cfg::JOIN && t_next < p.num_tiles) {
                mbar_wait(&q_full[next_qb], next_q_parity);
                mbar_wait(&k_full[it % Cfg::STAGES], (it / Cfg::STAGES) & 1);
            }
            named_bar_sync(my_turn, TURN_THREADS);
            if (Cfg::RESCALE_IN_TURN && o_started) sm90_rescale_o<Cfg>(O, rescale);
            sm90_issue_pv<Cfg>(O, P[0], p_smem, v_base + prev_stage * Cfg::KV_BYTES, o_started);
            if constexpr (Cfg::JOIN)
                sm90_issue_qk<Cfg>(S, q_buffer(next_qb), k_base + (it % Cfg::STAGES) * Cfg::KV_BYTES);
            named_bar_arrive(next_turn, TURN_THREADS);
            /* without JOIN: find the next tile while the last P V runs */
            if constexpr (!Cfg::JOIN)
                t_next = sm90_next_work_tile<Cfg>(p, sm90_tile_after<Cfg>(p, t), wg, tid, &next_tile);
            /* EARLY_FINISH: the epilogue's steps that need no O, while the
             * last P V runs */
            const bool whole_tile = !Cfg::SPLIT_TAIL || t < p.tail_first;
            float inv[2];
            auto finish_rows = [&]() {
                sm90_finish_rows<Cfg>(p, tile, row_max, row_sum, rows.s_log2, wg, tid, inv);
                if constexpr (!Cfg::O_IN_RING) sm90_claim_o_buf<Cfg>(o_empty, tile_iter, wg, tid);
            };
            if constexpr (Cfg::EARLY_FINISH) finish_rows();
            wgmma_wait<Cfg::JOIN ? 1 : 0>(); /* P V done (the joined next S may still run) */
            fence_regs<Cfg::D / 2>(O);
            uint8_t *o_stage = o_buf;
            uint64_t *stage_empty = nullptr;
            if constexpr (Cfg::O_IN_RING) {
                /* consumer 0 stages O in the last K stage, consumer 1 in the last V
                 * stage (kept from the producer until the store has read it) */
                o_stage = smem + (wg == 0 ? Cfg::OFF_K : Cfg::OFF_V) + prev_stage * Cfg::KV_BYTES;
                stage_empty = wg == 0 ? &k_empty[prev_stage] : &v_empty[prev_stage];
                if (wg == 0) named_bar_arrive(BAR_V_READ, 256); /* consumer 1 may now use the V stage */
            }
            if (tid == 0 && !(Cfg::O_IN_RING && wg == 1)) mbar_arrive(&v_empty[prev_stage]);

            /* A tail piece writes its tile only when it is the tile's last. */
            if (whole_tile || sm90_split_merge<Cfg>(p, t, O, row_max, row_sum, rows.s_log2, wg, tid)) {
                if constexpr (!Cfg::EARLY_FINISH) finish_rows();
                sm90_epilogue<Cfg>(p, tile, O, inv, o_stage, stage_empty, mailbox, o_full, wg, tid);
            } else if constexpr (Cfg::O_IN_RING) {
                /* the staging stage goes back unused, after the same hand-over as the epilogue's */
                named_bar_sync(wg == 0 ? BAR_K_READ : BAR_V_READ, 256);
                if (tid == 0) mbar_arrive(stage_empty);
            }
            ++tile_iter;
            tiles_done = tile_iter;
            if (t_next >= p.num_tiles) {
                wgmma_wait<0>(); /* with JOIN: the dropped S */
                break;
            }
            t = t_next;
            tile = next_tile;
            rows = sm90_row_setup<Cfg>(p, tile, wg, tid);
            if constexpr (!Cfg::JOIN) issue_first_s(tile_iter % Cfg::Q_BUFS, (tile_iter / Cfg::Q_BUFS) & 1);
        }
    }
    if constexpr (Cfg::STORE_THREAD) { /* no more tiles: the store thread may finish */
        mbar_wait(o_empty, (tiles_done & 1) ^ 1);
        sm90_post(mailbox, o_full, 0, 0, 0, SM90_MAIL_END, tid);
    } else if (tid == 0) {
        tma_store_wait_all(); /* shared memory must outlive the last store */
    }
}

/* ---- kernel ------------------------------------------------------------------- */

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1) sm90_fwd_kernel(const __grid_constant__ Sm90FwdParams p) {
    extern __shared__ uint8_t smem_raw[];
    /* swizzle atoms are 1024 B and addressed absolutely: align the base */
    uint8_t *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    uint64_t *bars = reinterpret_cast<uint64_t *>(smem + Cfg::OFF_BAR);
    if (threadIdx.x == 0) {
        for (int b = 0; b < Cfg::Q_BUFS; ++b) {
            mbar_init(&bars[b], 1);                            /* q_full: producer's expect_tx arrive */
            mbar_init(&bars[Cfg::Q_BUFS + b], Cfg::CONSUMERS); /* q_empty: one arrive per consumer warpgroup */
        }
        uint64_t *ring = bars + 2 * Cfg::Q_BUFS;
        for (int s = 0; s < Cfg::STAGES; ++s) {
            mbar_init(&ring[s], 1);                              /* k_full */
            mbar_init(&ring[Cfg::STAGES + s], Cfg::CONSUMERS);     /* k_empty */
            mbar_init(&ring[2 * Cfg::STAGES + s], 1);            /* v_full */
            mbar_init(&ring[3 * Cfg::STAGES + s], Cfg::CONSUMERS); /* v_empty */
        }
        for (int c = 0; c < Cfg::MAILBOXES; ++c) {
            mbar_init(&ring[4 * Cfg::STAGES + c], 128);                 /* o_full: every thread of consumer c */
            mbar_init(&ring[4 * Cfg::STAGES + Cfg::MAILBOXES + c], 1); /* o_empty: the store thread */
        }
        mbar_fence_init();
    }
    __syncthreads();
    /* broadcast from lane 0: the compiler then knows the warpgroup index (and
     * the shared-memory addresses made from it) to be warp-uniform, and keeps
     * the consumers' Q descriptors in uniform registers */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    if (wg == 0) {
        regs_dealloc<Cfg::PRODUCER_REGS>();
        /* lane 0 of warps 0 and 1: the Q/K and the V loader */
        if (threadIdx.x == 0) sm90_producer<Cfg, LOAD_Q_K>(p, smem, bars);
        if (threadIdx.x == 32) sm90_producer<Cfg, LOAD_V>(p, smem, bars);
        if (Cfg::STORE_THREAD && threadIdx.x == 64) {
            uint64_t *o_full = bars + 2 * Cfg::Q_BUFS + 4 * Cfg::STAGES;
            sm90_store_thread<Cfg>(p, smem, o_full, o_full + Cfg::MAILBOXES);
        }
    } else {
        regs_alloc<Cfg::CONSUMER_REGS>();
        sm90_consumer<Cfg>(p, smem, bars, wg - 1);
    }
}

#endif /* FA_SM90_FWD_KERNEL_CUH */
