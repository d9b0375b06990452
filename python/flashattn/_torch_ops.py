"""flashattn as torch operators with autograd.

With torch >= 2.4 each entry point is a ``torch.library.custom_op`` in the
``flashattn`` namespace with a fake (meta) implementation and registered
autograd, so torch.compile traces through it with no graph break. Older torch
gets the same functions as plain ``torch.autograd.Function``s.

Dropout randomness enters as ``rng_state``, a CPU int64 tensor
``[seed, offset]`` drawn by the caller from torch's generator, so the op is a
pure function of its inputs and the backward replays the forward's mask.
"""

import os
from typing import Optional, Tuple

import torch

from . import _core

__all__ = ["fwd", "varlen_fwd", "fwd_kvcache", "make_rng_state", "HAS_CUSTOM_OP"]

# FLASHATTN_TORCH_CUSTOM_OP=0 selects the plain autograd.Function path of older torch.
HAS_CUSTOM_OP = (hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")
                 and os.environ.get("FLASHATTN_TORCH_CUSTOM_OP", "1") != "0")


def make_rng_state(dropout_p):
    """[seed, offset] for one dropout call, from torch's default CPU generator
    (so torch.manual_seed makes runs repeatable); None without dropout."""
    if dropout_p <= 0.0:
        return None
    return torch.randint(0, 2**62, (2,), dtype=torch.int64)


def _seed_offset(rng_state):
    if rng_state is None:
        return 0, 0
    seed, offset = rng_state.tolist()
    return seed, offset


def _opts(dropout_p, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
          deterministic, rng_state):
    seed, offset = _seed_offset(rng_state)
    return dict(softmax_scale=softmax_scale, causal=causal, window_size=(window_left, window_right),
                softcap=softcap, alibi_slopes=alibi_slopes, dropout_p=dropout_p, seed=seed,
                offset=offset, deterministic=deterministic)


# ---------------------------------------------------------------------------
# Implementations on real tensors
# ---------------------------------------------------------------------------

def _fwd_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
              softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
              softcap: float, alibi_slopes: Optional[torch.Tensor], deterministic: bool,
              rng_state: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    return _core.fwd(q, k, v, **_opts(dropout_p, softmax_scale, causal, window_left, window_right,
                                      softcap, alibi_slopes, deterministic, rng_state))


def _bwd_impl(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              out: torch.Tensor, lse: torch.Tensor, dropout_p: float,
              softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
              softcap: float, alibi_slopes: Optional[torch.Tensor], deterministic: bool,
              rng_state: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _core.bwd(dout, q, k, v, out, lse,
                     **_opts(dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                             alibi_slopes, deterministic, rng_state))


def _varlen_fwd_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                     max_seqlen_k: int, dropout_p: float, softmax_scale: Optional[float],
                     causal: bool, window_left: int, window_right: int, softcap: float,
                     alibi_slopes: Optional[torch.Tensor], deterministic: bool,
                     rng_state: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    return _core.varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            **_opts(dropout_p, softmax_scale, causal, window_left, window_right,
                                    softcap, alibi_slopes, deterministic, rng_state))


def _varlen_bwd_impl(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     out: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                     dropout_p: float, softmax_scale: Optional[float], causal: bool,
                     window_left: int, window_right: int, softcap: float,
                     alibi_slopes: Optional[torch.Tensor], deterministic: bool,
                     rng_state: Optional[torch.Tensor]
                     ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _core.varlen_bwd(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                            max_seqlen_k,
                            **_opts(dropout_p, softmax_scale, causal, window_left, window_right,
                                    softcap, alibi_slopes, deterministic, rng_state))


def _kvcache_impl(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  k: Optional[torch.Tensor], v: Optional[torch.Tensor],
                  cache_seqlens: Optional[torch.Tensor], block_table: Optional[torch.Tensor],
                  softmax_scale: Optional[float], causal: bool, window_left: int,
                  window_right: int, softcap: float, alibi_slopes: Optional[torch.Tensor],
                  num_splits: int) -> Tuple[torch.Tensor, torch.Tensor]:
    return _core.fwd_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, k, v, num_splits,
                             softmax_scale=softmax_scale, causal=causal,
                             window_size=(window_left, window_right), softcap=softcap,
                             alibi_slopes=alibi_slopes)


# ---------------------------------------------------------------------------
# Shapes only (fake / meta tensors for tracing)
# ---------------------------------------------------------------------------

def _fwd_fake(q, k, v, dropout_p, softmax_scale, causal, window_left, window_right, softcap,
              alibi_slopes, deterministic, rng_state):
    B, Sq, Hq, _ = q.shape
    return (q.new_empty((B, Sq, Hq, v.shape[-1])),
            q.new_empty((B, Hq, Sq), dtype=torch.float32))


