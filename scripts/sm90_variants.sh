#!/bin/bash
# Compile-time variants of the Hopper forward, checked and timed in one GPU
# call. For each set of nvcc flags given (one argument per variant, e.g.
# "-DKNOB=4" for a knob the kernel header reads as #ifndef KNOB / #define
# KNOB 0, off by default; docs/perf/sm90.md items 63-65 measured three that
# way), builds here (nvcc, no GPU):
#   - sm90_selftest of the working tree with those flags (checks, timings),
#   - sm90_ab: revision REV against the working tree with those flags
#     (scripts/sm90_ab.sh; both in one process, so they share the clock),
# and packs them, xz-compressed, into DIR/variants.tar.xz (the binaries are
# ~20 MB each, ~1 MB compressed).
#
#   scripts/sm90_variants.sh REV DIR FLAGS...                  # build here
#   scripts/sm90_variants.sh --run DIR [CHECKS [TIMINGS]]      # on the GPU
#
# --run unpacks DIR/variants.tar.xz into DIR/bin and, for each variant in turn,
# runs `sm90_selftest small` (a variant that fails or hangs there is skipped),
# then the selftest commands in CHECKS (';'-separated, default "fp8;check"; a
# command's PASS lines are counted, anything else is printed), then the
# sm90_ab commands in TIMINGS (default "fp8;bf16 64"). Everything goes to one
# log, $OUT/variants.log (or DIR/variants.log without $OUT).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = "--run" ]; then
    DIR=$(realpath "${2:?usage: scripts/sm90_variants.sh --run DIR [CHECKS [TIMINGS]]}")
    CHECKS=${3:-"fp8;check"}
    TIMINGS=${4:-"fp8;bf16 64"}
    LOG=${OUT:-$DIR}/variants.log
    WORK=$DIR/bin # kept, for commands of one's own afterwards (DIR/bin/v0/sm90_selftest ...)
    rm -rf "$WORK" && mkdir -p "$WORK"
    tar -xJf "$DIR/variants.tar.xz" -C "$WORK"
    {
        nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv || true
        for v in "$WORK"/v*/; do
            echo "=== variant $(basename "$v"): $(cat "$v/flags")"
            # a few quick cases first: a variant that fails or hangs here is not timed
            if ! timeout 60 "$v/sm90_selftest" small >"$v/small.txt" 2>&1; then
                echo "-- selftest small failed or hung: not timed"
                grep -v '^PASS' "$v/small.txt" | tail -20 || true
                continue
            fi
            echo "-- selftest small: $(grep -c '^PASS' "$v/small.txt") PASS"
            IFS=';' read -ra cmds <<<"$CHECKS"
            for c in "${cmds[@]}"; do
                # shellcheck disable=SC2086 # a command is its words
                timeout 300 "$v/sm90_selftest" $c >"$v/check.txt" 2>&1 && rc=0 || rc=$?
                echo "-- selftest $c: rc $rc, $(grep -c '^PASS' "$v/check.txt") PASS"
                grep -v '^PASS' "$v/check.txt" | tail -20 || true
            done
            IFS=';' read -ra cmds <<<"$TIMINGS"
            for c in "${cmds[@]}"; do
                echo "-- sm90_ab $c"
                # shellcheck disable=SC2086
                timeout 300 "$v/sm90_ab" $c 2>&1 || echo "rc $?"
            done
        done
    } >"$LOG" 2>&1
    echo "log: $LOG"
    exit 0
fi

REV=${1:?usage: scripts/sm90_variants.sh REV DIR FLAGS...}
DIR=$(realpath -m "${2:?usage: scripts/sm90_variants.sh REV DIR FLAGS...}")
shift 2
[ $# -gt 0 ] || { echo "no variants given" >&2; exit 2; }
mkdir -p "$DIR"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export SM90_AB_BASE_O=$WORK/base.o # REV's forward, built by the first variant and linked by the others
i=0
for flags in "$@"; do
    v=$WORK/v$i
    mkdir -p "$v"
    echo "$flags" >"$v/flags"
    # shellcheck disable=SC2086 # flags is a list of flags
    (
        cd "$ROOT"
        nvcc -std=c++17 -O3 $flags -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc/api -Isrc/cuda/sm90 \
            scripts/sm90_selftest.cu -o "$v/sm90_selftest"
        SM90_AB_FLAGS="$flags" scripts/sm90_ab.sh "$REV" "$v/sm90_ab" >/dev/null
        echo "built variant v$i: $flags"
    ) &
    i=$((i + 1))
    # the first alone (it builds REV's forward), then two at a time
    if [ $i -eq 1 ] || [ $((i % 2)) -eq 1 ]; then wait; fi
done
wait
for ((j = 0; j < $#; ++j)); do
    if [ ! -x "$WORK/v$j/sm90_selftest" ] || [ ! -x "$WORK/v$j/sm90_ab" ]; then
        echo "variant v$j failed to build" >&2
        exit 1
    fi
done
tar -cJf "$DIR/variants.tar.xz" -C "$WORK" --exclude=./base.o .
echo "packed $# variants into $DIR/variants.tar.xz ($(du -h "$DIR/variants.tar.xz" | cut -f1))"
