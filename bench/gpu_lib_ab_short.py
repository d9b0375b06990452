#!/usr/bin/env python3
"""Two builds of libflashattn against each other, in one process, on head-dim-64
non-causal shapes whose last query tile is short (at most 64 rows on the Hopper
three-consumer kernel: 64 queries over long keys, 1000 = 5 x 192 + 40,
1024 = 5 x 192 + 64, ...) and a few whole-tile controls (docs/perf/sm90.md,
item 109). Per shape: both builds' outputs compared, then three rounds of each
build (150 ms of its own calls first, then the median of 7 timings of 10
back-to-back calls); the median TFLOP/s and B/A are printed.

    python3 bench/gpu_lib_ab_short.py OLD.so NEW.so
"""
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_vs_torch import FlashAttn, settle, time_ms  # noqa: E402

SHAPES = [  # B, Sq, Sk, H
    (1, 64, 16384, 32), (4, 64, 4096, 32), (1, 200, 8192, 32), (8, 1000, 1000, 32),
    (16, 1024, 1024, 32), (4, 4096, 4096, 32), (1, 16384, 16384, 32), (32, 512, 512, 32), (8, 2048, 2048, 32)]
libs = [FlashAttn(p, "cuda") for p in sys.argv[1:3]]
for l in libs: l.use_current_stream()
print("B    Sq     Sk     H  | A TF/s   B TF/s  | B/A")
for B, Sq, Sk, H in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(B + Sq + Sk)
    q = torch.randn(B, Sq, H, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, Sk, H, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, Sk, H, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    outs = [torch.empty_like(q) for _ in libs]
    lse = [torch.empty(B, H, Sq, device="cuda", dtype=torch.float32) for _ in libs]
    fns = [l.fwd(q, k, v, False, o, s) for l, o, s in zip(libs, outs, lse)]
    for f in fns: f()
    torch.cuda.synchronize()
    err = (outs[0].float() - outs[1].float()).abs().max().item()
    fl = 4.0 * B * H * Sq * Sk * 64
    res = [[], []]
    for r in range(3):
        for i, f in enumerate(fns):
            settle(f, 150)
            res[i].append(fl / statistics.median(time_ms(f, 10) for _ in range(7)) / 1e9)
    a, b = statistics.median(res[0]), statistics.median(res[1])
    print("%-4d %-6d %-6d %-2d | %-8.1f %-8.1f| %.3f  (max |A-B| %.2e)" % (B, Sq, Sk, H, a, b, b / a, err))
