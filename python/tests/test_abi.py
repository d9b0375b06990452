"""The ctypes mirrors of fa_tensor and fa_options against the header, compiled
with the system C compiler (skipped when there is none)."""

import ctypes
import os
import shutil
import subprocess

import pytest

from flashattn._lib import FaOptions, FaTensor

HEADER_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "include")

PROGRAM = r"""
#include <stddef.h>
#include <stdio.h>
#include "flashattn.h"
#define F(T, f) printf(#T "." #f " %zu\n", offsetof(T, f));
int main(void) {
    printf("fa_tensor %zu\nfa_options %zu\n", sizeof(fa_tensor), sizeof(fa_options));
    F(fa_tensor, data) F(fa_tensor, dtype) F(fa_tensor, device) F(fa_tensor, device_index)
    F(fa_tensor, ndim) F(fa_tensor, shape) F(fa_tensor, stride)
    F(fa_options, scale) F(fa_options, causal) F(fa_options, use_window)
    F(fa_options, window_left) F(fa_options, window_right) F(fa_options, align)
    F(fa_options, softcap) F(fa_options, alibi_slopes) F(fa_options, dropout_p)
    F(fa_options, dropout_seed) F(fa_options, dropout_offset) F(fa_options, deterministic)
    F(fa_options, q_descale) F(fa_options, k_descale) F(fa_options, v_descale)
    return 0;
}
"""


@pytest.mark.skipif(not os.path.isfile(os.path.join(HEADER_DIR, "flashattn.h")),
                    reason="needs the source tree's include/flashattn.h")
def test_struct_layout_matches_header(tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "layout.c"
    exe = tmp_path / "layout"
    src.write_text(PROGRAM)
    subprocess.run([cc, "-std=c11", "-I", HEADER_DIR, str(src), "-o", str(exe)], check=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    got = dict(line.split() for line in lines if line)
    assert int(got["fa_tensor"]) == ctypes.sizeof(FaTensor)
    assert int(got["fa_options"]) == ctypes.sizeof(FaOptions)
    for struct, cls in (("fa_tensor", FaTensor), ("fa_options", FaOptions)):
        for name, _ in cls._fields_:
            assert int(got[f"{struct}.{name}"]) == getattr(cls, name).offset, f"{struct}.{name}"
