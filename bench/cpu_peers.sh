#!/usr/bin/env bash
# Side-by-side CPU comparison: flashattn's CPU backend against llama.cpp's CPU
# flash attention (ggml's GGML_OP_FLASH_ATTN_EXT through test-backend-ops) and
# PyTorch's CPU scaled_dot_product_attention, on the same shapes, in one run.
# Prints one table of times and speed ratios (ours / peer: above 1 means
# flashattn is faster). flashattn and PyTorch run case by case, back to back,
# twice; each keeps its faster pass (medians within a pass).
#
# Nothing of the peers goes into this repository: they are built or installed
# under PEERS_DIR (default /work/peers).
#
#   bench/cpu_peers.sh [--quick] [--ggml-align64] [--skip-ggml] [--skip-torch]
#
#   --quick          seqlen 1024 instead of 4096 (a smoke run)
#   --ggml-align64   also rebuild ggml with a 64-byte aligned work buffer and
#                    time it that way (its default buffer is 16-byte aligned,
#                    which makes its flash attention ~1.5x slower)
#
# Environment: PEERS_DIR, THREADS (default 2), BUILD_DIR (flashattn build,
# default build-peers), GGML_REPO (where to clone ggml from when PEERS_DIR/ggml
# is missing; default https://github.com/ggml-org/ggml.git).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEERS_DIR=${PEERS_DIR:-/work/peers}
THREADS=${THREADS:-2}
BUILD_DIR=${BUILD_DIR:-$ROOT/build-peers}
GGML_REPO=${GGML_REPO:-https://github.com/ggml-org/ggml.git}
SEQ=4096
ALIGN64=0
SKIP_GGML=0
SKIP_TORCH=0
for a in "$@"; do
  case $a in
    --quick) SEQ=1024 ;;
    --ggml-align64) ALIGN64=1 ;;
    --skip-ggml) SKIP_GGML=1 ;;
    --skip-torch) SKIP_TORCH=1 ;;
    *) echo "unknown flag $a" >&2; exit 2 ;;
  esac
