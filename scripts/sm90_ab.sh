#!/bin/bash
# Builds sm90_ab: the Hopper forward of revision REV against the working
# tree's, in one binary (scripts/sm90_ab.cu says why and how to run it).
# REV's forward is compiled from its own sources in a translation unit of
# its own, its external names prefixed with base_ by macros, so that each
# build keeps its own SASS. Needs nvcc and git; no GPU to build.
#
#   scripts/sm90_ab.sh REV [OUTPUT]        # OUTPUT: ./sm90_ab
#
# SM90_AB_FLAGS adds nvcc flags to the working tree's build only (a -D that
# selects a variant, say), so one tree gives several binaries.
# SM90_AB_BASE_O names an object file of REV's forward: linked as it is if it
# exists, else built and kept there (REV's build takes half the time).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REV=${1:?usage: scripts/sm90_ab.sh REV [OUTPUT]}
OUT=$(realpath -m "${2:-sm90_ab}")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# REV's sources (the CUDA backend and the headers it includes), in their own tree
git -C "$ROOT" archive "$REV" src/cuda src/api include | tar -x -C "$WORK"
cat > "$WORK/base.cu" <<'TU'
#define fa_sm90_fwd base_fa_sm90_fwd
#define fa_sm90_fwd_supports base_fa_sm90_fwd_supports
#define fa_sm90_fwd_workspace base_fa_sm90_fwd_workspace
#define sm90_fp8_transpose_v base_sm90_fp8_transpose_v
#define sm90_fwd_kernel base_sm90_fwd_kernel
#include "src/cuda/sm90/sm90_fwd.cu"
TU
# the library's flags (CMakeLists.txt); the comma belongs to the -gencode value
# shellcheck disable=SC2054
FLAGS=(-std=c++17 -O3 -lineinfo -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a)
BASE_O=${SM90_AB_BASE_O:-$WORK/base.o}
if [ ! -f "$BASE_O" ]; then
    nvcc "${FLAGS[@]}" -I"$WORK/include" -I"$WORK/src/api" -c "$WORK/base.cu" -o "$WORK/base.o.part"
    mv "$WORK/base.o.part" "$BASE_O"
fi
# shellcheck disable=SC2086 # SM90_AB_FLAGS is a list of flags
nvcc "${FLAGS[@]}" ${SM90_AB_FLAGS:-} -I"$ROOT/include" -I"$ROOT/src/api" "$ROOT/scripts/sm90_ab.cu" "$ROOT/src/cuda/sm90/sm90_fwd.cu" \
    "$BASE_O" -o "$OUT"
echo "built $OUT: $REV against the working tree"
