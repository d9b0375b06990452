"""The binding on NumPy arrays (CPU), against the float64 reference in
reference.py. Needs only numpy, pytest and (for bfloat16) ml_dtypes. Outputs
start as NaN (FLASHATTN_POISON, set in conftest.py), so every check that the
output is finite and matches also checks that every element was written."""

import numpy as np
import pytest

import flashattn as fa
from flashattn import _core, _tensors
from conftest import DTYPES, UNIT
import reference as R


def randn(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(DTYPES[dtype])


def check_fwd(out, lse, q, k, v, dtype, **kw):
    ref, ref_lse = R.attention(q, k, v, **kw)
    naive = None if dtype == "float32" else R.attention(q, k, v, dtype=DTYPES[dtype], **kw)[0]
    assert out.dtype == q.dtype and out.shape == ref.shape
    R.assert_close(out, ref, naive, unit=UNIT[dtype])
    if lse is not None:
        assert lse.dtype == np.float32 and lse.shape == ref_lse.shape
        fin = np.isfinite(ref_lse)
        assert np.array_equal(np.isfinite(lse), fin), "-inf lse exactly on empty rows"
        assert np.all(lse[~fin] == -np.inf)
        assert R.max_err(lse[fin], ref_lse[fin]) <= 1e-4 * max(1.0, np.abs(ref_lse[fin]).max(initial=0))


# --- dense -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("sq,sk", [(1, 1), (17, 17), (113, 203), (3, 79), (64, 31), (1, 239)])
@pytest.mark.parametrize("d", [32, 59])
@pytest.mark.parametrize("causal", [False, True])
def test_forward(rng, dtype, sq, sk, d, causal):
    q = randn(rng, (2, sq, 4, d), dtype)
    k = randn(rng, (2, sk, 2, d), dtype)
    v = randn(rng, (2, sk, 2, d), dtype)
    out, lse, mask = fa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    assert mask is None
    check_fwd(out, lse, q, k, v, dtype, causal=causal)


@pytest.mark.parametrize("window", [(4, 0), (0, 3), (7, 7), (-1, 2), (5, -1)])
@pytest.mark.parametrize("causal", [False, True])
def test_window(rng, backend, window, causal):
    q, k, v = (randn(rng, (2, s, 3, 40), "float32") for s in (37, 53, 53))
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, window_size=window,
                                     return_attn_probs=True)
    check_fwd(out, lse, q, k, v, "float32", causal=causal, window=window)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_softcap_scale_large_scores(rng, dtype):
    # large magnitudes: the softcap bounds them, and the row max moves late
    q = randn(rng, (1, 29, 2, 64), dtype, 4.0)
    k = randn(rng, (1, 150, 2, 64), dtype, 4.0)
    v = randn(rng, (1, 150, 2, 64), dtype)
    out, lse, _ = fa.flash_attn_func(q, k, v, softmax_scale=0.3, softcap=30.0,
                                     return_attn_probs=True)
    check_fwd(out, lse, q, k, v, dtype, scale=0.3, softcap=30.0)


def test_row_max_in_later_block(rng):
    q = randn(rng, (1, 8, 1, 32), "float32")
    k = randn(rng, (1, 300, 1, 32), "float32")
    k[:, 280:] *= 8.0  # the maximum sits far into the key sequence
    v = randn(rng, (1, 300, 1, 32), "float32")
    out, lse, _ = fa.flash_attn_func(q, k, v, return_attn_probs=True)
    check_fwd(out, lse, q, k, v, "float32")


@pytest.mark.parametrize("per_batch", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_alibi(rng, per_batch, causal):
    B, H = 2, 4
    q, k, v = (randn(rng, (B, s, H, 32), "float32") for s in (21, 40, 40))
    slopes = rng.uniform(0.05, 1.0, (B, H) if per_batch else (H,)).astype(np.float32)
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, alibi_slopes=slopes,
                                     return_attn_probs=True)
    check_fwd(out, lse, q, k, v, "float32", causal=causal, alibi=slopes)


