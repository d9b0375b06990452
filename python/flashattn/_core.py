"""Direct calls into the C library on NumPy arrays or torch tensors, without
autograd. Each function allocates its outputs like its inputs (same kind,
same device) and returns them."""

import ctypes
import os
import threading

import numpy as np

from . import _tensors as T
from ._lib import Align, Backend, DType, FaOptions, FaTensor, FlashAttnError, Status, check, lib

# ---------------------------------------------------------------------------
# Per-thread contexts (a context is not thread-safe)
# ---------------------------------------------------------------------------

_settings = {"backend": Backend.AUTO, "num_threads": 0}
_tls = threading.local()


class _Context:
    """One fa_context, destroyed with its thread's state."""

    def __init__(self):
        self.handle = ctypes.c_void_p()
        check(lib().fa_context_create(ctypes.byref(self.handle)))
        self.backend = None
        self.num_threads = None
        self.stream = None

    def __del__(self):
        try:
            if self.handle:
                lib().fa_context_destroy(self.handle)
        except Exception:  # interpreter shutdown
            pass


def set_backend(backend):
    """Backend for later calls on every thread: "auto" (default), "reference",
    "cpu", "cuda" or "cuda_sm80", or a Backend value."""
    if isinstance(backend, str):
        try:
            backend = Backend[backend.upper()]
        except KeyError:
            raise FlashAttnError(Status.ERR_OPTION, f"backend: unknown name {backend!r} "
                                 "(auto, reference, cpu, cuda, cuda_sm80)") from None
    _settings["backend"] = Backend(backend)


def get_backend():
    return _settings["backend"].name.lower()


def set_num_threads(n):
    """CPU worker threads for later calls; 0 (default) uses every core."""
    if int(n) < 0:
        raise FlashAttnError(Status.ERR_OPTION, f"num_threads: must be >= 0, got {n}")
    _settings["num_threads"] = int(n)


def _context(device_like):
    """This thread's context, configured for a call on device_like's device."""
    ctx = getattr(_tls, "ctx", None)
    if ctx is None:
        ctx = _tls.ctx = _Context()
    L = lib()
    if ctx.backend != _settings["backend"]:
        check(L.fa_context_set_backend(ctx.handle, int(_settings["backend"])))
        ctx.backend = _settings["backend"]
    if ctx.num_threads != _settings["num_threads"]:
        check(L.fa_context_set_num_threads(ctx.handle, _settings["num_threads"]))
        ctx.num_threads = _settings["num_threads"]
    stream = None
    if _is_cuda(device_like):
        # run on torch's current stream so ordering with torch's own work holds
        import torch
        stream = torch.cuda.current_stream(device_like.device).cuda_stream
    if ctx.stream != stream:
        check(L.fa_context_set_cuda_stream(ctx.handle, stream))
        ctx.stream = stream
    return ctx


def _is_cuda(x):
    return T.is_torch(x) and x.device.type == "cuda"


# Workspace for CUDA tensors comes from torch's caching allocator (sized by a
# dry run), so the library never calls cudaMalloc behind torch's back.
_TORCH_WORKSPACE = os.environ.get("FLASHATTN_TORCH_WORKSPACE", "1") != "0"


def _invoke(name, device_like, *args):
    """Call fa_<name>(ctx, *args) for tensors living where device_like lives."""
    L = lib()
    fn = getattr(L, name)
    ctx = _context(device_like)
    if not _is_cuda(device_like):
        check(fn(ctx.handle, *args))
        return
    import torch
    with torch.cuda.device(device_like.device):
        if not _TORCH_WORKSPACE:
            check(fn(ctx.handle, *args))
            return
        check(L.fa_context_set_dry_run(ctx.handle, 1))
        try:
            check(fn(ctx.handle, *args))
        finally:
            L.fa_context_set_dry_run(ctx.handle, 0)
        need = L.fa_context_workspace_needed(ctx.handle)
        if need == 0:
            check(fn(ctx.handle, *args))
            return
        # freed after the call: torch reuses it only after this stream's work
        ws = torch.empty(need, dtype=torch.uint8, device=device_like.device)
        check(L.fa_context_set_workspace(ctx.handle, ws.data_ptr(), need))
        try:
            check(fn(ctx.handle, *args))
        finally:
            L.fa_context_set_workspace(ctx.handle, None, 0)


# ---------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------

