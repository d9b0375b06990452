/*
 * The Hopper forward of two builds in one process: the working tree's
 * (fa_sm90_fwd) against another revision's (base_fa_sm90_fwd, compiled in a
 * translation unit of its own by scripts/sm90_ab.sh, so each keeps the SASS
 * of its own build). The H200 runs at its power cap, so figures from two
 * processes differ by the clock each met (5-15%); here the two builds run in
 * alternating groups after a common warm-up and see the same clock.
 *
 *   scripts/sm90_ab.sh REV            # builds ./sm90_ab (needs nvcc)
 *   ./sm90_ab fp8 [D]                 # e4m3, head dim D (128), 2048 / D heads
 *   ./sm90_ab bf16 D [causal]         # bf16, head dim D, hidden 2048, causal 0/1 (both)
 *
 * Cells: the standard grid's (batch, seqlen) pairs, inputs standard normal.
 * Each build uses the workspace its own plan asks for (the split tail where it
 * splits), as the library does. Per cell: 300 ms of warm-up, then 10 rounds
 * of one group of calls (~15 ms) per build, the order swapped every round
 * (so that drift within a pair falls on neither build); medians of the
 * rounds.
 *
 * SM90_AB_CONTROL=1 times the base build in both columns: the ratios then
 * show what the harness reads with no change at all (up to 2% on single
 * cells, docs/perf/sm90.md item 68), the yardstick for a real A/B.
 */
#include <algorithm>
#include <vector>

#include "sm90_harness.cuh" /* CK, fill_normal_async, grid_problem; the C headers and backend.h */

extern "C" fa_status fa_sm90_fwd(const fa_problem *p, const fa_exec *x);
extern "C" size_t fa_sm90_fwd_workspace(const fa_problem *p, const fa_exec *x);
extern "C" fa_status base_fa_sm90_fwd(const fa_problem *p, const fa_exec *x);
extern "C" size_t base_fa_sm90_fwd_workspace(const fa_problem *p, const fa_exec *x);

typedef fa_status (*fwd_fn)(const fa_problem *, const fa_exec *);

/* Milliseconds per call over a group of n back-to-back calls. */
static double group_ms(fwd_fn f, const fa_problem *p, const fa_exec *x, int n) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a));
    for (int i = 0; i < n; ++i)
        if (f(p, x) != FA_OK) exit(1);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / n;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

static void cell(int fp8, int B, int S, int H, int D, int causal, bool control) {
    const size_t n = (size_t)B * S * H * D, es = fp8 ? 1 : 2;
    void *q, *k, *v, *o, *ws_base = NULL, *ws_new = NULL;
    CK(cudaMalloc(&q, n * es));
    CK(cudaMalloc(&k, n * es));
    CK(cudaMalloc(&v, n * es));
    CK(cudaMalloc(&o, n * 2));
    uint32_t seed = 1;
    for (void *t : {q, k, v}) fill_normal_async(t, n, seed++, fp8);
    fa_problem p = grid_problem(fp8 ? FA_F8_E4M3 : FA_BF16, q, k, v, o, B, S, H, D, causal);
    fa_exec xb, xn;
    memset(&xb, 0, sizeof xb);
    memset(&xn, 0, sizeof xn);
    xb.workspace_bytes = base_fa_sm90_fwd_workspace(&p, &xb);
    xn.workspace_bytes = control ? 0 : fa_sm90_fwd_workspace(&p, &xn); /* control: xn is not run */
    if (xb.workspace_bytes) CK(cudaMalloc(&ws_base, xb.workspace_bytes));
    if (xn.workspace_bytes) CK(cudaMalloc(&ws_new, xn.workspace_bytes));
    xb.workspace = ws_base;
    xn.workspace = ws_new;
    const double est = group_ms(base_fa_sm90_fwd, &p, &xb, 3);
    const int settle = std::max(3, (int)(300.0 / est)), calls = std::max(3, (int)(15.0 / est));
    group_ms(base_fa_sm90_fwd, &p, &xb, settle);
    /* the "this" column: the working tree's build, or the base again (control) */
    const fwd_fn this_fwd = control ? base_fa_sm90_fwd : fa_sm90_fwd;
    const fa_exec *this_x = control ? &xb : &xn;
    std::vector<double> tb, tn;
    for (int r = 0; r < 10; ++r) {
        if (r % 2 == 0) tb.push_back(group_ms(base_fa_sm90_fwd, &p, &xb, calls));
        tn.push_back(group_ms(this_fwd, &p, this_x, calls));
        if (r % 2 == 1) tb.push_back(group_ms(base_fa_sm90_fwd, &p, &xb, calls));
    }
    const double mb = median(tb), mn = median(tn);
    const double tflop = 4.0 * B * H * (double)S * S * D / (causal ? 2 : 1) / 1e12;
    printf("%-5s %-4d %-6d %-6d %-6d | %-9.1f %-9.1f | %.3f\n", fp8 ? "e4m3" : "bf16", D, causal, B, S,
           tflop / (mb * 1e-3), tflop / (mn * 1e-3), mb / mn);
    fflush(stdout);
    for (void *t : {q, k, v, o, ws_base, ws_new}) cudaFree(t);
}

int main(int argc, char **argv) {
    const int fp8 = argc > 1 && !strcmp(argv[1], "fp8");
    if (argc < 2 || (!fp8 && strcmp(argv[1], "bf16")) || (!fp8 && argc < 3)) {
        fprintf(stderr, "usage: %s fp8 [D] | bf16 D [causal]\n", argv[0]);
        return 2;
    }
    const int D = argc > 2 ? atoi(argv[2]) : 128, only_causal = !fp8 && argc > 3 ? atoi(argv[3]) : -1;
    const int fp8_cells[][2] = {{16, 1024}, {4, 4096}, {2, 8192}, {1, 16384}};
    const int bf16_cells[][2] = {{32, 512}, {16, 1024}, {8, 2048}, {4, 4096}, {2, 8192}, {1, 16384}};
    const bool control = getenv("SM90_AB_CONTROL") && atoi(getenv("SM90_AB_CONTROL"));
    if (control) printf("control: the base build in both columns\n");
    printf("dtype D    causal batch  seqlen | base      this      | this/base (TFLOP/s)\n");
    for (int causal = 0; causal < 2; ++causal) {
        if (only_causal >= 0 && causal != only_causal) continue;
        if (fp8)
            for (auto &c : fp8_cells) cell(1, c[0], c[1], 2048 / D, D, causal, control);
        else
            for (auto &c : bf16_cells) cell(0, c[0], c[1], 2048 / D, D, causal, control);
    }
    return 0;
}
