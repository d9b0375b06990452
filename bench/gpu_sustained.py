#!/usr/bin/env python3
"""Sustained throughput, clock and power of our forward against torch's cuDNN
backend: each contender runs alone, back to back, for --seconds while
nvidia-smi samples the SM clock and board power every 20 ms; the figures are
taken over the last two thirds of each window, once the clock has settled at
the power cap (docs/perf/sm90.md, item 30).

    python3 bench/gpu_sustained.py [--lib build/libflashattn.so] [--seconds 1.5]
                                   [--cells 128:0:1:16384,128:0:4:4096,64:1:16:1024 | --grid]
                                   [--trace 100] [--gap-s 0.3] [--ab B.so] [--rounds 1]

A cell is D:causal:batch:seqlen (hidden 2048, bf16). Prints, per contender and
cell, the TFLOP/s of its first 20 calls and of the settled part, and the mean
SM clock (MHz) and power (W) nvidia-smi read over the settled part.

With --trace MS each cell also gets the window cut into MS-millisecond slices:
both contenders' TFLOP/s, clock and power slice by slice from the start of
their load, and ours over cuDNN, which shows where in a load the ratio moves
(bench/gpu_vs_torch.py times each cell ~0.15-0.2 s into a contender's load).
--gap-s sets the idle time before each contender (0: straight after the one
before, as in the grid).

--ab B.so adds a second build of the library as a third contender ("ours_b"),
and --rounds N times every cell N times, the contenders' order reversed every
other round: a settled A/B of two builds beside cuDNN. Where the grid's short
timings move by several percent from run to run, the settled figures of one
build agree within 1-4% across cards (docs/perf/sm90.md, item 151).

torch's cuDNN forward here runs outside autograd, so it computes no lse;
ours writes its lse unless --no-lse (--ab-no-lse for ours_b: the same
library as --lib and --ab, with --ab-no-lse, times what the lse costs).

--grid times the whole standard grid of bench/gpu_vs_torch.py (36 cells,
about 2.5 minutes) instead of --cells. A cell's settled ratio, ours over
cuDNN, is each one's throughput at its own clock under sustained load; a
table of them follows the summary, with the count of cells at the bar
(1.05x cuDNN) and the lowest.

With --reasons the summary also gives the instantaneous power and the share
of samples in which each clock event reason nvidia-smi reports was active
(software power cap, hardware slowdown, power brake, software and hardware
thermal slowdown): what held the clock where it was. Read only.
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


# clock event reasons read with --reasons (nvidia-smi's field names)
REASONS = ("sw_power_cap", "hw_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown")


def read_samples(path):
    """(time of day, MHz, W, instant W or NaN, reasons active) rows of an
    nvidia-smi CSV (timestamp, clocks.sm, power.draw[, power.draw.instant[,
    one column per REASONS entry]])."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = [x.strip() for x in line.split(",")]
            try:
                ts = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
                instant = float(parts[3].split()[0]) if len(parts) > 3 else float("nan")
                active = tuple(x.lower() == "active" for x in parts[4:])
                rows.append((ts, float(parts[1].split()[0]), float(parts[2].split()[0]), instant, active))
            except (ValueError, IndexError):
                pass  # header or a sample nvidia-smi could not read
    return rows