def make_options(like, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                 alibi_slopes=None, dropout_p=0.0, seed=0, offset=0, deterministic=False,
                 align=Align.BOTTOM_RIGHT, q_descale=None, k_descale=None, v_descale=None):
    """fa_options for these arguments; returns (options, objects to keep alive).
    The descales (float8 inputs): float32 (batch, nheads_k), or None for 1."""
    o = FaOptions()
    o.scale = 0.0 if softmax_scale is None else float(softmax_scale)
    o.causal = int(bool(causal))
    left, right = (-1, -1) if window_size is None else window_size
    left, right = int(left), int(right)
    if left != -1 or right != -1:
        o.use_window = 1
    o.window_left, o.window_right = left, right
    o.align = int(align)
    o.softcap = float(softcap or 0.0)
    keep = []
    if alibi_slopes is not None:
        slopes = T.as_readable(T.to_like(alibi_slopes, like, DType.F32), "alibi_slopes")
        keep.append(slopes)
        o.alibi_slopes = T.describe(slopes, "alibi_slopes")
    for name, x in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
        if x is not None:
            x = T.as_readable(T.to_like(x, like, DType.F32), name)
            keep.append(x)
            setattr(o, name, T.describe(x, name))
    o.dropout_p = float(dropout_p or 0.0)
    o.dropout_seed = int(seed) & (2**64 - 1)
    o.dropout_offset = int(offset) & (2**64 - 1)
    o.deterministic = int(bool(deterministic))
    return o, keep


def _shape_error(name, x, want):
    if x is not None and x.ndim != len(want):
        raise FlashAttnError(Status.ERR_SHAPE, f"{name}: expected {len(want)} dimensions "
                             f"({', '.join(want)}), got shape {tuple(x.shape)}")


_BSHD = ("batch", "seqlen", "heads", "head_dim")
_THD = ("total", "heads", "head_dim")


def _ref(t):
    return ctypes.byref(t) if t is not None else None


def _out_code(q):
    """The output's fa_dtype: q's, or bfloat16 for float8 inputs."""
    code = T.dtype_code(q, "q")
    return DType.BF16 if code == DType.F8_E4M3 else code


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------

