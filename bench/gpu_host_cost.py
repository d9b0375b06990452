#!/usr/bin/env python3
"""Host time of one forward call: flashattn (through ctypes, as
bench/gpu_vs_torch.py calls it) against torch SDPA's CUDNN_ATTENTION backend.

For each problem, --calls calls are issued back to back and timed with the
host clock up to the last call's return ("host"), then once more up to a
synchronise ("with sync"). On a tiny problem the kernels are shorter than
the host work, so "host" is the cost of a call on the CPU; on a large one
"with sync" is the GPU's time per call, and "host" shows how far ahead of
the GPU the caller stays. A timing that starts on an idle GPU counts the
first call's host time once (bench/gpu_vs_torch.py's `stream` timing queues
one untimed call first for that reason).

    python3 bench/gpu_host_cost.py [--lib build/libflashattn.so] [--calls 2000]
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_vs_torch import FlashAttn, fwd_against_cudnn  # noqa: E402

# (batch, seqlen, heads, head dim, causal): a tiny call, and the standard
# grid's shortest causal cell
PROBLEMS = ((1, 128, 1, 64, True), (32, 512, 32, 64, True))


def per_call_us(fn, calls):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return 1e6 * (t1 - t0) / calls, 1e6 * (t2 - t0) / calls


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libflashattn.so"))
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    lib = FlashAttn(args.lib, "cuda")
    print("%-22s %-6s | %13s | %18s" % ("B x S x H x D", "who", "host us/call", "with sync us/call"))
    for B, S, H, D, causal in PROBLEMS:
        ours, cudnn = fwd_against_cudnn(lib, B, S, H, D, causal)
        calls = args.calls if S * S * B * H <= 1 << 20 else max(1, args.calls // 10)
        for who, fn in (("ours", ours), ("cudnn", cudnn)):
            host, synced = per_call_us(fn, calls)
            name = "%dx%dx%dx%d%s" % (B, S, H, D, " causal" if causal else "")
            print("%-22s %-6s | %13.1f | %18.1f" % (name, who, host, synced))


if __name__ == "__main__":
    main()
