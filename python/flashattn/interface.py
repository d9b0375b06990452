"""flash-attn 2's Python functions, over the flashattn C library.

Signatures, defaults and return values follow ``flash_attn.flash_attn_interface``
(flash-attn 2.x). Inputs may be torch tensors (CPU or CUDA; autograd supported)
or NumPy arrays (CPU; forward only). Differences from flash-attn:

* float32 is accepted on the CPU, and any head dimension from 1 to 256.
* With ``return_attn_probs=True`` the third value is the dropout keep-mask
  (bool, ``(batch, nheads, seqlen_q, seqlen_k)``; ``max_seqlen_*`` for varlen)
  when ``dropout_p > 0``, rebuilt from the library's counter-based rule, and
  ``None`` otherwise. flash-attn returns a sign-encoded probability matrix there,
  which it documents as for testing only.
* ``softmax_lse`` carries no gradient (as in flash-attn).
* ``flash_attn_with_kvcache``: ``rotary_cos/rotary_sin`` and ``cache_leftpad``
  are not supported (NotImplementedError); ``cache_batch_idx`` is supported for
  contiguous caches; ``block_table`` accepts any page size.
* ``flash_attn_varlen_func(block_table=...)`` is not supported.
* float8 e4m3 inputs (forward only; on the CPU, and on Hopper GPUs at head
  dims 16 to 256 in steps of 16): ``flash_attn_func`` and ``flash_attn_varlen_func`` take
  ``q_descale``, ``k_descale`` and ``v_descale`` (float32
  ``(batch, nheads_k)``, as in flash-attn 3) and return bfloat16. These calls
  carry no autograd.
"""

import numpy as np

from . import _core
from . import _tensors as T
from ._lib import DType, FlashAttnError, Status

__all__ = [
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
    "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
]


def _window(window_size):
    if window_size is None:
        return -1, -1
    if len(window_size) != 2:
        raise FlashAttnError(Status.ERR_OPTION, f"window_size: expected (left, right), got "
                             f"{window_size!r}")
    return int(window_size[0]), int(window_size[1])


def _check_dropout(dropout_p):
    dropout_p = float(dropout_p or 0.0)
    if not 0.0 <= dropout_p < 1.0:
        raise FlashAttnError(Status.ERR_OPTION, f"dropout_p: must be in [0, 1), got {dropout_p}")
    return dropout_p


def _numpy_seed(dropout_p):
    """(seed, offset) for a NumPy call, from NumPy's global generator."""
    if dropout_p <= 0.0:
        return 0, 0
    seed, offset = np.random.randint(0, 2**62, size=2, dtype=np.int64)
    return int(seed), int(offset)


def _mask_like(like, seed_offset, p, batch, nheads, seqlen_q, seqlen_k):
    """The keep-mask a call used, as a bool array of like's kind and device.
    seed_offset is (seed, offset) or the torch rng_state tensor holding them."""
    seed, offset = (int(x) for x in seed_offset.tolist()) if T.is_torch(seed_offset) else seed_offset
    mask = _core.dropout_mask(seed, offset, p, batch, nheads, seqlen_q, seqlen_k).astype(bool)
    if T.is_torch(like):
        import torch
        return torch.from_numpy(mask).to(like.device)
    return mask


def _torch_ops():
    from . import _torch_ops
    return _torch_ops


def _float8_call(q, descales):
    """Whether a call takes the float8 path (no autograd): float8 inputs, or
    descale factors given (which the library refuses for other dtypes)."""
    if any(d is not None for d in descales):
        return True
    try:
        return T.dtype_code(q, "q") == DType.F8_E4M3
    except FlashAttnError:
        return False


def _tensor_like(x, like):
    """Index and slope arguments given as lists or NumPy arrays, as tensors on
    like's device (the torch operators take tensors only)."""
    if x is None or T.is_torch(x):
        return x
    import torch
    return torch.as_tensor(np.asarray(x), device=like.device)


# ---------------------------------------------------------------------------
# Dense (batch, seqlen, heads, head_dim)
# ---------------------------------------------------------------------------