@pytest.mark.parametrize("hq,hk", [(6, 6), (6, 2), (6, 1)])
def test_gqa_mqa(rng, backend, hq, hk):
    q = randn(rng, (2, 19, hq, 48), "float32")
    k = randn(rng, (2, 23, hk, 48), "float32")
    v = randn(rng, (2, 23, hk, 24), "float32")  # Dv != D
    out, lse, _ = fa.flash_attn_func(q, k, v, return_attn_probs=True)
    check_fwd(out, lse, q, k, v, "float32")


def test_head_dims(rng):
    for d in (1, 80, 111, 256):
        q, k, v = (randn(rng, (1, 9, 2, d), "float32") for _ in range(3))
        check_fwd(fa.flash_attn_func(q, k, v), None, q, k, v, "float32")


def test_fully_masked_rows(rng):
    # causal with Sq > Sk: the first Sq - Sk rows see no key
    q = randn(rng, (1, 10, 2, 16), "float32")
    k, v = (randn(rng, (1, 4, 2, 16), "float32") for _ in range(2))
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert np.all(out[:, :6] == 0) and np.all(lse[:, :, :6] == -np.inf)
    check_fwd(out, lse, q, k, v, "float32", causal=True)


def test_empty_sequences(rng):
    q = randn(rng, (2, 5, 2, 16), "float32")
    k = v = randn(rng, (2, 0, 2, 16), "float32")
    out, lse, _ = fa.flash_attn_func(q, k, v, return_attn_probs=True)
    assert np.all(out == 0) and np.all(lse == -np.inf)
    q0 = randn(rng, (2, 0, 2, 16), "float32")
    assert fa.flash_attn_func(q0, q, q).shape == (2, 0, 2, 16)


# --- packed and strided inputs -------------------------------------------------

def test_qkvpacked_is_zero_copy(rng):
    qkv = randn(rng, (2, 33, 3, 4, 32), "float32")
    q, k, v = (qkv[:, :, i] for i in range(3))
    assert _tensors.as_readable(q, "q") is q  # strided view, passed as is
    out = fa.flash_attn_qkvpacked_func(qkv, causal=True)
    check_fwd(out, None, q, k, v, "float32", causal=True)


def test_kvpacked(rng):
    q = randn(rng, (2, 12, 4, 32), "float32")
    kv = randn(rng, (2, 20, 2, 2, 32), "float32")
    out = fa.flash_attn_kvpacked_func(q, kv, window_size=(3, 3))
    check_fwd(out, None, q, kv[:, :, 0], kv[:, :, 1], "float32", window=(3, 3))


def test_strided_last_dim_is_copied(rng):
    big = randn(rng, (1, 14, 2, 64), "float32")
    q = big[..., ::2]  # last dim strided: the one layout that needs a copy
    k = randn(rng, (1, 14, 2, 32), "float32")
    v = np.ascontiguousarray(randn(rng, (14, 1, 2, 32), "float32").transpose(1, 0, 2, 3))
    out = fa.flash_attn_func(q, k, v)
    check_fwd(out, None, q, k, v, "float32")


# --- dropout -------------------------------------------------------------------

