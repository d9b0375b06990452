/*
 * Standalone check and timing of the Hopper forward (src/cuda/sm90) on an
 * sm_90 GPU, independent of the rest of the library:
 *
 *   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc/api \
 *        -Isrc/cuda/sm90 scripts/sm90_selftest.cu -o sm90_selftest
 *   ./sm90_selftest check        # awkward shapes vs a float64 reference
 *   ./sm90_selftest varlen       # only the varlen (packed sequences) cases
 *   ./sm90_selftest fp8          # e4m3 inputs (fp8_small: four cases, for compute-sanitizer)
 *   ./sm90_selftest bench_fp8 [D] # e4m3 TFLOP/s, head dim D (128), hidden 2048
 *   ./sm90_selftest bench [D [causal [varlen [seqlen]]]]  # TFLOP/s on the standard grid (hidden 2048)
 *
 * Timings are the median of FA_BENCH_REPS launches (default 20). A few
 * thousand launches (a second or more) measure the clock the GPU sustains
 * under this kernel's own power draw rather than its boost clock.
 *
 * Check rule (flash-attn's): the kernel's max error against float64 must be at
 * most 2x the error of a naive implementation in the same storage precision
 * (float32 scores, P and O rounded to 16 bits) plus 1e-3. Outputs are poisoned
 * (NaN) first, padding between heads must stay poisoned.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "../src/cuda/sm90/sm90_fwd.cu"
#include "sm90_harness.cuh"
#include "../tests/util/sm90_case_mask.h"

/* FA_SELFTEST_WHOLE=1: no workspace for the split tail, so every case runs
 * whole tiles (the same cases, to compare against). */
static bool whole_tiles_only(void) {
    const char *e = getenv("FA_SELFTEST_WHOLE");
    return e && atoi(e) != 0;
}

/* Whether fa_sm90_fwd will split the last wave (sm90_split_plan) with this workspace. */
static bool split_planned(const fa_problem *p, const fa_exec *x) {
    Sm90FwdParams k;
    if (!sm90_fill_params(p, &k, NULL, 0)) return false;
    const Sm90SplitPlan s = sm90_split_plan(p, k, sm90_num_sms(x->device_index));
    return s.tail_tiles > 0 && x->workspace && x->workspace_bytes >= sm90_workspace_bytes(p, s);
}

/* One worker's share of a check against the float64 reference: error
 * maxima and counts of bad elements, merged once every row is checked. */
struct RefTally {
    double err = 0, err_nolse = 0, err_naive = 0, err_lse = 0, lse_ratio = 0, maxref = 0;
    int unwritten = 0, pad_touched = 0, bad_empty = 0;
    void merge(const RefTally &o) {
        err = std::max(err, o.err);
        err_nolse = std::max(err_nolse, o.err_nolse);
        err_naive = std::max(err_naive, o.err_naive);
        err_lse = std::max(err_lse, o.err_lse);
        lse_ratio = std::max(lse_ratio, o.lse_ratio);
        maxref = std::max(maxref, o.maxref);
        unwritten += o.unwritten;
        pad_touched += o.pad_touched;
        bad_empty += o.bad_empty;
    }
};

/* Runs rows(b, h, i0, i1, tally) over every batch, head and 64-row group
 * of up to max_sq query rows, on all host cores: the reference visits every
 * visible key of every row in float64, minutes on one core for the cases
 * with head dim 256 or thousands of keys. */
