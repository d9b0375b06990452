#!/usr/bin/env bash
# Everything that needs the GPU, in one run on a machine with an NVIDIA GPU:
#   1. build once (Release, CUDA on) and run the C suite on the cuda and
#      cuda_sm80 backends (and cuda_sm80 with the GQA-packed forward forced),
#      compute-sanitizer on a subset (scripts/gpu_test.sh), then the float8
#      test under memcheck;
#   2. the Python package's tests, torch on CUDA included, against that same
#      library (scripts/gpu_python_test.sh);
#   3. bench/gpu_vs_torch.py on both CUDA flavours against PyTorch SDPA's flash
#      and cuDNN backends (FA_BENCH=quick, the default; full for the whole grid;
#      0 to skip), decoding timings, and packed (varlen) against batched calls.
# Logs go to a scratch folder; with $OUT set they come back packed in
# $OUT/logs.tgz (else they stay in build-gpu/logs). Exit status: nonzero if
# any step failed.
set -u -o pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export FA_BUILD_DIR="${FA_BUILD_DIR:-$ROOT/build-gpu}"
RESULT="${OUT:-}"
export OUT="${RESULT:+/tmp/fa-gpu-logs}"
export OUT="${OUT:-$FA_BUILD_DIR/logs}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
B="$FA_BUILD_DIR"
bench="${FA_BENCH:-quick}"
status=0

echo "== 1. C suite on the CUDA backends, sanitizers"
FA_BENCH=0 timeout "${FA_SUITE_TIMEOUT:-420}" bash scripts/gpu_test.sh > "$OUT/gpu_test.out" 2>&1 || status=1
grep -E "ctest|sanitizer|BUILD|gpu_test:|spill" "$OUT/gpu_test.out"
FA_TEST_BACKEND=cuda timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/tests/test_fp8" \
    > "$OUT/fp8_memcheck.log" 2>&1 || status=1
echo "float8 under memcheck: $(grep -E "passed|ERROR SUMMARY" "$OUT/fp8_memcheck.log" | tr '\n' ' ')"

echo "== 2. Python tests (torch, CUDA)"
FLASHATTN_LIBRARY="$B/libflashattn.so" timeout 300 bash scripts/gpu_python_test.sh > "$OUT/python.out" 2>&1 || status=1
grep -E "passed|failed|gpu_python_test" "$OUT/python.out" | tail -3

if [ "$bench" != "0" ]; then
    echo "== 3. benchmark against torch, decoding"
    args="--quick"
    [ "$bench" = "full" ] && args=""
    for be in cuda cuda_sm80; do
        python3 bench/gpu_vs_torch.py --lib "$B/libflashattn.so" --backend $be --out "$OUT/bench_$be" $args \
            2>&1 | tee "$OUT/bench_$be.log" | grep -v "Warning" || status=1
    done
    for a in "" "--block-size 16" "--batch 1 --cache-len 131072"; do
        echo "decode $a: $(timeout 60 "$B/flashattn" bench --decode --backend cuda_sm80 $a 2>&1 | tail -1)"
    done
    echo "decode, packing off: $(FA_SM80_PACK=0 timeout 60 "$B/flashattn" bench --decode --backend cuda_sm80 2>&1 | tail -1)"
    # packed sequences against the batched call on the same data (head dim 128, 4 x 4096)
    for a in "" "--varlen"; do
        echo "batch 4 x 4096 ${a:-batched}:"
        timeout 120 "$B/flashattn" bench --batch 4 --seqlen 4096 --heads 16 --head-dim 128 --no-causal $a 2>&1 | tail -2
    done
fi

[ -n "$RESULT" ] && tar czf "$RESULT/logs.tgz" -C "$OUT" .
echo "gpu_all: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
