#!/usr/bin/env python3
"""Sustained throughput, clock and power of our forward against torch's cuDNN
backend: each contender runs alone, back to back, for --seconds while
nvidia-smi samples the SM clock and board power every 20 ms; the figures are
taken over the last two thirds of each window, once the clock has settled at
the power cap (docs/perf/sm90.md, item 30).

    python3 bench/gpu_sustained.py [--lib build/libflashattn.so] [--seconds 1.5]
                                   [--cells 128:0:1:16384,128:0:4:4096,64:1:16:1024]

A cell is D:causal:batch:seqlen (hidden 2048, bf16). Prints, per contender and
cell, the TFLOP/s of its first 20 calls and of the settled part, and the mean
SM clock (MHz) and power (W) nvidia-smi read over the settled part.
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import gpu_vs_torch as g  # noqa: E402


def read_samples(path):
    """(time of day, MHz, W) rows of an nvidia-smi CSV (timestamp, clocks.sm, power.draw)."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = [x.strip() for x in line.split(",")]
            try:
                ts = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
                rows.append((ts, float(parts[1].split()[0]), float(parts[2].split()[0])))
            except (ValueError, IndexError):
                pass  # header or a sample nvidia-smi could not read
    return rows


def window_means(rows, t0, t1):
    """Mean clock and power over the last two thirds of [t0, t1]."""
    sel = [r for r in rows if t0 <= r[0] <= t1]
    sel = sel[len(sel) // 3:]
    if not sel:
        return float("nan"), float("nan")
    return statistics.mean(r[1] for r in sel), statistics.mean(r[2] for r in sel)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libflashattn.so"))
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--cells", default="128:0:1:16384,128:0:4:4096,64:1:16:1024")
    args = ap.parse_args()

    lib = g.FlashAttn(args.lib, "cuda")
    samples = tempfile.NamedTemporaryFile(mode="w", suffix=".csv", delete=False)
    csv = samples.name
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader",
                            "-lms", "20"], stdout=samples, stderr=subprocess.DEVNULL)
    windows = []
    try:
        for cell in args.cells.split(","):
            D, causal, B, S = (int(x) for x in cell.split(":"))
            H = 2048 // D
            ours, cudnn = g.fwd_against_cudnn(lib, B, S, H, D, bool(causal))
            flops = g.flops_fwd(B, H, S, D, bool(causal))
            for name, fn in (("ours", ours), ("cudnn", cudnn)):
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                time.sleep(0.3)  # the same (idle) start for every contender
                t0, times = datetime.datetime.now(), []
                end = time.time() + args.seconds
                while time.time() < end:
                    times.append(g.time_ms(fn, 20))
                windows.append((cell, name, t0, datetime.datetime.now(), flops / times[0] / 1e9,
                                flops / statistics.median(times[len(times) // 3:]) / 1e9))
            del ours, cudnn, fn  # the problem's tensors, held by the two callables
            torch.cuda.empty_cache()
    finally:
        time.sleep(0.1)
        smi.terminate()
        smi.wait()
        samples.close()
    rows = read_samples(csv)
    os.unlink(csv)
    print("%-16s %-6s %12s %14s %8s %6s" % ("D:causal:B:S", "who", "first 20 TF", "settled TF", "MHz", "W"))
    for cell, name, t0, t1, first, settled in windows:
        mhz, watts = window_means(rows, t0, t1)
        print("%-16s %-6s %12.0f %14.0f %8.0f %6.0f" % (cell, name, first, settled, mhz, watts))


if __name__ == "__main__":
    main()