def _bwd_fake(dout, q, k, v, out, lse, *args):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, *args):
    total_q, Hq, _ = q.shape
    return (q.new_empty((total_q, Hq, v.shape[-1])),
            q.new_empty((Hq, total_q), dtype=torch.float32))


def _kvcache_fake(q, k_cache, v_cache, *args):
    B, Sq, Hq, _ = q.shape
    return (q.new_empty((B, Sq, Hq, v_cache.shape[-1])),
            q.new_empty((B, Hq, Sq), dtype=torch.float32))


# ---------------------------------------------------------------------------
# Autograd: forward saves what the backward op needs
# ---------------------------------------------------------------------------

def _fwd_setup(ctx, inputs, output):
    q, k, v, *opts = inputs
    alibi_slopes, deterministic, rng_state = opts[6], opts[7], opts[8]
    out, lse = output
    ctx.mark_non_differentiable(lse)  # as in flash-attn: no gradient through lse
    ctx.opts = tuple(opts[:6])
    ctx.deterministic = deterministic
    ctx.save_for_backward(q, k, v, out, lse, alibi_slopes, rng_state)


def _varlen_fwd_setup(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, *opts = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.opts = tuple(opts[:6])
    ctx.deterministic = opts[7]
    ctx.max_seqlens = (max_q, max_k)
    ctx.save_for_backward(q, k, v, out, lse, opts[6], opts[8], cu_q, cu_k)


def _grads_or_zero(dout, like):
    # the loss may not depend on out (only on lse): a zero output gradient
    return dout if dout is not None else torch.zeros_like(like)


def _make_autograd(bwd_op, varlen_bwd_op):
    def fwd_backward(ctx, dout, dlse):
        q, k, v, out, lse, alibi_slopes, rng_state = ctx.saved_tensors
        dq, dk, dv = bwd_op(_grads_or_zero(dout, out), q, k, v, out, lse, *ctx.opts, alibi_slopes,
                            ctx.deterministic, rng_state)
        return (dq, dk, dv) + (None,) * 9

    def varlen_backward(ctx, dout, dlse):
        q, k, v, out, lse, alibi_slopes, rng_state, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = varlen_bwd_op(_grads_or_zero(dout, out), q, k, v, out, lse, cu_q, cu_k,
                                   *ctx.max_seqlens, *ctx.opts, alibi_slopes, ctx.deterministic,
                                   rng_state)
        return (dq, dk, dv) + (None,) * 13

    return fwd_backward, varlen_backward


if HAS_CUSTOM_OP:
    def _op(name, impl, fake, mutates=()):
        op = torch.library.custom_op(f"flashattn::{name}", mutates_args=mutates)(impl)
        op.register_fake(fake)
        return op

    _fwd_op = _op("fwd", _fwd_impl, _fwd_fake)
    _bwd_op = _op("bwd", _bwd_impl, _bwd_fake)
    _varlen_fwd_op = _op("varlen_fwd", _varlen_fwd_impl, _varlen_fwd_fake)
    _varlen_bwd_op = _op("varlen_bwd", _varlen_bwd_impl, _bwd_fake)
    _kvcache_op = _op("fwd_kvcache", _kvcache_impl, _kvcache_fake, mutates=("k_cache", "v_cache"))

    _fwd_backward, _varlen_backward = _make_autograd(_bwd_op, _varlen_bwd_op)
    _fwd_op.register_autograd(_fwd_backward, setup_context=_fwd_setup)
    _varlen_fwd_op.register_autograd(_varlen_backward, setup_context=_varlen_fwd_setup)

    fwd = _fwd_op
    varlen_fwd = _varlen_fwd_op
    fwd_kvcache = _kvcache_op
else:
    _fwd_backward, _varlen_backward = _make_autograd(_bwd_impl, _varlen_bwd_impl)

    def _autograd_function(name, impl, setup, backward):
        """An autograd.Function running impl forward and backward(ctx, dout, dlse)."""

        def forward(ctx, *inputs):
            output = impl(*inputs)
            setup(ctx, inputs, output)
            return output

        return type(name, (torch.autograd.Function,), {
            "forward": staticmethod(forward),
            "backward": staticmethod(lambda ctx, dout, dlse: backward(ctx, dout, dlse)),
        })

    _FwdFunction = _autograd_function("_FwdFunction", _fwd_impl, _fwd_setup, _fwd_backward)
    _VarlenFwdFunction = _autograd_function("_VarlenFwdFunction", _varlen_fwd_impl, _varlen_fwd_setup,
                                            _varlen_backward)

    def fwd(*inputs):
        return _FwdFunction.apply(*inputs)

    def varlen_fwd(*inputs):
        return _VarlenFwdFunction.apply(*inputs)

    def fwd_kvcache(*inputs):
        with torch.no_grad():
            return _kvcache_impl(*inputs)
