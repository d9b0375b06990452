#!/bin/bash
# Compiles the Hopper kernels (src/cuda/sm90/*.cu) for sm_90a with the ptxas
# report on and fails if ptxas
#   - serialises wgmma (C7515, C7511, C7509, C7517, ... any "wgmma" warning),
#   - ignores setmaxnreg (C7508, C7504),
#   - spills registers or uses a stack frame in any kernel,
#   - prints any other warning.
# If a cuobjdump is on PATH (or $CUOBJDUMP), it also checks the SASS: HGMMA
# instructions present, no local-memory loads/stores, and no kernel whose
# every HGMMA is a wgmma group of its own (serialised, whether or not ptxas
# said so).
#
# With --ptxas PATH the kernels are assembled by that ptxas instead of
# nvcc's: nvcc writes the PTX (its ISA version line lowered to --ptx-isa,
# default 8.5, which the assemblers of CUDA 12.6 on read) with the code path
# that builds by CUDA 12.8 and older compile (FA_SM90_ZERO_ACCUMULATORS), and
# the older assembler turns it into SASS. scripts/fetch_cuda_tools.sh fetches
# one.
# Usage: scripts/check_ptxas.sh [--ptxas PATH [--ptx-isa X.Y]]   (needs nvcc; no GPU)
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NVCC=${NVCC:-nvcc}
PTXAS=""
PTX_ISA=8.5
while [ $# -gt 0 ]; do
    case "$1" in
    --ptxas) PTXAS=$2; shift 2 ;;
    --ptx-isa) PTX_ISA=$2; shift 2 ;;
    *) echo "check_ptxas: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
if [ -n "$PTXAS" ] && ! "$PTXAS" --version >/dev/null 2>&1; then
    echo "check_ptxas: --ptxas '$PTXAS' does not run" >&2; exit 2
fi
[ -n "$PTXAS" ] && echo "assembler: $("$PTXAS" --version | tail -1)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FLAGS=(-std=c++17 -O3 -lineinfo -DNDEBUG --expt-relaxed-constexpr -I"$ROOT/include" -I"$ROOT/src/api")
status=0
for src in "$ROOT"/src/cuda/sm90/*.cu; do
    name=$(basename "$src" .cu)
    log="$WORK/$name.log"
    obj="$WORK/$name.o"
    if [ -z "$PTXAS" ]; then
        "$NVCC" "${FLAGS[@]}" -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -Xptxas --warn-on-spills \
            -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter -Werror all-warnings -c "$src" -o "$obj" >"$log" 2>&1
    else
        "$NVCC" "${FLAGS[@]}" -DFA_SM90_ZERO_ACCUMULATORS=1 -arch=compute_90a -ptx "$src" -o "$WORK/$name.ptx" \
            >"$log" 2>&1 &&
            sed -i "s/^\.version .*/.version $PTX_ISA/" "$WORK/$name.ptx" &&
            "$PTXAS" -arch=sm_90a -v --warn-on-spills "$WORK/$name.ptx" -o "$obj" >>"$log" 2>&1
    fi
    if [ $? -ne 0 ]; then
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
        # (cuobjdump runs the nvdisasm on PATH: the one beside it first)
        PATH="$(dirname "$CUOBJDUMP"):$PATH" "$CUOBJDUMP" --dump-sass "$obj" >"$WORK/$name.sass" 2>&1
        if ! grep -q "HGMMA" "$WORK/$name.sass"; then
            echo "FAIL $name: no HGMMA in the SASS"; status=1
        fi
        if grep -qE "\b(LDL|STL)\b" "$WORK/$name.sass"; then
            echo "FAIL $name: local memory in the SASS"; status=1
        fi
        # every wgmma group opens with WARPGROUP.ARRIVE: as many as HGMMAs means one HGMMA a group
        serial=$(awk '/Function :/ { if (h > 1 && a == h) print f; f = $3; h = 0; a = 0 }
                      /HGMMA/ { ++h } /WARPGROUP.ARRIVE/ { ++a }
                      END { if (h > 1 && a == h) print f }' "$WORK/$name.sass")
        if [ -n "$serial" ]; then
            echo "FAIL $name: every HGMMA a group of its own in:"; echo "$serial"; status=1
        fi
    fi
    echo "$name: $kernels kernels, $(grep -o 'Used [0-9]* registers' "$log" | sort | uniq -c | tr -s ' ' | paste -sd, -)"
done
[ $status -eq 0 ] && echo "check_ptxas: OK" || echo "check_ptxas: FAILED"
exit $status
