#!/usr/bin/env python3
"""Writes sm90_wgmma.cuh: one inline-PTX wrapper per wgmma shape the Hopper
kernels use. The accumulator lists are long (up to 128 registers), so they are
generated rather than typed. Run from this directory: python3 gen_wgmma.py"""

SS_N = (64, 128)          # S = Q K^T: N = kv block
RS_N = (64, 96, 128, 192, 256)  # O += P V:  N = head dim
RS_K_N = (8,)             # row sums of P: B a block of ones, K-major (LAG_MAX)
TYPES = (("bf16", "bf16"), ("f16", "f16"))
SS_TT_N = (64, 96, 128)   # backward dQ = dS K: both operands MN-major in smem
SS_KT_N = (96, 128)       # backward dK = dS^T Q with dS^T in smem: B MN-major
FP8_SS_N = (64, 128)     # e4m3: S = Q K^T (N = kv block) and, P from smem, O += P V^T; k32 steps
FP8_RS_N = (64, 128, 192, 256)  # e4m3: O += P V^T (V transposed: K-major), N = head dim


def regs(n, first):
    return ", ".join("%%%d" % (first + i) for i in range(n))


def acc_operands(n):
    lines = []
    for i in range(0, n, 8):
        lines.append("          " + ", ".join('"+f"(d[%d])' % j for j in range(i, min(i + 8, n))))
    return ",\n".join(lines)


def ss(n, name, ptx, trans_a=0, trans_b=0):
    """Both operands from shared memory; trans_x = 1: that operand is stored
    MN-major (its k dimension as rows), the wgmma transpose immediate."""
    na = n // 2
    major = lambda t: "MN-major" if t else "K-major"
    b_shape = f"B(16x{n}, smem, {major(trans_b)})" if trans_b else f"B({n}x16, smem, K-major)^T"
    kind = {(0, 0): "ss", (1, 1): "ss_tt", (0, 1): "ss_kt"}[(trans_a, trans_b)]
    return f'''/* D(64x{n}) (+)= A(64x16, smem, {major(trans_a)}) * {b_shape} */
__device__ __forceinline__ void wgmma_{kind}_m64n{n}_{name}(float *d, uint64_t desc_a, uint64_t desc_b, int accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{na + 2}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} "
        "{{{regs(na, 0)}}}, %{na}, %{na + 1}, p, 1, 1, {trans_a}, {trans_b};\\n}}\\n"
        : {acc_operands(na).strip()}
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}}
'''


def rs(n, name, ptx, trans_b=1):
    """A from registers; trans_b = 1: B stored MN-major (V), 0: K-major."""
    na = n // 2
    kind, b_shape = ("rs", f"B(16x{n}, smem, MN-major)") if trans_b else ("rs_k", f"B({n}x16, smem, K-major)^T")
    return f'''/* D(64x{n}) (+)= A(64x16, registers) * {b_shape} */
__device__ __forceinline__ void wgmma_{kind}_m64n{n}_{name}(float *d, const uint32_t *a, uint64_t desc_b, int accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{na + 5}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} "
        "{{{regs(na, 0)}}}, {{%{na}, %{na + 1}, %{na + 2}, %{na + 3}}}, %{na + 4}, p, 1, 1, {trans_b};\\n}}\\n"
        : {acc_operands(na).strip()}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}}
'''


def ss_fp8(n):
    na = n // 2
    return f'''/* D(64x{n}) (+)= A(64x32, smem, K-major) * B({n}x32, smem, K-major)^T, e4m3 inputs
 * (8-bit operands exist only K-major: no transpose immediates) */
__device__ __forceinline__ void wgmma_ss_m64n{n}_e4m3(float *d, uint64_t desc_a, uint64_t desc_b, int accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{na + 2}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 "
        "{{{regs(na, 0)}}}, %{na}, %{na + 1}, p, 1, 1;\\n}}\\n"
        : {acc_operands(na).strip()}
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}}
'''


def rs_fp8(n):
    na = n // 2
    return f'''/* D(64x{n}) (+)= A(64x32, registers, 4 e4m3 per register) * B({n}x32, smem, K-major)^T */
__device__ __forceinline__ void wgmma_rs_m64n{n}_e4m3(float *d, const uint32_t *a, uint64_t desc_b, int accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{na + 5}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 "
        "{{{regs(na, 0)}}}, {{%{na}, %{na + 1}, %{na + 2}, %{na + 3}}}, %{na + 4}, p, 1, 1;\\n}}\\n"
        : {acc_operands(na).strip()}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}}
'''