def test_philox_known_answers():
    """Random123's published Philox4x32-10 test vectors, through the library."""
    import ctypes
    from flashattn._lib import lib
    cases = [
        ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
        ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
        ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
         [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
    ]
    for ctr, key, want in cases:
        c = (ctypes.c_uint32 * 4)(*ctr)
        k = (ctypes.c_uint32 * 2)(*key)
        r = (ctypes.c_uint32 * 4)()
        lib().fa_philox4x32_10(c, k, r)
        assert list(r) == want
        assert [int(x) for x in R.philox4x32_10(*ctr, *key)] == want


def test_dropout_mask_matches_definition():
    seed, offset, p = 0x1234_5678_9ABC_DEF0, 0xFEDC_BA98_7654_3210, 0.17
    mask = fa.dropout_mask(seed, offset, p, 3, 5, 7, 13)
    assert mask.dtype == np.uint8 and mask.shape == (3, 5, 7, 13)
    assert np.array_equal(mask, R.dropout_keep(seed, offset, p, 3, 5, 7, 13))
    big = fa.dropout_mask(7, 0, p, 2, 4, 64, 256)
    assert abs((1 - big.mean()) - p) < 0.01


@pytest.mark.parametrize("causal", [False, True])
def test_dropout_forward(rng, backend, causal):
    np.random.seed(rng.integers(2**31))
    q, k, v = (randn(rng, (2, s, 2, 32), "float32") for s in (30, 45, 45))
    p = 0.17
    out, lse, mask = fa.flash_attn_func(q, k, v, dropout_p=p, causal=causal,
                                        return_attn_probs=True)
    assert mask.shape == (2, 2, 30, 45) and mask.dtype == bool
    check_fwd(out, lse, q, k, v, "float32", causal=causal, keep=mask, dropout_p=p)
    out2 = fa.flash_attn_func(q, k, v, dropout_p=p, causal=causal)
    assert not np.array_equal(out, out2), "each call draws a new mask"


# --- backward through the raw binding (autograd is in test_torch.py) ---------

@pytest.mark.parametrize("opts", [
    dict(), dict(causal=True), dict(window_size=(5, 2)), dict(softcap=5.0),
    dict(alibi_slopes=np.array([0.3, 0.7, 0.1, 0.5], np.float32)),
    dict(dropout_p=0.2, seed=11, offset=3),
])
def test_backward(rng, backend, opts):
    q = randn(rng, (2, 19, 4, 24), "float32")
    k, v = (randn(rng, (2, 27, 2, 24), "float32") for _ in range(2))
    dout = randn(rng, (2, 19, 4, 24), "float32")
    out, lse = _core.fwd(q, k, v, **opts)
    dq, dk, dv = _core.bwd(dout, q, k, v, out, lse, **opts)
    kw = dict(causal=opts.get("causal", False), window=opts.get("window_size", (-1, -1)),
              softcap=opts.get("softcap", 0.0), alibi=opts.get("alibi_slopes"))
    if "dropout_p" in opts:
        kw.update(keep=fa.dropout_mask(11, 3, 0.2, 2, 4, 19, 27), dropout_p=0.2)
    for got, want in zip((dq, dk, dv), R.attention_grads(q, k, v, dout, **kw)):
        assert got.shape == want.shape
        R.assert_close(got, want)


# --- varlen -------------------------------------------------------------------

def _varlen_case(rng, lens_q, lens_k, hq=4, hk=2, d=32, dtype="float32"):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = randn(rng, (cu_q[-1], hq, d), dtype)
    k = randn(rng, (cu_k[-1], hk, d), dtype)
    v = randn(rng, (cu_k[-1], hk, d), dtype)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [False, True])
def test_varlen(rng, dtype, causal):
    lens_q, lens_k = [5, 0, 17, 1, 9], [7, 3, 17, 0, 30]
    q, k, v, cu_q, cu_k = _varlen_case(rng, lens_q, lens_k, dtype=dtype)
    out, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                            causal=causal, return_attn_probs=True)
    assert out.shape == (q.shape[0], 4, 32) and lse.shape == (4, q.shape[0])
    for b in range(len(lens_q)):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        check_fwd(out[None, sq], lse[None, :, sq], q[None, sq], k[None, sk], v[None, sk], dtype,
                  causal=causal)


def test_varlen_packed_and_dropout(rng):
    np.random.seed(rng.integers(2**31))
    lens = [6, 11, 0, 4]
    q, k, v, cu, _ = _varlen_case(rng, lens, lens, hq=2, hk=2)
    qkv = np.stack([q, k, v], axis=1)
    out = fa.flash_attn_varlen_qkvpacked_func(qkv, cu, max(lens), causal=True)
    out_kv = fa.flash_attn_varlen_kvpacked_func(q, np.stack([k, v], axis=1), cu, cu, max(lens),
                                                max(lens), causal=True)
    ref = fa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(out_kv, ref)
    p = 0.25
    out, lse, mask = fa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), dropout_p=p,
                                               return_attn_probs=True)
    assert mask.shape == (4, 2, 11, 11)
    for b, n in enumerate(lens):
        s = slice(cu[b], cu[b + 1])
        check_fwd(out[None, s], None, q[None, s], k[None, s], v[None, s], "float32",
                  keep=mask[b:b + 1, :, :n, :n], dropout_p=p)