done
case "$PEERS_DIR" in "$ROOT"|"$ROOT"/*) echo "PEERS_DIR must be outside the repository" >&2; exit 2 ;; esac
mkdir -p "$PEERS_DIR"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# --- flashattn -----------------------------------------------------------------
# A benchmark build: warnings do not stop it (the library is tested elsewhere with -Werror).
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=OFF -DFLASHATTN_TESTS=OFF -DFLASHATTN_WERROR=OFF >/dev/null
cmake --build "$BUILD_DIR" -j2 --target flashattn_cli >/dev/null
FA="$BUILD_DIR/flashattn"

# --- ggml ------------------------------------------------------------------------
GGML="$PEERS_DIR/ggml"
TBO="$GGML/build/bin/test-backend-ops"
ggml_patch_cases() {
  # The shapes of this comparison, added to test-backend-ops' perf list once.
  local f="$GGML/tests/test-backend-ops.cpp"
  grep -q "flashattn-peers" "$f" && return 0
  python3 - "$f" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
anchor = "static std::vector<std::unique_ptr<test_case>> make_test_cases_perf() {\n    std::vector<std::unique_ptr<test_case>> test_cases;\n"
assert anchor in s, "test-backend-ops.cpp layout changed"
cases = "    // flashattn-peers: the shapes of flashattn's bench/cpu_peers.sh\n"
for n in (1024, 4096):
    for mask in ("false", "true"):
        cases += f"    test_cases.emplace_back(new test_flash_attn_ext(128, 128, 8, {{1, 1}}, {n}, {n}, {mask}, false, 0, 0, GGML_PREC_F32, GGML_TYPE_F16, GGML_TYPE_F16));\n"
    for t in ("F16", "BF16"):
        cases += f"    test_cases.emplace_back(new test_flash_attn_ext(128, 128, 8, {{4, 1}}, {n}, 1, false, false, 0, 0, GGML_PREC_F32, GGML_TYPE_{t}, GGML_TYPE_{t}));\n"
open(p, "w").write(s.replace(anchor, anchor + cases))
EOF
}
ggml_align() { # $1 = 1: 64-byte aligned work buffer, 0: upstream
  local f="$GGML/src/ggml-cpu/ggml-cpu.cpp"
  # Edit only when the state changes, so the build does not redo the file.
  if grep -q "flashattn-peers-align64" "$f"; then [ "$1" = 1 ] && return 0; else [ "$1" = 0 ] && return 0; fi
  if [ "$1" = 1 ]; then
    sed -i 's/cpu_ctx->work_data = new uint8_t\[cplan.work_size\];/cpu_ctx->work_data = new (std::align_val_t(64)) uint8_t[cplan.work_size]; \/\/ flashattn-peers-align64/' "$f"
    sed -i 's/delete\[\] cpu_ctx->work_data;/::operator delete[](cpu_ctx->work_data, std::align_val_t(64)); \/\/ flashattn-peers-align64/' "$f"
  else
    sed -i 's/cpu_ctx->work_data = new (std::align_val_t(64)) uint8_t\[cplan.work_size\]; \/\/ flashattn-peers-align64/cpu_ctx->work_data = new uint8_t[cplan.work_size];/' "$f"
    sed -i 's/::operator delete\[\](cpu_ctx->work_data, std::align_val_t(64)); \/\/ flashattn-peers-align64/delete[] cpu_ctx->work_data;/' "$f"
  fi
}
ggml_build() {
  cmake -S "$GGML" -B "$GGML/build" -DGGML_NATIVE=ON -DGGML_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
  echo "building ggml test-backend-ops (about 7 minutes the first time on 2 cores)..." >&2
  cmake --build "$GGML/build" --target test-backend-ops -j2 >/dev/null
}
ggml_run() { # $1 = label suffix
  "$TBO" perf -o FLASH_ATTN_EXT -b CPU -p "hsk=128,hsv=128,nh=8,nr23=\[[14],1\],kv=$SEQ,nb=($SEQ|1)," 2>/dev/null |
    sed 's/\x1b\[[0-9;]*m//g' | grep "us/run" | sed "s/^/$1 /" >>"$OUT/ggml.txt" || true
}
if [ "$SKIP_GGML" = 0 ]; then
  [ -d "$GGML/.git" ] || git clone -q "$GGML_REPO" "$GGML"
  ggml_patch_cases
  ggml_align 0
  ggml_build
  ggml_run align16
  if [ "$ALIGN64" = 1 ]; then
    ggml_align 1; ggml_build; ggml_run align64
    ggml_align 0; ggml_build
  fi
fi

# --- PyTorch and flashattn, case by case ---------------------------------------
# Each case runs ours and then PyTorch's back to back, twice, and the table
# keeps the faster of the two runs of each: on a shared machine the load
# changes within minutes, and a pair run together sees the same load.
VENV="$PEERS_DIR/venv-torch"
if [ "$SKIP_TORCH" = 0 ]; then
  if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch numpy
  fi
fi
cat >"$OUT/torch_case.py" <<'EOF'
import json, sys, time
import torch
import torch.nn.functional as F
threads, seq, case = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(threads)
torch.manual_seed(0)
def median_ms(fn, reps):
    fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); t.append(time.perf_counter() - t0)
    t.sort()
    return t[len(t) // 2] * 1e3
if case == "decode":
    q = torch.randn(1, 32, 1, 128, dtype=torch.bfloat16)
    k, v = (torch.randn(1, 8, seq, 128, dtype=torch.bfloat16) for _ in range(2))
    with torch.no_grad():
        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 50)
    print(json.dumps({"case": "decode bf16", "ms": ms}))
else:
    name, mask = case.split("-")
    causal = mask == "causal"
    dtype = torch.float32 if name == "f32" else torch.bfloat16
    q, k, v = (torch.randn(1, 8, seq, 128, dtype=dtype) for _ in range(3))
    with torch.no_grad():
        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), 5)
    print(json.dumps({"case": f"fwd {name} {mask}", "ms": ms}))
    # backward: forward + gradients, minus the forward
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    dout = torch.randn_like(q)
    def step():
        o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        torch.autograd.grad(o, (qg, kg, vg), dout)
    print(json.dumps({"case": f"bwd {name} {mask}", "ms": median_ms(step, 3) - ms}))
print(json.dumps({"case": "torch", "version": torch.__version__}))
EOF
for pass in 1 2; do
  for case in f32-full f32-causal bf16-full bf16-causal decode; do
    if [ "$case" = decode ]; then
      "$FA" bench --decode --batch 1 --heads 32 --kv-heads 8 --head-dim 128 --cache-len "$SEQ" --dtype bf16 \
        --threads "$THREADS" --repeat 50 --warmup 5 --no-check --json >>"$OUT/ours.json"
    else
      dt=${case%-*}; c=--no-causal; [ "${case#*-}" = causal ] && c=--causal
      "$FA" bench --batch 1 --heads 8 --head-dim 128 --seqlen "$SEQ" --dtype "$dt" $c \
        --threads "$THREADS" --repeat 5 --warmup 1 --no-check --json >>"$OUT/ours.json"
    fi
    if [ "$SKIP_TORCH" = 0 ]; then "$VENV/bin/python" "$OUT/torch_case.py" "$THREADS" "$SEQ" "$case" >>"$OUT/torch.json"; fi
  done
done

# --- table -----------------------------------------------------------------------
python3 - "$OUT" "$SEQ" "$THREADS" <<'EOF'
import json, os, re, sys
out, seq, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ours = {}
peak = bw = None
ours_decode = {}
for line in open(os.path.join(out, "ours.json")):  # the faster of the two passes
    r = json.loads(line)
    if r["direction"] == "decode":
        if "decode bf16" not in ours or r["time_ms"] < ours["decode bf16"]:
            ours["decode bf16"] = r["time_ms"]; bw = r.get("read_bandwidth_gbs"); ours_decode = r
        continue
    key = f'{r["direction"]} {r["dtype"]} {"causal" if r["causal"] else "full"}'
    if key not in ours or r["time_ms"] < ours[key]:
        ours[key] = r["time_ms"]; peak = r.get("peak_f32_gflops")
        ours.setdefault("_frac", {})[key] = r.get("frac_peak_f32")
torch = {}
tv = ""
p = os.path.join(out, "torch.json")
if os.path.exists(p):
    for line in open(p):
        r = json.loads(line)
        if "ms" in r: torch[r["case"]] = min(r["ms"], torch.get(r["case"], float("inf")))
        else: tv = r["version"]
ggml = {}
p = os.path.join(out, "ggml.txt")
if os.path.exists(p):
    for line in open(p):
        m = re.search(r"^(\S+) .*nr23=\[(\d),1\],kv=(\d+),nb=(\d+),mask=(\d).*type_K=(\w+).*?([\d.]+) us/run", line)
        if not m: continue
        align, nr, kv, nb, mask, tk, us = m.groups()
        if int(nb) == 1: key = f"decode {'bf16' if tk == 'bf16' else 'f16'}-kv"
        else: key = f"fwd f16-kv {'masked' if mask == '1' else 'full'}"
        ggml[(key, align)] = float(us) / 1e3
rows = [
    ("fwd f32 full",   "fwd f32 full",   ("fwd f16-kv full", "align16"),   ("fwd f16-kv full", "align64")),
    ("fwd f32 causal", "fwd f32 causal", ("fwd f16-kv masked", "align16"), ("fwd f16-kv masked", "align64")),
    ("fwd bf16 full",  "fwd bf16 full",  ("fwd f16-kv full", "align16"),   ("fwd f16-kv full", "align64")),
    ("fwd bf16 causal","fwd bf16 causal",("fwd f16-kv masked", "align16"), ("fwd f16-kv masked", "align64")),
    ("bwd f32 full",   "bwd f32 full",   None, None),
    ("bwd f32 causal", "bwd f32 causal", None, None),
    ("bwd bf16 full",  "bwd bf16 full",  None, None),
    ("bwd bf16 causal","bwd bf16 causal",None, None),
    ("decode bf16",    "decode bf16",    ("decode bf16-kv", "align16"),    ("decode bf16-kv", "align64")),
    ("decode bf16 (ggml f16 cache)", "decode bf16", ("decode f16-kv", "align16"), ("decode f16-kv", "align64")),
]
def f(x): return f"{x:9.2f}" if x is not None else "        -"
def ratio(a, b): return f"{b / a:6.2f}x" if a and b else "     -"
print(f"flashattn CPU peers: batch 1, 8 heads (decode: 32 over 8), head dim 128, seqlen {seq}, {threads} threads")
print(f"flashattn: f32 FMA peak {peak:.0f} GFLOP/s, read bandwidth {bw:.1f} GB/s (measured with the fastest runs)" if peak and bw else "")
if tv: print(f"PyTorch {tv} (scaled_dot_product_attention)")
print("ggml test-backend-ops: K/V f16 (decode rows: bf16 and f16 caches); its 'masked' case is a full mask")
print("tensor, not a skipped causal half. align16 = upstream work buffer, align64 = patched (--ggml-align64).")
print()
print(f"{'case':30s} {'ours ms':>9s} {'torch ms':>9s} {'ggml16 ms':>9s} {'ggml64 ms':>9s} {'vs torch':>8s} {'vs ggml16':>9s} {'vs ggml64':>9s}")
for label, ok, g16, g64 in rows:
    o = ours.get(ok)
    t = torch.get(ok.replace(" (ggml f16 cache)", "")) if "ggml f16" not in label else None
    a = ggml.get(g16) if g16 else None
    b = ggml.get(g64) if g64 else None
    print(f"{label:30s} {f(o)} {f(t)} {f(a)} {f(b)} {ratio(o, t):>8s} {ratio(o, a):>9s} {ratio(o, b):>9s}")
fr = ours.get("_frac", {})
if fr:
    print()
    print("flashattn fraction of the f32 FMA peak: " + ", ".join(f"{k} {v * 100:.0f}%" for k, v in fr.items() if v))
if bw:
    print(f"flashattn decode reads the cache at {ours_decode.get('gbs', 0):.1f} GB/s = {ours_decode.get('frac_bandwidth', 0) * 100:.0f}% of the measured read bandwidth")
EOF
