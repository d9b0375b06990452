#!/usr/bin/env python3
"""flashattn's float8 e4m3 forward (CUDA backend, Hopper) through the C API,
beside two references timed in the same process:

  gemm   torch._scaled_mm on e4m3 (8192 x 8192 x 8192, bf16 out): the rate
         the tensor cores sustain on float8 at the power cap, a ceiling that
         attention (with its softmax between the two products) stays under;
  cudnn  PyTorch SDPA's CUDNN_ATTENTION backend in bf16 on the same shape
         (torch has no float8 attention).

Shapes: head dim 128, 16 heads (--head-dims picks others, with 2048 / D
heads rounded down), (batch, seqlen) = (16,1k) (4,4k) (2,8k) (1,16k)
(--seqlens picks others: batch x seqlen = 16k), causal and not
(--causal no|yes picks one); q, k, v standard normal in e4m3 (no descales),
bf16 output. A cell is timed in --passes passes (default 4), ours then
cuDNN, then cuDNN then ours, in turn; in each pass a contender first runs on
its own for --settle-ms, then takes --reps timings of --burst back-to-back
calls each. The median over all passes' timings is reported, and beside it
the lowest and highest pass median: the H200's clock dips at its power cap
(5-12% for 100-200 ms about once a second, docs/perf/sm90.md item 125) can
cover one pass of a contender, and the median of several passes keeps the
reading off it.
The GEMM ceiling is timed after the attention cells: timed first, it left
the board so hot that the first cell, e4m3 at 512, read anywhere from 468
to 639 TFLOP/s from run to run after its 300 ms of settling, against a
steady 655-662 with nothing before it (docs/perf/sm90.md, item 119).
The e4m3 call includes its V transpose. FLOPs: 4*B*H*S*S*D (halved for
causal). With --varlen a third contender is timed: ours on the same batch
packed as B equal-length sequences (fa_varlen_fwd, the same FLOPs), printed
with its ratio to the batched call.

    python3 bench/gpu_fp8.py [--lib build/libflashattn.so] [--seqlens 512,1024] [--causal no] [--varlen]
                             [--head-dims 128,256]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_vs_torch import MASKS, FlashAttn, flops_fwd, pass_medians, pooled_median, time_passes  # noqa: E402


def gemm_tflops(reps, burst, settle_ms):
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
    one = torch.ones((), device="cuda")
    fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    per_pass = time_passes({"gemm": fn}, (("gemm",),), 1, reps, burst, settle_ms)["gemm"]  # one settled pass
    return 2.0 * n * n * n / pooled_median(per_pass) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build/libflashattn.so")
    ap.add_argument("--reps", type=int, default=10, help="timings per contender and pass")
    ap.add_argument("--passes", type=int, default=4, help="passes over a cell's two contenders (see above)")
    ap.add_argument("--burst", type=int, default=10)
    ap.add_argument("--settle-ms", type=float, default=300.0)
    ap.add_argument("--seqlens", default="1024,4096,8192,16384", help="sequence lengths (batch = 16384 / seqlen)")
    ap.add_argument("--causal", choices=sorted(MASKS), default="both", help="which masks to time")
    ap.add_argument("--varlen", action="store_true", help="also time the batch packed as varlen sequences")
    ap.add_argument("--head-dims", default="128", help="head dims (heads = 2048 / D, rounded down)")
    args = ap.parse_args()
    lib = FlashAttn(args.lib, "cuda")
    lib.use_current_stream()
    print("# %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__))
    rows = []  # (D, causal, B, S, ours, cuDNN): printed once the GEMM ceiling is known
    seqlens = [int(x) for x in args.seqlens.split(",")]
    cells = [(D, causal, max(1, 16384 // s), s) for D in (int(x) for x in args.head_dims.split(","))
             for causal in MASKS[args.causal] for s in seqlens]
    for D, causal, B, S in cells:
        H = max(1, 2048 // D)
        gen = torch.Generator(device="cuda").manual_seed(B * 131 + S)
        mk = lambda: torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        q, k, v = mk(), mk(), mk()
        q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
        out = torch.empty(B, S, H, D, device="cuda", dtype=torch.bfloat16)
        lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        ours = lib.fwd(q8, k8, v8, causal, out, lse)
        fns = {"ours": ours}
        if args.varlen:  # (B * S, H, D) rows, B sequences of S; lse (H, B * S)
            cu = torch.arange(0, B * S + 1, S, device="cuda", dtype=torch.int32)
            packed = [x.reshape(B * S, H, D) for x in (q8, k8, v8)]
            out_p = torch.empty(B * S, H, D, device="cuda", dtype=torch.bfloat16)
            lse_p = torch.empty(H, B * S, device="cuda", dtype=torch.float32)
            fns["varlen"] = lib.varlen_fwd(*packed, cu, cu, S, S, causal, out_p, lse_p)
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        fl = flops_fwd(B, H, S, D, causal)
        fns["cudnn"] = cudnn
        names = tuple(fns)
        times = time_passes(fns, (names, names[::-1]), args.passes, args.reps, args.burst, args.settle_ms)
        tf = {}  # TFLOP/s: the pooled figure, then each pass's
        for n, per_pass in times.items():
            tf[n] = [fl / ms / 1e9 for ms in [pooled_median(per_pass)] + pass_medians(per_pass)]
        rows.append((D, causal, B, S, tf["ours"][0], tf["cudnn"][0]))
        print("# head dim %d, causal %d, %d x %d: e4m3 ours %.1f (passes %.1f-%.1f), bf16 cuDNN %.1f (passes %.1f-%.1f) "
              "TFLOP/s" % (D, causal, B, S, tf["ours"][0], min(tf["ours"][1:]), max(tf["ours"][1:]),
                           tf["cudnn"][0], min(tf["cudnn"][1:]), max(tf["cudnn"][1:])))
        if args.varlen:
            print("# head dim %d, causal %d, %d x %d: e4m3 ours packed as varlen %.1f (passes %.1f-%.1f) TFLOP/s, "
                  "%.3f of batched" % (D, causal, B, S, tf["varlen"][0], min(tf["varlen"][1:]),
                                       max(tf["varlen"][1:]), tf["varlen"][0] / tf["ours"][0]))
        sys.stdout.flush()
    gemm = gemm_tflops(args.reps, args.burst, args.settle_ms)
    print("# e4m3 GEMM ceiling (torch._scaled_mm, 8192^3, timed last): %.0f TFLOP/s" % gemm)
    print("%-4s %-6s %-6s %-6s | %-10s %-10s %-10s | %-8s %-8s" %
          ("D", "causal", "batch", "seqlen", "e4m3 ours", "bf16 cuDNN", "GEMM", "vs cuDNN", "of GEMM"))
    for D, causal, B, S, t_ours, t_cudnn in rows:
        print("%-4d %-6d %-6d %-6d | %-10.1f %-10.1f %-10.0f | %-8.3f %-8.3f" %
              (D, causal, B, S, t_ours, t_cudnn, gemm, t_ours / t_cudnn, t_ours / gemm))


if __name__ == "__main__":
    main()