def test_varlen_backward(rng):
    lens_q, lens_k = [3, 8, 0], [5, 8, 2]
    q, k, v, cu_q, cu_k = _varlen_case(rng, lens_q, lens_k)
    dout = randn(rng, q.shape, "float32")
    out, lse = _core.varlen_fwd(q, k, v, cu_q, cu_k, 8, 8, causal=True)
    dq, dk, dv = _core.varlen_bwd(dout, q, k, v, out, lse, cu_q, cu_k, 8, 8, causal=True)
    for b in range(3):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want = R.attention_grads(q[None, sq], k[None, sk], v[None, sk], dout[None, sq], causal=True)
        for got, w in zip((dq[None, sq], dk[None, sk], dv[None, sk]), want):
            R.assert_close(got, w)


# --- KV cache -----------------------------------------------------------------

def _gather_cache(cache, block_table, b, n):
    """The first n keys of sequence b of a (paged) cache."""
    if block_table is None:
        return cache[b, :n]
    bs = cache.shape[1]
    rows = [cache[block_table[b, j // bs], j % bs] for j in range(n)]
    return np.stack(rows) if rows else cache[0, :0]


@pytest.mark.parametrize("block_size", [None, 1, 5, 16])
@pytest.mark.parametrize("append", [False, True])
@pytest.mark.parametrize("num_splits", [0, 1, 3])
def test_kvcache(rng, block_size, append, num_splits):
    B, Hq, Hk, D, S_cache, sq = 3, 4, 2, 32, 40, 2
    s_new = 3 if append else 0
    seqlens = np.array([0, 17, 40 - s_new], np.int32)
    if block_size is None:
        kc = randn(rng, (B, S_cache, Hk, D), "float32")
        vc = randn(rng, (B, S_cache, Hk, D), "float32")
        table = None
    else:
        per_seq = -(-S_cache // block_size)
        nblocks = B * per_seq + 2
        kc = randn(rng, (nblocks, block_size, Hk, D), "float32")
        vc = randn(rng, (nblocks, block_size, Hk, D), "float32")
        table = rng.permutation(nblocks)[:B * per_seq].reshape(B, per_seq).astype(np.int32)
    q = randn(rng, (B, sq, Hq, D), "float32")
    k_new = randn(rng, (B, s_new, Hk, D), "float32") if append else None
    v_new = randn(rng, (B, s_new, Hk, D), "float32") if append else None
    kc0, vc0 = kc.copy(), vc.copy()
    out, lse = fa.flash_attn_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=seqlens,
                                          block_table=table, causal=True, num_splits=num_splits,
                                          return_softmax_lse=True)
    for b in range(B):
        n = seqlens[b] + s_new
        keys = _gather_cache(kc, table, b, n)
        vals = _gather_cache(vc, table, b, n)
        if append:  # appended in place after the cached keys
            np.testing.assert_array_equal(keys[seqlens[b]:], k_new[b])
            np.testing.assert_array_equal(vals[seqlens[b]:], v_new[b])
        # the keys already cached are untouched
        np.testing.assert_array_equal(keys[:seqlens[b]], _gather_cache(kc0, table, b, seqlens[b]))
        np.testing.assert_array_equal(vals[:seqlens[b]], _gather_cache(vc0, table, b, seqlens[b]))
        check_fwd(out[b:b + 1], lse[b:b + 1], q[b:b + 1], keys[None], vals[None], "float32",
                  causal=True)


def test_kvcache_int_seqlens_and_batch_idx(rng):
    kc = randn(rng, (4, 20, 1, 16), "float32")
    vc = randn(rng, (4, 20, 1, 16), "float32")
    q = randn(rng, (2, 1, 2, 16), "float32")
    out = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=12)
    check_fwd(out, None, q, kc[:2, :12], vc[:2, :12], "float32")
    idx = np.array([3, 1], np.int32)
    out = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array([5, 20], np.int32),
                                     cache_batch_idx=idx)
    check_fwd(out[:1], None, q[:1], kc[3:4, :5], vc[3:4, :5], "float32")
    check_fwd(out[1:], None, q[1:], kc[1:2], vc[1:2], "float32")


def test_kvcache_unsupported():
    q = np.zeros((1, 1, 1, 8), np.float32)
    c = np.zeros((1, 4, 1, 8), np.float32)
    with pytest.raises(NotImplementedError):
        fa.flash_attn_with_kvcache(q, c, c, rotary_cos=c, rotary_sin=c)


# --- threads ------------------------------------------------------------------

def test_calls_from_many_threads(rng):
    """Each Python thread gets its own library context."""
    from concurrent.futures import ThreadPoolExecutor
    cases = [tuple(randn(rng, (1, 40, 2, 32), "float32") for _ in range(3)) for _ in range(8)]
    want = [fa.flash_attn_func(*c, causal=True) for c in cases]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: fa.flash_attn_func(*c, causal=True), cases * 3))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % len(cases)])