def dispatch_chain(kind, ns, args, fp8_ns=None):
    """The body of a shape-generic entry point: one `if constexpr` per
    generated (N, type) wrapper, and a compile error for any other N. With
    fp8_ns, e4m3 inputs (FP8) go to the e4m3 wrappers of those N first."""
    def allowed(ns):
        return " || ".join("N == %d" % n for n in ns)
    lines = []
    if fp8_ns:
        lines.append("    if constexpr (FP8) {")
        lines.append('        static_assert(%s, "wgmma_%s e4m3: no wrapper generated for this N");' % (allowed(fp8_ns), kind))
        for n in fp8_ns:
            lines.append("        if constexpr (N == %d) wgmma_%s_m64n%d_e4m3(%s);" % (n, kind, n, args))
        lines.append("    } else {")
        indent = "        "
    else:
        indent = "    "
    lines.append('%sstatic_assert(%s, "wgmma_%s: no wrapper generated for this N");' % (indent, allowed(ns), kind))
    for n in ns:
        for name, flag in (("bf16", "BF16"), ("f16", "!BF16")):
            lines.append("%sif constexpr (N == %d && %s) wgmma_%s_m64n%d_%s(%s);" % (indent, n, flag, kind, n, name, args))
    if fp8_ns:
        lines.append("    }")
    return "\n".join(lines)


def dispatch():
    """Shape-generic entry points: the kernels name a shape by template
    arguments; the N lists are the ones the wrappers above were made from."""
    ss_args, rs_args = "d, da, db, accumulate", "d, a, db, accumulate"
    return f'''/* D(64xN) (+)= A B^T, both from shared memory (K-major). */
template <int N, bool BF16, bool FP8>
__device__ __forceinline__ void wgmma_ss(float *d, uint64_t da, uint64_t db, int accumulate) {{
{dispatch_chain("ss", SS_N, ss_args, FP8_SS_N)}
}}

/* D(64xN) (+)= A B, A from registers, B from shared memory (MN-major; K-major for e4m3). */
template <int N, bool BF16, bool FP8>
__device__ __forceinline__ void wgmma_rs(float *d, const uint32_t *a, uint64_t db, int accumulate) {{
{dispatch_chain("rs", RS_N, rs_args, FP8_RS_N)}
}}

/* D(64xN) (+)= A B^T, A from registers, B from shared memory (K-major). */
template <int N, bool BF16>
__device__ __forceinline__ void wgmma_rs_k(float *d, const uint32_t *a, uint64_t db, int accumulate) {{
{dispatch_chain("rs_k", RS_K_N, rs_args)}
}}

/* D(64xN) (+)= A B, both from shared memory, A K-major, B MN-major. */
template <int N, bool BF16>
__device__ __forceinline__ void wgmma_ss_kt(float *d, uint64_t da, uint64_t db, int accumulate) {{
{dispatch_chain("ss_kt", SS_KT_N, ss_args)}
}}

/* D(64xN) (+)= A B, both from shared memory, both MN-major. */
template <int N, bool BF16>
__device__ __forceinline__ void wgmma_ss_tt(float *d, uint64_t da, uint64_t db, int accumulate) {{
{dispatch_chain("ss_tt", SS_TT_N, ss_args)}
}}
'''


def main():
    out = ['''/* Generated by gen_wgmma.py -- do not edit by hand.
 *
 * Warpgroup MMA wrappers (sm_90a) for the Hopper forward and backward.
 * Accumulators are float32, 64 x N per warpgroup, N/2 registers per thread
 * (fragment layout in sm90_fwd_kernel.cuh). `accumulate` = 0 overwrites D
 * (first k-step), so no C code ever zeroes an accumulator inside a wgmma
 * pipeline stage. */
#ifndef FA_SM90_WGMMA_CUH
#define FA_SM90_WGMMA_CUH

#include <stdint.h>
''']
    for name, ptx in TYPES:
        for n in SS_N:
            out.append(ss(n, name, ptx))
        for n in RS_N:
            out.append(rs(n, name, ptx))
        for n in RS_K_N:
            out.append(rs(n, name, ptx, 0))
        for n in SS_TT_N:
            out.append(ss(n, name, ptx, 1, 1))
        for n in SS_KT_N:
            out.append(ss(n, name, ptx, 0, 1))
    for n in FP8_SS_N:
        out.append(ss_fp8(n))
    for n in FP8_RS_N:
        out.append(rs_fp8(n))
    out.append(dispatch())
    out.append("#endif /* FA_SM90_WGMMA_CUH */\n")
    with open("sm90_wgmma.cuh", "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()
