"""The torch front: autograd against PyTorch's SDPA in float64, the custom
ops under torch.compile, CUDA streams. Skipped without torch; CUDA cases are
skipped without a GPU and a CUDA build of the library."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashattn as fa  # noqa: E402
import reference as R  # noqa: E402
from flashattn import _torch_ops  # noqa: E402


def _cuda_ok():
    return torch.cuda.is_available() and fa.cuda_device_count() > 0


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not _cuda_ok(), reason="needs a GPU and the library's CUDA backend"))]
# (device, dtype) pairs each backend supports
CASES = [("cpu", torch.float32), ("cpu", torch.bfloat16)] + [
    pytest.param("cuda", dt, marks=pytest.mark.skipif(not _cuda_ok(), reason="needs a GPU"))
    for dt in (torch.float16, torch.bfloat16)]
UNIT = {torch.float32: None, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


@pytest.fixture(autouse=True)
def _seed(rng):
    torch.manual_seed(int(rng.integers(2**31)))


def sdpa(q, k, v, causal=False, window=(-1, -1), softcap=0.0, keep=None, dropout_p=0.0,
         naive=False):
    """PyTorch's SDPA on (B, S, H, D) tensors with the bottom-right masks,
    GQA by repeating kv heads. naive (the error baseline), softcap or a fixed
    dropout mask take the math written out, every step in the inputs' dtype."""
    B, sq, H, D = q.shape
    g = H // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k.repeat_interleave(g, 2),
                                              v.repeat_interleave(g, 2)))
    mask = torch.from_numpy(R.visible(sq, k.shape[1], causal, window)).to(q.device)
    if softcap == 0.0 and keep is None and not naive:
        return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask).transpose(1, 2)
    s = qt @ kt.transpose(-1, -2) / D**0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
    if keep is not None:
        p = p * keep.to(p.dtype) / (1 - dropout_p)
    return (p @ vt).transpose(1, 2)


def leaf(x, dtype=None):
    return x.detach().to(dtype or x.dtype).requires_grad_()


def run(fn, inputs, dout):
    """Output and input gradients of fn for the loss sum(out * dout)."""
    out = fn(*inputs)
    grads = torch.autograd.grad(out, inputs, dout)
    return out.detach(), [g.detach() for g in grads]


def check(got, ref, naive, dtype, mult):
    got, ref = got.double().cpu().numpy(), ref.double().cpu().numpy()
    naive = None if naive is None else naive.double().cpu().numpy()
    R.assert_close(got, ref, naive, mult=mult, unit=UNIT[dtype], rtol32=5e-5)


