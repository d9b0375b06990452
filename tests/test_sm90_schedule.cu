/*
 * The Hopper forward's tile schedule, on the host (no GPU needed). For each
 * problem: the launch's plan (sm90_plan_tiles: the paired order's tail, the
 * short-tile split, the split tail), the kernel instance the dispatcher
 * picks for it (sm90_launch_variant, with its own checks), and then every
 * CTA's walk over its tiles, through the same functions the kernel runs
 * (sm90_fwd_schedule.cuh, compiled for the host too). Checked: every query
 * block of every head that has rows is taken exactly once, by one CTA, with
 * the kv blocks its rows see (a tile holding phantom rows before a head's
 * first, ROW_SHIFT, may take more); a split-tail tile as pieces whose kv
 * blocks cover its blocks exactly once, each from the CTA the merge takes
 * for its owner, in a part slot of its own; packed row groups once each,
 * with every block. Each paired walk also prints how far its busiest CTA
 * runs over an even split of the work by the paired plan's cost model (a
 * tile costs its kv blocks plus 1.7 of one): the balance it predicts, e.g.
 * for the grid's causal cells `test_sm90_schedule | grep
 * "causal=1.*ctas=132"`. `test_sm90_schedule --plan-time` times the plan
 * itself on the host for the grid's causal cells.
 */
#define FA_SM90_SCHEDULE_TEST 1
#include <stdio.h>
#include <string.h>

#include <chrono>
#include <vector>

#include "../src/cuda/sm90/sm90_fwd.cu"
#include "util/sm90_case_mask.h"

namespace {

/* What the walk saw of one query block of one head. */
struct Seen {
    int whole = 0;           /* times taken as a whole tile */
    int pieces = 0;          /* split-tail pieces of it */
    int n_lo = 0, n_hi = 0;  /* the kv blocks of its whole-tile visit */
    std::vector<int> blocks; /* times each kv block was taken */
};

struct Walk {
    int ctas = 132;        /* the persistent grid's CTAs, as the device has SMs */
    int rows_per_tile = 0; /* BM (64 for packed row groups), set by the instance walked */
    int bn = 0;            /* keys a kv block */
    int m_blocks = 0;      /* query blocks a head, in the instance's numbering */
    std::vector<Seen> seen; /* by (batch, head, m) */
    std::vector<double> load; /* by CTA: the paired plan's cost model, kv blocks + 1.7 a tile */
    int errors = 0;
} walk;

Seen &seen_at(const fa_problem *p, int b, int h, int m) {
    return walk.seen[((size_t)b * p->Hq + h) * walk.m_blocks + m];
}

void record(const fa_problem *p, int b, int h, int m, int n_lo, int n_hi, bool piece, int nb) {
    if (b < 0 || b >= p->B || h < 0 || h >= p->Hq || m < 0 || m >= walk.m_blocks) {
        printf("  tile out of range: batch %d head %d block %d\n", b, h, m);
        walk.errors++;
        return;
    }
    Seen &s = seen_at(p, b, h, m);
    if (s.blocks.empty()) s.blocks.assign(nb, 0);
    if (n_lo < 0 || n_hi > nb) {
        printf("  batch %d head %d block %d: kv blocks [%d, %d) outside [0, %d)\n", b, h, m, n_lo, n_hi, nb);
        walk.errors++;
        return;
    }
    if (piece) {
        s.pieces++;
    } else {
        s.whole++;
        s.n_lo = n_lo;
        s.n_hi = n_hi;
    }
    for (int n = n_lo; n < n_hi; ++n) s.blocks[n]++;
}

/* Sequence b's lengths. */
void seq_lengths(const fa_problem *p, int b, int64_t *sq, int64_t *sk) {
    *sq = p->cu_seqlens_q ? p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b] : p->Sq;
    *sk = p->cu_seqlens_k ? p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b] : p->Sk;
}

} // namespace