def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
                    q_descale=None, k_descale=None, v_descale=None):
    """Attention of q (batch, seqlen_q, nheads, headdim) over k, v
    (batch, seqlen_k, nheads_k, headdim[_v]); nheads % nheads_k == 0 (MQA/GQA).

    causal and window_size (left, right; -1 unbounded) are aligned to the
    bottom-right corner: query i sees keys up to i + seqlen_k - seqlen_q + right.
    softcap > 0 applies softcap * tanh(s / softcap) to the scores. alibi_slopes
    (nheads,) or (batch, nheads) float32 add -slope * |i + seqlen_k - seqlen_q - j|.

    Returns out (batch, seqlen_q, nheads, headdim_v); with return_attn_probs
    also softmax_lse (batch, nheads, seqlen_q) float32 and the dropout mask
    (None without dropout).

    float8 e4m3 q, k, v (CPU, Hopper GPUs): q_descale, k_descale, v_descale (float32
    (batch, nheads_k), None for 1) multiply them back to their real scale;
    out is bfloat16, and the call has no autograd.
    """
    dropout_p = _check_dropout(dropout_p)
    left, right = _window(window_size)
    if _float8_call(q, (q_descale, k_descale, v_descale)):
        out, lse = _core.fwd(q, k, v, want_lse=bool(return_attn_probs), softmax_scale=softmax_scale,
                             causal=causal, window_size=(left, right), softcap=softcap,
                             alibi_slopes=alibi_slopes, dropout_p=dropout_p,
                             deterministic=deterministic, q_descale=q_descale,
                             k_descale=k_descale, v_descale=v_descale)
        return (out, lse, None) if return_attn_probs else out
    if T.is_torch(q):
        ops = _torch_ops()
        rng = ops.make_rng_state(dropout_p)
        out, lse = ops.fwd(q, k, v, dropout_p, softmax_scale, bool(causal), left, right,
                           float(softcap), _tensor_like(alibi_slopes, q), bool(deterministic),
                           rng)
        seed_offset = rng  # read only if the mask is asked for (a sync under tracing)
    else:
        seed_offset = _numpy_seed(dropout_p)
        out, lse = _core.fwd(q, k, v, want_lse=bool(return_attn_probs),
                             softmax_scale=softmax_scale, causal=causal,
                             window_size=(left, right), softcap=softcap,
                             alibi_slopes=alibi_slopes, dropout_p=dropout_p, seed=seed_offset[0],
                             offset=seed_offset[1], deterministic=deterministic)
    if not return_attn_probs:
        return out
    mask = None
    if dropout_p > 0.0:
        B, Sq, Hq, _ = q.shape
        mask = _mask_like(q, seed_offset, dropout_p, B, Hq, Sq, k.shape[1])
    return out, lse, mask


