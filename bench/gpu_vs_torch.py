#!/usr/bin/env python3
"""flashattn (CUDA backend) against PyTorch SDPA's FLASH_ATTENTION and
CUDNN_ATTENTION backends, in one process, on the standard grid:
hidden 2048, head dim 64/128/256, (batch, seqlen) = (32,512) (16,1k) (8,2k)
(4,4k) (2,8k) (1,16k), causal and not, bf16, forward and backward.

Every cell times each contender with CUDA events on torch's current stream
and reports the median of its timings (--reps per pass). Before its timings each contender
runs on its own for --settle-ms (default 150 ms): the H200 holds its clock at
its power cap, and a kernel timed right after another one starts from the
clock the other left (interleaved with the others, cuDNN's head-dim-128 16k
cell measured 672 TFLOP/s, settled 592; docs/perf/sm90.md, item 30). What
the one before leaves still shows through the settling: at head dim 64
causal 512 and 2k, ours timed first in a cell read 1-2% better against
cuDNN than cuDNN timed first (docs/perf/sm90.md, item 119). So by default
(--order both) each cell is timed in --passes passes (default 4) that
alternate two orders, ours, FA2, cuDNN and then cuDNN, FA2, ours, and the
median is taken over all passes' timings. Several short passes rather than
two long ones: at its power cap the H200 drops its clock by 5-12% for
100-200 ms about once a second (docs/perf/sm90.md, item 125), long enough
to cover one contender's whole pass; with two passes such a dip moved the
pooled median of the contender it fell on by half its depth, with four it
falls on one pass in four and the median stays with the other three. The
JSON keeps each pass's median (fwd_pass_ms, bwd_pass_ms), so the spread
between passes can be read back.
FLOPs: forward 4*B*H*S*S*D (halved for causal), backward 2.5x.

Two timings (--timing):
  stream  events around a run of --burst back-to-back calls, divided by the
          count: the host work of each call (Python, ctypes, torch dispatch,
          our argument checks) overlaps the previous call's kernels, as in a
          training or serving loop (one untimed call goes first, so this
          holds for the first timed one too); this is the kernels'
          throughput.
  single  events around one call after a synchronise: the host time of the
          call is inside the figure (the GPU idles while it runs).
both (the default) prints the two, stream first.

    python3 bench/gpu_vs_torch.py [--quick] [--lib build/libflashattn.so]
                                  [--backend cuda|cuda_sm80] [--timing stream|single|both]
                                  [--dims 64,128,256] [--max-seqlen N] [--no-bwd]
                                  [--causal both|no|yes] [--order both|ours,fa2,cudnn|...]
                                  [--passes N] [--reps N]
                                  [--out DIR]
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

FA_F32, FA_BF16, FA_F8_E4M3, FA_I32 = 0, 2, 3, 4
FA_DEVICE_CUDA = 1
BACKENDS = {"cuda": 3, "cuda_sm80": 4}


class FaTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("device", ctypes.c_int),
                ("device_index", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * 4), ("stride", ctypes.c_int64 * 4)]


class FaOptions(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_float), ("causal", ctypes.c_int), ("use_window", ctypes.c_int),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64), ("align", ctypes.c_int),
                ("softcap", ctypes.c_float), ("alibi_slopes", FaTensor), ("dropout_p", ctypes.c_float),
                ("dropout_seed", ctypes.c_uint64), ("dropout_offset", ctypes.c_uint64),
                ("deterministic", ctypes.c_int), ("q_descale", FaTensor), ("k_descale", FaTensor),
                ("v_descale", FaTensor)]


def fa_view(t):
    """An fa_tensor describing a CUDA torch tensor (no copy)."""
    x = FaTensor()
    x.data = t.data_ptr()
    x.dtype = {torch.bfloat16: FA_BF16, torch.float8_e4m3fn: FA_F8_E4M3, torch.int32: FA_I32}.get(t.dtype, FA_F32)
    x.device = FA_DEVICE_CUDA
    x.device_index = t.device.index or 0
    x.ndim = t.dim()
    for i in range(t.dim()):
        x.shape[i] = t.shape[i]
        x.stride[i] = t.stride(i)
    return x


class FlashAttn:
    def __init__(self, path, backend):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.fa_last_error.restype = ctypes.c_char_p
        L.fa_context_create.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        L.fa_context_set_backend.argtypes = [ctypes.c_void_p, ctypes.c_int]
        L.fa_context_set_cuda_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        P = ctypes.POINTER
        L.fa_fwd.argtypes = [ctypes.c_void_p, P(FaTensor), P(FaTensor), P(FaTensor), P(FaOptions),
                             P(FaTensor), P(FaTensor)]
        L.fa_varlen_fwd.argtypes = [ctypes.c_void_p, P(FaTensor), P(FaTensor), P(FaTensor), P(FaTensor),
                                    P(FaTensor), ctypes.c_int, ctypes.c_int, P(FaOptions), P(FaTensor), P(FaTensor)]
        L.fa_bwd.argtypes = [ctypes.c_void_p, P(FaTensor), P(FaTensor), P(FaTensor), P(FaTensor),
                             P(FaTensor), P(FaTensor), P(FaOptions), P(FaTensor), P(FaTensor), P(FaTensor)]
        self.ctx = ctypes.c_void_p()
        self.check(L.fa_context_create(ctypes.byref(self.ctx)))
        self.check(L.fa_context_set_backend(self.ctx, BACKENDS[backend]))

    def check(self, status):
        if status != 0:
            raise RuntimeError("flashattn: status %d: %s" % (status, self.lib.fa_last_error().decode()))

    def use_current_stream(self):
        self.check(self.lib.fa_context_set_cuda_stream(self.ctx, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)))

    def fwd(self, q, k, v, causal, out, lse):
        """A callable running the forward; the argument structs are built
        once, as a C caller would keep them. lse None: none is written."""
        o = FaOptions()
        o.causal = 1 if causal else 0
        a = [fa_view(t) for t in (q, k, v, out)] + [fa_view(lse) if lse is not None else None]
        f, ctx = self.lib.fa_fwd, self.ctx
        return lambda: self.check(f(ctx, a[0], a[1], a[2], o, a[3], a[4]))

    def varlen_fwd(self, q, k, v, cu_q, cu_k, max_q, max_k, causal, out, lse):
        """As fwd, for packed sequences (q (total_q, H, D), cu_seqlens int32)."""
        o = FaOptions()
        o.causal = 1 if causal else 0
        a = [fa_view(t) for t in (q, k, v, cu_q, cu_k, out, lse)]
        f, ctx = self.lib.fa_varlen_fwd, self.ctx
        return lambda: self.check(f(ctx, a[0], a[1], a[2], a[3], a[4], max_q, max_k, o, a[5], a[6]))

    def bwd(self, dout, q, k, v, out, lse, causal, dq, dk, dv):
        o = FaOptions()
        o.causal = 1 if causal else 0
        a = [fa_view(t) for t in (dout, q, k, v, out, lse, dq, dk, dv)]
        f, ctx = self.lib.fa_bwd, self.ctx
        return lambda: self.check(f(ctx, a[0], a[1], a[2], a[3], a[4], a[5], o, a[6], a[7], a[8]))


def time_ms(fn, calls):
    """Milliseconds per call over `calls` back-to-back calls (1: one call
    alone, started on an idle GPU). A run of calls starts with one more,
    untimed: the start event fires once its kernels are done, and by then
    the host has queued the first timed call, so that call's host work
    overlaps the GPU's as every later one's does. Timed from an idle GPU
    instead, the first call's host work counted once per run (with 10 calls
    of ~130 us, ~5% of torch's figure and ~1% of ours: torch's SDPA takes
    ~65 us of host time a call, ours ~13 us)."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if calls > 1:
        fn()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def settle(fn, ms):
    """Run fn back to back for about `ms` milliseconds, so the clock settles
    where this kernel's own power draw puts it."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    n = max(1, int(ms / max(start.elapsed_time(end), 1e-3)))
    for _ in range(n):
        fn()
    torch.cuda.synchronize()


def fwd_problem(B, S, H, D):
    """A fresh bf16 forward problem (B, S, H, D): q, k, v, out and lse."""
    dev = torch.device("cuda")
    q, k, v = (torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
    return q, k, v, torch.empty_like(q), torch.empty(B, H, S, device=dev, dtype=torch.float32)


def ours_fwd(lib, problem, causal, lse=True):
    """Our forward of a fwd_problem, as a callable on torch's current stream
    (lse False: without the lse, as torch's forward outside autograd)."""
    lib.use_current_stream()
    fwd = lib.fwd(*problem[:3], causal, problem[3], problem[4] if lse else None)

    def ours(tensors=problem):  # holds the memory fwd's views point into
        fwd()
    return ours


def cudnn_fwd(problem, causal):
    """torch's CUDNN_ATTENTION forward of a fwd_problem, as a callable."""
    qt, kt, vt = (x.transpose(1, 2) for x in problem[:3])

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    return cudnn


def fwd_against_cudnn(lib, B, S, H, D, causal):
    """Our forward and torch's CUDNN_ATTENTION forward of one fresh bf16
    problem (B, S, H, D), as two callables on torch's current stream."""
    problem = fwd_problem(B, S, H, D)
    return ours_fwd(lib, problem, causal), cudnn_fwd(problem, causal)


def flops_fwd(B, H, S, D, causal):
    f = 4.0 * B * H * S * S * D
    return f / 2 if causal else f


ORDERS = (("ours", "fa2", "cudnn"), ("cudnn", "fa2", "ours"))
# the standard grid: (batch, seqlen) at hidden 2048, for each head dim, causal and not
GRID_SIZES = ((32, 512), (16, 1024), (8, 2048), (4, 4096), (2, 8192), (1, 16384))
GRID_DIMS = (64, 128, 256)
# the bar: our forward at this multiple of cuDNN's or more on every cell
BAR = 1.05
# --causal: the masks each choice times (bench/gpu_fp8.py takes the same option)
MASKS = {"both": (False, True), "no": (False,), "yes": (True,)}


def time_passes(fns, orders, passes, reps, calls, settle_ms):
    """Times the contenders (dict name -> callable) in `passes` passes, the
    orders (tuples of names; names not in fns are passed over) in turn; in
    each pass a contender settles first (see settle), then takes `reps`
    timings of `calls` calls. Per contender, one list of timings a pass."""
    times = {n: [] for n in fns}
    for i in range(passes):
        for n in orders[i % len(orders)]:
            if n in fns:
                settle(fns[n], settle_ms)  # its own clock, not the one the previous contender left
                times[n].append([time_ms(fns[n], calls) for _ in range(reps)])
    return times


def pooled_median(per_pass):
    """The median of all passes' timings together."""
    return statistics.median(t for p in per_pass for t in p)


def pass_medians(per_pass):
    """Each pass's median: the spread a clock dip leaves between passes."""
    return [statistics.median(p) for p in per_pass]


def bench_cell(lib, B, S, D, causal, warmup, reps, do_bwd, modes, burst, settle_ms, orders=ORDERS, passes=4):
    H = 2048 // D
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(B * 131 + S * 7 + D)
    mk = lambda: torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16, generator=gen)
    q, k, v, dout = mk(), mk(), mk(), mk()
    out = torch.empty_like(q)
    lse = torch.empty(B, H, S, device=dev, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # torch wants (B, H, S, D); a transposed view keeps the same memory.
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_(do_bwd) for x in (q, k, v))
    doutt = dout.transpose(1, 2)

    contenders = {"ours": None, "fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    res = {}
    fwd_fns, bwd_fns = {}, {}
    lib.use_current_stream()
    fwd_fns["ours"] = lib.fwd(q, k, v, causal, out, lse)
    if do_bwd:
        bwd_fns["ours"] = lib.bwd(dout, q, k, v, out, lse, causal, dq, dk, dv)
    graphs = {}
    for name, backend in contenders.items():
        if backend is None:
            continue
        try:
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            graphs[name] = o
        except Exception as e:  # a backend that cannot run this cell
            res[name] = {"error": str(e).splitlines()[0][:120]}
            continue

        def f(backend=backend):
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(qt.detach(), kt.detach(), vt.detach(), is_causal=causal)
        fwd_fns[name] = f
        if do_bwd:
            def g(o=o):
                torch.autograd.grad(o, (qt, kt, vt), doutt, retain_graph=True)
            bwd_fns[name] = g

    for kind, fns in (("fwd", fwd_fns), ("bwd", bwd_fns)):
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        fl = flops_fwd(B, H, S, D, causal) * (2.5 if kind == "bwd" else 1.0)
        for mode in modes:
            calls = burst if mode == "stream" else 1
            times = time_passes(fns, orders, passes, reps, calls, settle_ms)  # the timings pooled (see --passes)
            for n, per_pass in times.items():
                ms = pooled_median(per_pass)
                r = res.setdefault(n, {}).setdefault(mode, {})
                r[kind + "_ms"] = ms
                r[kind + "_tflops"] = fl / ms / 1e9
                r[kind + "_pass_ms"] = pass_medians(per_pass)

    # Correctness spot check of our forward against cuDNN/FA2 output on this cell.
    fwd_fns["ours"]()
    ref = graphs.get("fa2", graphs.get("cudnn"))
    if ref is not None:
        err = (out.float() - ref.detach().transpose(1, 2).float()).abs().max().item()
        res["ours"]["max_abs_diff_vs_torch"] = err
    del graphs
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libflashattn.so"))
    ap.add_argument("--backend", default="cuda", choices=sorted(BACKENDS))
    ap.add_argument("--quick", action="store_true", help="three sizes, and head dim 128 unless --dims is given")
    ap.add_argument("--dims", default=None, help="head dims to time (comma-separated; default 64,128,256)")
    ap.add_argument("--max-seqlen", type=int, default=16384, help="skip the grid's longer sequences")
    ap.add_argument("--no-bwd", action="store_true")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=6, help="timings per contender and pass")
    ap.add_argument("--passes", type=int, default=4,
                    help="passes over a cell's contenders, each settling first; with --order both they alternate "
                         "the two orders")
    ap.add_argument("--timing", default="both", choices=("stream", "single", "both"))
    ap.add_argument("--burst", type=int, default=10, help="back-to-back calls per stream timing")
    ap.add_argument("--settle-ms", type=float, default=150.0,
                    help="each contender runs alone this long before its timings")
    ap.add_argument("--causal", choices=sorted(MASKS), default="both", help="which masks to time")
    ap.add_argument("--order", default="both",
                    help="the order in which a cell's contenders are timed: a permutation of ours,fa2,cudnn, or "
                         "both (ours,fa2,cudnn then cudnn,fa2,ours, in turn over --passes, the timings pooled)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    orders = ORDERS if args.order == "both" else (tuple(args.order.split(",")),)
    masks = MASKS[args.causal]
    if any(sorted(o) != ["cudnn", "fa2", "ours"] for o in orders):
        ap.error("--order: a permutation of ours,fa2,cudnn, or both")
    if args.passes < 1 or args.reps < 1:
        ap.error("--passes and --reps: at least 1")

    lib = FlashAttn(args.lib, args.backend)
    if args.quick:
        sizes = [(16, 1024), (4, 4096), (1, 16384)]
    else:
        sizes = list(GRID_SIZES)
    sizes = [(B, S) for B, S in sizes if S <= args.max_seqlen]
    dims = [int(d) for d in args.dims.split(",")] if args.dims else [128] if args.quick else list(GRID_DIMS)
    modes = ("stream", "single") if args.timing == "both" else (args.timing,)
    rows = []
    print("%-4s %-9s %-6s %-6s | %-19s | %-19s | %-19s | %-11s | %s" % (
        "D", "B x S", "causal", "timing", "ours fwd/bwd TF", "FA2 fwd/bwd TF", "cuDNN fwd/bwd TF",
        "vs FA2 f, b", "vs cuDNN f, b"))
    for D in dims:
        for causal in masks:
            for B, S in sizes:
                r = bench_cell(lib, B, S, D, causal, args.warmup, args.reps, not args.no_bwd, modes, args.burst,
                               args.settle_ms, orders, args.passes)
                row = {"D": D, "B": B, "S": S, "causal": causal, "results": r}
                rows.append(row)
                for mode in modes:
                    def tf(n, kind):
                        return r.get(n, {}).get(mode, {}).get(kind + "_tflops", float("nan"))
                    print("%-4d %-9s %-6s %-6s | %7.1f / %7.1f   | %7.1f / %7.1f   | %7.1f / %7.1f   | %.2f, %.2f  | %.2f, %.2f" % (
                        D, "%dx%d" % (B, S), "yes" if causal else "no", mode, tf("ours", "fwd"), tf("ours", "bwd"),
                        tf("fa2", "fwd"), tf("fa2", "bwd"), tf("cudnn", "fwd"), tf("cudnn", "bwd"),
                        tf("ours", "fwd") / tf("fa2", "fwd"), tf("ours", "bwd") / tf("fa2", "bwd"),
                        tf("ours", "fwd") / tf("cudnn", "fwd"), tf("ours", "bwd") / tf("cudnn", "bwd")), flush=True)
                torch.cuda.empty_cache()

    for mode in modes:  # the bar
        vs = [(r["results"]["ours"][mode]["fwd_tflops"] / r["results"]["cudnn"][mode]["fwd_tflops"], r)
              for r in rows if mode in r["results"].get("cudnn", {})]
        if vs:
            lo, r = min(vs, key=lambda x: x[0])
            print("# forward, %s timing: %d of %d cells at >= %.2fx cuDNN; lowest %.3f (head dim %d, %s, %d x %d)" % (
                mode, sum(v >= BAR for v, _ in vs), len(vs), BAR, lo, r["D"], "causal" if r["causal"] else "non-causal",
                r["B"], r["S"]))

    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "backend": args.backend,
            "cudnn": torch.backends.cudnn.version(), "warmup": args.warmup, "reps": args.reps,
            "timing": list(modes), "burst": args.burst, "settle_ms": args.settle_ms,
            "orders": [list(o) for o in orders], "passes": args.passes}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_vs_torch.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        combos = [(D, c) for D in dims for c in masks]
        fig, axes = plt.subplots(2, len(combos), figsize=(4 * len(combos), 7), squeeze=False)
        for col, (D, c) in enumerate(combos):
            sel = [r for r in rows if r["D"] == D and r["causal"] == c]
            x = [r["S"] for r in sel]
            for ri, kind in enumerate(("fwd", "bwd")):
                ax = axes[ri][col]
                for n, label in (("ours", "flashattn"), ("fa2", "torch FA2"), ("cudnn", "torch cuDNN")):
                    ax.plot(x, [r["results"].get(n, {}).get(modes[0], {}).get(kind + "_tflops", math.nan) for r in sel],
                            "o-", label=label)
                ax.set_xscale("log", base=2)
                ax.set_title("%s D=%d%s" % (kind, D, " causal" if c else ""))
                ax.set_xlabel("seqlen")
                ax.set_ylabel("TFLOP/s")
                ax.grid(alpha=0.3)
        axes[0][0].legend()
        fig.suptitle("flashattn vs PyTorch SDPA, bf16, hidden 2048, %s, %s timing" % (meta["device"], modes[0]))
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "gpu_vs_torch.png"), dpi=90)
    except ImportError:
        print("matplotlib not available: no plot", file=sys.stderr)


if __name__ == "__main__":
    main()