/* Called by sm90_launch_instance in place of the launch. */
template <class Cfg>
static fa_status sm90_schedule_test_walk(const fa_problem *p, const Sm90FwdParams &k, const fa_exec *) {
    walk.rows_per_tile = Cfg::BM;
    walk.bn = Cfg::BN;
    walk.m_blocks = Cfg::PACKED_ROWS ? k.rg_div.d : k.num_m_blocks;
    walk.seen.assign((size_t)p->B * p->Hq * walk.m_blocks, Seen());
    const int G = sm90_grid(k, walk.ctas);
    std::vector<int> slots(G + k.num_tiles); /* split-tail part slots (sm90_split_merge): each once */
    walk.load.assign(G, 0.0);
    for (int c = 0; c < G; ++c) {
        sm90_host_grid = {c, G};
        int steps = 0;
        for (int t = sm90_first_tile<Cfg>(k); t < k.num_tiles; t = sm90_tile_after<Cfg>(k, t)) {
            if (++steps > 4 * k.num_tiles + 8) {
                printf("  CTA %d: its walk does not end\n", c);
                walk.errors++;
                break;
            }
            for (int wg = 0; wg < (Cfg::PACKED_ROWS ? Cfg::CONSUMERS : 1); ++wg) {
                const Sm90Tile tile = sm90_decode_any<Cfg>(k, t, wg);
                if (!sm90_tile_live<Cfg>(k, tile)) continue;
                int64_t sq, sk;
                seq_lengths(p, tile.batch, &sq, &sk);
                const int nb = (int)((sk + Cfg::BN - 1) / Cfg::BN);
                if (Cfg::PACKED_ROWS) { /* each consumer its own 64-row group */
                    if (wg == 0) walk.load[c] += tile.n_hi - tile.n_lo + SM90_TILE_BOUNDARY_TENTHS / 10.0;
                    const int g = tile.m_block + wg;
                    if ((int64_t)g * 64 < sq) record(p, tile.batch, tile.head, g, tile.n_lo, tile.n_hi, false, nb);
                    continue;
                }
                const bool piece = Cfg::SPLIT_TAIL && !k.paired && t >= k.tail_first;
                record(p, tile.batch, tile.head, tile.m_block, tile.n_lo, tile.n_hi, piece, nb);
                walk.load[c] += tile.n_hi - tile.n_lo + SM90_TILE_BOUNDARY_TENTHS / 10.0;
                if (piece) { /* the merge finds a tile's parts by their owners and slots */
                    const int r = sm90_split_tile(k, t);
                    for (int n = tile.n_lo; n < tile.n_hi; ++n)
                        if (sm90_split_owner(k, (uint32_t)(r * k.split_blocks + n)) != c) {
                            printf("  CTA %d: tail tile %d block %d has another owner\n", c, r, n);
                            walk.errors++;
                            break;
                        }
                    if (slots[c + r]++) {
                        printf("  CTA %d: tail tile %d's part slot taken twice\n", c, r);
                        walk.errors++;
                    }
                }
            }
        }
    }
    return FA_OK;
}

