#!/bin/bash
# One device call: check, sanitize, time the Hopper forward, and time torch's
# SDPA in the same run. Logs under $OUT.
# Usage: [SANITIZE=1] [BENCH=1 [BENCH_ARGS="D causal [varlen]"]] [FP8=1] [TORCH=1 [TORCH_ARGS=...]]
#        scripts/sm90_device_run.sh [harness binary]
# (build the harness first, as scripts/sm90_selftest.cu says)
set -o pipefail
OUT=${OUT:-/tmp/sm90_out}
mkdir -p "$OUT"
BIN=${1:-.sm90bin/sm90_selftest}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$OUT/gpu.log"
if ! timeout 20 "$BIN" small > "$OUT/small.log" 2>&1; then
    echo "small cases fail or hang: stopping"; cat "$OUT/small.log"; exit 1
fi
cat "$OUT/small.log"
echo "== check"; timeout 180 "$BIN" check 2>&1 | tee "$OUT/check.log" | grep -v "^PASS"
if [ -n "$SANITIZE" ]; then
    echo "== memcheck"; timeout 120 compute-sanitizer --tool memcheck "$BIN" small 2>&1 | tail -2
    echo "== racecheck"; timeout 120 compute-sanitizer --tool racecheck "$BIN" small 2>&1 | tail -2
fi
if [ -n "$FP8" ]; then
    echo "== e4m3"; timeout 120 "$BIN" fp8 2>&1 | tee "$OUT/fp8.log" | grep -v "^PASS"
    if [ -n "$SANITIZE" ]; then
        echo "== e4m3 memcheck"; timeout 60 compute-sanitizer --tool memcheck "$BIN" fp8_small 2>&1 | tail -2
        echo "== e4m3 racecheck"; timeout 60 compute-sanitizer --tool racecheck "$BIN" fp8_small 2>&1 | tail -2
    fi
    echo "== e4m3 bench"; timeout 60 "$BIN" bench_fp8 2>&1 | tee "$OUT/bench_fp8.log"
fi
if [ -n "$BENCH" ]; then
    echo "== bench"; timeout 150 "$BIN" bench $BENCH_ARGS 2>&1 | tee "$OUT/bench.log"
fi
if [ -n "$TORCH" ]; then
    echo "== torch"; PYTHONUNBUFFERED=1 timeout 200 python3 scripts/sm90_bench_torch.py $TORCH_ARGS 2>&1 | tee "$OUT/torch.log"
fi