# --- merge --------------------------------------------------------------------

def test_merge_equals_full(rng):
    q = randn(rng, (1, 7, 2, 16), "float32")
    k, v = (randn(rng, (1, 50, 2, 16), "float32") for _ in range(2))
    a = _core.fwd(q, k[:, :20], v[:, :20])
    b = _core.fwd(q, k[:, 20:], v[:, 20:])
    out, lse = fa.merge([a[0], b[0]], [a[1], b[1]])
    check_fwd(out, lse, q, k, v, "float32")


# --- errors -------------------------------------------------------------------

def _raises(status, fn, *args, **kw):
    with pytest.raises(fa.FlashAttnError) as e:
        fn(*args, **kw)
    assert e.value.status == status, str(e.value)
    assert isinstance(e.value, RuntimeError) and str(e.value)
    return e.value


def test_errors_become_exceptions(rng):
    q = randn(rng, (1, 4, 3, 16), "float32")
    kv = randn(rng, (1, 4, 2, 16), "float32")
    err = _raises(fa.Status.ERR_SHAPE, fa.flash_attn_func, q, kv, kv)  # 3 % 2 != 0
    assert "head" in str(err)
    big = randn(rng, (1, 4, 1, 300), "float32")
    _raises(fa.Status.ERR_HEAD_DIM, fa.flash_attn_func, big, big, big)
    x64 = np.zeros((1, 4, 1, 16))
    _raises(fa.Status.ERR_DTYPE, fa.flash_attn_func, x64, x64, x64)
    half = q.astype(np.float16)
    _raises(fa.Status.ERR_DTYPE, fa.flash_attn_func, half, q, q)
    _raises(fa.Status.ERR_OPTION, fa.flash_attn_func, q, q, q, dropout_p=1.5)
    _raises(fa.Status.ERR_OPTION, fa.flash_attn_func, q, q, q, softcap=-1.0)
    _raises(fa.Status.ERR_SHAPE, fa.flash_attn_func, q[0], q[0], q[0])


def test_varlen_and_cache_errors(rng):
    q = randn(rng, (10, 2, 16), "float32")
    bad_cu = np.array([0, 6, 4, 10], np.int32)
    _raises(fa.Status.ERR_SEQLENS, fa.flash_attn_varlen_func, q, q, q, bad_cu, bad_cu, 6, 6)
    kc = randn(rng, (3, 4, 2, 16), "float32")
    qd = randn(rng, (1, 1, 2, 16), "float32")
    table = np.array([[0, 7]], np.int32)  # block 7 does not exist
    _raises(fa.Status.ERR_BLOCK_TABLE, fa.flash_attn_with_kvcache, qd, kc, kc,
            cache_seqlens=6, block_table=table)


