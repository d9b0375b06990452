#!/usr/bin/env python3
"""The GEMM loops of CUDA kernels as the assembler scheduled them, read from
the SASS without a GPU: per loop (a backward branch whose body holds wgmma
instructions, HGMMA) its address range, instruction count, opcode counts and
the sum of the stall cycles in the instructions' control words.

    python3 scripts/sass_loops.py OBJECT [REGEX ...] [--list] [--dump LO-HI]

OBJECT is an object file, shared library or cubin holding sm_90a code (for
example `nvcc ... -c src/cuda/sm90/sm90_fwd.cu -o fwd.o`); REGEX picks kernels
by their demangled names (all kernels if none is given). --list prints only
the matching names. --dump LO-HI also prints each instruction of that hex
address range with its control fields (stall, yield, write and read
scoreboards, wait mask).

The stall sum is a static figure: the cycles the schedule makes a warp wait
after each instruction in issue order, before any wait on a scoreboard
(memory, MUFU, wgmma) or a barrier. Two schedules of the same loop compare by
it; the time a loop takes on the GPU is at least that sum for each warp.

Needs nvdisasm and cuobjdump on PATH (scripts/fetch_cuda_tools.sh fetches
them into build/cuda-tools) and c++filt.

Control word layout (the upper 23 bits of each 128-bit sm_70+ instruction):
stall cycles in bits 105-108, yield 109, write scoreboard 110-112, read
scoreboard 113-115, wait mask 116-121, operand reuse 122-125.
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

INSTR = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/")
WORD = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/")
BRANCH = re.compile(r"\bBRA\b.*?\(\.L_x_(\d+)\)")
LABEL = re.compile(r"^\.L_x_(\d+):")


def cubins(path, tmp):
    """The sm_90a cubins in path (itself, if it is one)."""
    if path.endswith(".cubin"):
        return [path]
    subprocess.run(["cuobjdump", "-xelf", "all", os.path.abspath(path)], cwd=tmp, check=True,
                   stdout=subprocess.DEVNULL)
    return sorted(f for f in glob.glob(os.path.join(tmp, "*.cubin")) if "sm_90" in f)


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def functions(cubin):
    """{mangled name: [(address, text, control word fields, label before it)]}."""
    text = subprocess.run(["nvdisasm", "-hex", "-c", cubin], capture_output=True, text=True, check=True).stdout
    funcs, cur, pending = {}, None, None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(".text.") and line.endswith(":"):
            cur = line[len(".text."):-1]
            funcs[cur] = []
        m = LABEL.match(line)
        if m:
            pending = int(m.group(1))
        m = INSTR.match(line)
        if m and cur is not None and i + 1 < len(lines):
            hi = WORD.match(lines[i + 1])
            ctl = int(hi.group(1), 16) >> 41 if hi else 0
            fields = dict(stall=ctl & 0xF, yld=(ctl >> 4) & 1, wb=(ctl >> 5) & 7, rb=(ctl >> 8) & 7,
                          wait=(ctl >> 11) & 0x3F)
            funcs[cur].append((int(m.group(1), 16), m.group(2), fields, pending))
            pending = None
            i += 2
            continue
        i += 1
    return funcs


def loops(body):
    """(first, last) indices of the loops that hold HGMMA, innermost first.
    Past the kernel's last unconditional EXIT lie the retry paths of its
    barrier waits, whose branches back into the code are not loops."""
    at_label = {lab: n for n, (_a, _t, _f, lab) in enumerate(body) if lab is not None}
    end = max((n for n, (_a, text, _f, _l) in enumerate(body) if text == "EXIT"), default=len(body))
    found = []
    for n, (_a, text, _f, _l) in enumerate(body[:end]):
        m = BRANCH.search(text)
        if m and int(m.group(1)) in at_label and at_label[int(m.group(1))] <= n:
            first = at_label[int(m.group(1))]
            if any("HGMMA" in t for _a, t, _f, _l in body[first:n + 1]):
                found.append((first, n))
    return sorted(found, key=lambda r: r[1] - r[0])


def opcode(text):
    return re.sub(r"^@!?U?P[0-9T]+\s+", "", text).split()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("object")
    ap.add_argument("regex", nargs="*")
    ap.add_argument("--list", action="store_true", help="print the matching kernels' names only")
    ap.add_argument("--dump", metavar="LO-HI", help="print the instructions of this hex address range")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for cubin in cubins(args.object, tmp):
            funcs = functions(cubin)
            names = demangle(list(funcs))
            for mangled, body in funcs.items():
                name = names[mangled]
                if args.regex and not any(re.search(r, name) for r in args.regex):
                    continue
                print("%s  (%d instructions)" % (name, len(body)))
                if args.list:
                    continue
                for first, last in loops(body):
                    part = body[first:last + 1]
                    ops = collections.Counter(opcode(t) for _a, t, _f, _l in part)
                    print("  loop %05x-%05x  %4d instructions  stall sum %5d  waits %3d  HGMMA %d  MUFU %d  "
                          "BAR %d  SYNCS %d" % (part[0][0], part[-1][0], len(part),
                                                sum(f["stall"] for _a, _t, f, _l in part),
                                                sum(f["wait"] != 0 for _a, _t, f, _l in part),
                                                sum(n for o, n in ops.items() if o.startswith("HGMMA")),
                                                sum(n for o, n in ops.items() if o.startswith("MUFU")),
                                                sum(n for o, n in ops.items() if o.startswith("BAR")),
                                                sum(n for o, n in ops.items() if o.startswith("SYNCS"))))
                if args.dump:
                    lo, hi = (int(x, 16) for x in args.dump.split("-"))
                    for a, text, f, _l in body:
                        if lo <= a <= hi:
                            print("  %05x  s%-2d y%d wb%d rb%d wait%02x  %s" % (a, f["stall"], f["yld"], f["wb"],
                                                                             f["rb"], f["wait"], text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