def lse_ref(q, k, causal=False):
    """float64 logsumexp of each query row's visible scores, (B, H, Sq), for
    (B, S, H, D) inputs, GQA by repeating kv heads."""
    k = k.repeat_interleave(q.shape[2] // k.shape[2], 2)
    s = q.double().transpose(1, 2) @ k.double().transpose(1, 2).transpose(-1, -2) / q.shape[-1]**0.5
    mask = torch.from_numpy(R.visible(q.shape[1], k.shape[1], causal, (-1, -1))).to(q.device)
    return torch.logsumexp(s.masked_fill(~mask, float("-inf")), dim=-1)


def make_qkv(device, dtype, B=2, sq=45, sk=61, hq=4, hk=2, d=40, dv=None):
    q = torch.randn(B, sq, hq, d, device=device).to(dtype)
    k = torch.randn(B, sk, hk, d, device=device).to(dtype)
    v = torch.randn(B, sk, hk, dv or d, device=device).to(dtype)
    return q, k, v


OPTS = [dict(), dict(causal=True), dict(window_size=(8, 3)), dict(softcap=8.0)]


@pytest.mark.parametrize("device,dtype", CASES)
@pytest.mark.parametrize("opts", OPTS, ids=["plain", "causal", "window", "softcap"])
@pytest.mark.parametrize("hk", [4, 1])
def test_autograd_matches_sdpa(device, dtype, opts, hk):
    q, k, v = make_qkv(device, dtype, hk=hk, dv=48 if hk == 1 else None)
    dout = torch.randn(q.shape[:3] + (v.shape[-1],), device=device).to(dtype)
    kw = dict(causal=opts.get("causal", False), window=opts.get("window_size", (-1, -1)),
              softcap=opts.get("softcap", 0.0))
    out, grads = run(lambda q, k, v: fa.flash_attn_func(q, k, v, **opts),
                     [leaf(q), leaf(k), leaf(v)], dout)
    ref, ref_grads = run(lambda q, k, v: sdpa(q, k, v, **kw),
                         [leaf(q, torch.float64), leaf(k, torch.float64), leaf(v, torch.float64)],
                         dout.double())
    naive, naive_grads = (None, [None] * 3) if dtype == torch.float32 else run(
        lambda q, k, v: sdpa(q, k, v, naive=True, **kw), [leaf(q), leaf(k), leaf(v)], dout)
    assert out.dtype == dtype and out.device == q.device
    check(out, ref, naive, dtype, 2.0)
    for g, r, n in zip(grads, ref_grads, naive_grads):
        check(g, r, n, dtype, 3.0)


@pytest.mark.skipif(not _cuda_ok(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("sq,sk", [(1, 239), (113, 203), (128, 128), (799, 3), (1023, 1024)])
@pytest.mark.parametrize("d", [59, 64, 80, 96, 128, 160, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_shapes(dtype, sq, sk, d, causal):
    """Lengths that do and do not divide the tiles, odd head dims, on the GPU."""
    if causal and sq > sk:
        sq, sk = sk, sq  # SDPA cannot express rows that see no key
    q, k, v = make_qkv("cuda", dtype, B=2, sq=sq, sk=sk, hq=4, hk=2, d=d)
    dout = torch.randn_like(q)
    out, grads = run(lambda q, k, v: fa.flash_attn_func(q, k, v, causal=causal),
                     [leaf(q), leaf(k), leaf(v)], dout)
    ref, ref_grads = run(lambda q, k, v: sdpa(q, k, v, causal=causal),
                         [leaf(x, torch.float64) for x in (q, k, v)], dout.double())
    naive, naive_grads = run(lambda q, k, v: sdpa(q, k, v, causal=causal, naive=True),
                             [leaf(q), leaf(k), leaf(v)], dout)
    check(out, ref, naive, dtype, 2.0)
    for g, r, n in zip(grads, ref_grads, naive_grads):
        check(g, r, n, dtype, 3.0)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_autograd(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = make_qkv(device, dtype, sq=33, sk=33)
    dout = torch.randn_like(q)
    p = 0.2
    qs, ks, vs = leaf(q), leaf(k), leaf(v)
    out, lse, mask = fa.flash_attn_func(qs, ks, vs, dropout_p=p, causal=True,
                                        return_attn_probs=True)
    grads = torch.autograd.grad(out, (qs, ks, vs), dout)
    assert mask.shape == (2, 4, 33, 33) and mask.dtype == torch.bool
    ref, ref_grads = run(lambda q, k, v: sdpa(q, k, v, causal=True, keep=mask, dropout_p=p),
                         [leaf(q, torch.float64), leaf(k, torch.float64), leaf(v, torch.float64)],
                         dout.double())
    naive, naive_grads = (None, [None] * 3) if dtype == torch.float32 else run(
        lambda q, k, v: sdpa(q, k, v, causal=True, keep=mask, dropout_p=p),
        [leaf(q), leaf(k), leaf(v)], dout)
    check(out.detach(), ref, naive, dtype, 2.0)
    for g, r, n in zip(grads, ref_grads, naive_grads):
        check(g, r, n, dtype, 3.0)


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_backward(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = make_qkv(device, dtype, sq=70, sk=130)
    dout = torch.randn_like(q)
    f = lambda q, k, v: fa.flash_attn_func(q, k, v, causal=True, deterministic=True)  # noqa
    _, g1 = run(f, [leaf(q), leaf(k), leaf(v)], dout)
    _, g2 = run(f, [leaf(q), leaf(k), leaf(v)], dout)
    for a, b in zip(g1, g2):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_qkvpacked_grads(device):
    dtype = torch.float32 if device == "cpu" else torch.float16
    qkv = torch.randn(2, 30, 3, 4, 32, device=device).to(dtype).requires_grad_()
    out = fa.flash_attn_qkvpacked_func(qkv, causal=True)
    out.sum().backward()
    q, k, v = qkv.detach().unbind(2)
    _, grads = run(lambda q, k, v: fa.flash_attn_func(q, k, v, causal=True),
                   [leaf(q), leaf(k), leaf(v)], torch.ones_like(out))
    # the same kernels on the same strided views; GPU backward may sum in any order
    torch.testing.assert_close(qkv.grad, torch.stack(grads, dim=2), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("head_dim", [32, 256])
def test_varlen_autograd(device, head_dim):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    lens = [5, 0, 19, 8]
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device=device)
    q = torch.randn(sum(lens), 4, head_dim, device=device).to(dtype)
    k, v = (torch.randn(sum(lens), 2, head_dim, device=device).to(dtype) for _ in range(2))
    dout = torch.randn_like(q)
    out, grads = run(lambda q, k, v: fa.flash_attn_varlen_func(q, k, v, cu, cu, 19, 19,
                                                               causal=True),
                     [leaf(q), leaf(k), leaf(v)], dout)
    for b in range(len(lens)):
        s = slice(int(cu[b]), int(cu[b + 1]))
        if lens[b] == 0:
            continue
        ref, ref_grads = run(lambda q, k, v: sdpa(q, k, v, causal=True),
                             [leaf(x[None, s], torch.float64) for x in (q, k, v)],
                             dout[None, s].double())
        naive, naive_grads = (None, [None] * 3) if dtype == torch.float32 else run(
            lambda q, k, v: sdpa(q, k, v, causal=True, naive=True),
            [leaf(x[None, s]) for x in (q, k, v)],
            dout[None, s])
        check(out[None, s], ref, naive, dtype, 2.0)
        for g, r, n in zip(grads, ref_grads, naive_grads):
            check(g[None, s], r, n, dtype, 3.0)


@pytest.mark.skipif(not _cuda_ok(), reason="needs a GPU")
@pytest.mark.parametrize("d,sq,sk", [(64, 2048, 2048), (96, 2048, 2048), (128, 2048, 2048), (192, 2048, 2048),
                                     (256, 2048, 2048), (64, 64, 4096), (64, 2200, 2200)])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_more_tiles_than_sms(d, sq, sk, causal):
    """A forward with about 1.2 tiles of 128 queries per SM: the last round
    of tiles is partial, which on Hopper the kernels balance by splitting
    the last tiles' keys across CTAs (non-causal) or by dealing the last
    query blocks largest first (causal). With 64 queries over 4096 keys
    every tile is short, and at head dim 64 (non-causal) its keys are
    split among the CTA's consumers; 2200 = 11 x 192 + 88 queries leave
    a last tile of more than 64 rows at head dim 64, never split."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    dtype = torch.bfloat16
    heads = -(-sms * 6 // 5 // -(-sq // 128))  # ceil(1.2 sms / tiles per head)
    q, k, v = make_qkv("cuda", dtype, B=1, sq=sq, sk=sk, hq=heads, hk=heads, d=d)
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    ref = sdpa(q.double(), k.double(), v.double(), causal=causal)
    naive = sdpa(q, k, v, causal=causal, naive=True)
    check(out, ref, naive, dtype, 2.0)
    # the merges (split tail, split short tiles) combine a row's parts by their lse: it must hold too
    torch.testing.assert_close(lse.double(), lse_ref(q, k, causal), rtol=0, atol=1e-3)


@pytest.mark.skipif(not _cuda_ok(), reason="needs a GPU")
@pytest.mark.parametrize("sq", [512, 384, 256, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_short_causal_heads_many_units(sq, dtype):
    """Head dim 64 causal over at most 4 query blocks of 128 with about 2.5
    units (pairs of query blocks of two heads) per SM, and an odd number of
    heads, whose last pair has no first halves: on Hopper the units go out
    round-robin, and where the host's cost model says it ends sooner the
    last rounds' go out as single tiles, largest first, dealt in a snake
    (the paired order's tail), as at the standard grid's 512-key cells."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    m = -(-sq // 128)  # query blocks a head; a pair of heads holds m units
    heads = 2 * -(-sms * 5 // 2 // m) + 1  # odd: the last pair's first halves are missing
    q, k, v = make_qkv("cuda", dtype, B=1, sq=sq, sk=sq, hq=heads, hk=heads, d=64)
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    ref = sdpa(q.double(), k.double(), v.double(), causal=True)
    check(out, ref, sdpa(q, k, v, causal=True, naive=True), dtype, 2.0)
    torch.testing.assert_close(lse.double(), lse_ref(q, k, True), rtol=0, atol=1e-3)


@pytest.mark.skipif(not _cuda_ok(), reason="needs a GPU")
@pytest.mark.parametrize("sq,sk", [(512, 512), (384, 400), (128, 128), (200, 130)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batch,group", [(1, 1), (3, 4)], ids=["mha", "gqa"])
def test_cuda_joined_tile_boundaries(sq, sk, dtype, batch, group):
    """About 3.5 tiles of 128 queries per SM at head dim 128 over at most 512
    keys, without a mask: on Hopper each CTA runs several tiles, and its
    kernel joins the boundary between two (the next tile's first Q K^T and
    softmax under the last P V of the one before, whose output is written
    after). Tiles of 1-4 kv blocks, even and odd counts (which P buffer the
    last P V reads), and a partial top block at 400 and 130 keys; consecutive
    tiles of one CTA in other heads, and with GQA and batches in other kv
    heads and sequences (the joined Q K^T reads the next tile's K)."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    per_head = batch * -(-sq // 128)  # tiles a query head holds over the batch
    heads = -(-sms * 7 // 2 // per_head // group) * group  # ceil(3.5 sms / per_head), whole groups
    q, k, v = make_qkv("cuda", dtype, B=batch, sq=sq, sk=sk, hq=heads, hk=heads // group, d=128)
    out, lse, _ = fa.flash_attn_func(q, k, v, return_attn_probs=True)
    ref = sdpa(q.double(), k.double(), v.double())
    check(out, ref, sdpa(q, k, v, naive=True), dtype, 2.0)
    torch.testing.assert_close(lse.double(), lse_ref(q, k), rtol=0, atol=1e-3)


@pytest.mark.skipif(not _cuda_ok(), reason="needs a GPU")
def test_cuda_chained_calls():
    """Calls queued back to back on one stream, each reading what the one
    before wrote: a forward's q is the last forward's output, a backward's
    dout the last backward's dq. On Hopper the backward's kernels may launch
    before the one ahead of them has ended, and must wait for it before
    touching memory; the calls are long enough (~0.3-1 ms) for the host to
    queue them ahead."""
    from flashattn import _core
    dtype = torch.bfloat16
    _, k, v = make_qkv("cuda", dtype, B=1, sq=1, sk=4096, hq=32, hk=32, d=64)
    x = torch.randn(1, 4096, 32, 64, device="cuda").to(dtype)
    causal = [False, True, False, True]
    torch.cuda.synchronize()
    qs, outs, lses = [x], [], []
    for c in causal:  # no sync in between: the host runs ahead of the GPU
        out, lse = _core.fwd(qs[-1], k, v, causal=c)
        qs.append(out)
        outs.append(out)
        lses.append(lse)
    douts = [torch.randn_like(x)]
    for q, out, lse, c in zip(qs, outs, lses, causal):
        dq, _, _ = _core.bwd(douts[-1], q, k, v, out, lse, causal=c)
        douts.append(dq)
    torch.cuda.synchronize()
    for i, c in enumerate(causal):
        ref = sdpa(qs[i].double(), k.double(), v.double(), causal=c)
        check(outs[i], ref, sdpa(qs[i], k, v, causal=c, naive=True), dtype, 2.0)
        _, (ref_dq,) = run(lambda q, c=c: sdpa(q, k.double(), v.double(), causal=c),
                           [leaf(qs[i], torch.float64)], douts[i].double())
        _, (naive_dq,) = run(lambda q, c=c: sdpa(q, k, v, causal=c, naive=True), [leaf(qs[i])], douts[i])
        check(douts[i + 1], ref_dq, naive_dq, dtype, 3.0)


@pytest.mark.skipif(not _cuda_ok(), reason="needs a GPU")
@pytest.mark.parametrize("block_size", [None, 1, 16, 256])
@pytest.mark.parametrize("num_splits", [0, 1, 5])
def test_cuda_decode(block_size, num_splits):
    """Split-KV decoding over long, paged caches on the GPU."""
    B, Hq, Hk, D, S = 3, 8, 2, 128, 2048
    dtype = torch.bfloat16
    seqlens = torch.tensor([1, 700, 2047], dtype=torch.int32, device="cuda")
    if block_size is None:
        kc = torch.randn(B, S, Hk, D, device="cuda").to(dtype)
        table = None
    else:
        per_seq = S // block_size
        kc = torch.randn(B * per_seq, block_size, Hk, D, device="cuda").to(dtype)
        table = torch.randperm(B * per_seq, device="cuda").to(torch.int32).view(B, per_seq)
    vc = torch.randn_like(kc)
    q = torch.randn(B, 1, Hq, D, device="cuda").to(dtype)
    k_new, v_new = (torch.randn(B, 1, Hk, D, device="cuda").to(dtype) for _ in range(2))
    out = fa.flash_attn_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=seqlens,
                                     block_table=table, causal=True, num_splits=num_splits)
    for b in range(B):
        n = int(seqlens[b]) + 1
        if table is None:
            keys, vals = kc[b, :n], vc[b, :n]
        else:
            keys = kc[table[b].long()].flatten(0, 1)[:n]
            vals = vc[table[b].long()].flatten(0, 1)[:n]
        assert torch.equal(keys[-1], k_new[b, 0]) and torch.equal(vals[-1], v_new[b, 0])
        ref = sdpa(q[b:b + 1].double(), keys[None].double(), vals[None].double())
        naive = sdpa(q[b:b + 1], keys[None], vals[None], naive=True)
        check(out[b:b + 1], ref, naive, dtype, 3.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_appends_in_place(device, paged):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    B, Hk, D = 2, 2, 64
    seqlens = torch.tensor([3, 30], dtype=torch.int32, device=device)
    if paged:
        kc = torch.randn(12, 16, Hk, D, device=device).to(dtype)
        table = torch.tensor([[5, 2, 9], [0, 11, 7]], dtype=torch.int32, device=device)
    else:
        kc = torch.randn(B, 48, Hk, D, device=device).to(dtype)
        table = None
    vc = torch.randn_like(kc)
    q = torch.randn(B, 1, 8, D, device=device).to(dtype)
    k_new, v_new = (torch.randn(B, 1, Hk, D, device=device).to(dtype) for _ in range(2))
    out, lse = fa.flash_attn_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=seqlens,
                                          block_table=table, return_softmax_lse=True)
    for b in range(B):
        n = int(seqlens[b])
        if paged:
            blk, row = int(table[b, n // 16]), n % 16
            assert torch.equal(kc[blk, row], k_new[b, 0]) and torch.equal(vc[blk, row], v_new[b, 0])
            keys = torch.cat([kc[int(i)] for i in table[b]])[:n + 1]
            vals = torch.cat([vc[int(i)] for i in table[b]])[:n + 1]
        else:
            assert torch.equal(kc[b, n], k_new[b, 0]) and torch.equal(vc[b, n], v_new[b, 0])
            keys, vals = kc[b, :n + 1], vc[b, :n + 1]
        ref = sdpa(q[b:b + 1].double(), keys[None].double(), vals[None].double())
        naive = None if dtype == torch.float32 else sdpa(q[b:b + 1], keys[None], vals[None],
                                                         naive=True)
        check(out[b:b + 1], ref, naive, dtype, 3.0)
    assert lse.shape == (B, 8, 1) and lse.dtype == torch.float32


@pytest.mark.skipif(not os.environ.get("FLASHATTN_REQUIRE_CUDA"), reason="FLASHATTN_REQUIRE_CUDA unset")
def test_cuda_cases_are_not_skipped():
    """On the GPU machine, a library built without CUDA must fail loudly."""
    assert torch.cuda.is_available(), "torch sees no GPU"
    assert fa.cuda_device_count() > 0, f"{fa.library_path()} has no usable CUDA backend"


def test_numpy_and_torch_agree():
    q, k, v = make_qkv("cpu", torch.float32)
    got = fa.flash_attn_func(q, k, v, causal=True, window_size=(10, -1))
    want = fa.flash_attn_func(q.numpy(), k.numpy(), v.numpy(), causal=True, window_size=(10, -1))
    np.testing.assert_array_equal(got.numpy(), want)


def test_index_arguments_as_lists():
    q = torch.randn(9, 2, 16)
    out = fa.flash_attn_varlen_func(q, q, q, [0, 4, 9], [0, 4, 9], 5, 5, alibi_slopes=[0.5, 0.25])
    want = fa.flash_attn_varlen_func(q.numpy(), q.numpy(), q.numpy(), np.array([0, 4, 9], np.int32),
                                     np.array([0, 4, 9], np.int32), 5, 5,
                                     alibi_slopes=np.array([0.5, 0.25], np.float32))
    np.testing.assert_array_equal(out.numpy(), want)


def test_errors_are_runtime_errors():
    q = torch.randn(1, 4, 3, 16)
    kv = torch.randn(1, 4, 2, 16)
    with pytest.raises(RuntimeError) as e:
        fa.flash_attn_func(q, kv, kv)
    assert isinstance(e.value, fa.FlashAttnError) and e.value.status == fa.Status.ERR_SHAPE
    with pytest.raises(fa.FlashAttnError):
        fa.flash_attn_func(q.double(), q.double(), q.double())


# --- torch.compile and operator registration ---------------------------------

needs_custom_op = pytest.mark.skipif(not _torch_ops.HAS_CUSTOM_OP,
                                     reason="torch.library.custom_op needs torch >= 2.4")


@needs_custom_op
def test_ops_registered_and_opcheck():
    assert hasattr(torch.ops.flashattn, "fwd") and hasattr(torch.ops.flashattn, "bwd")
    q, k, v = make_qkv("cpu", torch.float32, B=1, sq=6, sk=9, d=16)
    args = (leaf(q), leaf(k), leaf(v), 0.0, None, True, -1, -1, 0.0, None, False, None)
    torch.library.opcheck(torch.ops.flashattn.fwd.default, args)
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    vargs = (leaf(q[0]), leaf(k[0, :6]), leaf(v[0, :6]), cu, cu, 4, 4, 0.0, None, True, -1, -1,
             0.0, None, False, None)
    torch.library.opcheck(torch.ops.flashattn.varlen_fwd.default, vargs)


@needs_custom_op
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = make_qkv(device, dtype, sq=32, sk=48)

    def step(q, k, v):
        out = fa.flash_attn_func(q, k, v, causal=True, window_size=(16, -1))
        return (out.float() ** 2).sum()

    # CPU compiles with aot_eager (no C++ toolchain needed); CUDA with inductor
    compiled = torch.compile(step, fullgraph=True,
                             backend="aot_eager" if device == "cpu" else "inductor")
    eager_in = [leaf(q), leaf(k), leaf(v)]
    comp_in = [leaf(q), leaf(k), leaf(v)]
    loss_e = step(*eager_in)
    loss_c = compiled(*comp_in)
    torch.testing.assert_close(loss_c, loss_e)
    ge = torch.autograd.grad(loss_e, eager_in)
    gc = torch.autograd.grad(loss_c, comp_in)
    for a, b in zip(gc, ge):
        torch.testing.assert_close(a, b)


@needs_custom_op
def test_compile_dropout_and_kvcache():
    q, k, v = make_qkv("cpu", torch.float32, sq=16, sk=16)
    drop = torch.compile(lambda q, k, v: fa.flash_attn_func(q, k, v, dropout_p=0.1),
                         fullgraph=True, backend="aot_eager")
    assert drop(q, k, v).shape == q.shape
    kc = torch.zeros(2, 20, 2, 40)
    vc = torch.zeros(2, 20, 2, 40)
    dec = torch.compile(lambda q, kc, vc, kn, vn: fa.flash_attn_with_kvcache(
        q, kc, vc, kn, vn, cache_seqlens=4), fullgraph=True, backend="aot_eager")
    kn, vn = torch.randn(2, 1, 2, 40), torch.randn(2, 1, 2, 40)
    dec(q[:, :1], kc, vc, kn, vn)
    assert torch.equal(kc[:, 4], kn[:, 0]) and torch.equal(vc[:, 4], vn[:, 0])


# --- CUDA specifics -----------------------------------------------------------

@pytest.mark.skipif(not _cuda_ok(), reason="needs a GPU")
def test_cuda_current_stream():
    q, k, v = make_qkv("cuda", torch.float16, sq=256, sk=1024)
    want = fa.flash_attn_func(q, k, v, causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            got = fa.flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert torch.equal(got, want)


@pytest.mark.skipif(not _cuda_ok(), reason="needs a GPU")
def test_cuda_graph_capture():
    """Forward and decode calls captured in a CUDA graph and replayed: no host
    synchronisation or allocation outside torch's allocator inside a call."""
    q, k, v = make_qkv("cuda", torch.bfloat16, sq=128, sk=512)
    kc = torch.randn(2, 1024, 2, 40, device="cuda").to(torch.bfloat16)
    vc = torch.randn_like(kc)
    lens = torch.full((2,), 700, dtype=torch.int32, device="cuda")
    q1 = q[:, :1].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (workspace, lazy loading) before capture
        fa.flash_attn_func(q, k, v, causal=True)
        fa.flash_attn_with_kvcache(q1, kc, vc, cache_seqlens=lens)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fa.flash_attn_func(q, k, v, causal=True)
        dec = fa.flash_attn_with_kvcache(q1, kc, vc, cache_seqlens=lens)
    q.normal_()
    q1.normal_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, fa.flash_attn_func(q, k, v, causal=True))
    assert torch.equal(dec, fa.flash_attn_with_kvcache(q1, kc, vc, cache_seqlens=lens))


@pytest.mark.skipif(not _cuda_ok(), reason="needs a GPU")
def test_cuda_rejects_float32():
    q = torch.randn(1, 8, 2, 32, device="cuda")
    with pytest.raises(fa.FlashAttnError) as e:
        fa.flash_attn_func(q, q, q)
    assert e.value.status == fa.Status.ERR_DTYPE


# ---------------------------------------------------------------------------
# float8 e4m3 forward (Hopper)
# ---------------------------------------------------------------------------

F8 = getattr(torch, "float8_e4m3fn", None)


def _hopper_ok():
    return _cuda_ok() and F8 is not None and torch.cuda.get_device_capability() == (9, 0)


def test_descale_refused_for_other_dtypes():
    """Descale factors apply to float8 inputs only: the call is refused,
    naming the argument, and writes nothing."""
    q = torch.randn(1, 8, 2, 32)
    with pytest.raises(fa.FlashAttnError) as e:
        fa.flash_attn_func(q, q, q, k_descale=torch.ones(1, 2))
    assert e.value.status == fa.Status.ERR_OPTION and "opts.k_descale" in str(e.value)


def _float8_one(q, k, v, qd, kd, vd, causal, softcap):
    """One sequence, (S, H, D) float8 tensors and (Hk,) descales: the float64
    truth on the dequantised values, the naive same-precision baseline
    (float32 scores, P rounded to e4m3, bfloat16 out) and each row's bound
    on the lse error (2^-12 of its largest scale * sum |q_d k_d| over visible
    keys, D / 128 times that above head dim 128, + 1e-4: the tensor cores'
    e4m3 sums keep ~14 bits, and each 32 head-dim columns' loss adds up)."""
    g = q.shape[1] // k.shape[1]
    deq = [x.double() * d.double().repeat_interleave(r)[None, :, None]
           for x, d, r in ((q, qd, g), (k, kd, 1), (v, vd, 1))]
    qf, kf, vf = deq[0], deq[1].repeat_interleave(g, 1), deq[2].repeat_interleave(g, 1)
    D = q.shape[-1]
    mask = torch.from_numpy(R.visible(q.shape[0], k.shape[0], causal)).to(q.device)
    s = torch.einsum("ihd,jhd->hij", qf, kf) / D**0.5
    absdot = torch.einsum("ihd,jhd->hij", qf.abs(), kf.abs()) / D**0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    truth = torch.einsum("hij,jhd->ihd", torch.softmax(s, dim=-1).nan_to_num(), vf)
    s32 = s.float()
    rowmax = lambda x: x.amax(-1, keepdim=True) if x.shape[-1] else x.new_zeros(x.shape[:-1] + (1,))  # noqa: E731
    m = rowmax(s32).clamp_min(-1e30)
    p = torch.exp(s32 - m)
    v8 = (v.float().repeat_interleave(g, 1))
    o = torch.einsum("hij,jhd->ihd", p.to(F8).float(), v8) / p.sum(-1).T[:, :, None].clamp_min(1e-30)
    naive = (o * vd.float().repeat_interleave(g)[None, :, None]).to(torch.bfloat16).double()
    bound = rowmax(absdot.masked_fill(~mask, 0))[..., 0] * 2.0**-12 * max(1.0, D / 128) + 1e-4
    return truth, naive, lse, bound


def _float8_check(out, lse, truth, naive, ref_lse, bound):
    assert out.dtype == torch.bfloat16 and not out.isnan().any()
    err = (out.double() - truth).abs().max().item()
    err_naive = (naive - truth).abs().max().item()
    top = truth.abs().max().item()
    half_ulp = 2.0 ** (np.floor(np.log2(top)) - 8) if top > 0 else 0.0
    assert err <= 2 * err_naive + half_ulp, (err, err_naive, half_ulp)
    empty = torch.isinf(ref_lse)
    assert (lse[empty] == float("-inf")).all()
    assert ((lse.double() - ref_lse).abs()[~empty] <= bound[~empty]).all()


def _float8_inputs(lens_q, lens_k, hq, hk, d, scale=1.0):
    B = len(lens_q)
    mk = lambda n, h, s: (torch.randn(n, h, d, device="cuda") * s).to(F8)  # noqa: E731
    q, k, v = mk(sum(lens_q), hq, scale), mk(sum(lens_k), hk, scale), mk(sum(lens_k), hk, 1.0)
    desc = [0.5 + 1.5 * torch.rand(B, hk, device="cuda") for _ in range(3)]
    return q, k, v, desc


@pytest.mark.skipif(not _hopper_ok(), reason="needs a Hopper GPU")
@pytest.mark.parametrize("d", [64, 128, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_float8(d, causal):
    """flash_attn_func on float8 e4m3 with descales: bfloat16 out, lse, GQA."""
    B, sq, sk = 2, 200, 333
    q, k, v, (qd, kd, vd) = _float8_inputs([sq] * B, [sk] * B, 4, 2, d)
    shape = lambda x, s: x.view(B, s, *x.shape[1:])  # noqa: E731
    out, lse, _ = fa.flash_attn_func(shape(q, sq), shape(k, sk), shape(v, sk), causal=causal,
                                     return_attn_probs=True, q_descale=qd, k_descale=kd,
                                     v_descale=vd)
    assert out.shape == (B, sq, 4, d)
    for b in range(B):
        rows, keys = slice(b * sq, (b + 1) * sq), slice(b * sk, (b + 1) * sk)
        ref = _float8_one(q[rows], k[keys], v[keys], qd[b], kd[b], vd[b], causal, 0.0)
        _float8_check(out[b], lse[b].T, *ref[:2], ref[2].T, ref[3].T)


@pytest.mark.skipif(not _hopper_ok(), reason="needs a Hopper GPU")
@pytest.mark.parametrize("d,causal,softcap", [(128, True, 0.0), (64, False, 0.0), (96, True, 30.0),
                                              (256, True, 0.0), (176, False, 30.0)])
def test_cuda_float8_varlen(d, causal, softcap):
    """flash_attn_varlen_func on float8: sequences ending inside a 32-key
    chunk and a kv block, a single key, empty ones, descales per sequence."""
    lens_q, lens_k = [130, 0, 1, 257, 7, 31], [130, 5, 1, 300, 0, 31]
    if causal:
        lens_k[3] = 257
    q, k, v, (qd, kd, vd) = _float8_inputs(lens_q, lens_k, 4, 2, d, 3.0 if softcap else 1.0)
    cu = [torch.tensor(np.cumsum([0] + x), device="cuda", dtype=torch.int32) for x in (lens_q, lens_k)]
    out, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu[0], cu[1], max(lens_q), max(lens_k),
                                            causal=causal, softcap=softcap, return_attn_probs=True,
                                            q_descale=qd, k_descale=kd, v_descale=vd)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    for b in range(len(lens_q)):
        rows = slice(int(cu[0][b]), int(cu[0][b + 1]))
        keys = slice(int(cu[1][b]), int(cu[1][b + 1]))
        if rows.stop == rows.start:
            continue
        ref = _float8_one(q[rows], k[keys], v[keys], qd[b], kd[b], vd[b], causal, softcap)
        _float8_check(out[rows], lse[:, rows].T, ref[0], ref[1], ref[2].T, ref[3].T)