namespace {

/* Checks what the walk saw against the problem: every block of rows taken
 * once with the kv blocks its rows see. */
void check_walk(const fa_problem *p, const Sm90FwdParams &k) {
    const bool packed = k.packed_rows != 0;
    for (int b = 0; b < p->B; ++b) {
        int64_t sq, sk;
        seq_lengths(p, b, &sq, &sk);
        const int64_t shift = k.row_shift; /* phantom rows before the first (batched only) */
        const int64_t bm = walk.rows_per_tile;
        const int nb = (int)((sk + walk.bn - 1) / walk.bn);
        for (int h = 0; h < p->Hq; ++h)
            for (int m = 0; m < walk.m_blocks; ++m) {
                const Seen &s = seen_at(p, b, h, m);
                const int64_t r0 = m * bm - shift, r1 = r0 + bm; /* the block's rows, phantom ones included */
                const int64_t i0 = r0 > 0 ? r0 : 0, i1 = (r1 < sq ? r1 : sq) - 1; /* its real rows */
                if (i0 > i1) { /* past this sequence's end */
                    if (s.whole || s.pieces) {
                        printf("  batch %d head %d block %d: taken, with no rows\n", b, h, m);
                        walk.errors++;
                    }
                    continue;
                }
                if (s.whole + (s.pieces > 0) != 1) {
                    printf("  batch %d head %d block %d (rows %lld..%lld): taken %d times whole, %d pieces\n", b, h, m,
                           (long long)i0, (long long)i1, s.whole, s.pieces);
                    walk.errors++;
                    continue;
                }
                int64_t lo, hi, lo1, hi1; /* a band mask: the first row's lower bound, the last row's upper */
                fa_key_range(p, sq, sk, i0, &lo, &hi1);
                fa_key_range(p, sq, sk, i1, &lo1, &hi);
                const int want_lo = hi <= lo ? 0 : (int)(lo / walk.bn);
                const int want_hi = hi <= lo ? 0 : (int)((hi + walk.bn - 1) / walk.bn);
                if (packed) { /* no mask: every block */
                    if (s.n_lo != 0 || s.n_hi != nb) {
                        printf("  batch %d head %d group %d: kv blocks [%d, %d) of %d\n", b, h, m, s.n_lo, s.n_hi, nb);
                        walk.errors++;
                    }
                    continue;
                }
                const bool phantom = r0 < 0; /* a shifted head's first tile may take more */
                bool ok = true;
                for (int n = 0; n < nb && ok; ++n) {
                    const int times = s.blocks.empty() ? 0 : s.blocks[n];
                    const bool wanted = n >= want_lo && n < want_hi;
                    ok = wanted ? times == 1 : (times == 0 || (phantom && times == 1 && !s.pieces));
                }
                if (!ok) {
                    printf("  batch %d head %d block %d (rows %lld..%lld): kv blocks [%d, %d) wanted, got [%d, %d)%s\n",
                           b, h, m, (long long)i0, (long long)i1, want_lo, want_hi, s.n_lo, s.n_hi,
                           s.pieces ? " in pieces" : "");
                    walk.errors++;
                }
            }
    }
}

struct Case {
    fa_dtype dtype;
    int B, Sq, Sk, Hq, Hk, D;
    int causal, top_left, wl, wr; /* wl/wr < 0: unbounded */
    float softcap;
    std::vector<int> seq_q, seq_k; /* varlen: the sequences' lengths (B of them) */
};

/* Case c as a problem (its varlen offsets in cu_q, cu_k). */
fa_problem make_problem(const Case &c, std::vector<int> &cu_q, std::vector<int> &cu_k) {
    static uint8_t base[64] __attribute__((aligned(256)));
    void *data = base; /* TMA needs only an aligned address here: nothing is read */
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.dtype = c.dtype;
    p.B = c.B;
    p.Sq = c.Sq;
    p.Sk = c.Sk;
    p.Hq = c.Hq;
    p.Hk = c.Hk;
    p.D = p.Dv = c.D;
    const bool varlen = !c.seq_q.empty();
    int64_t rows_q = c.Sq, rows_k = c.Sk;
    if (varlen) {
        cu_q.assign(1, 0);
        cu_k.assign(1, 0);
        for (int b = 0; b < c.B; ++b) {
            cu_q.push_back(cu_q.back() + c.seq_q[b]);
            cu_k.push_back(cu_k.back() + c.seq_k[b]);
        }
        p.cu_seqlens_q = cu_q.data();
        p.cu_seqlens_k = cu_k.data();
        p.total_q = rows_q = cu_q.back();
        p.total_k = rows_k = cu_k.back();
    }
    const int es = c.dtype == FA_F8_E4M3 ? 1 : 2, pad = (16 / es); /* rows 16-byte aligned */
    const int64_t dq = (c.D + pad - 1) / pad * pad;
    p.q = {data, varlen ? 0 : rows_q * c.Hq * dq, c.Hq * dq, dq};
    p.out = p.q;
    p.k = {data, varlen ? 0 : rows_k * c.Hk * dq, c.Hk * dq, dq};
    p.v = p.k;
    p.scale = 1.0f / sqrtf((float)c.D);
    p.softcap = c.softcap;
    sm90_case_mask(&p, c.causal, c.top_left, c.wl, c.wr);
    return p;
}

/* Runs one problem on a grid of `ctas` CTAs; returns 1 if it failed, -1 if
 * the Hopper forward does not take it. */
int run_case(const Case &c, int ctas) {
    std::vector<int> cu_q, cu_k;
    fa_problem p = make_problem(c, cu_q, cu_k);
    const bool varlen = !c.seq_q.empty();
    char name[200];
    snprintf(name, sizeof name, "%s B=%d Sq=%d Sk=%d Hq=%d Hk=%d D=%d causal=%d tl=%d win=(%d,%d) cap=%g%s ctas=%d",
             c.dtype == FA_F8_E4M3 ? "e4m3" : "bf16", c.B, c.Sq, c.Sk, c.Hq, c.Hk, c.D, c.causal, c.top_left, c.wl,
             c.wr, c.softcap, varlen ? " varlen" : "", ctas);
    if (!sm90_fwd_takes(&p)) {
        printf("skip %s: not a Hopper forward problem\n", name);
        return -1;
    }
    Sm90FwdParams k;
    if (!sm90_fill_params(&p, &k, NULL, 0)) {
        printf("FAIL %s: no parameters\n", name);
        return 1;
    }
    if (k.num_tiles == 0) return 0;
    fa_exec x;
    memset(&x, 0, sizeof x);
    /* a workspace large enough for any split tail; nothing is written to it */
    x.workspace = (void *)(uintptr_t)(1 << 20);
    x.workspace_bytes = (size_t)1 << 40;
    sm90_plan_tiles(&p, &k, ctas, x.workspace, x.workspace_bytes);
    walk.ctas = ctas;
    walk.errors = 0;
    const fa_status st = sm90_launch_variant(&p, k, &x);
    if (st != FA_OK) {
        printf("FAIL %s: %s\n", name, fa_last_error());
        return 1;
    }
    check_walk(&p, k);
    const char *plan = "plain";
    if (k.packed_rows) plan = "packed";
    else if (k.tail_first < k.num_tiles) plan = "split tail";
    else if (k.pair_tail_count) plan = "paired, dealt tail";
    else if (k.paired) plan = "paired";
    else if (k.short_split) plan = "short split";
    double busiest = 0, total = 0; /* by the paired plan's cost model (sm90_pair_tail_plan) */
    for (double l : walk.load) busiest = l > busiest ? l : busiest, total += l;
    char balance[64] = "";
    if (k.paired && total > 0)
        snprintf(balance, sizeof balance, "; busiest CTA %+.2f%% over an even split",
                 100.0 * (busiest * walk.load.size() / total - 1));
    printf("%s %s: %s%s%s\n", walk.errors ? "FAIL" : "PASS", name, plan, k.row_shift ? ", rows shifted" : "", balance);
    return walk.errors != 0;
}

} // namespace

