#!/usr/bin/env python3
"""Where one forward cell's instructions go, ours beside cuDNN's, from
Nsight Compute's per-SASS-instruction counters.

Two steps, the first on a machine with the GPU and `ncu`:

    python3 bench/gpu_ncu_cell.py profile --lib build/libflashattn.so \\
        --dim 64 --batch 32 --seqlen 512 --causal --out DIR
        # runs ncu (SourceCounters, clocks left alone) on one of our forward
        # calls and one of cuDNN's (torch SDPA), after three warm-up calls,
        # and writes DIR/{ours,cudnn}.csv (ncu's source page, SASS)

    python3 bench/gpu_ncu_cell.py summary DIR/ours.csv [DIR/cudnn.csv ...]
        # per file: warp instructions executed, by opcode, and the runs of
        # consecutive instructions that execute equally often (a loop body,
        # or code that runs once a tile) with their share of the total

The runs tell per-tile code from per-block code by their counts: in a
persistent kernel an instruction that runs once a tile executes (tiles x
warps) times, one in the kv-block loop (blocks x warps) times.
docs/perf/sm90.md item 98 read the two-consumer head-dim-64 kernel this way.
"""
import argparse
import collections
import csv
import os
import shutil
import subprocess
import sys


def profile(args):
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    os.makedirs(args.out, exist_ok=True)
    for who, kernel in (("ours", "regex:sm90_fwd_kernel"), ("cudnn", "regex:sdpa|fprop|flash")):
        rep = os.path.join(args.out, who)
        cmd = [ncu, "--clock-control", "none", "--section", "SourceCounters", "--section", "WarpStateStats",
               "--section", "SpeedOfLight", "--import-source", "no", "-k", kernel, "--launch-skip", "3",
               "--launch-count", "1", "-f", "-o", rep, sys.executable, os.path.abspath(__file__), "call",
               "--lib", args.lib, "--who", who, "--dim", str(args.dim), "--batch", str(args.batch),
               "--seqlen", str(args.seqlen)] + (["--causal"] if args.causal else [])
        subprocess.run(cmd, check=True)
        with open(rep + ".csv", "w") as f:
            subprocess.run([ncu, "-i", rep + ".ncu-rep", "--page", "source", "--csv", "--print-source", "sass"],
                           stdout=f, check=True)
        with open(rep + "_details.csv", "w") as f:
            subprocess.run([ncu, "-i", rep + ".ncu-rep", "--page", "details", "--csv"], stdout=f, check=True)
        print("wrote", rep + ".csv")


def call(args):
    """Four forward calls of one contender (ncu profiles the fourth)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    from gpu_vs_torch import FlashAttn, fwd_against_cudnn
    ours, cudnn = fwd_against_cudnn(FlashAttn(args.lib, "cuda"), args.batch, args.seqlen, 2048 // args.dim,
                                    args.dim, args.causal)
    fn = ours if args.who == "ours" else cudnn
    for _ in range(4):
        fn()
    torch.cuda.synchronize()


def summary(args):
    for path in args.files:
        with open(path) as f:
            rows = list(csv.reader(f))
        header, data = rows[1], rows[2:]  # rows[0] names the kernel
        executed = header.index("Instructions Executed")
        samples = header.index("Warp Stall Sampling (All Samples)")
        counts = [int(r[executed]) for r in data]
        total = sum(counts)
        print("%s: %s\n  %d warp instructions executed, %d SASS instructions" % (path, rows[0][1], total, len(data)))
        by_op = collections.Counter()
        for r, c in zip(data, counts):
            words = r[1].split()
            if words:
                op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
                by_op[op.split(".")[0]] += c
        print("  by opcode: " + ", ".join("%s %.1f%%" % (op, 100.0 * c / total) for op, c in by_op.most_common(16)))
        runs = []  # [first, last, count, samples]
        for i, (r, c) in enumerate(zip(data, counts)):
            if runs and runs[-1][2] == c:
                runs[-1][1] = i
                runs[-1][3] += int(r[samples])
            else:
                runs.append([i, i, c, int(r[samples])])
        print("  runs of equal counts holding >= %.1f%% of the instructions:" % args.min_share)
        for first, last, c, s in runs:
            n = last - first + 1
            if c and 100.0 * n * c / total >= args.min_share:
                print("    %5d-%5d  %4d instructions x %8d = %5.1f%%  samples %5d  first: %s" % (
                    first, last, n, c, 100.0 * n * c / total, s, data[first][1].strip()[:48]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    for name in ("profile", "call"):
        p = sub.add_parser(name)
        p.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libflashattn.so"))
        p.add_argument("--dim", type=int, default=64)
        p.add_argument("--batch", type=int, default=32)
        p.add_argument("--seqlen", type=int, default=512)
        p.add_argument("--causal", action="store_true")
        if name == "profile":
            p.add_argument("--out", default=os.environ.get("OUT", "."))
        else:
            p.add_argument("--who", choices=("ours", "cudnn"), required=True)
    p = sub.add_parser("summary")
    p.add_argument("files", nargs="+")
    p.add_argument("--min-share", type=float, default=0.5, help="smallest run to print, percent of the total")
    args = ap.parse_args()
    {"profile": profile, "call": call, "summary": summary}[args.step](args)


if __name__ == "__main__":
    main()
