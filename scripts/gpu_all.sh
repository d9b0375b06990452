#!/usr/bin/env bash
# Everything that needs the GPU, in one run on a machine with an NVIDIA GPU:
#   1. build once (Release, CUDA on) and run the C suite on the cuda and
#      cuda_sm80 backends, compute-sanitizer on a subset (scripts/gpu_test.sh);
#   2. the Python package's tests, torch on CUDA included, against that same
#      library (scripts/gpu_python_test.sh);
#   3. the benchmark against PyTorch SDPA's flash and cuDNN backends
#      (bench/gpu_vs_torch.py; FA_BENCH=full for the whole grid, 0 to skip).
# Logs go to $OUT when it is set. Exit status: nonzero if any step failed.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export FA_BUILD_DIR="${FA_BUILD_DIR:-$ROOT/build-gpu}"
LOGS="${OUT:-$FA_BUILD_DIR/logs}"
mkdir -p "$LOGS"
status=0

echo "== 1. C suite on the CUDA backends"
FA_BENCH=0 bash scripts/gpu_test.sh || status=1

echo "== 2. Python tests (torch, CUDA)"
FLASHATTN_LIBRARY="$FA_BUILD_DIR/libflashattn.so" bash scripts/gpu_python_test.sh || status=1

bench="${FA_BENCH:-quick}"
if [ "$bench" != "0" ]; then
    echo "== 3. benchmark against torch"
    args="--quick"
    [ "$bench" = "full" ] && args=""
    PYTHONUNBUFFERED=1 python3 bench/gpu_vs_torch.py --lib "$FA_BUILD_DIR/libflashattn.so" --out "$LOGS" $args \
        2>&1 | tee "$LOGS/bench.log" || status=1
fi

echo "gpu_all: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