/* --plan-time: the host time of the launch's plan (sm90_plan_tiles) for
 * the standard grid's causal cells on 132 CTAs, its first call for the
 * shape and the mean of the calls after it. */
int plan_time() {
    const fa_dtype bf = FA_BF16, f8 = FA_F8_E4M3;
    std::vector<Case> cells;
    for (int D : {64, 128, 256})
        for (int S : {512, 1024, 2048, 4096, 8192, 16384})
            cells.push_back({bf, 16384 / S, S, S, 2048 / D, 2048 / D, D, 1, 0, -1, -1, 0.f, {}, {}});
    for (int S : {2048, 4096, 8192, 16384}) cells.push_back({f8, 16384 / S, S, S, 16, 16, 128, 1, 0, -1, -1, 0.f, {}, {}});
    for (const Case &c : cells) {
        std::vector<int> cu_q, cu_k;
        const fa_problem p = make_problem(c, cu_q, cu_k);
        Sm90FwdParams k0, k;
        if (!sm90_fill_params(&p, &k0, NULL, 0)) return 1;
        enum { REPEATS = 200 };
        auto t0 = std::chrono::steady_clock::now();
        k = k0;
        sm90_plan_tiles(&p, &k, 132, NULL, 0);
        auto t1 = std::chrono::steady_clock::now();
        for (int i = 0; i < REPEATS; ++i) {
            k = k0;
            sm90_plan_tiles(&p, &k, 132, NULL, 0);
        }
        auto t2 = std::chrono::steady_clock::now();
        printf("%s D=%d causal %d x %d: plan %.1f us first, %.2f us after\n", c.dtype == f8 ? "e4m3" : "bf16", c.D, c.B,
               c.Sq, std::chrono::duration<double, std::micro>(t1 - t0).count(),
               std::chrono::duration<double, std::micro>(t2 - t1).count() / REPEATS);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--plan-time")) return plan_time();
    std::vector<Case> cases;
    const fa_dtype bf = FA_BF16, f8 = FA_F8_E4M3;
    /* the standard grid's shapes, causal and not, every head dim */
    for (int D : {64, 128, 256})
        for (int S : {512, 1024, 2048, 4096, 8192, 16384})
            for (int causal : {0, 1}) cases.push_back({bf, 16384 / S, S, S, 2048 / D, 2048 / D, D, causal, 0, -1, -1, 0.f, {}, {}});
    for (int S : {1024, 2048, 4096, 8192, 16384})
        for (int causal : {0, 1}) cases.push_back({f8, 16384 / S, S, S, 16, 16, 128, causal, 0, -1, -1, 0.f, {}, {}});
    /* awkward lengths: short last tiles (row shift, short split, packing,
     * weighted split shares), Sq != Sk in both alignments, rows that see
     * no key, windows, GQA, softcap */
    for (fa_dtype dt : {bf, f8})
        for (int D : {64, 96, 128, 192, 256}) {
            if (dt == f8 && D > 128) continue;
            for (int Sq : {1, 65, 129, 200, 1000, 2300, 2600, 4100, 16320})
                for (int causal : {0, 1}) {
                    cases.push_back({dt, 2, Sq, Sq, 8, 4, D, causal, 0, -1, -1, 0.f, {}, {}});
                    cases.push_back({dt, 1, Sq, 2500, 33, 11, D, causal, 1, -1, -1, 0.f, {}, {}});
                    cases.push_back({dt, 3, Sq, 700, 16, 16, D, causal, 0, -1, -1, 0.f, {}, {}});
                }
            cases.push_back({dt, 2, 3000, 3000, 8, 8, D, 0, 0, 300, 0, 0.f, {}, {}});   /* sliding window */
            cases.push_back({dt, 2, 3000, 2000, 8, 8, D, 0, 0, 100, 20, 0.f, {}, {}});  /* band */
            cases.push_back({dt, 1, 1100, 1100, 4, 2, D, 0, 0, -1, 5000, 0.f, {}, {}}); /* right window past every key */
            cases.push_back({dt, 2, 129, 3100, 99, 33, D, 0, 0, -1, -1, 0.f, {}, {}});  /* split tail, short tiles */
            cases.push_back({dt, 2, 8, 6200, 71, 71, D, 0, 0, -1, -1, 0.f, {}, {}});    /* split tail, every tile short */
            cases.push_back({dt, 4, 1500, 1500, 12, 4, D, 1, 0, -1, -1, 30.f, {}, {}});  /* softcap */
            cases.push_back({dt, 3, 1, 1, 300, 300, D, 0, 0, -1, -1, 0.f, {}, {}});
            /* varlen: the longest sequence sizes the grid */
            cases.push_back({dt, 4, 3000, 3000, 8, 2, D, 1, 0, -1, -1, 0.f, {3000, 1, 700, 2049}, {3000, 5, 900, 2049}});
            cases.push_back({dt, 3, 1000, 1200, 4, 4, D, 0, 0, -1, -1, 0.f, {1000, 0, 513}, {1200, 7, 513}});
        }
    int fails = 0, runs = 0;
    for (const Case &c : cases)
        for (int ctas : {132, 78, 7}) {
            const int r = run_case(c, ctas);
            if (r < 0) break; /* a problem the Hopper forward does not take */
            fails += r;
            ++runs;
        }
    printf("sm90 schedule: %d of %d walks failed\n", fails, runs);
    return fails != 0;
}