def settled_samples(rows, t0, t1):
    """The samples of the last two thirds of [t0, t1]."""
    sel = [r for r in rows if t0 <= r[0] <= t1]
    return sel[len(sel) // 3:]


def window_means(rows, t0, t1):
    """Mean clock and (averaged) power over the last two thirds of [t0, t1]."""
    sel = settled_samples(rows, t0, t1)
    if not sel:
        return float("nan"), float("nan")
    return statistics.mean(r[1] for r in sel), statistics.mean(r[2] for r in sel)


def reason_shares(rows, t0, t1):
    """Mean instantaneous power, and the share of samples with each of
    REASONS active, over the last two thirds of [t0, t1]."""
    sel = settled_samples(rows, t0, t1)
    if not sel:
        return float("nan"), [float("nan")] * len(REASONS)
    return (statistics.mean(r[3] for r in sel),
            [sum(len(r[4]) > i and r[4][i] for r in sel) / len(sel) for i in range(len(REASONS))])


def grid_cells():
    """The standard grid as D:causal:batch:seqlen cells, in the grid's order."""
    return ["%d:%d:%d:%d" % (D, causal, B, S)
            for D in g.GRID_DIMS for causal in (0, 1) for B, S in g.GRID_SIZES]


def settled_figures(windows):
    """(cell, {contender: settled TFLOP/s, the median over its rounds}) per
    cell, in the order timed."""
    by_cell = {}
    for cell, name, _t0, _t1, _first, settled, _trace in windows:
        by_cell.setdefault(cell, {}).setdefault(name, []).append(settled)
    return [(cell, {n: statistics.median(v) for n, v in tf.items()}) for cell, tf in by_cell.items()]


def bar_line(figures, name="ours"):
    """The bar's summary of a contender's settled figures against cuDNN's."""
    ratios = [(tf[name] / tf["cudnn"], cell) for cell, tf in figures if name in tf and "cudnn" in tf]
    lo, cell = min(ratios)
    return "# settled, %s: %d of %d cells at >= %.2fx cuDNN; lowest %.3f (%s)" % (
        name, sum(r >= g.BAR for r, _ in ratios), len(ratios), g.BAR, lo, cell)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libflashattn.so"))
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--cells", default="128:0:1:16384,128:0:4:4096,64:1:16:1024")
    ap.add_argument("--grid", action="store_true", help="the standard grid's 36 cells instead of --cells")
    ap.add_argument("--trace", type=float, default=0.0, help="slice width in ms for a trace of each window (0: none)")
    ap.add_argument("--gap-s", type=float, default=0.3, help="idle seconds before each contender's window")
    ap.add_argument("--ab", metavar="B.so", help="a second build, timed as a third contender (ours_b)")
    ap.add_argument("--rounds", type=int, default=1, help="times each cell is timed, the order reversed every other")
    ap.add_argument("--no-lse", action="store_true",
                    help="ours writes no lse, as torch's cuDNN forward writes none outside autograd")
    ap.add_argument("--ab-no-lse", action="store_true", help="ours_b writes no lse (--ab)")
    ap.add_argument("--reasons", action="store_true",
                    help="also the instantaneous power and the share of samples each clock event reason was active")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds: at least 1")

    lib = g.FlashAttn(args.lib, "cuda")
    lib_b = g.FlashAttn(args.ab, "cuda") if args.ab else None
    samples = tempfile.NamedTemporaryFile(mode="w", suffix=".csv", delete=False)
    csv = samples.name
    # power.draw is averaged over about a second on recent drivers; a trace
    # and --reasons also ask for the instantaneous reading
    fields = "timestamp,clocks.sm,power.draw" + (",power.draw.instant" if args.trace > 0 or args.reasons else "")
    if args.reasons:
        fields += "".join(",clocks_event_reasons." + r for r in REASONS)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=" + fields, "--format=csv,noheader", "-lms", "20"],
                           stdout=samples, stderr=subprocess.DEVNULL)
    windows = []
    try:
        cells = grid_cells() if args.grid else args.cells.split(",")
        for r, cell in ((r, c) for r in range(args.rounds) for c in cells):
            D, causal, B, S = (int(x) for x in cell.split(":"))
            H = 2048 // D
            problem = g.fwd_problem(B, S, H, D)  # every contender runs the same inputs
            fns = [("ours", g.ours_fwd(lib, problem, bool(causal), lse=not args.no_lse))]
            if lib_b:
                fns.append(("ours_b", g.ours_fwd(lib_b, problem, bool(causal), lse=not args.ab_no_lse)))
            fns.append(("cudnn", g.cudnn_fwd(problem, bool(causal))))
            flops = g.flops_fwd(B, H, S, D, bool(causal))
            for name, fn in fns if r % 2 == 0 else fns[::-1]:
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                time.sleep(args.gap_s)  # the same start for every contender (idle unless --gap-s 0)
                t0, times, starts = datetime.datetime.now(), [], []
                start = time.time()
                end = start + args.seconds
                while time.time() < end:
                    starts.append(time.time() - start)
                    times.append(g.time_ms(fn, 20))
                windows.append((cell, name, t0, datetime.datetime.now(), flops / times[0] / 1e9,
                                flops / statistics.median(times[len(times) // 3:]) / 1e9,
                                [(a, flops / b / 1e9) for a, b in zip(starts, times)]))
            del problem, fn, fns  # the problem's tensors, held by the callables too
            torch.cuda.empty_cache()
    finally:
        time.sleep(0.1)
        smi.terminate()
        smi.wait()
        samples.close()
    rows = read_samples(csv)
    os.unlink(csv)
    print("%-16s %-6s %12s %14s %8s %6s" % ("D:causal:B:S", "who", "first 20 TF", "settled TF", "MHz", "W") +
          ("  %6s  %s" % ("W inst", " ".join(REASONS)) if args.reasons else ""))
    for cell, name, t0, t1, first, settled, _ in windows:
        mhz, watts = window_means(rows, t0, t1)
        line = "%-16s %-6s %12.0f %14.0f %8.0f %6.0f" % (cell, name, first, settled, mhz, watts)
        if args.reasons:
            instant, shares = reason_shares(rows, t0, t1)
            line += "  %6.0f  %s" % (instant, " ".join("%*.2f" % (len(r), x) for r, x in zip(REASONS, shares)))
        print(line)
    figures = settled_figures(windows)
    if figures:
        ab = lib_b is not None
        print("\n%-16s %9s %9s %11s" % ("D:causal:B:S", "ours TF", "cuDNN TF", "ours/cuDNN") +
              (" %9s %13s %9s" % ("B TF", "ours_b/cuDNN", "B/A") if ab else ""))
        for cell, tf in figures:
            line = "%-16s %9.1f %9.1f %11.3f" % (cell, tf["ours"], tf["cudnn"], tf["ours"] / tf["cudnn"])
            if ab:
                line += " %9.1f %13.3f %9.3f" % (tf["ours_b"], tf["ours_b"] / tf["cudnn"], tf["ours_b"] / tf["ours"])
            print(line)
        print(bar_line(figures))
        if ab:
            print(bar_line(figures, "ours_b"))
    if args.trace > 0:
        print_traces(windows, rows, args.trace / 1000.0, args.seconds)


def slice_means(trace, rows, t0, lo, hi):
    """Mean TFLOP/s of the timings that started in [lo, hi) seconds into a
    window, and the mean clock and instantaneous power nvidia-smi read in
    that slice."""
    tf = [v for a, v in trace if lo <= a < hi]
    sel = [r for r in rows if lo <= (r[0] - t0).total_seconds() < hi]
    return (statistics.mean(tf) if tf else float("nan"), statistics.mean(r[1] for r in sel) if sel else float("nan"),
            statistics.mean(r[3] for r in sel) if sel else float("nan"))


def print_traces(windows, rows, width, seconds):
    """Per cell (its last round), ours and cuDNN slice by slice from the start
    of each one's load."""
    by_cell = {}
    for cell, name, t0, _t1, _f, _s, trace in windows:
        by_cell.setdefault(cell, {})[name] = (t0, trace)
    for cell, both in by_cell.items():
        print("\ntrace %s (slices of %.0f ms from the start of each load)" % (cell, width * 1000))
        print("%8s | %7s %6s %5s | %7s %6s %5s | %6s" % ("ms", "ours TF", "MHz", "W", "cuDNN", "MHz", "W", "ratio"))
        lo = 0.0
        while lo < seconds:
            a = slice_means(both["ours"][1], rows, both["ours"][0], lo, lo + width)
            b = slice_means(both["cudnn"][1], rows, both["cudnn"][0], lo, lo + width)
            print("%8.0f | %7.0f %6.0f %5.0f | %7.0f %6.0f %5.0f | %6.3f" % (lo * 1000, *a, *b, a[0] / b[0]))
            lo += width


if __name__ == "__main__":
    main()
