#!/usr/bin/env bash
# The Python package's tests on a machine with an NVIDIA GPU and torch:
#   1. build libflashattn with the CUDA backend (CMake, Release) into build-gpu-python/,
#   2. run python/tests with FLASHATTN_LIBRARY pointing at it: the NumPy suite,
#      the torch suite on CPU and CUDA (autograd against float64 SDPA, torch.compile
#      with fullgraph=True, streams, KV cache), failing if CUDA cases would be skipped,
#   3. with FA_PY_PIP=1, also `pip install ./python` (no network: build isolation off)
#      into a scratch directory and run the suite against the installed package.
# Logs go to $OUT when it is set (else build-gpu-python/logs).
#
# Environment:
#   FLASHATTN_LIBRARY=PATH  skip the build and test this library
#   FA_PY_PIP=1             also check the pip install path (builds the library again)
#   PYTHON=python3          the interpreter that has torch
#   PYTEST_ARGS             extra pytest arguments (e.g. "-k torch -x")
set -u -o pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD="${FA_PY_BUILD_DIR:-$ROOT/build-gpu-python}"
LOGS="${OUT:-$BUILD/logs}"
PY="${PYTHON:-python3}"
JOBS="$(nproc 2>/dev/null || echo 4)"
mkdir -p "$BUILD" "$LOGS"
export PYTHONUNBUFFERED=1
status=0

{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    "$PY" -c 'import sys, torch, numpy; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "numpy", numpy.__version__)'
    command -v nvcc && nvcc --version | tail -1
} 2>&1 | tee "$LOGS/python-env.log"

# ---- 1. library ------------------------------------------------------------
if [ -z "${FLASHATTN_LIBRARY:-}" ]; then
    start=$(date +%s)
    # Unix Makefiles: the library's CMake target is "flashattn" there unambiguously.
    if ! { cmake -S "$ROOT" -B "$BUILD" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
               -DFLASHATTN_CUDA=ON -DFLASHATTN_TESTS=OFF -DFLASHATTN_WERROR=OFF &&
           cmake --build "$BUILD" -j "$JOBS" --target flashattn; } > "$LOGS/python-build.log" 2>&1; then
        tail -50 "$LOGS/python-build.log"
        echo "gpu_python_test: library build failed (log: $LOGS/python-build.log)"
        exit 1
    fi
    echo "library built in $(( $(date +%s) - start )) s" | tee -a "$LOGS/python-env.log"
    export FLASHATTN_LIBRARY="$BUILD/libflashattn.so"
fi
echo "FLASHATTN_LIBRARY=$FLASHATTN_LIBRARY" | tee -a "$LOGS/python-env.log"

# ---- 2. tests against the source package -----------------------------------
export FLASHATTN_REQUIRE_CUDA=1
# shellcheck disable=SC2086
PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest "$ROOT/python/tests" -rs \
    -p no:cacheprovider --junitxml="$LOGS/python-junit.xml" ${PYTEST_ARGS:-} 2>&1 \
    | tee "$LOGS/python-tests.log" || status=1

# ---- 3. optional: the pip install path ---------------------------------------
if [ "${FA_PY_PIP:-0}" = "1" ]; then
    SITE="$BUILD/site"
    rm -rf "$SITE"
    if "$PY" -m pip install --no-build-isolation --no-deps --target "$SITE" "$ROOT/python" \
            -C cmake.define.FLASHATTN_CUDA=ON > "$LOGS/python-pip.log" 2>&1; then
        ( cd "$BUILD" && unset FLASHATTN_LIBRARY &&
          PYTHONPATH="$SITE" "$PY" -c 'import flashattn; print(flashattn.library_path(), flashattn.cuda_device_count())' &&
          PYTHONPATH="$SITE" "$PY" -m pytest "$ROOT/python/tests" -q -p no:cacheprovider ${PYTEST_ARGS:-} ) \
            2>&1 | tee "$LOGS/python-tests-installed.log" || status=1
    else
        tail -30 "$LOGS/python-pip.log"
        echo "gpu_python_test: pip install ./python failed (log: $LOGS/python-pip.log)"
        status=1
    fi
fi

echo "gpu_python_test: $([ $status = 0 ] && echo PASS || echo FAIL)" | tee -a "$LOGS/python-env.log"
exit $status
