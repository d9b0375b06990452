#!/usr/bin/env bash
# GPU check for the CUDA backend, run on a machine with an NVIDIA GPU:
#   1. configure and build (Release, CUDA on) into build-gpu/,
#   2. the whole test suite with FA_TEST_BACKEND=cuda and =cuda_sm80, and once
#      more on cuda_sm80 with the GQA-packed forward forced (FA_SM80_PACK=1);
#      each test compares the backend with the float64 reference and a
#      same-precision naive baseline,
#   3. compute-sanitizer memcheck and racecheck on small subsets, on both
#      flavours,
#   4. optionally (FA_BENCH=1 or FA_BENCH=quick) bench/gpu_vs_torch.py.
# Logs go to $OUT when it is set (else build-gpu/logs).
#
# Environment:
#   FA_PREBUILT=DIR   skip the build: take the test programs and libflashattn.so
#                     from DIR (files may be xz-compressed, *.xz) and run each
#                     program directly instead of through ctest
#   FA_BUILD_TARGETS  restrict the build (default: everything)
#   FA_WERROR=ON      treat warnings as errors (default OFF here: CI checks warnings)
#   FA_SANITIZE=0     skip compute-sanitizer
#   FA_FLAVOURS       the backends of step 2 (default: cuda cuda_sm80 cuda_sm80_packed)
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD="${FA_BUILD_DIR:-$ROOT/build-gpu}"
LOGS="${OUT:-$BUILD/logs}"
mkdir -p "$LOGS"
JOBS="$(nproc 2>/dev/null || echo 4)"
status=0

if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$LOGS/summary.log" 2>&1; then
    echo "gpu_test: no usable NVIDIA GPU here; the CUDA tests would only skip" | tee -a "$LOGS/summary.log"
    exit 1
fi
cat "$LOGS/summary.log"

# ---- 1. build (or unpack a prebuilt tree) ----------------------------------
if [ -n "${FA_PREBUILT:-}" ]; then
    BIN="$BUILD/bin"
    mkdir -p "$BIN"
    for f in "$FA_PREBUILT"/*; do
        case "$f" in
            *.xz) xz -dc "$f" > "$BIN/$(basename "${f%.xz}")" ;;
            *) cp "$f" "$BIN/" ;;
        esac
    done
    chmod +x "$BIN"/* 2>/dev/null
    TESTS=$(ls "$BIN"/test_* 2>/dev/null)
    LIB="$BIN/libflashattn.so"
else
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
          -DFLASHATTN_WERROR="${FA_WERROR:-OFF}" > "$LOGS/build.log" 2>&1 &&
    cmake --build "$BUILD" -j "$JOBS" ${FA_BUILD_TARGETS:+--target $FA_BUILD_TARGETS} >> "$LOGS/build.log" 2>&1
    if [ $? -ne 0 ]; then
        echo "BUILD FAILED" | tee -a "$LOGS/summary.log"
        tail -40 "$LOGS/build.log"
        exit 1
    fi
    grep -E "spill|warning" "$LOGS/build.log" | sort -u | head -20
    TESTS=$(ls "$BUILD"/tests/test_suite "$BUILD"/tests/test_kvcache "$BUILD"/tests/test_merge 2>/dev/null)
    LIB="$BUILD/libflashattn.so"
fi

# ---- 2. the suite on both CUDA flavours ------------------------------------
# cuda_sm80_packed: the portable kernels with the GQA-packed forward forced
# on every shape (by default it runs only for few query rows per kv head).
for flavour in ${FA_FLAVOURS:-cuda cuda_sm80 cuda_sm80_packed}; do
    backend=${flavour%_packed}
    pack=""
    [ "$flavour" != "$backend" ] && pack=1
    log="$LOGS/test_$flavour.log"
    : > "$log"
    if [ -z "${FA_PREBUILT:-}" ]; then
        # the whole ctest suite, as CI runs it, with the backend forced
        FA_SM80_PACK=$pack FA_TEST_BACKEND=$backend ctest --test-dir "$BUILD" --output-on-failure \
            --timeout "${FA_TEST_TIMEOUT:-900}" >> "$log" 2>&1
        rc=$?
        echo "$flavour ctest: rc $rc, $(grep -E 'tests passed|tests failed' "$log" | tail -1)" | tee -a "$LOGS/summary.log"
        [ $rc -ne 0 ] && status=1
    else
        for t in $TESTS; do
            start=$(date +%s)
            FA_SM80_PACK=$pack FA_TEST_BACKEND=$backend timeout "${FA_TEST_TIMEOUT:-600}" "$t" >> "$log" 2>&1
            rc=$?
            echo "$flavour $(basename "$t"): rc $rc, $(( $(date +%s) - start )) s, $(tail -1 "$log")" | tee -a "$LOGS/summary.log"
            [ $rc -ne 0 ] && status=1
        done
    fi
    grep -E "^FAIL" "$log" | head -30
done

# ---- 3. compute-sanitizer on a subset --------------------------------------
if [ "${FA_SANITIZE:-1}" != "0" ] && command -v compute-sanitizer > /dev/null; then
    suite=$(echo "$TESTS" | tr ' ' '\n' | grep 'test_suite$' | head -1)
    kv=$(echo "$TESTS" | tr ' ' '\n' | grep -E 'test_(kvcache|merge)$')
    # (backend, test, case filter): small shapes, the tools are slow. On a
    # Hopper device "cuda" runs the sm90 kernels: every head-dim tile shape
    # of the forward and backward, masks and GQA.
    runs="cuda_sm80:$suite:${FA_SANITIZE_FILTER:-gqa}"
    for t in $kv; do runs="$runs cuda_sm80:$t:"; done
    runs="$runs cuda:$suite:head%dim cuda:$suite:gqa cuda:$suite:window"
    for tool in memcheck racecheck; do
        for run in $runs; do
            IFS=: read -r backend t filter <<< "$run"
            filter=${filter//%/ }
            FA_TEST_BACKEND=$backend FA_TEST_QUICK=1 FA_TEST_FILTER="$filter" \
                timeout 600 compute-sanitizer --tool $tool --error-exitcode 3 "$t" >> "$LOGS/sanitizer.log" 2>&1
            rc=$?
            echo "sanitizer $tool $backend $(basename "$t") ${filter:+[$filter]}: rc $rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitizer.log" | tail -1)" | tee -a "$LOGS/summary.log"
            [ $rc -ne 0 ] && status=1
        done
    done
fi

# ---- 4. benchmark against torch --------------------------------------------
if [ -n "${FA_BENCH:-}" ] && [ "${FA_BENCH}" != "0" ]; then
    extra=""
    [ "$FA_BENCH" = "quick" ] && extra="--quick"
    PYTHONUNBUFFERED=1 python3 bench/gpu_vs_torch.py --lib "$LIB" --out "$LOGS" $extra 2>&1 | tee "$LOGS/bench.log"
fi

echo "gpu_test: $( [ $status -eq 0 ] && echo PASS || echo FAIL )" | tee -a "$LOGS/summary.log"
exit $status
