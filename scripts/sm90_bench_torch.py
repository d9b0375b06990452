#!/usr/bin/env python3
"""TFLOP/s of torch SDPA (cuDNN and FLASH backends) on the standard forward grid
(hidden 2048, bf16), to print next to scripts/sm90_selftest bench in the same run."""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F


def time_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    # optional filters: [D [causal]]
    only_d = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    only_causal = int(sys.argv[2]) if len(sys.argv) > 2 else -1
    grid = [(32, 512), (16, 1024), (8, 2048), (4, 4096), (2, 8192), (1, 16384)]
    print("%-6s %-6s %-6s %-6s %-10s %-10s" % ("D", "causal", "batch", "seqlen", "cudnn", "flash"))
    for d in (64, 128, 256):
        for causal in (0, 1):
            for b, s in grid:
                if (only_d and d != only_d) or (only_causal >= 0 and causal != only_causal):
                    continue
                h = 2048 // d
                # (B, S, H, D) storage viewed as (B, H, S, D), as the library's layout
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                           for _ in range(3))
                flops = 4.0 * b * h * s * s * d / (2 if causal else 1)
                res = []
                for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
                    try:
                        with sdpa_kernel([be]):
                            ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)))
                        res.append("%.1f" % (flops / ms / 1e9))
                    except Exception:
                        res.append("n/a")
                print("%-6d %-6d %-6d %-6d %-10s %-10s" % (d, causal, b, s, res[0], res[1]), flush=True)


if __name__ == "__main__":
    main()