def _unpack(x, n, axis):
    """Zero-copy views x[..., i, ...] along the packing axis."""
    if x.shape[axis] != n:
        raise FlashAttnError(Status.ERR_SHAPE, f"packed tensor: dimension {axis} must be {n}, "
                             f"got shape {tuple(x.shape)}")
    if T.is_torch(x):
        return x.unbind(dim=axis)
    return tuple(x[(slice(None),) * axis + (i,)] for i in range(n))


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """flash_attn_func with qkv (batch, seqlen, 3, nheads, headdim), read in place."""
    q, k, v = _unpack(qkv, 3, 2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """flash_attn_func with kv (batch, seqlen_k, 2, nheads_k, headdim), read in place."""
    k, v = _unpack(kv, 2, 2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


# ---------------------------------------------------------------------------
# Variable length: (total_tokens, heads, head_dim) with cu_seqlens
# ---------------------------------------------------------------------------

def _num_seqs(cu_seqlens):
    return int(cu_seqlens.shape[0]) - 1


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, q_descale=None,
                           k_descale=None, v_descale=None):
    """Packed sequences: q (total_q, nheads, headdim), k, v (total_k, nheads_k,
    headdim[_v]), cu_seqlens_* int32 (batch + 1). Each sequence is its own
    problem (its own bottom-right alignment). Returns out (total_q, nheads,
    headdim_v); with return_attn_probs also softmax_lse (nheads, total_q) and
    the dropout mask (batch, nheads, max_seqlen_q, max_seqlen_k) or None.
    float8 inputs as in flash_attn_func, the descales (batch, nheads_k) per
    sequence.
    """
    if block_table is not None:
        raise NotImplementedError("flash_attn_varlen_func: block_table (paged KV in varlen) is "
                                  "not supported; use flash_attn_with_kvcache")
    dropout_p = _check_dropout(dropout_p)
    left, right = _window(window_size)
    if _float8_call(q, (q_descale, k_descale, v_descale)):
        out, lse = _core.varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, want_lse=bool(return_attn_probs),
                                    softmax_scale=softmax_scale, causal=causal,
                                    window_size=(left, right), softcap=softcap,
                                    alibi_slopes=alibi_slopes, dropout_p=dropout_p,
                                    deterministic=deterministic, q_descale=q_descale,
                                    k_descale=k_descale, v_descale=v_descale)
        return (out, lse, None) if return_attn_probs else out
    if T.is_torch(q):
        ops = _torch_ops()
        rng = ops.make_rng_state(dropout_p)
        out, lse = ops.varlen_fwd(q, k, v, _tensor_like(cu_seqlens_q, q),
                                  _tensor_like(cu_seqlens_k, q), int(max_seqlen_q),
                                  int(max_seqlen_k), dropout_p, softmax_scale, bool(causal), left,
                                  right, float(softcap), _tensor_like(alibi_slopes, q),
                                  bool(deterministic), rng)
        seed_offset = rng  # read only if the mask is asked for (a sync under tracing)
    else:
        seed_offset = _numpy_seed(dropout_p)
        out, lse = _core.varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, want_lse=bool(return_attn_probs),
                                    softmax_scale=softmax_scale, causal=causal,
                                    window_size=(left, right), softcap=softcap,
                                    alibi_slopes=alibi_slopes, dropout_p=dropout_p,
                                    seed=seed_offset[0], offset=seed_offset[1],
                                    deterministic=deterministic)
    if not return_attn_probs:
        return out
    mask = None
    if dropout_p > 0.0:
        mask = _mask_like(q, seed_offset, dropout_p, _num_seqs(cu_seqlens_q), q.shape[1],
                          int(max_seqlen_q), int(max_seqlen_k))
    return out, lse, mask


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn_varlen_func with qkv (total, 3, nheads, headdim), read in place."""
    q, k, v = _unpack(qkv, 3, 1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  dropout_p, softmax_scale, causal, window_size, softcap,
                                  alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p=0.0, softmax_scale=None, causal=False,
                                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                    deterministic=False, return_attn_probs=False):
    """flash_attn_varlen_func with kv (total_k, 2, nheads_k, headdim), read in place."""
    k, v = _unpack(kv, 2, 1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p, softmax_scale, causal, window_size, softcap,
                                  alibi_slopes, deterministic, return_attn_probs)


# ---------------------------------------------------------------------------
# KV cache (inference)
# ---------------------------------------------------------------------------

def _batch_index_as_block_table(cache_batch_idx):
    """cache_batch_idx over a contiguous cache is a paged cache whose pages are
    whole sequences: page b of the table is cache row cache_batch_idx[b]."""
    if T.is_torch(cache_batch_idx):
        return cache_batch_idx.reshape(-1, 1)
    return np.asarray(cache_batch_idx).reshape(-1, 1)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """Attention of q (batch, seqlen_q, nheads, headdim) over a KV cache, for
    decoding. No gradient.

    k_cache, v_cache: (batch_cache, seqlen_cache, nheads_k, headdim[_v]), or
    paged (num_blocks, page_block_size, nheads_k, headdim[_v]) with block_table
    int32 (batch, max_blocks_per_seq); any page_block_size >= 1.
    k, v (batch, seqlen_new, nheads_k, headdim[_v]), optional: written into the
    cache in place at cache_seqlens, then attended to. cache_seqlens: int or
    int32 (batch,), the keys already in the cache (not updated here).
    num_splits: split-KV chunks merged exactly; 0 picks by a heuristic.

    Returns out (batch, seqlen_q, nheads, headdim_v), and softmax_lse
    (batch, nheads, seqlen_q) float32 if return_softmax_lse.
    """
    if rotary_cos is not None or rotary_sin is not None:
        raise NotImplementedError("flash_attn_with_kvcache: rotary embedding is not supported; "
                                  "apply it to q and k before the call")
    if cache_leftpad is not None:
        raise NotImplementedError("flash_attn_with_kvcache: cache_leftpad is not supported")
    if (k is None) != (v is None):
        raise FlashAttnError(Status.ERR_NULL_POINTER, "k, v: give both new tensors or neither")
    if cache_batch_idx is not None:
        if block_table is not None:
            raise NotImplementedError("flash_attn_with_kvcache: cache_batch_idx with block_table "
                                      "is not supported")
        block_table = _batch_index_as_block_table(cache_batch_idx)
        if cache_seqlens is None:  # a paged cache needs lengths: the whole rows
            cache_seqlens = int(k_cache.shape[1])
    elif block_table is None and k_cache.shape[0] > q.shape[0]:
        # a larger contiguous cache: sequences 0..batch-1 use its first rows
        k_cache, v_cache = k_cache[:q.shape[0]], v_cache[:q.shape[0]]
    left, right = _window(window_size)
    if isinstance(cache_seqlens, (int, np.integer)):
        cache_seqlens = T.full_int32(q, (q.shape[0],), int(cache_seqlens))
    if T.is_torch(q):
        out, lse = _torch_ops().fwd_kvcache(q, k_cache, v_cache, k, v,
                                            _tensor_like(cache_seqlens, q),
                                            _tensor_like(block_table, q), softmax_scale,
                                            bool(causal), left, right, float(softcap),
                                            _tensor_like(alibi_slopes, q), int(num_splits))
    else:
        out, lse = _core.fwd_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, k, v,
                                     num_splits, want_lse=bool(return_softmax_lse),
                                     softmax_scale=softmax_scale, causal=causal,
                                     window_size=(left, right), softcap=softcap,
                                     alibi_slopes=alibi_slopes)
    return (out, lse) if return_softmax_lse else out