def fwd(q, k, v, want_lse=True, **opts):
    """fa_fwd: returns (out, lse); lse is None unless want_lse."""
    q, k, v = (T.as_readable(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        _shape_error(n, x, _BSHD)
    B, Sq, Hq, _ = q.shape
    out = T.empty(q, (B, Sq, Hq, v.shape[-1]), _out_code(q))
    lse = T.empty(q, (B, Hq, Sq), DType.F32) if want_lse else None
    o, keep = make_options(q, **opts)
    tq, tk, tv, to, tl = (T.describe(x, n) for x, n in
                          ((q, "q"), (k, "k"), (v, "v"), (out, "out"), (lse, "lse")))
    _invoke("fa_fwd", q, _ref(tq), _ref(tk), _ref(tv), _ref(o), _ref(to),
            _ref(tl) if lse is not None else None)
    del keep
    return out, lse


def bwd(dout, q, k, v, out, lse, **opts):
    """fa_bwd: returns (dq, dk, dv), shaped and typed like q, k, v."""
    names = ("dout", "q", "k", "v", "out", "lse")
    dout, q, k, v, out, lse = (T.as_readable(x, n) for x, n in zip((dout, q, k, v, out, lse), names))
    dq = T.empty(q, q.shape, T.dtype_code(q, "q"))
    dk = T.empty(q, k.shape, T.dtype_code(k, "k"))
    dv = T.empty(q, v.shape, T.dtype_code(v, "v"))
    o, keep = make_options(q, **opts)
    ts = [T.describe(x, n) for x, n in zip((dout, q, k, v, out, lse, dq, dk, dv),
                                           names + ("dq", "dk", "dv"))]
    _invoke("fa_bwd", q, *[_ref(t) for t in ts[:6]], _ref(o), *[_ref(t) for t in ts[6:]])
    del keep
    return dq, dk, dv


def _cu_seqlens(cu, like, name):
    if cu is None:
        raise FlashAttnError(Status.ERR_NULL_POINTER, f"{name}: required")
    return T.as_readable(T.to_like(cu, like, DType.I32), name)


def varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
               want_lse=True, **opts):
    """fa_varlen_fwd: returns (out (total_q, Hq, Dv), lse (Hq, total_q) or None)."""
    q, k, v = (T.as_readable(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        _shape_error(n, x, _THD)
    cq = _cu_seqlens(cu_seqlens_q, q, "cu_seqlens_q")
    ck = _cu_seqlens(cu_seqlens_k, q, "cu_seqlens_k")
    total_q, Hq, _ = q.shape
    out = T.empty(q, (total_q, Hq, v.shape[-1]), _out_code(q))
    lse = T.empty(q, (Hq, total_q), DType.F32) if want_lse else None
    o, keep = make_options(q, **opts)
    ts = [T.describe(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"), (cq, "cu_seqlens_q"),
                                        (ck, "cu_seqlens_k"), (out, "out"))]
    tl = T.describe(lse, "lse") if lse is not None else None
    _invoke("fa_varlen_fwd", q, *[_ref(t) for t in ts[:5]], int(max_seqlen_q or 0),
            int(max_seqlen_k or 0), _ref(o), _ref(ts[5]), _ref(tl))
    del keep
    return out, lse


def varlen_bwd(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
               **opts):
    """fa_varlen_bwd: returns (dq, dk, dv)."""
    names = ("dout", "q", "k", "v", "out", "lse")
    dout, q, k, v, out, lse = (T.as_readable(x, n) for x, n in zip((dout, q, k, v, out, lse), names))
    cq = _cu_seqlens(cu_seqlens_q, q, "cu_seqlens_q")
    ck = _cu_seqlens(cu_seqlens_k, q, "cu_seqlens_k")
    dq = T.empty(q, q.shape, T.dtype_code(q, "q"))
    dk = T.empty(q, k.shape, T.dtype_code(k, "k"))
    dv = T.empty(q, v.shape, T.dtype_code(v, "v"))
    o, keep = make_options(q, **opts)
    ins = [T.describe(x, n) for x, n in zip((dout, q, k, v, out, lse, cq, ck),
                                            names + ("cu_seqlens_q", "cu_seqlens_k"))]
    outs = [T.describe(x, n) for x, n in ((dq, "dq"), (dk, "dk"), (dv, "dv"))]
    _invoke("fa_varlen_bwd", q, *[_ref(t) for t in ins], int(max_seqlen_q or 0),
            int(max_seqlen_k or 0), _ref(o), *[_ref(t) for t in outs])
    del keep
    return dq, dk, dv


def fwd_kvcache(q, k_cache, v_cache, cache_seqlens=None, block_table=None, k_new=None, v_new=None,
                num_splits=0, want_lse=True, **opts):
    """fa_fwd_kvcache: appends k_new / v_new into the caches in place, then
    attends. Returns (out, lse or None)."""
    q = T.as_readable(q, "q")
    _shape_error("q", q, _BSHD)
    for x, n in ((k_cache, "k_cache"), (v_cache, "v_cache")):
        _shape_error(n, x, _BSHD)
        if T.is_torch(x) or isinstance(x, np.ndarray):
            continue
        raise FlashAttnError(Status.ERR_DTYPE, f"{n}: must be a NumPy array or torch tensor "
                             "(it is written in place)")
    k_new = T.as_readable(k_new, "k")
    v_new = T.as_readable(v_new, "v")
    if isinstance(cache_seqlens, (int, np.integer)):
        cache_seqlens = T.full_int32(q, (q.shape[0],), int(cache_seqlens))
    elif cache_seqlens is not None:
        cache_seqlens = T.as_readable(T.to_like(cache_seqlens, q, DType.I32), "cache_seqlens")
    if block_table is not None:
        block_table = T.as_readable(T.to_like(block_table, q, DType.I32), "block_table")
    B, Sq, Hq, _ = q.shape
    out = T.empty(q, (B, Sq, Hq, v_cache.shape[-1]), T.dtype_code(q, "q"))
    lse = T.empty(q, (B, Hq, Sq), DType.F32) if want_lse else None
    o, keep = make_options(q, **opts)
    names = ("q", "k_cache", "v_cache", "cache_seqlens", "block_table", "k", "v")
    ts = [T.describe(x, n) if x is not None else None
          for x, n in zip((q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new), names)]
    to = T.describe(out, "out")
    tl = T.describe(lse, "lse") if lse is not None else None
    _invoke("fa_fwd_kvcache", q, *[_ref(t) for t in ts], int(num_splits), _ref(o), _ref(to),
            _ref(tl))
    del keep
    return out, lse


def merge(outs, lses, out_dtype=None):
    """fa_merge: exact merge of partial results over disjoint key sets.
    outs[i] (B, S, H, Dv), lses[i] (B, H, S) float32. Returns (out, lse)."""
    outs = [T.as_readable(x, f"outs[{i}]") for i, x in enumerate(outs)]
    lses = [T.as_readable(x, f"lses[{i}]") for i, x in enumerate(lses)]
    if not outs or len(outs) != len(lses):
        raise FlashAttnError(Status.ERR_SHAPE, "outs, lses: need the same number (>= 1) of each")
    first = outs[0]
    code = T.dtype_code(first, "outs[0]") if out_dtype is None else out_dtype
    out = T.empty(first, first.shape, code)
    lse = T.empty(first, lses[0].shape, DType.F32)
    to_arr = (FaTensor * len(outs))(*[T.describe(x, f"outs[{i}]") for i, x in enumerate(outs)])
    tl_arr = (FaTensor * len(lses))(*[T.describe(x, f"lses[{i}]") for i, x in enumerate(lses)])
    t_out, t_lse = T.describe(out, "out"), T.describe(lse, "lse")
    _invoke("fa_merge", first, len(outs), to_arr, tl_arr, ctypes.byref(t_out), ctypes.byref(t_lse))
    return out, lse


def dropout_mask(seed, offset, p, batch, nheads, seqlen_q, seqlen_k):
    """The dropout keep-mask (batch, nheads, seqlen_q, seqlen_k) as a NumPy
    uint8 array: 1 where an attention probability is kept."""
    mask = np.empty((batch, nheads, seqlen_q, seqlen_k), dtype=np.uint8)
    t = T.describe(mask, "mask")
    check(lib().fa_dropout_mask(int(seed) & (2**64 - 1), int(offset) & (2**64 - 1), float(p),
                                ctypes.byref(t)))
    return mask