def _float8(rng, lens_q, lens_k, hq, hk, d):
    """float8 e4m3 q, k, v packed (total, heads, d), descales (sequences, hk)
    and the exactly dequantised float64 copies."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    f8 = ml_dtypes.float8_e4m3fn
    q, k, v = (randn(rng, (sum(n), h, d), "float32").astype(f8)
               for n, h in ((lens_q, hq), (lens_k, hk), (lens_k, hk)))
    desc = [(0.5 + 1.5 * rng.random((len(lens_q), hk))).astype(np.float32) for _ in range(3)]
    seq_q = np.repeat(np.arange(len(lens_q)), lens_q)
    seq_k = np.repeat(np.arange(len(lens_k)), lens_k)
    deq = [x.astype(np.float64) * np.repeat(dd, x.shape[1] // hk, axis=1)[seq][:, :, None]
           for x, dd, seq in ((q, desc[0], seq_q), (k, desc[1], seq_k), (v, desc[2], seq_k))]
    return (q, k, v), desc, deq


def _check_float8(out, lse, deq, causal):
    """One sequence's bfloat16 out (S, H, D) and lse (H, S) against the
    float64 truth; the naive baseline rounds to bfloat16 after every step."""
    import ml_dtypes
    q, k, v = (x[None] for x in deq)
    ref, ref_lse = R.attention(q, k, v, causal=causal)
    naive = R.attention(q, k, v, causal=causal, dtype=ml_dtypes.bfloat16)[0]
    assert out.dtype == ml_dtypes.bfloat16
    R.assert_close(out[None].astype(np.float32), ref, naive, unit=2.0**-8)
    fin = np.isfinite(ref_lse[0])
    assert np.all(lse[~fin] == -np.inf)
    assert R.max_err(lse[fin], ref_lse[0][fin]) <= 1e-4 * max(1.0, np.abs(ref_lse[0][fin]).max(initial=0))


@pytest.mark.parametrize("causal", [False, True])
def test_float8_forward(rng, causal):
    """float8 e4m3 inputs with descales on the CPU: bfloat16 out, lse, GQA."""
    (q, k, v), desc, deq = _float8(rng, [37, 37], [50, 50], 4, 2, 32)
    shape = lambda x: x.reshape(2, -1, *x.shape[1:])  # noqa: E731
    out, lse, _ = fa.flash_attn_func(shape(q), shape(k), shape(v), causal=causal, return_attn_probs=True,
                                     q_descale=desc[0], k_descale=desc[1], v_descale=desc[2])
    for b in range(2):
        rows, keys = slice(37 * b, 37 * (b + 1)), slice(50 * b, 50 * (b + 1))
        _check_float8(out[b], lse[b], [deq[0][rows], deq[1][keys], deq[2][keys]], causal)


def test_float8_varlen(rng):
    """Packed float8 sequences (one without keys), descales per sequence."""
    lens_q, lens_k = [5, 40, 1, 9], [7, 33, 0, 60]
    (q, k, v), desc, deq = _float8(rng, lens_q, lens_k, 2, 1, 48)
    cu_q, cu_k = (np.cumsum([0] + x).astype(np.int32) for x in (lens_q, lens_k))
    out, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                            return_attn_probs=True, q_descale=desc[0], k_descale=desc[1],
                                            v_descale=desc[2])
    for b in range(len(lens_q)):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        _check_float8(out[rows], lse[:, rows], [deq[0][rows], deq[1][keys], deq[2][keys]], True)


def test_float8_errors(rng):
    """The descale factors are checked, and refused for other dtypes; float8
    has no backward."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q = randn(rng, (1, 8, 2, 32), "float32")
    one = np.ones((1, 2), np.float32)
    err = _raises(fa.Status.ERR_OPTION, fa.flash_attn_func, q, q, q, k_descale=one)
    assert "opts.k_descale" in str(err)
    q8 = q.astype(ml_dtypes.float8_e4m3fn)
    err = _raises(fa.Status.ERR_SHAPE, fa.flash_attn_func, q8, q8, q8, v_descale=np.ones((2, 2), np.float32))
    assert "opts.v_descale" in str(err)
    out = np.zeros((1, 8, 2, 32), ml_dtypes.bfloat16)
    lse = np.zeros((1, 2, 8), np.float32)
    err = _raises(fa.Status.ERR_DTYPE, _core.bwd, out, q8, q8, q8, out, lse)
    assert "float8" in str(err)
