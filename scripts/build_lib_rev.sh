#!/bin/bash
# Builds libflashattn.so of another revision (CUDA backend, Release, no tests)
# from its tree (git archive, as scripts/sm90_ab.sh takes its sources) in a
# scratch directory and copies it to OUT, for a library-level A/B against
# the working tree's build on a GPU machine:
#
#   scripts/build_lib_rev.sh REV OUT.so
#   python3 bench/gpu_lib_ab.py OUT.so build/libflashattn.so -- --dims 64 --no-bwd
#
# Needs nvcc (no GPU). The scratch directory is removed afterwards.
set -euo pipefail
REV=${1:?usage: scripts/build_lib_rev.sh REV OUT.so}
OUT=$(realpath -m "${2:?usage: scripts/build_lib_rev.sh REV OUT.so}")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
command -v nvcc >/dev/null || { echo "build_lib_rev: nvcc not found" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src"
git -C "$ROOT" archive "$REV" | tar -x -C "$WORK/src"
cmake -S "$WORK/src" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_TESTS=OFF >"$WORK/cmake.log" 2>&1 ||
    { cat "$WORK/cmake.log"; exit 1; }
cmake --build "$WORK/build" -j"$(nproc)" --target flashattn >"$WORK/build.log" 2>&1 ||
    { tail -40 "$WORK/build.log"; exit 1; }
mkdir -p "$(dirname "$OUT")"
cp "$(realpath "$WORK/build/libflashattn.so")" "$OUT"
echo "built $(git -C "$ROOT" rev-parse --short "$REV") -> $OUT"
