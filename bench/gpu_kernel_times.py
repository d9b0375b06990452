#!/usr/bin/env python3
"""GPU time of the kernels of one forward (or, with --pass bwd, backward)
call, ours against torch SDPA's CUDNN_ATTENTION backend, from
torch.profiler (CUPTI): each contender settles
for 150 ms on its own, then 30 calls run back to back under the profiler and
the durations of every kernel and memset they launch are summed per call.

This leaves out what lies between kernels (launch gaps, host work the GPU
waits for), which bench/gpu_vs_torch.py's timings include; comparing the two
says how much of a cell's ratio is the kernels and how much the calls. Two
more figures per contender say where the difference lies: the span of the
profiled calls on the GPU (first kernel's start to last kernel's end, per
call: the kernels and the gaps between them), and the same 30 calls timed
with CUDA events without the profiler, right after.

    python3 bench/gpu_kernel_times.py [--lib build/libflashattn.so] [--pass bwd]
        [--cells D:causal:B:S,...] [--verbose]

With --verbose each contender's kernels are listed with their median
durations: for the backward, how much of a call is the main kernel and how
much the passes around it (row statistics, dQ's zeroing and conversion).
"""
import argparse
import os
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from gpu_vs_torch import FlashAttn, flops_fwd, fwd_against_cudnn, settle, time_ms  # noqa: E402

# (head dim, batch, seqlen, causal): the standard grid's cells up to 2k and one at 4k
CELLS = [(64, 32, 512, True), (64, 16, 1024, True), (64, 8, 2048, True), (64, 32, 512, False),
         (64, 16, 1024, False), (128, 16, 1024, False), (128, 8, 2048, False), (128, 32, 512, True),
         (256, 16, 1024, False), (256, 8, 2048, False), (256, 4, 4096, False), (256, 32, 512, True),
         (256, 16, 1024, True)]
CALLS = 30


def bwd_against_cudnn(lib, B, S, H, D, causal):
    """Our backward and torch's CUDNN_ATTENTION backward (autograd through
    SDPA) of one fresh bf16 problem, as two callables on torch's current
    stream; both start from their own forward's output and lse."""
    dev = torch.device("cuda")
    q, k, v, dout = (torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16) for _ in range(4))
    out, lse = torch.empty_like(q), torch.empty(B, H, S, device=dev, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    lib.use_current_stream()
    lib.fwd(q, k, v, causal, out, lse)()
    bwd = lib.bwd(dout, q, k, v, out, lse, causal, dq, dk, dv)
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_(True) for x in (q, k, v))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    doutt = dout.transpose(1, 2)

    def ours(keep=(q, k, v, dout, out, lse, dq, dk, dv)):  # holds the memory bwd's views point into
        bwd()

    def cudnn():
        torch.autograd.grad(o, (qt, kt, vt), doutt, retain_graph=True)
    return ours, cudnn


def parse_cells(text):
    """D:causal:B:S,... (causal 0 or 1) as kernel_times' (D, B, S, causal) tuples."""
    cells = []
    for c in text.split(","):
        d, causal, b, s = (int(x) for x in c.split(":"))
        cells.append((d, b, s, bool(causal)))
    return cells


def kernel_us_per_call(fn):
    """Per call: summed GPU durations, the GPU span (kernels and the gaps
    between them) under the profiler, and the time of the same number of
    calls by CUDA events without it; and a short list of what ran."""
    settle(fn, 150.0)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    by_name = {}
    first, last = float("inf"), float("-inf")
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by_name.setdefault(e.name, []).append(e.device_time_total)
            first = min(first, e.time_range.start)  # microseconds, on the GPU's timeline
            last = max(last, e.time_range.end)
    total = sum(sum(v) for v in by_name.values()) / CALLS
    span = (last - first) / CALLS
    events = time_ms(fn, CALLS) * 1e3  # gpu_vs_torch's back-to-back timing
    what = "; ".join("%s x%d median %.1f us" % (n[:70], len(v), statistics.median(v)) for n, v in by_name.items())
    return total, span, events, what


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libflashattn.so"))
    ap.add_argument("--verbose", action="store_true", help="print the kernels each contender ran")
    ap.add_argument("--pass", dest="which", choices=("fwd", "bwd"), default="fwd",
                    help="time the forward (default) or the backward")
    ap.add_argument("--cells", help="D:causal:B:S,... (default: the grid's short cells listed in CELLS)")
    args = ap.parse_args()
    lib = FlashAttn(args.lib, "cuda")
    cells = parse_cells(args.cells) if args.cells else CELLS
    against = bwd_against_cudnn if args.which == "bwd" else fwd_against_cudnn
    work = 2.5 if args.which == "bwd" else 1.0  # the backward's FLOPs, as in gpu_vs_torch
    print("us per call: kernels (summed durations) / span (kernels and gaps, profiled) / events (not profiled)")
    print("%-4s %-9s %-6s | %-23s %9s | %-23s %9s | %s" % ("D", "B x S", "causal", "ours us", "TFLOP/s", "cuDNN us",
                                                           "TFLOP/s", "cuDNN kernels / ours"))
    for D, B, S, causal in cells:
        H = 2048 // D
        ours, cudnn = against(lib, B, S, H, D, causal)
        fl = flops_fwd(B, H, S, D, causal) * work
        t_ours, s_ours, e_ours, what_ours = kernel_us_per_call(ours)
        t_cudnn, s_cudnn, e_cudnn, what_cudnn = kernel_us_per_call(cudnn)
        print("%-4d %-9s %-6s | %7.1f %7.1f %7.1f %9.0f | %7.1f %7.1f %7.1f %9.0f | %.3f" % (
            D, "%dx%d" % (B, S), "yes" if causal else "no", t_ours, s_ours, e_ours, fl / t_ours / 1e6, t_cudnn,
            s_cudnn, e_cudnn, fl / t_cudnn / 1e6, t_cudnn / t_ours))
        if args.verbose:
            print("    ours:  " + what_ours)
            print("    cuDNN: " + what_cudnn)


if __name__ == "__main__":
    main()
