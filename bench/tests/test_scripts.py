"""The GPU benchmark scripts' own logic, run against a stand-in for torch
(bench/tests/torch_standin.py): the passes, their orders, the outputs."""
import itertools
import json
import os
import subprocess
import sys

STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_standin.py")


def run(tmp_path, script, *args, path_first=None):
    """Runs a script (path_first: a folder put first on its PATH); returns its
    stdout and the names of its kernel calls, in order."""
    calls = tmp_path / "calls"
    env = dict(os.environ, STANDIN_CALLS=str(calls))
    if path_first:
        env["PATH"] = str(path_first) + os.pathsep + env.get("PATH", "")
    r = subprocess.run([sys.executable, STANDIN, script, *args], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout, calls.read_text().split("\n")


def runs(names):
    """The names with repeats merged: a, a, b, a -> a, b, a."""
    return [n for n, _ in itertools.groupby(names)]


def test_grid_alternates_orders_over_passes(tmp_path):
    out, calls = run(tmp_path, "gpu_vs_torch", "--dims", "64", "--causal", "yes", "--max-seqlen", "512", "--no-bwd",
                     "--timing", "stream", "--passes", "4", "--reps", "2", "--settle-ms", "0", "--out", str(tmp_path))
    # four passes: ours, FA2, cuDNN; cuDNN, FA2, ours; and again; then the spot check's call of ours
    assert runs(calls)[-9:] == ["ours", "fa2", "cudnn", "fa2", "ours", "fa2", "cudnn", "fa2", "ours"]
    data = json.loads((tmp_path / "gpu_vs_torch.json").read_text())
    assert data["meta"]["passes"] == 4 and data["meta"]["reps"] == 2
    (row,) = data["rows"]
    for name in ("ours", "fa2", "cudnn"):
        r = row["results"][name]["stream"]
        assert len(r["fwd_pass_ms"]) == 4
        assert min(r["fwd_pass_ms"]) <= r["fwd_ms"] <= max(r["fwd_pass_ms"])
    assert "# forward, stream timing: " in out and "of 1 cells at >= 1.05x cuDNN" in out


def test_grid_one_order(tmp_path):
    _, calls = run(tmp_path, "gpu_vs_torch", "--dims", "128", "--causal", "no", "--max-seqlen", "512", "--no-bwd",
                   "--timing", "single", "--order", "cudnn,ours,fa2", "--passes", "2", "--reps", "1",
                   "--settle-ms", "0", "--out", str(tmp_path))
    assert runs(calls)[-7:] == ["cudnn", "ours", "fa2", "cudnn", "ours", "fa2", "ours"]


def test_grid_rejects_no_passes(tmp_path):
    r = subprocess.run([sys.executable, STANDIN, "gpu_vs_torch", "--passes", "0", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--passes" in r.stderr


def test_fp8_alternates_over_passes(tmp_path):
    out, calls = run(tmp_path, "gpu_fp8", "--seqlens", "16384", "--causal", "no", "--passes", "3", "--reps", "2",
                     "--settle-ms", "0")
    assert runs(calls) == ["ours", "cudnn", "ours", "cudnn", "gemm"]  # ours, cuDNN; cuDNN, ours; ours, cuDNN
    line = next(x for x in out.splitlines() if x.startswith("# head dim 128, causal 0, 1 x 16384"))
    assert line.count("passes ") == 2


def test_fp8_head_dims(tmp_path):
    """--head-dims times each head dim, with 2048 / D heads rounded down."""
    out, _ = run(tmp_path, "gpu_fp8", "--head-dims", "256,192", "--seqlens", "16384", "--causal", "no", "--passes", "1",
                 "--reps", "2", "--settle-ms", "0")
    cells = [x for x in out.splitlines() if x.startswith("# head dim")]
    assert [c.split(",")[0] for c in cells] == ["# head dim 256", "# head dim 192"]
    assert [r.split()[0] for r in out.splitlines() if r[:1].isdigit()] == ["256", "192"]


def import_sustained():
    """bench/gpu_sustained.py as a module, imported under the stand-in for
    torch (only while it is imported), so its functions can be called."""
    saved_modules, saved_path = dict(sys.modules), list(sys.path)
    try:
        sys.path.insert(0, os.path.dirname(STANDIN))
        import torch_standin
        torch_standin.install()
        sys.path.insert(0, torch_standin.BENCH)
        import gpu_sustained
        return gpu_sustained
    finally:
        sys.modules.clear()
        sys.modules.update(saved_modules)
        sys.path[:] = saved_path


def test_sustained_reads_clock_event_reasons(tmp_path):
    """gpu_sustained's nvidia-smi samples with --reasons: the instantaneous
    power and the share of settled samples each reason was active."""
    import datetime
    gpu_sustained = import_sustained()
    t0 = datetime.datetime(2026, 1, 1, 12, 0, 0)
    csv = tmp_path / "samples.csv"
    with open(csv, "w") as f:
        for i in range(30):  # 20 ms apart; the cap active in every other sample
            ts = (t0 + datetime.timedelta(milliseconds=20 * i)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            cap = "Active" if i % 2 else "Not Active"
            f.write(f"{ts}, 1800 MHz, 650.00 W, {680 + i % 3}.00 W, {cap}, Not Active, Not Active, Not Active, "
                    "Not Active\n")
    rows = gpu_sustained.read_samples(str(csv))
    t1 = t0 + datetime.timedelta(seconds=1)
    assert gpu_sustained.window_means(rows, t0, t1) == (1800.0, 650.0)
    instant, shares = gpu_sustained.reason_shares(rows, t0, t1)
    assert 680 <= instant <= 682 and shares == [0.5, 0.0, 0.0, 0.0, 0.0]


def test_sustained_grid_and_settled_figures():
    """--grid's cells are the standard grid's; the settled figures take each
    contender's median over the rounds, and the bar's line counts a
    contender's cells at 1.05x cuDNN."""
    gpu_sustained = import_sustained()
    cells = gpu_sustained.grid_cells()
    assert len(cells) == 36 and len(set(cells)) == 36
    assert cells[0] == "64:0:32:512" and cells[5] == "64:0:1:16384" and cells[-1] == "256:1:1:16384"

    def window(cell, name, settled):  # as main() keeps them: cell, contender, start, end, first-20 TF, settled, trace
        return (cell, name, None, None, 0.0, settled, [])
    windows = [window("64:1:32:512", n, tf) for n, tf in (("ours", 262.0), ("ours_b", 270.0), ("cudnn", 250.0))]
    windows += [window("128:0:1:16384", n, tf) for n, tf in (("cudnn", 600.0), ("ours_b", 700.0), ("ours", 690.0))]
    windows += [window("64:1:32:512", n, tf) for n, tf in (("cudnn", 250.0), ("ours_b", 280.0), ("ours", 262.0))]
    windows += [window("64:1:32:512", n, tf) for n, tf in (("ours", 300.0), ("ours_b", 275.0), ("cudnn", 250.0))]
    figures = gpu_sustained.settled_figures(windows)
    assert [cell for cell, _ in figures] == ["64:1:32:512", "128:0:1:16384"]
    assert figures[0][1] == {"ours": 262.0, "ours_b": 275.0, "cudnn": 250.0}  # medians of three rounds
    assert gpu_sustained.bar_line(figures) == \
        "# settled, ours: 1 of 2 cells at >= 1.05x cuDNN; lowest 1.048 (64:1:32:512)"
    assert gpu_sustained.bar_line(figures, "ours_b") == \
        "# settled, ours_b: 2 of 2 cells at >= 1.05x cuDNN; lowest 1.100 (64:1:32:512)"


def test_sustained_ab_rounds_reverse_the_order(tmp_path):
    """--ab times the second build as a third contender, and every other
    round of --rounds reverses the contenders' order."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\nexec sleep 30\n")  # samples nothing until it is stopped
    smi.chmod(0o755)
    out, calls = run(tmp_path, "gpu_sustained", "--cells", "64:1:32:512,128:0:1:16384", "--ab", "b.so",
                     "--rounds", "2", "--seconds", "0.01", "--gap-s", "0", path_first=smi.parent)
    forward = ["ours", "ours_b", "cudnn"]
    # round 2's first cuDNN window follows round 1's last, so runs() merges them
    assert runs(calls) == runs(forward * 2 + forward[::-1] * 2)
    assert "# settled, ours: " in out and "# settled, ours_b: " in out and "of 2 cells" in out