template <class F>
static RefTally reference_rows(int B, int H, int max_sq, F rows) {
    const int groups = (max_sq + 63) / 64, items = B * H * groups;
    const unsigned workers = std::max(1u, std::min(std::thread::hardware_concurrency(), (unsigned)std::max(items, 1)));
    std::vector<RefTally> tally(workers);
    std::atomic<int> next{0};
    auto work = [&](unsigned w) {
        for (int k; (k = next.fetch_add(1)) < items;) {
            const int g = k % groups, bh = k / groups;
            rows(bh / H, bh % H, g * 64, std::min(max_sq, g * 64 + 64), tally[w]);
        }
    };
    std::vector<std::thread> pool;
    for (unsigned w = 1; w < workers; ++w) pool.emplace_back(work, w);
    work(0);
    for (std::thread &t : pool) t.join();
    RefTally all;
    for (const RefTally &t : tally) all.merge(t);
    return all;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* xorshift64*, uniform in [0,1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

static uint16_t to16(float x, bool bf16) {
    if (bf16) {
        __nv_bfloat16 h = __float2bfloat16(x);
        return *reinterpret_cast<uint16_t *>(&h);
    }
    __half h = __float2half(x);
    return *reinterpret_cast<uint16_t *>(&h);
}
static float from16(uint16_t u, bool bf16) {
    if (bf16) {
        __nv_bfloat16 h;
        memcpy(&h, &u, 2);
        return __bfloat162float(h);
    }
    __half h;
    memcpy(&h, &u, 2);
    return __half2float(h);
}

struct Case {
    int B, Sq, Sk, Hq, Hk, D;
    int causal, top_left;
    int wl, wr; /* window, -1 unbounded (ignored when causal) */
    float softcap;
    bool bf16;
    float qscale; /* input magnitude */
    int pad;      /* extra elements between heads (strides not packed) */
    /* Varlen: per-sequence lengths (B, Sq, Sk are then ignored). The packed
     * output is followed by VARLEN_TAIL poisoned rows, which must stay so. */
    std::vector<int> lq, lk;
};

enum { VARLEN_TAIL = 70 };

static int run_case(const Case &c0) {
    Case c = c0;
    const bool varlen = !c.lq.empty();
    /* first row of each sequence in the packed rows (batched: 0) */
    std::vector<int> q0, k0, sq, sk;
    int total_q = 0, total_k = 0;
    if (varlen) {
        c.B = (int)c.lq.size();
        c.Sq = c.Sk = 0;
        for (int b = 0; b < c.B; ++b) {
            q0.push_back(total_q);
            k0.push_back(total_k);
            total_q = q0.back() + c.lq[b];
            total_k = k0.back() + c.lk[b];
            c.Sq = std::max(c.Sq, c.lq[b]);
            c.Sk = std::max(c.Sk, c.lk[b]);
        }
        sq = c.lq;
        sk = c.lk;
    } else {
        for (int b = 0; b < c.B; ++b) {
            q0.push_back(0);
            k0.push_back(0);
            sq.push_back(c.Sq);
            sk.push_back(c.Sk);
        }
    }
    const bool bf = c.bf16;
    const int64_t D = c.D;
    const int64_t qsh = D + c.pad, qss = c.Hq * qsh, qsb = varlen ? 0 : c.Sq * qss;
    const int64_t ksh = D + c.pad, kss = c.Hk * ksh, ksb = varlen ? 0 : c.Sk * kss;
    const size_t nq = varlen ? (size_t)(total_q + VARLEN_TAIL) * qss : (size_t)c.B * qsb;
    const size_t nk = varlen ? (size_t)total_k * kss : (size_t)c.B * ksb;
    const size_t nlse = varlen ? (size_t)c.Hq * total_q : (size_t)c.B * c.Hq * c.Sq;
    std::vector<uint16_t> hq(nq), hk(nk), hv(nk);
    for (auto &x : hq) x = to16((float)(nrand() * c.qscale), bf);
    for (auto &x : hk) x = to16((float)(nrand() * c.qscale), bf);
    for (auto &x : hv) x = to16((float)nrand(), bf);
    uint16_t *dq, *dk, *dv, *dout;
    float *dlse;
    CK(cudaMalloc(&dq, hq.size() * 2));
    CK(cudaMalloc(&dk, hk.size() * 2));
    CK(cudaMalloc(&dv, hv.size() * 2));
    CK(cudaMalloc(&dout, hq.size() * 2));
    CK(cudaMalloc(&dlse, nlse * 4));
    int *dcu_q = NULL, *dcu_k = NULL;
    if (varlen) { /* B + 1 starts; the last is the end of the last sequence */
        std::vector<int> cq(q0), ck(k0);
        cq.push_back(total_q);
        ck.push_back(total_k);
        CK(cudaMalloc(&dcu_q, cq.size() * 4));
        CK(cudaMalloc(&dcu_k, ck.size() * 4));
        CK(cudaMemcpy(dcu_q, cq.data(), cq.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dcu_k, ck.data(), ck.size() * 4, cudaMemcpyHostToDevice));
    }
    CK(cudaMemcpy(dq, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xFF, hq.size() * 2)); /* NaN poison */
    CK(cudaMemset(dlse, 0xFF, nlse * 4));

    fa_problem p;
    memset(&p, 0, sizeof p);
    p.dtype = bf ? FA_BF16 : FA_F16;
    p.B = c.B;
    p.Sq = c.Sq;
    p.Sk = c.Sk;
    p.Hq = c.Hq;
    p.Hk = c.Hk;
    p.D = p.Dv = D;
    p.q = {dq, qsb, qss, qsh};
    p.out = {dout, qsb, qss, qsh};
    p.k = {dk, ksb, kss, ksh};
    p.v = {dv, ksb, kss, ksh};
    p.lse = dlse;
    p.lse_sb = varlen ? 0 : (int64_t)c.Hq * c.Sq;
    p.lse_sh = varlen ? total_q : c.Sq;
    p.lse_ss = 1;
    if (varlen) {
        p.cu_seqlens_q = dcu_q;
        p.cu_seqlens_k = dcu_k;
        p.total_q = total_q;
        p.total_k = total_k;
    }
    p.scale = 1.0f / sqrtf((float)D);
    p.softcap = c.softcap;
    sm90_case_mask(&p, c.causal, c.top_left, c.wl, c.wr);
    fa_exec x;
    memset(&x, 0, sizeof x);
    if (!fa_sm90_fwd_supports(&p)) {
        printf("UNSUPPORTED\n");
        return 1;
    }
    void *ws = NULL; /* the split tail's counters and parts, where the plan has one */
    x.workspace_bytes = whole_tiles_only() ? 0 : fa_sm90_fwd_workspace(&p, &x);
    if (x.workspace_bytes) {
        CK(cudaMalloc(&ws, x.workspace_bytes));
        CK(cudaMemset(ws, 0xFF, x.workspace_bytes)); /* the launch itself must zero the counters */
    }
    x.workspace = ws;
    const bool split = split_planned(&p, &x);
    if (fa_sm90_fwd(&p, &x) != FA_OK) return 1;
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    cudaFree(ws);
    std::vector<uint16_t> ho(hq.size());
    std::vector<float> hl(nlse);
    CK(cudaMemcpy(ho.data(), dout, ho.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hl.data(), dlse, hl.size() * 4, cudaMemcpyDeviceToHost));
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dlse);
    cudaFree(dcu_q);
    cudaFree(dcu_k);

    /* float64 reference and naive 16-bit implementation */
    int max_sq = 0;
    for (int b = 0; b < c.B; ++b) max_sq = std::max(max_sq, sq[b]);
    RefTally t = reference_rows(c.B, c.Hq, max_sq, [&](int b, int h, int i0, int i1, RefTally &mine) {
        double &err = mine.err, &err_naive = mine.err_naive, &err_lse = mine.err_lse, &maxref = mine.maxref;
        int &unwritten = mine.unwritten, &pad_touched = mine.pad_touched, &bad_empty = mine.bad_empty;
        std::vector<double> s(c.Sk + 1), o(D);
        std::vector<float> sf(c.Sk + 1), of(D);
        int kh = h / (c.Hq / c.Hk);
        const int64_t off = c.top_left ? 0 : (int64_t)sk[b] - sq[b];
        for (int i = i0; i < std::min(i1, sq[b]); ++i) {
            const uint16_t *qi = &hq[b * qsb + (q0[b] + i) * qss + h * qsh];
            const uint16_t *oi = &ho[b * qsb + (q0[b] + i) * qss + h * qsh];
            for (int e = D; e < D + c.pad; ++e)
                if (oi[e] != 0xFFFF) pad_touched++;
            /* visible keys [lo, hi): causal keeps j <= i + off, a window
             * i + off - left <= j <= i + off + right (-1: unbounded) */
            int64_t lo = (c.causal || c.wl < 0) ? 0 : i + off - c.wl;
            int64_t hi = c.causal ? i + off + 1 : (c.wr < 0 ? sk[b] : i + off + c.wr + 1);
            lo = std::max<int64_t>(lo, 0);
            hi = std::min<int64_t>(hi, sk[b]);
            double m = -INFINITY;
            float mf = -INFINITY;
            for (int64_t j = lo; j < hi; ++j) {
                const uint16_t *kj = &hk[b * ksb + (k0[b] + j) * kss + kh * ksh];
                double a = 0;
                float af = 0;
                for (int d = 0; d < D; ++d) {
                    a += (double)from16(qi[d], bf) * from16(kj[d], bf);
                    af += from16(qi[d], bf) * from16(kj[d], bf);
                }
                a *= 1.0 / sqrt((double)D);
                af *= 1.0f / sqrtf((float)D);
                if (c.softcap > 0) {
                    a = c.softcap * tanh(a / c.softcap);
                    af = c.softcap * tanhf(af / c.softcap);
                }
                s[j] = a;
                sf[j] = af;
                m = std::max(m, a);
                mf = std::max(mf, af);
            }
            float lse_k = hl[(size_t)b * p.lse_sb + (size_t)h * p.lse_sh + q0[b] + i];
            if (hi <= lo) { /* no visible key: out 0, lse -inf */
                for (int d = 0; d < D; ++d)
                    if (oi[d] != 0 && oi[d] != 0x8000) bad_empty++;
                if (!(lse_k == -INFINITY)) bad_empty++;
                continue;
            }
            double l = 0;
            float lf = 0;
            std::fill(o.begin(), o.end(), 0.0);
            std::fill(of.begin(), of.end(), 0.f);
            for (int64_t j = lo; j < hi; ++j) {
                double pj = exp(s[j] - m);
                float pf = expf(sf[j] - mf);
                l += pj;
                lf += pf;
                float pr = from16(to16(pf, bf), bf); /* P in storage precision */
                const uint16_t *vj = &hv[b * ksb + (k0[b] + j) * kss + kh * ksh];
                for (int d = 0; d < D; ++d) {
                    o[d] += pj * from16(vj[d], bf);
                    of[d] += pr * from16(vj[d], bf);
                }
            }
            for (int d = 0; d < D; ++d) {
                double r = o[d] / l;
                float nf = from16(to16(of[d] / lf, bf), bf);
                float kv = from16(oi[d], bf);
                if (isnan(kv)) {
                    unwritten++;
                    continue;
                }
                err = std::max(err, fabs(kv - r));
                err_naive = std::max(err_naive, fabs(nf - r));
                maxref = std::max(maxref, fabs(r));
            }
            double lse_ref = m + log(l);
            if (isnan(lse_k))
                unwritten++;
            else
                err_lse = std::max(err_lse, fabs(lse_k - lse_ref));
        }
    });
    if (varlen) /* rows after the last sequence: nothing may write there */
        for (int64_t e = (int64_t)total_q * qss; e < (int64_t)nq; ++e)
            if (ho[e] != 0xFFFF) t.pad_touched++;
    const double err = t.err, err_naive = t.err_naive, err_lse = t.err_lse, maxref = t.maxref;
    const int unwritten = t.unwritten, pad_touched = t.pad_touched, bad_empty = t.bad_empty;
    bool ok = unwritten == 0 && pad_touched == 0 && bad_empty == 0 && err <= 2 * err_naive + 1e-3 &&
              err_lse <= 2e-3;
    if (varlen) {
        printf("varlen q/k lengths");
        for (int b = 0; b < c.B; ++b) printf(" %d/%d", sq[b], sk[b]);
        printf(" | ");
    }
    printf("%s B=%d Sq=%d Sk=%d Hq=%d Hk=%d D=%d %s causal=%d tl=%d win=(%d,%d) cap=%g mag=%g pad=%d | err %.2e "
           "naive %.2e lse %.2e max|o| %.2f unwritten %d pad %d empty %d%s\n",
           ok ? "PASS" : "FAIL", c.B, c.Sq, c.Sk, c.Hq, c.Hk, c.D, bf ? "bf16" : "f16", c.causal, c.top_left, c.wl,
           c.wr, c.softcap, c.qscale, c.pad, err, err_naive, err_lse, maxref, unwritten, pad_touched, bad_empty,
           split ? " split-tail" : "");
    return ok ? 0 : 1;
}

static Case varlen_case(int D, int causal, int top_left, int wl, int wr, float softcap, bool bf16, int Hq, int Hk,
                        std::vector<int> lq, std::vector<int> lk) {
    Case c = {0, 0, 0, Hq, Hk, D, causal, top_left, wl, wr, softcap, bf16, 1.f, D % 64 ? 8 : 0};
    c.lq = lq;
    c.lk = lk;
    return c;
}

static int check_all(bool small, bool varlen_only) {
    std::vector<Case> cases;
    if (small) { /* a few quick cases, for compute-sanitizer */
        cases.push_back({1, 130, 300, 2, 1, 128, 1, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 70, 100, 2, 2, 64, 0, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 300, 400, 2, 1, 64, 1, 0, -1, -1, 0.f, false, 1.f, 0}); /* masked head dim 64 */
        cases.push_back({1, 150, 400, 2, 2, 128, 0, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 70, 150, 2, 2, 256, 1, 1, -1, -1, 0.f, false, 1.f, 0});
        cases.push_back(varlen_case(128, 1, 0, -1, -1, 0.f, true, 2, 1, {5, 0, 130, 64}, {7, 3, 200, 0}));
        cases.push_back(varlen_case(64, 0, 0, -1, -1, 0.f, false, 2, 2, {200, 1, 0}, {129, 300, 2}));
        cases.push_back(varlen_case(256, 1, 0, -1, -1, 0.f, true, 2, 1, {5, 0, 130, 64}, {7, 3, 200, 0}));
        cases.push_back({2, 8, 3100, 99, 33, 72, 0, 0, -1, -1, 0.f, true, 1.f, 0});   /* split tail */
        cases.push_back({2, 8, 1560, 99, 99, 136, 0, 0, -1, -1, 0.f, true, 1.f, 0}); /* split tail, O in the ring */
        cases.push_back({1, 50, 385, 2, 1, 64, 0, 0, -1, -1, 20.f, false, 3.f, 8}); /* a short tile split */
        cases.push_back({1, 2200, 2200, 2, 1, 64, 1, 0, -1, -1, 0.f, true, 1.f, 0}); /* paired, 88-row tile */
        cases.push_back({1, 64, 400, 300, 100, 64, 0, 0, -1, -1, 0.f, true, 1.f, 0}); /* split tiles in a row */
        cases.push_back({3, 200, 300, 6, 2, 64, 0, 0, -1, -1, 0.f, true, 1.f, 0}); /* row groups packed across heads */
        cases.push_back({1, 200, 130, 5, 5, 64, 0, 0, -1, -1, 0.f, false, 1.f, 0}); /* packed, a last tile short of groups */
        /* head dim 256 causal, Sq = Sk: consumer 0 skips each tile's top block (TOP_SKIP), the instance without masks */
        cases.push_back({2, 384, 384, 4, 2, 256, 1, 0, -1, -1, 0.f, false, 1.f, 0});
        int fails = 0;
        for (const Case &c : cases) fails += run_case(c);
        return fails != 0;
    }
    const int dims[] = {128, 64, 256, 40, 96, 192};
    for (int D : dims) {
        if (varlen_only) break;
        for (int bf = 1; bf >= 0; --bf) {
            if (!bf && D != 128 && D != 96 && D != 64) continue;
            cases.push_back({1, 1, 1, 1, 1, D, 0, 0, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({2, 17, 17, 2, 1, D, 1, 0, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({1, 113, 203, 4, 2, D, 0, 0, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({1, 113, 203, 4, 2, D, 1, 0, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({1, 113, 203, 4, 2, D, 1, 1, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({1, 203, 113, 2, 2, D, 1, 0, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({1, 203, 113, 2, 2, D, 1, 1, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({2, 1023, 1024, 4, 1, D, 1, 0, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({1, 1, 239, 3, 1, D, 0, 0, -1, -1, 0.f, (bool)bf, 1.f, 8});
            cases.push_back({1, 3, 799, 2, 2, D, 1, 0, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({1, 300, 700, 2, 1, D, 0, 0, 100, 20, 0.f, (bool)bf, 1.f, 64});
            cases.push_back({1, 333, 333, 2, 2, D, 0, 0, 7, 0, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({1, 257, 513, 2, 2, D, 0, 0, -1, -1, 30.f, (bool)bf, 3.f, 0});
            cases.push_back({1, 200, 900, 2, 1, D, 0, 0, -1, -1, 0.f, (bool)bf, 4.f, 0}); /* large scores */
            /* the causal diagonal on 128-key block edges with Sq != Sk (the instances without the steady
             * loop's masks) */
            cases.push_back({1, 130, 258, 2, 1, D, 1, 0, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({1, 300, 172, 2, 2, D, 1, 0, -1, -1, 0.f, (bool)bf, 1.f, 0});
            cases.push_back({1, 130, 500, 2, 2, D, 1, 1, -1, -1, 0.f, (bool)bf, 1.f, 0});
        }
    }
    if (!varlen_only) {
        /* head dim 64 with a mask: 128-row tiles up to 2048 queries, 192-row beyond */
        cases.push_back({1, 1500, 1601, 2, 1, 64, 1, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 1700, 1300, 2, 2, 64, 0, 0, 300, 10, 0.f, false, 1.f, 0});
        cases.push_back({1, 2500, 2601, 2, 1, 64, 1, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 2700, 2300, 2, 2, 64, 0, 0, 300, 10, 0.f, false, 1.f, 0});
        /* 192-row tiles whose warpgroups see no key of the first block, or
         * have no row at all (1024 = 5 * 192 + 64; 2500 = 13 * 192 + 4) */
        cases.push_back({1, 1024, 1024, 2, 1, 64, 0, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 2048, 2048, 2, 2, 64, 1, 0, -1, -1, 0.f, true, 1.f, 0});
        /* Short last tiles (at most 64 rows) whose kv blocks the three
         * consumers split (Sm90ShortSplit, where sm90_short_split_plan
         * takes it: every tile short, and on an H200 the last two cases):
         * 8 blocks (the last partial), 3 blocks (the last with one key), 4
         * blocks (consumer 0 takes two, the others pass a turn), a left
         * window (the lowest block partly hidden, blocks from 1 on),
         * softcap and large scores in f16, GQA; a CTA with a whole tile
         * then a short one, and CTAs with several short tiles in a row. */
        cases.push_back({2, 64, 1000, 3, 1, 64, 0, 0, -1, -1, 0.f, false, 1.f, 0});
        cases.push_back({1, 64, 257, 2, 2, 64, 0, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 50, 385, 2, 1, 64, 0, 0, -1, -1, 20.f, false, 3.f, 8});
        cases.push_back({1, 60, 600, 2, 2, 64, 0, 0, 300, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 40, 900, 4, 2, 64, 0, 0, -1, -1, 0.f, false, 4.f, 0}); /* large scores */
        cases.push_back({1, 1024, 1111, 24, 8, 64, 0, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 64, 400, 300, 100, 64, 0, 0, -1, -1, 0.f, true, 1.f, 0}); /* 2-3 split tiles a CTA */
        /* causal past 2048 queries (192-row tiles, paired order, its tail
         * dealt tile by tile) with an 88-row last tile: never split */
        cases.push_back({1, 2200, 2200, 2, 1, 64, 1, 0, -1, -1, 0.f, true, 1.f, 0});
        /* the same tiles moved down by phantom rows (Sm90FwdConfig::ROW_SHIFT)
         * under both diagonal alignments with Sq != Sk, and with rows that
         * see no key (Sq > Sk, bottom-right) */
        cases.push_back({1, 2300, 2500, 2, 1, 64, 1, 1, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 2300, 2500, 2, 1, 64, 1, 0, -1, -1, 0.f, false, 1.f, 0});
        cases.push_back({2, 2600, 2200, 2, 1, 64, 1, 0, -1, -1, 0.f, true, 1.f, 0});
        /* The split tail, on an H200 (132 SMs): 198 tiles leave a last wave
         * of 66, whose kv blocks (25 per tile) are shared out 12.5 per CTA,
         * so pieces split tiles and cross from one tile into the next. Few
         * query rows keep the reference cheap; head dims 72, 120 and 136
         * run on the 128 and 256 kernels. */
        cases.push_back({2, 8, 3100, 99, 33, 72, 0, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 129, 3100, 99, 1, 72, 0, 0, -1, -1, 0.f, true, 1.f, 0}); /* two m-blocks */
        cases.push_back({2, 20, 3100, 99, 9, 120, 0, 0, -1, -1, 20.f, false, 3.f, 8}); /* softcap, f16 */
        cases.push_back({2, 8, 3100, 99, 99, 120, 0, 0, -1, -1, 0.f, true, 4.f, 0});   /* large scores */
        cases.push_back({2, 8, 1560, 99, 99, 136, 0, 0, -1, -1, 0.f, true, 1.f, 0});   /* 64-key blocks */
        /* the head-dim-256 kernel's lagging max through the merge: large
         * scores (rows led by a few keys), and softcap in f16 */
        cases.push_back({2, 8, 1560, 99, 99, 256, 0, 0, -1, -1, 0.f, true, 4.f, 0});
        cases.push_back({2, 8, 1560, 99, 99, 200, 0, 0, -1, -1, 20.f, false, 3.f, 8});
        /* Many units of the paired order, on an H200: 99 head pairs of 3
         * query blocks (the last pair without its second head) leave 33 of
         * 297 units for a last round; 39 pairs of 6 (234 units, 102 left);
         * a window, 32 pairs of 5 (160, 28 left). The head-dim-128 case
         * deals its last rounds tile by tile (sm90_pair_tail_plan); the
         * head-dim-64 ones run the kernel of short masked problems, which
         * keeps whole units (Sm90FwdConfig::PAIR_TAIL). */
        cases.push_back({2, 300, 300, 99, 3, 64, 1, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({1, 700, 700, 77, 7, 128, 1, 0, -1, -1, 0.f, false, 1.f, 0});
        cases.push_back({1, 600, 650, 64, 8, 64, 0, 0, 100, 0, 0.f, true, 1.f, 0});
        /* head dim 128 without a mask, several tiles per CTA (one padded) */
        cases.push_back({3, 1024, 640, 8, 2, 128, 0, 0, -1, -1, 0.f, true, 1.f, 0});
        cases.push_back({2, 250, 1000, 4, 4, 120, 0, 0, -1, -1, 0.f, false, 1.f, 8});
    }
    /* varlen: empty query and key sequences, 1-row ones, tiles straddling a
     * sequence end, Sq > Sk and Sq < Sk per sequence */
    const std::vector<int> lq = {5, 0, 17, 1, 113, 0, 64, 40, 300, 129};
    const std::vector<int> lk = {7, 3, 0, 240, 113, 0, 64, 9, 500, 128};
    for (int D : {128, 64, 96, 40, 256, 200}) { /* 256, 200: the head-dim-256 kernel's varlen instance */
        for (int bf = 1; bf >= 0; --bf) {
            if (!bf && D != 128) continue;
            cases.push_back(varlen_case(D, 0, 0, -1, -1, 0.f, (bool)bf, 4, 2, lq, lk));
            cases.push_back(varlen_case(D, 1, 0, -1, -1, 0.f, (bool)bf, 4, 2, lq, lk));
            cases.push_back(varlen_case(D, 1, 1, -1, -1, 0.f, (bool)bf, 4, 2, lq, lk));
            cases.push_back(varlen_case(D, 0, 0, 30, 5, 0.f, (bool)bf, 2, 1, lq, lk));
            cases.push_back(varlen_case(D, 1, 0, -1, -1, 20.f, (bool)bf, 3, 1, lq, lk));
        }
    }
    /* head dim 64 with long masked sequences: 128-row tiles (the longest up to
     * 2048 queries), 192-row tiles (longer) */
    cases.push_back(varlen_case(64, 1, 0, -1, -1, 0.f, true, 2, 1, {1500, 7, 1100}, {1601, 900, 1100}));
    cases.push_back(varlen_case(64, 0, 0, -1, -1, 0.f, true, 2, 2, {1500, 7, 1100}, {1601, 900, 1100}));
    cases.push_back(varlen_case(64, 1, 0, -1, -1, 0.f, true, 2, 1, {2500, 7, 1100}, {2601, 900, 1100}));
    int fails = 0;
    for (const Case &c : cases) fails += run_case(c);
    printf("%d / %zu cases failed\n", fails, cases.size());
    return fails != 0;
}

/* ---- e4m3 inputs ------------------------------------------------------------ */

static uint8_t to_e4m3(float x) { return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
static float from_e4m3(uint8_t u) {
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)u, __NV_E4M3);
    return __half2float(__half(h));
}

/* e4m3 q, k, v with per-(batch, kv head) descales, bf16 output, run with and
 * without lse. Rule: error against float64 (on the dequantised inputs) at most
 * 2x that of a naive implementation in the same precision (float32 scores, P
 * rounded to e4m3 before P V, output rounded to bf16) plus half a bf16 ulp of
 * max|o|, for both outputs. */
static int run_fp8_case(const Case &c) {
    const int64_t D = c.D;
    const int64_t qsh = D + c.pad, qss = c.Hq * qsh, qsb = c.Sq * qss;
    const int64_t ksh = D + c.pad, kss = c.Hk * ksh, ksb = c.Sk * kss;
    std::vector<uint8_t> hq(c.B * qsb), hk(c.B * ksb), hv(c.B * ksb);
    for (auto &x : hq) x = to_e4m3((float)(nrand() * c.qscale));
    for (auto &x : hk) x = to_e4m3((float)(nrand() * c.qscale));
    for (auto &x : hv) x = to_e4m3((float)nrand());
    std::vector<float> desc[3];
    for (int i = 0; i < 3; ++i)
        for (int e = 0; e < c.B * c.Hk; ++e) desc[i].push_back((float)(0.5 + 1.5 * urand()));
    uint8_t *dq, *dk, *dv;
    uint16_t *dout;
    float *dlse, *ddesc[3];
    void *ws;
    CK(cudaMalloc(&dq, hq.size()));
    CK(cudaMalloc(&dk, hk.size()));
    CK(cudaMalloc(&dv, hv.size()));
    CK(cudaMalloc(&dout, hq.size() * 2));
    CK(cudaMalloc(&dlse, (size_t)c.B * c.Hq * c.Sq * 4));
    CK(cudaMemcpy(dq, hq.data(), hq.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, hk.data(), hk.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, hv.data(), hv.size(), cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xFF, hq.size() * 2));
    CK(cudaMemset(dlse, 0xFF, (size_t)c.B * c.Hq * c.Sq * 4));
    for (int i = 0; i < 3; ++i) {
        CK(cudaMalloc(&ddesc[i], desc[i].size() * 4));
        CK(cudaMemcpy(ddesc[i], desc[i].data(), desc[i].size() * 4, cudaMemcpyHostToDevice));
    }
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.dtype = FA_F8_E4M3;
    p.B = c.B;
    p.Sq = c.Sq;
    p.Sk = c.Sk;
    p.Hq = c.Hq;
    p.Hk = c.Hk;
    p.D = p.Dv = D;
    p.q = {dq, qsb, qss, qsh};
    p.out = {dout, qsb, qss, qsh};
    p.k = {dk, ksb, kss, ksh};
    p.v = {dv, ksb, kss, ksh};
    p.lse = dlse;
    p.lse_sb = (int64_t)c.Hq * c.Sq;
    p.lse_sh = c.Sq;
    p.lse_ss = 1;
    p.q_descale = ddesc[0];
    p.k_descale = ddesc[1];
    p.v_descale = ddesc[2];
    p.scale = 1.0f / sqrtf((float)D);
    p.softcap = c.softcap;
    sm90_case_mask(&p, c.causal, c.top_left, c.wl, c.wr);
    if (!fa_sm90_fwd_supports(&p)) {
        printf("UNSUPPORTED e4m3 D=%d\n", c.D);
        return 1;
    }
    fa_exec x;
    memset(&x, 0, sizeof x);
    x.workspace_bytes = fa_sm90_fwd_workspace(&p, &x);
    CK(cudaMalloc(&ws, x.workspace_bytes));
    CK(cudaMemset(ws, 0xFF, x.workspace_bytes)); /* the launch itself must zero the split tail's counters */
    x.workspace = ws;
    if (whole_tiles_only()) x.workspace_bytes = sm90_fp8_vt_bytes(&p);
    if (split_planned(&p, &x)) printf("(split tail) ");
    /* one launch into the poisoned output, copied to host */
    auto run_into = [&](std::vector<uint16_t> &host) {
        CK(cudaMemset(dout, 0xFF, host.size() * 2));
        if (fa_sm90_fwd(&p, &x) != FA_OK) return false;
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(host.data(), dout, host.size() * 2, cudaMemcpyDeviceToHost));
        return true;
    };
    std::vector<uint16_t> ho(hq.size()), ho_nolse(hq.size());
    std::vector<float> hl((size_t)c.B * c.Hq * c.Sq);
    if (!run_into(ho)) return 1;
    CK(cudaMemcpy(hl.data(), dlse, hl.size() * 4, cudaMemcpyDeviceToHost));
    p.lse = NULL; /* again without lse (the epilogue skips it) */
    if (!run_into(ho_nolse)) return 1;
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dlse);
    cudaFree(ws);
    for (int i = 0; i < 3; ++i) cudaFree(ddesc[i]);

    const int64_t off = c.top_left ? 0 : (int64_t)c.Sk - c.Sq;
    const RefTally t = reference_rows(c.B, c.Hq, c.Sq, [&](int b, int h, int i0, int i1, RefTally &mine) {
        double &err = mine.err, &err_nolse = mine.err_nolse, &err_naive = mine.err_naive, &err_lse = mine.err_lse,
               &lse_ratio = mine.lse_ratio, &maxref = mine.maxref;
        int &unwritten = mine.unwritten, &pad_touched = mine.pad_touched, &bad_empty = mine.bad_empty;
        std::vector<double> s(c.Sk), o(D);
        std::vector<float> sf(c.Sk), of(D), qi(D);
        int kh = h / (c.Hq / c.Hk);
        float qd = desc[0][b * c.Hk + kh], kd = desc[1][b * c.Hk + kh], vd = desc[2][b * c.Hk + kh];
        for (int i = i0; i < i1; ++i) {
            const uint16_t *oi = &ho[b * qsb + i * qss + h * qsh], *oi2 = &ho_nolse[b * qsb + i * qss + h * qsh];
            for (int d = 0; d < D; ++d) qi[d] = from_e4m3(hq[b * qsb + i * qss + h * qsh + d]) * qd;
            for (int e = D; e < D + c.pad; ++e)
                if (oi[e] != 0xFFFF || oi2[e] != 0xFFFF) pad_touched++;
            int64_t lo = (c.causal || c.wl < 0) ? 0 : i + off - c.wl;
            int64_t hi = c.causal ? i + off + 1 : (c.wr < 0 ? c.Sk : i + off + c.wr + 1);
            lo = std::max<int64_t>(lo, 0);
            hi = std::min<int64_t>(hi, c.Sk);
            double m = -INFINITY, n_abs = 0;
            float mf = -INFINITY;
            for (int64_t j = lo; j < hi; ++j) {
                double a = 0, a_abs = 0;
                float af = 0;
                for (int d = 0; d < D; ++d) {
                    float kv = from_e4m3(hk[b * ksb + j * kss + kh * ksh + d]) * kd;
                    a += (double)qi[d] * kv;
                    a_abs += fabs((double)qi[d] * kv);
                    af += qi[d] * kv;
                }
                n_abs = std::max(n_abs, a_abs / sqrt((double)D));
                a *= 1.0 / sqrt((double)D);
                af *= 1.0f / sqrtf((float)D);
                if (c.softcap > 0) {
                    a = c.softcap * tanh(a / c.softcap);
                    af = c.softcap * tanhf(af / c.softcap);
                }
                s[j] = a;
                sf[j] = af;
                m = std::max(m, a);
                mf = std::max(mf, af);
            }
            float lse_k = hl[(size_t)b * c.Hq * c.Sq + (size_t)h * c.Sq + i];
            if (hi <= lo) {
                for (int d = 0; d < D; ++d)
                    if ((oi[d] != 0 && oi[d] != 0x8000) || (oi2[d] != 0 && oi2[d] != 0x8000)) bad_empty++;
                if (!(lse_k == -INFINITY)) bad_empty++;
                continue;
            }
            double l = 0;
            float lf = 0;
            std::fill(o.begin(), o.end(), 0.0);
            std::fill(of.begin(), of.end(), 0.f);
            for (int64_t j = lo; j < hi; ++j) {
                double pj = exp(s[j] - m);
                float pf = expf(sf[j] - mf);
                l += pj;
                lf += pf;
                float pr = from_e4m3(to_e4m3(pf)); /* P in e4m3 */
                for (int d = 0; d < D; ++d) {
                    float v8 = from_e4m3(hv[b * ksb + j * kss + kh * ksh + d]);
                    o[d] += pj * v8 * vd;
                    of[d] += pr * v8;
                }
            }
            for (int d = 0; d < D; ++d) {
                double r = o[d] / l;
                float nf = from16(to16(of[d] * vd / lf, true), true);
                float kv = from16(oi[d], true), kv2 = from16(oi2[d], true);
                if (isnan(kv) || isnan(kv2)) {
                    unwritten++;
                    continue;
                }
                err = std::max(err, fabs(kv - r));
                err_nolse = std::max(err_nolse, fabs(kv2 - r));
                err_naive = std::max(err_naive, fabs(nf - r));
                maxref = std::max(maxref, fabs(r));
            }
            double lse_ref = m + log(l);
            if (isnan(lse_k)) {
                unwritten++;
            } else {
                /* the e4m3 tensor cores sum Q K^T with ~14 bits: a score may be
                 * off by a few 2^-13 of scale * sum |q_d k_d| per 128 head-dim
                 * columns, and lse by at most the largest such error (the bound
                 * tests/test_fp8.c uses) */
                const double lse_bound = ldexp(n_abs * std::max(1.0, D / 128.0), -12) + 1e-4;
                err_lse = std::max(err_lse, fabs(lse_k - lse_ref));
                lse_ratio = std::max(lse_ratio, fabs(lse_k - lse_ref) / lse_bound);
            }
        }
    });
    const double err = t.err, err_nolse = t.err_nolse, err_naive = t.err_naive, err_lse = t.err_lse,
                 lse_ratio = t.lse_ratio, maxref = t.maxref;
    const int unwritten = t.unwritten, pad_touched = t.pad_touched, bad_empty = t.bad_empty;
    double half_ulp = maxref > 0 ? ldexp(1.0, (int)floor(log2(maxref)) - 8) : 0.0;
    bool ok = unwritten == 0 && pad_touched == 0 && bad_empty == 0 && err <= 2 * err_naive + half_ulp &&
              err_nolse <= 2 * err_naive + half_ulp && lse_ratio <= 1.0;
    printf("%s e4m3 B=%d Sq=%d Sk=%d Hq=%d Hk=%d D=%d causal=%d tl=%d win=(%d,%d) cap=%g mag=%g pad=%d | err %.2e "
           "(no lse %.2e) naive %.2e lse %.2e (%.2f of its bound) max|o| %.2f unwritten %d pad %d empty %d\n",
           ok ? "PASS" : "FAIL", c.B, c.Sq, c.Sk, c.Hq, c.Hk, c.D, c.causal, c.top_left, c.wl, c.wr, c.softcap,
           c.qscale, c.pad, err, err_nolse, err_naive, err_lse, lse_ratio, maxref, unwritten, pad_touched, bad_empty);
    return ok ? 0 : 1;
}

static int check_fp8(bool small) {
    std::vector<Case> cases;
    cases.push_back({1, 130, 300, 2, 1, 128, 1, 0, -1, -1, 0.f, true, 1.f, 0});
    cases.push_back({1, 70, 200, 2, 2, 128, 0, 0, -1, -1, 0.f, true, 1.f, 16});
    cases.push_back({1, 100, 300, 2, 1, 64, 1, 0, -1, -1, 0.f, true, 1.f, 0}); /* the head-dim-64 kernel */
    cases.push_back({2, 8, 6200, 71, 1, 128, 0, 0, -1, -1, 0.f, true, 1.f, 0}); /* split tail (sm90_split_plan) */
    cases.push_back({2, 300, 300, 99, 3, 128, 1, 0, -1, -1, 0.f, true, 1.f, 0}); /* many units, odd head count */
    if (!small) {
        /* head dims between the kernels' run on the next one up, over zero-filled columns */
        for (int D : {16, 80, 112, 144, 208, 240})
            cases.push_back({1, 113, 203, 4, 2, D, 1, 0, -1, -1, 0.f, true, 1.f, 16});
        for (int D : {128, 96, 64, 192, 256}) {
            cases.push_back({1, 1, 1, 1, 1, D, 0, 0, -1, -1, 0.f, true, 1.f, 0});
            cases.push_back({2, 17, 17, 2, 1, D, 1, 0, -1, -1, 0.f, true, 1.f, 0});
            cases.push_back({1, 113, 203, 4, 2, D, 0, 0, -1, -1, 0.f, true, 1.f, 0});
            cases.push_back({1, 113, 203, 4, 2, D, 1, 0, -1, -1, 0.f, true, 1.f, 0});
            cases.push_back({1, 203, 113, 2, 2, D, 1, 1, -1, -1, 0.f, true, 1.f, 0});
            cases.push_back({1, 203, 113, 2, 2, D, 1, 0, -1, -1, 0.f, true, 1.f, 0});
            cases.push_back({2, 1023, 1024, 4, 1, D, 1, 0, -1, -1, 0.f, true, 1.f, 0});
            /* masked problems past 1024 queries take the three-consumer kernel */
            cases.push_back({1, 1500, 1700, 2, 1, D, 1, 0, -1, -1, 0.f, true, 1.f, 0});
            cases.push_back({1, 1500, 1300, 2, 2, D, 1, 1, -1, -1, 0.f, true, 1.f, 0});
            cases.push_back({1, 1100, 1300, 2, 1, D, 0, 0, 100, 20, 0.f, true, 1.f, 0});
            /* a right window past every key: paired, yet only the top block masked (no row shift) */
            cases.push_back({1, 1100, 1100, 2, 1, D, 0, 0, -1, 5000, 0.f, true, 1.f, 0});
            cases.push_back({1, 3, 799, 2, 2, D, 0, 0, -1, -1, 0.f, true, 1.f, 16});
            cases.push_back({1, 300, 700, 2, 1, D, 0, 0, 100, 20, 0.f, true, 1.f, 0});
            cases.push_back({1, 257, 513, 2, 2, D, 0, 0, -1, -1, 30.f, true, 3.f, 0});
            cases.push_back({1, 200, 900, 2, 1, D, 0, 0, -1, -1, 0.f, true, 4.f, 0});
            cases.push_back({2, 8, 3100, 99, 1, D, 0, 0, -1, -1, 0.f, true, 1.f, 0}); /* a partial last wave */
            /* a partial last wave that the three-consumer kernel splits (sm90_split_plan) */
            if (D != 128) cases.push_back({2, 8, 6200, 71, 1, D, 0, 0, -1, -1, 0.f, true, 1.f, 0});
        }
    }
    int fails = 0;
    for (const Case &c : cases) fails += run_fp8_case(c);
    printf("e4m3: %d / %zu cases failed\n", fails, cases.size());
    return fails != 0;
}

/* Median of 20 timed launches after 3 warm-up ones, in milliseconds. */
static double median_fwd_ms(const fa_problem *p, const fa_exec *x) {
    for (int w = 0; w < 3; ++w) fa_sm90_fwd(p, x);
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ts;
    const int reps = getenv("FA_BENCH_REPS") ? std::max(1, atoi(getenv("FA_BENCH_REPS"))) : 20;
    for (int r = 0; r < reps; ++r) {
        cudaEventRecord(e0);
        fa_sm90_fwd(p, x);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        ts.push_back(ms);
    }
    CK(cudaGetLastError());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

/* Time per launch of n back-to-back launches, in milliseconds. */
static double group_ms(const fa_problem *p, const fa_exec *x, int n) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    for (int i = 0; i < n; ++i) fa_sm90_fwd(p, x);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    CK(cudaGetLastError());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms / n;
}

/* Whole-tile tail (xa) against split tail (xb) on the same problem, timed in
 * alternating groups after ~150 ms of settling, so both see the same clock;
 * medians of 8 groups each. */
static void whole_vs_split_ms(const fa_problem *p, const fa_exec *xa, const fa_exec *xb, double *a, double *b) {
    const double est = group_ms(p, xa, 3);
    const int settle = std::max(3, (int)(150.0 / est)), n = std::max(3, (int)(10.0 / est));
    group_ms(p, xa, settle);
    std::vector<double> ta, tb;
    for (int r = 0; r < 8; ++r) {
        ta.push_back(group_ms(p, xa, n));
        tb.push_back(group_ms(p, xb, n));
    }
    std::sort(ta.begin(), ta.end());
    std::sort(tb.begin(), tb.end());
    *a = (ta[3] + ta[4]) / 2;
    *b = (tb[3] + tb[4]) / 2;
}

/* One timing cell: whole tiles with xa and, where the plan splits with xb's
 * workspace, the split tail against them; prints the line up to its tag. */
static void bench_cell(const fa_problem *p, const fa_exec *xa, const fa_exec *xb, int B, int H, int S, int D,
                       int causal) {
    const bool split = split_planned(p, xb);
    double ms, ms_split;
    if (split)
        whole_vs_split_ms(p, xa, xb, &ms, &ms_split);
    else
        ms = ms_split = median_fwd_ms(p, xa);
    const double flops = 4.0 * B * H * (double)S * S * D / (causal ? 2 : 1);
    printf("%-6d %-6d %-6d %-6d %-10.4f %-10.1f", D, causal, B, S, ms, flops / ms / 1e9);
    if (split) printf(" split %-10.1f (x%.3f)", flops / ms_split / 1e9, ms / ms_split);
}

/* e4m3 timing: head dim D (128 unless given), 2048 / D heads, the standard
 * (batch, seqlen) grid */
static int bench_fp8(int argc, char **argv) {
    const int D = argc > 2 ? atoi(argv[2]) : 128;
    if (D < 16 || D > 256 || D % 16) {
        fprintf(stderr, "bench_fp8: head dim must be a multiple of 16 up to 256\n");
        return 2;
    }
    const int bs[][2] = {{16, 1024}, {4, 4096}, {2, 8192}, {1, 16384}};
    printf("%-6s %-6s %-6s %-6s %-10s %-10s\n", "D", "causal", "batch", "seqlen", "ms", "TFLOP/s");
    for (int causal = 0; causal < 2; ++causal)
        for (auto &bsz : bs) {
            int B = bsz[0], S = bsz[1], H = 2048 / D;
            size_t n = (size_t)B * S * H * D;
            uint8_t *q, *k, *v;
            uint16_t *o;
            void *ws;
            CK(cudaMalloc(&q, n));
            CK(cudaMalloc(&k, n));
            CK(cudaMalloc(&v, n));
            CK(cudaMalloc(&o, n * 2));
            uint32_t seed = 1;
            for (uint8_t *dst : {q, k, v}) fill_normal_async(dst, n, seed++, 1); /* independent, as in bench() */
            fa_problem p = grid_problem(FA_F8_E4M3, q, k, v, o, B, S, H, D, causal);
            fa_exec x;
            memset(&x, 0, sizeof x);
            const size_t ws_bytes = fa_sm90_fwd_workspace(&p, &x);
            CK(cudaMalloc(&ws, ws_bytes));
            x.workspace = ws;
            x.workspace_bytes = sm90_fp8_vt_bytes(&p); /* V^T only: whole tiles in the last wave */
            fa_exec xs = x;
            xs.workspace_bytes = ws_bytes;
            bench_cell(&p, &x, &xs, B, H, S, D, causal);
            printf(" e4m3 (V transpose included)\n");
            cudaFree(q);
            cudaFree(k);
            cudaFree(v);
            cudaFree(o);
            cudaFree(ws);
        }
    return 0;
}

/* Median kernel time over reps, on random inputs. */
static int bench(int argc, char **argv) {
    /* optional filters: bench [D [causal [varlen [seqlen]]]]; varlen packs the
     * batch's equal-length sequences as one varlen problem (same work); 0 or
     * -1 leaves a filter open */
    int only_d = argc > 2 ? atoi(argv[2]) : 0, only_causal = argc > 3 ? atoi(argv[3]) : -1;
    int varlen = argc > 4 && atoi(argv[4]) > 0, only_s = argc > 5 ? atoi(argv[5]) : 0;
    const int dims[] = {64, 128, 256};
    const int bs[][2] = {{32, 512}, {16, 1024}, {8, 2048}, {4, 4096}, {2, 8192}, {1, 16384}};
    printf("%-6s %-6s %-6s %-6s %-10s %-10s\n", "D", "causal", "batch", "seqlen", "ms", "TFLOP/s");
    for (int D : dims)
        for (int causal = 0; causal < 2; ++causal)
            for (auto &bsz : bs) {
                if ((only_d && D != only_d) || (only_causal >= 0 && causal != only_causal)) continue;
                if (only_s > 0 && bsz[1] != only_s) continue;
                int B = bsz[0], S = bsz[1], H = 2048 / D;
                size_t n = (size_t)B * S * H * D;
                uint16_t *q, *k, *v, *o;
                float *lse;
                CK(cudaMalloc(&q, n * 2));
                CK(cudaMalloc(&k, n * 2));
                CK(cudaMalloc(&v, n * 2));
                CK(cudaMalloc(&o, n * 2));
                CK(cudaMalloc(&lse, (size_t)B * H * S * 4));
                /* independent random q, k, v, drawn on the device */
                uint32_t seed = 1;
                for (uint16_t *dst : {q, k, v}) fill_normal_async(dst, n, seed++, 0);
                fa_problem p = grid_problem(FA_BF16, q, k, v, o, B, S, H, D, causal);
                p.lse = lse;
                p.lse_sb = (int64_t)H * S;
                p.lse_sh = S;
                p.lse_ss = 1;
                int *cu = NULL;
                if (varlen) {
                    std::vector<int> hcu(B + 1);
                    for (int b = 0; b <= B; ++b) hcu[b] = b * S;
                    CK(cudaMalloc(&cu, (B + 1) * 4));
                    CK(cudaMemcpy(cu, hcu.data(), (B + 1) * 4, cudaMemcpyHostToDevice));
                    p.cu_seqlens_q = p.cu_seqlens_k = cu;
                    p.total_q = p.total_k = (int64_t)B * S;
                    p.q.sb = p.k.sb = p.v.sb = p.out.sb = 0;
                    p.lse_sb = 0;
                    p.lse_sh = (int64_t)B * S;
                }
                fa_exec x;
                memset(&x, 0, sizeof x);
                /* without a workspace the last wave runs whole tiles; with
                 * one, split where the plan says so: both, same inputs */
                const size_t ws_bytes = fa_sm90_fwd_workspace(&p, &x);
                void *ws = NULL;
                if (ws_bytes) CK(cudaMalloc(&ws, ws_bytes));
                fa_exec xs = x;
                xs.workspace = ws;
                xs.workspace_bytes = ws_bytes;
                bench_cell(&p, &x, &xs, B, H, S, D, causal);
                printf("%s\n", varlen ? (fa_sm90_fwd_supports(&p) ? " varlen" : " varlen UNSUPPORTED") : "");
                cudaFree(ws);
                cudaFree(cu);
                cudaFree(q);
                cudaFree(k);
                cudaFree(v);
                cudaFree(o);
                cudaFree(lse);
            }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* keep finished lines if a case hangs */
    if (argc > 1 && !strcmp(argv[1], "bench")) return bench(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "bench_fp8")) return bench_fp8(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "fp8")) return check_fp8(false);
    if (argc > 1 && !strcmp(argv[1], "fp8_small")) return check_fp8(true);
    /* check: every case; small: a few, for compute-sanitizer; varlen: varlen cases only */
    return check_all(argc > 1 && !strcmp(argv[1], "small"), argc > 1 && !strcmp(argv[1], "varlen"));
}
