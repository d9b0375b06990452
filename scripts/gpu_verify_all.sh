#!/usr/bin/env bash
# One GPU call that checks and times everything, with every log packed into
# $OUT/logs.tgz (the device returns only a few files):
#   scripts/gpu_test.sh (build; suite on cuda, cuda_sm80, cuda_sm80 packed;
#   compute-sanitizer), memcheck of the float8 test, the Python torch suite,
#   bench/gpu_vs_torch.py --quick on both CUDA flavours, decode timings.
set -u -o pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
RESULT="${OUT:-$ROOT/build-gpu/verify}"
export OUT=/tmp/fa-logs PYTHONUNBUFFERED=1 FA_BENCH=0
mkdir -p "$OUT" "$RESULT"
B=build-gpu
status=0
step() { echo "== $*"; }

step "C suite, sanitizers"
timeout "${FA_VERIFY_SUITE_S:-360}" bash scripts/gpu_test.sh > "$OUT/gpu_test.out" 2>&1 || status=1
grep -E "ctest|sanitizer|BUILD|gpu_test:|spill" "$OUT/gpu_test.out"

step "float8 under memcheck"
FA_TEST_BACKEND=cuda timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/test_fp8 \
    > "$OUT/fp8_memcheck.log" 2>&1 || status=1
grep -E "passed|ERROR SUMMARY" "$OUT/fp8_memcheck.log" | tail -2

step "Python"
FLASHATTN_LIBRARY=$B/libflashattn.so timeout 150 bash scripts/gpu_python_test.sh > "$OUT/python.out" 2>&1 || status=1
grep -E "passed|failed|gpu_python_test" "$OUT/python.out" | tail -3

step "bench"
for be in cuda cuda_sm80; do
    timeout 120 python3 bench/gpu_vs_torch.py --lib $B/libflashattn.so --backend $be --quick \
        --out "$OUT/bench_$be" 2>&1 | tee "$OUT/bench_$be.log" | grep -v "^#" | tail -8
done
for a in "" "--block-size 16" "--splits 16" "--batch 1 --cache-len 131072"; do
    echo "decode $a"; timeout 60 $B/flashattn bench --decode --backend cuda_sm80 $a 2>&1 | tail -3
done
echo "decode unpacked"; FA_SM80_PACK=0 timeout 60 $B/flashattn bench --decode --backend cuda_sm80 2>&1 | tail -2

tar czf "$RESULT/logs.tgz" -C "$OUT" .
echo "gpu_verify_all: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
