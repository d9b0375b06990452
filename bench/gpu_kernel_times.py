#!/usr/bin/env python3
"""GPU time of the kernels of one forward call, ours against torch SDPA's
CUDNN_ATTENTION backend, from torch.profiler (CUPTI): each contender settles
for 150 ms on its own, then 30 calls run back to back under the profiler and
the durations of every kernel and memset they launch are summed per call.

This leaves out what lies between kernels (launch gaps, host work the GPU
waits for), which bench/gpu_vs_torch.py's timings include; comparing the two
says how much of a cell's ratio is the kernels and how much the calls. Two
more figures per contender say where the difference lies: the span of the
profiled calls on the GPU (first kernel's start to last kernel's end, per
call: the kernels and the gaps between them), and the same 30 calls timed
with CUDA events without the profiler, right after.

    python3 bench/gpu_kernel_times.py [--lib build/libflashattn.so]
"""
import argparse
import os
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_vs_torch import FlashAttn, flops_fwd, fwd_against_cudnn, settle, time_ms  # noqa: E402

# (head dim, batch, seqlen, causal): the standard grid's cells up to 2k and one at 4k
CELLS = [(64, 32, 512, True), (64, 16, 1024, True), (64, 8, 2048, True), (64, 32, 512, False),
         (64, 16, 1024, False), (128, 16, 1024, False), (128, 8, 2048, False), (128, 32, 512, True),
         (256, 16, 1024, False), (256, 8, 2048, False), (256, 4, 4096, False), (256, 32, 512, True),
         (256, 16, 1024, True)]
CALLS = 30


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
    args = ap.parse_args()
    lib = FlashAttn(args.lib, "cuda")
    print("us per call: kernels (summed durations) / span (kernels and gaps, profiled) / events (not profiled)")
    print("%-4s %-9s %-6s | %-23s %9s | %-23s %9s | %s" % ("D", "B x S", "causal", "ours us", "TFLOP/s", "cuDNN us",
                                                           "TFLOP/s", "cuDNN kernels / ours"))
    for D, B, S, causal in CELLS:
        H = 2048 // D
        ours, cudnn = fwd_against_cudnn(lib, B, S, H, D, causal)
        fl = flops_fwd(B, H, S, D, causal)
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
