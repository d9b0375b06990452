#!/bin/sh
# Exercise the flashattn command: exit codes, flag errors, checks over awkward
# shapes and every option on the given backend, and the JSON output.
# usage: tools/test_cli.sh path/to/flashattn [backend]
set -u
bin=${1:?usage: tools/test_cli.sh path/to/flashattn [backend]}
backend=${2:-cpu}
failures=0

expect() { # expect <exit status> <args...>
    want=$1
    shift
    "$bin" "$@" >/tmp/flashattn_cli_test.$$ 2>&1
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL (exit $got, wanted $want): flashattn $*"
        sed 's/^/    /' /tmp/flashattn_cli_test.$$
        failures=$((failures + 1))
    else
        echo "ok   flashattn $*"
    fi
}

said() { # said <text>: the last expect's output names it
    if ! grep -qF -e "$1" /tmp/flashattn_cli_test.$$; then
        echo "FAIL the message of the last command does not say '$1'"
        sed 's/^/    /' /tmp/flashattn_cli_test.$$
        failures=$((failures + 1))
    fi
}

expect 0 --help
expect 2
expect 2 frobnicate
expect 0 info
expect 0 bench --help
expect 0 check --help
expect 2 bench --no-such-flag
expect 2 bench --batch
expect 2 bench --batch zero
expect 2 bench --dtype f64
expect 2 bench --dropout 1
expect 2 bench --window 5
expect 2 bench --heads 6 --kv-heads 4
expect 2 bench --against cpu
expect 2 check --repeat 3
expect 2 info --verbose
expect 2 check --decode --dtype e4m3; said "--decode cannot be combined with --dtype e4m3"
expect 2 bench --dtype e4m3 --kvcache
expect 2 check --dtype e4m3 --deterministic; said "--deterministic" # asks for the backward, which float8 lacks
expect 2 check --dtype e4m3 --dropout 0.1; said "--dropout"
expect 2 check --descale; said "--descale needs --dtype e4m3"
expect 1 check --backend "$backend" --head-dim 300 --seqlen 8

small="--backend $backend --batch 2 --heads 4"
case $backend in cuda*) f32=f16 ;; *) f32=f32 ;; esac # GPUs hold no float32 attention
expect 0 check $small --seqlen 113
expect 0 check $small --seqlen 1
expect 0 check $small --seqlen-q 17 --seqlen-k 203 --kv-heads 2 --head-dim 40
expect 0 check $small --seqlen-q 203 --seqlen-k 17 --kv-heads 1 --head-dim 59 --head-dim-v 80
expect 0 check $small --seqlen-q 3 --seqlen-k 79 --top-left --dtype f16
expect 0 check $small --seqlen 64 --dtype $f32 --no-causal --softcap 3 --alibi
expect 0 check $small --seqlen 97 --window 16,4 --dropout 0.2
expect 0 check $small --seqlen 65 --deterministic --scale 0.3
expect 0 check $small --decode --cache-len 100 --new 3 --block-size 16
expect 0 check $small --decode --cache-len 33 --block-size 1 --splits 3 --dtype $f32
expect 0 bench $small --seqlen 64 --repeat 2 --warmup 1
expect 0 bench $small --seqlen 64 --repeat 2 --no-check --fwd-only

# float8 e4m3 forward (bf16 out): the CPU backends take any shape; of the GPUs
# only Hopper's kernels do, for head dims that are multiples of 16 without ALiBi.
case $backend in
cuda_sm80) e4m3=no ;;
cuda*) if "$bin" info | grep -q "compute capability 9\.0"; then e4m3=hopper; else e4m3=no; fi ;;
*) e4m3=cpu ;;
esac
if [ "$e4m3" != no ]; then
    expect 0 check $small --seqlen 113 --dtype e4m3 --no-causal
    expect 0 check $small --seqlen-q 70 --seqlen-k 203 --dtype float8_e4m3 --descale    # causal, bottom-right
    expect 0 check $small --seqlen 97 --kv-heads 1 --head-dim 128 --dtype float8_e4m3fn --softcap 5
    expect 0 check $small --seqlen 80 --kv-heads 2 --head-dim 32 --dtype e4m3 --varlen --window 16,4 --descale
    expect 0 bench $small --seqlen 64 --repeat 2 --warmup 1 --dtype e4m3
fi
if [ "$e4m3" = cpu ]; then
    expect 0 check $small --seqlen-q 203 --seqlen-k 17 --kv-heads 2 --head-dim 40 --dtype e4m3 --alibi --top-left
fi

if command -v python3 >/dev/null 2>&1; then
    if "$bin" bench $small --seqlen 48 --repeat 2 --json |
        python3 -c 'import json, sys; rows = [json.loads(l) for l in sys.stdin]; assert len(rows) == 2 and all(r["pass"] for r in rows)'; then
        echo "ok   bench --json gives one valid object per direction"
    else
        echo "FAIL bench --json"
        failures=$((failures + 1))
    fi
    if [ "$e4m3" != no ]; then
        if "$bin" bench $small --seqlen 48 --repeat 2 --dtype e4m3 --json |
            python3 -c 'import json, sys; rows = [json.loads(l) for l in sys.stdin]; assert len(rows) == 1 and rows[0]["dtype"] == "e4m3" and rows[0]["direction"] == "fwd" and rows[0]["pass"]'; then
            echo "ok   bench --dtype e4m3 --json gives one valid forward object"
        else
            echo "FAIL bench --dtype e4m3 --json"
            failures=$((failures + 1))
        fi
    fi
fi

rm -f /tmp/flashattn_cli_test.$$
if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all passed"
