"""Float64 NumPy reference for attention, its gradients, a same-precision
naive implementation (the error baseline of flash-attn's tolerance rule), and
the dropout rule rebuilt from its definition in flashattn.h."""

import numpy as np

try:
    import ml_dtypes
except ImportError:  # bfloat16 tests are skipped without it
    ml_dtypes = None


def _expand_kv(x, groups):
    """(B, S, Hk, D) -> (B, S, Hk * groups, D): query head h reads kv head h // groups."""
    return np.repeat(x, groups, axis=2)


def visible(sq, sk, causal=False, window=(-1, -1), top_left=False):
    """Boolean (sq, sk): which keys each query row may see."""
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    diag = i + (0 if top_left else sk - sq)
    keep = np.ones((sq, sk), dtype=bool)
    if left >= 0:
        keep &= j >= diag - left
    if right >= 0:
        keep &= j <= diag + right
    return keep


def _slopes(alibi, B, H):
    if alibi is None:
        return None
    a = np.asarray(alibi, dtype=np.float64)
    return np.broadcast_to(a if a.ndim == 2 else a[None, :], (B, H))


def scores(q, k, scale=None, softcap=0.0, alibi=None, top_left=False, rnd=None):
    """Pre-softmax scores (B, H, Sq, Sk) and, with softcap, tanh(s0 / c)."""
    rnd = rnd or (lambda x: x)
    B, sq, H, D = q.shape
    sk = k.shape[1]
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    s = rnd(np.einsum("bihd,bjhd->bhij", q, _expand_kv(k, H // k.shape[2])) * scale)
    t = None
    if softcap > 0:
        t = np.tanh(s / softcap)
        s = rnd(softcap * t)
    sl = _slopes(alibi, B, H)
    if sl is not None:
        i = np.arange(sq)[:, None]
        j = np.arange(sk)[None, :]
        dist = np.abs(i + (0 if top_left else sk - sq) - j)
        s = rnd(s - sl[:, :, None, None] * dist)
    return s, t


def attention(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0, alibi=None,
              keep=None, dropout_p=0.0, top_left=False, dtype=None):
    """out (B, Sq, H, Dv) and lse (B, H, Sq). dtype None: float64 throughout;
    otherwise the naive computation rounded to dtype after every step."""
    if dtype is None:
        rnd = None
        q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    else:
        def rnd(x):
            return np.asarray(x).astype(dtype).astype(np.float32)
        q, k, v = (rnd(x) for x in (q, k, v))
    B, sq, H, _ = q.shape
    sk = k.shape[1]
    s, _ = scores(q, k, scale, softcap, alibi, top_left, rnd)
    mask = visible(sq, sk, causal, window, top_left)
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if sk else np.full(s.shape[:-1] + (1,), -np.inf)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    e = np.where(mask, np.exp(s - m_safe), 0.0)
    l = e.sum(axis=-1, keepdims=True)
    p = e / np.where(l > 0, l, 1.0)
    if rnd:
        p = rnd(p)
    with np.errstate(divide="ignore"):
        lse = np.where(l > 0, m_safe + np.log(np.where(l > 0, l, 1.0)), -np.inf)[..., 0]
    if keep is not None:
        p = p * keep / (1.0 - dropout_p)
    out = np.einsum("bhij,bjhd->bihd", p, _expand_kv(v, H // v.shape[2]))
    return (rnd(out) if rnd else out), lse


def attention_grads(q, k, v, dout, scale=None, causal=False, window=(-1, -1), softcap=0.0,
                    alibi=None, keep=None, dropout_p=0.0, top_left=False):
    """dq, dk, dv in float64 for the loss sum(dout * out)."""
    q, k, v, dout = (np.asarray(x, dtype=np.float64) for x in (q, k, v, dout))
    B, sq, H, D = q.shape
    sk, Hk = k.shape[1], k.shape[2]
    g = H // Hk
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    s, t = scores(q, k, scale, softcap, alibi, top_left)
    mask = visible(sq, sk, causal, window, top_left)
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    e = np.where(mask, np.exp(s - m_safe), 0.0)
    l = e.sum(axis=-1, keepdims=True)
    p = e / np.where(l > 0, l, 1.0)
    drop = keep / (1.0 - dropout_p) if keep is not None else 1.0
    kk, vv = _expand_kv(k, g), _expand_kv(v, g)
    dv = np.einsum("bhij,bihd->bjhd", p * drop, dout)
    dp = np.einsum("bihd,bjhd->bhij", dout, vv) * drop
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))
    if t is not None:
        ds = ds * (1.0 - t * t)  # d/ds0 of c * tanh(s0 / c)
    dq = scale * np.einsum("bhij,bjhd->bihd", ds, kk)
    dk = scale * np.einsum("bhij,bihd->bjhd", ds, q)
    fold = lambda x: x.reshape(B, sk, Hk, g, x.shape[-1]).sum(axis=3)  # noqa: E731
    return dq, fold(dk), fold(dv)


# --- Philox4x32-10 and the dropout rule, from the header's definition ----------

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Vectorised Philox4x32-10 (Salmon et al., SC'11) on uint64 arrays holding 32-bit words."""
    c0, c1, c2, c3, k0, k1 = (np.asarray(x, dtype=np.uint64) & _LO for x in (c0, c1, c2, c3, k0, k1))
    for _ in range(10):
        p0 = _M0 * c0
        p1 = _M1 * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _LO,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _LO)
        k0 = (k0 + _W0) & _LO
        k1 = (k1 + _W1) & _LO
    return c0, c1, c2, c3


def dropout_keep(seed, offset, p, B, H, sq, sk):
    """uint8 (B, H, sq, sk) keep-mask by the rule written in flashattn.h."""
    b, h, i, j = np.meshgrid(np.arange(B), np.arange(H), np.arange(sq), np.arange(sk),
                             indexing="ij")
    b, h, i, j = (x.astype(np.uint64) for x in (b, h, i, j))
    seed, offset = np.uint64(seed), np.uint64(offset)
    c3 = ((offset & _LO) + (offset >> np.uint64(32)) * _W0) & _LO
    r = philox4x32_10(j >> np.uint64(2), i, h | (b << np.uint64(16)), c3,
                      seed & _LO, seed >> np.uint64(32))
    word = np.choose((j & np.uint64(3)).astype(np.int64), r)
    threshold = np.uint64(min(int(np.floor(np.float64(np.float32(p)) * 2.0**32)), 0xFFFFFFFF))
    return (word >= threshold).astype(np.uint8)


# --- tolerance ------------------------------------------------------------------

def max_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def assert_close(got, ref, naive=None, mult=2.0, unit=None, rtol32=2e-5):
    """float32: max error below rtol32 * max(|ref|, 1) + 1e-6. Half precision:
    flash-attn's rule, max error at most mult x the naive same-precision error,
    plus a floor of one rounding unit (unit: 2**-11 float16, 2**-8 bfloat16)."""
    got = np.asarray(got).astype(np.float64)
    assert np.all(np.isfinite(got)), "non-finite values in the output"
    scale = float(np.max(np.abs(ref))) if np.size(ref) else 0.0
    err = max_err(got, ref)
    if naive is None:
        tol = rtol32 * max(scale, 1.0) + 1e-6
        assert err <= tol, f"max error {err:.3g} > {tol:.3g} (max |ref| {scale:.3g})"
    else:
        base = max_err(naive, ref)
        floor = 1e-5 + (unit or 0.0) * max(scale, 1.0)
        assert err <= mult * base + floor, (
            f"max error {err:.3g} > {mult} x naive {base:.3g} + {floor:.2g}")
