#!/usr/bin/env python3
"""Builds of libflashattn against each other through the library, each beside
torch's cuDNN in the same run: `bench/gpu_vs_torch.py` runs for build A, then
B (then C, ...), then A again, ... (separate processes, `--rounds` each), and
the forward TFLOP/s of every cell are printed side by side with each later
build over A and each build's ratio against cuDNN. Kernel-level A/Bs
(`scripts/sm90_ab.sh`) time both builds in one process on their own inputs;
this one times what a caller gets, which for short cells can differ by
several percent (docs/perf/sm90.md, item 78).

    python3 bench/gpu_lib_ab.py OLD.so NEW.so [--rounds 2] -- --dims 256 --no-bwd
    python3 bench/gpu_lib_ab.py OLD.so NEW.so OTHER.so --rounds 4 -- --dims 64 --causal yes --no-bwd
    python3 bench/gpu_lib_ab.py OLD.so NEW.so --pass bwd -- --dims 128

Arguments after `--` go to gpu_vs_torch.py (`--timing stream` unless given).
`--pass bwd` compares the backward's TFLOP/s instead (don't pass --no-bwd)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(lib, extra, out):
    cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "gpu_vs_torch.py"), "--lib", lib, "--out", out]
    subprocess.run(cmd + extra, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "gpu_vs_torch.json")) as f:
        return json.load(f)["rows"]


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("libs", nargs="+", metavar="LIB", help="two or more builds; the first is the base (A)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each build, alternating")
    ap.add_argument("--pass", dest="which", choices=("fwd", "bwd"), default="fwd", help="which pass to compare")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if len(args.libs) < 2:
        ap.error("give at least two builds")
    if "--timing" not in extra:
        extra += ["--timing", "stream"]
    timing = extra[extra.index("--timing") + 1]
    if timing == "both":
        sys.exit("gpu_lib_ab: give one timing (stream or single)")
    tags = [chr(ord("A") + i) for i in range(len(args.libs))]
    cells = {}  # (D, B, S, causal) -> {tag: [(ours, cudnn)] per round}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for tag, lib in zip(tags, args.libs):
                for row in run(lib, extra, os.path.join(tmp, f"{tag}{r}")):
                    res = row["results"]
                    key = (row["D"], row["B"], row["S"], row["causal"])
                    field = f"{args.which}_tflops"
                    pair = (res["ours"][timing][field], res["cudnn"][timing][field])
                    cells.setdefault(key, {t: [] for t in tags})[tag].append(pair)
    for tag, lib in zip(tags, args.libs):
        print(f"# {tag} = {lib}")
    print(f"# {args.rounds} rounds each, {timing} timing, {'forward' if args.which == 'fwd' else 'backward'} TFLOP/s")
    print("D    B x S     causal | " + " | ".join(f"{t} ours (each round)  " for t in tags) + " | " +
          " | ".join(f"{t}/A   " for t in tags[1:]) + " | " + " | ".join(f"{t}/cuDNN" for t in tags))
    for (d, b, s, causal), v in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][3], kv[0][2])):
        med = {t: statistics.median(x for x, _ in v[t]) for t in tags}
        vs = {t: statistics.median(x / c for x, c in v[t]) for t in tags}
        runs = " | ".join(f"{' '.join(f'{x:.0f}' for x, _ in v[t]):<21s}" for t in tags)
        size = f"{b}x{s}"
        print(f"{d:<4d} {size:<9s} {'yes' if causal else 'no':<6s} | {runs} | " +
              " | ".join(f"{med[t] / med['A']:.3f} " for t in tags[1:]) + " | " +
              " | ".join(f"{vs[t]:.3f}  " for t in tags))


if __name__ == "__main__":
    main()
