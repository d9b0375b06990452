#!/bin/bash
# Compiles the Hopper kernels (src/cuda/sm90/*.cu) for sm_90a with the ptxas
# report on and fails if ptxas
#   - serialises wgmma (C7515, C7511, C7509, C7517, ... any "wgmma" warning),
#   - ignores setmaxnreg (C7508, C7504),
#   - spills registers or uses a stack frame in any kernel,
#   - prints any other warning.
# If a cuobjdump is on PATH (or $CUOBJDUMP), it also checks that the SASS has
# HGMMA instructions and no local-memory loads/stores.
# Usage: scripts/check_ptxas.sh            (needs nvcc; no GPU)
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NVCC=${NVCC:-nvcc}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
status=0
for src in "$ROOT"/src/cuda/sm90/*.cu; do
    name=$(basename "$src" .cu)
    log="$WORK/$name.log"
    if ! "$NVCC" -std=c++17 -O3 -lineinfo -DNDEBUG --expt-relaxed-constexpr \
        -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -Xptxas --warn-on-spills \
        -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter -Werror all-warnings \
        -I"$ROOT/include" -I"$ROOT/src/api" -c "$src" -o "$WORK/$name.o" >"$log" 2>&1; then
        echo "FAIL $name: compilation failed"; cat "$log"; status=1; continue
    fi
    kernels=$(grep -c "Compiling entry function" "$log")
    if grep -qiE "warning|C75[0-9][0-9]" "$log"; then
        echo "FAIL $name: ptxas/nvcc warnings"; grep -iE "warning|C75[0-9][0-9]" "$log"; status=1
    fi
    if grep -E "bytes spill (stores|loads)" "$log" | grep -qvE "^ *[0-9]+ bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"; then
        echo "FAIL $name: register spills"; grep -B3 -E "[1-9][0-9]* bytes spill" "$log"; status=1
    fi
    if grep -E "bytes stack frame" "$log" | grep -qv "^ *0 bytes stack frame"; then
        echo "FAIL $name: stack frame (local memory)"; grep -E "[1-9][0-9]* bytes stack frame" "$log"; status=1
    fi
    CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || true)}
    if [ -n "$CUOBJDUMP" ] && [ "$kernels" -gt 0 ]; then
        "$CUOBJDUMP" --dump-sass "$WORK/$name.o" >"$WORK/$name.sass" 2>&1
        if ! grep -q "HGMMA" "$WORK/$name.sass"; then
            echo "FAIL $name: no HGMMA in the SASS"; status=1
        fi
        if grep -qE "\b(LDL|STL)\b" "$WORK/$name.sass"; then
            echo "FAIL $name: local memory in the SASS"; status=1
        fi
    fi
    echo "$name: $kernels kernels, $(grep -o 'Used [0-9]* registers' "$log" | sort | uniq -c | tr -s ' ' | paste -sd, -)"
done
[ $status -eq 0 ] && echo "check_ptxas: OK" || echo "check_ptxas: FAILED"
exit $status
