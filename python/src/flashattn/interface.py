"""flash-attn's Python API (names, arguments, defaults, return values) on flashattn's kernels.

Layout is flash-attn's: q (batch, seqlen_q, heads, headdim), k/v (batch, seqlen_k, heads_kv, headdim);
varlen: (total_tokens, heads, headdim) with int32 cu_seqlens. Supported: fp16/bf16 on CUDA,
fp32/fp16/bf16 on the CPU; causal (aligned bottom-right), sliding windows, softcap, GQA/MQA.
Not supported yet, and refused with NotImplementedError rather than ignored: dropout_p > 0,
alibi_slopes, block_table (paged KV).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _ops
from ._ops import InvalidArgumentError

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func"]

_HEAD_DIM_MULTIPLE = 8  # the kernels take head dims that are multiples of 8; others are zero-padded
_MAX_HEAD_DIM = 256


def _refuse_unsupported(dropout_p, alibi_slopes, block_table=None) -> None:
    if dropout_p == 0.0 and alibi_slopes is None and block_table is None:
        return  # what every call passes: decided in one comparison
    if dropout_p is None or float(dropout_p) < 0.0 or float(dropout_p) >= 1.0:
        raise ValueError(f"flashattn: dropout_p = {dropout_p} must be in [0, 1)")
    if float(dropout_p) > 0.0:
        raise NotImplementedError(
            f"flashattn: dropout_p = {dropout_p} is not supported yet (attention dropout); pass dropout_p=0.0")
    if alibi_slopes is not None:
        raise NotImplementedError("flashattn: alibi_slopes is not supported yet (ALiBi bias); pass alibi_slopes=None")
    if block_table is not None:
        raise NotImplementedError("flashattn: block_table is not supported yet (paged KV cache); pass block_table=None")


def _pad_head_dim(x: Tensor) -> Tensor:
    d = x.shape[-1]
    if d % _HEAD_DIM_MULTIPLE == 0 or d > _MAX_HEAD_DIM:
        return x  # a head dim over the maximum is left for the library to report by value
    return F.pad(x, (0, _HEAD_DIM_MULTIPLE - d % _HEAD_DIM_MULTIPLE))


def _window(window_size, causal: bool) -> Tuple[int, int]:
    try:
        left, right = window_size
        left, right = int(left), int(right)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"flashattn: window_size = {window_size!r} must be a pair (left, right) of ints, "
                                   f"-1 meaning unbounded") from None
    # As flash-attn: causal means right = 0, whatever window_size says (HF passes (w, w) with causal).
    return left, 0 if causal else right


def _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"flashattn: {name} must be a torch.Tensor, got {type(t).__name__}")
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if not isinstance(t, Tensor) or t.dtype != torch.int32:
                got = t.dtype if isinstance(t, Tensor) else type(t).__name__
                raise InvalidArgumentError(f"flashattn: {name}: dtype {got}, expected torch.int32")


def _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
               window_size, softcap, alibi_slopes, deterministic, return_attn_probs, path, block_table=None):
    _refuse_unsupported(dropout_p, alibi_slopes, block_table)
    _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k)
    hdim_qk, hdim_v = q.shape[-1], v.shape[-1]
    scale = hdim_qk ** -0.5 if softmax_scale is None else float(softmax_scale)
    window_left, window_right = _window(window_size, causal)
    out, lse = _ops.attention(_pad_head_dim(q), _pad_head_dim(k), _pad_head_dim(v), cu_seqlens_q, cu_seqlens_k,
                              max_seqlen_q, max_seqlen_k, scale, bool(causal), window_left, window_right,
                              float(softcap), bool(deterministic), path)
    if out.shape[-1] != hdim_v:
        out = out[..., :hdim_v]
    # flash-attn returns (out, softmax_lse, S_dmask); S_dmask exists only with dropout, so it is None.
    return (out, lse, None) if return_attn_probs else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, path="auto"):
    """Exact attention softmax(q kᵀ · softmax_scale) v, computed without materializing the scores.

    Arguments:
        q: (batch_size, seqlen_q, nheads, headdim)
        k: (batch_size, seqlen_k, nheads_k, headdim), nheads a multiple of nheads_k (GQA/MQA)
        v: (batch_size, seqlen_k, nheads_k, headdim_v)
        dropout_p: must be 0.0 (dropout is not supported yet: NotImplementedError).
        softmax_scale: scale of q kᵀ before the softmax; default 1 / sqrt(headdim).
        causal: causal mask, aligned to the bottom-right corner when seqlen_q != seqlen_k.
        window_size: (left, right); query i sees keys in
            [i + seqlen_k - seqlen_q - left, i + seqlen_k - seqlen_q + right], -1 meaning unbounded.
        softcap: > 0 applies softcap · tanh(scores / softcap) before the softmax.
        alibi_slopes: must be None (not supported yet: NotImplementedError).
        deterministic: bitwise-reproducible backward (slower).
        return_attn_probs: also return softmax_lse and S_dmask (always None: probabilities are never stored).
        path: (keyword only; not in flash-attn) which kernel family may run the call: "auto" (the
            fastest that supports it), or one of flashattn.families() ("sm80", "cpu", ...) to run that
            one or raise its reason (NotSupportedError; InvalidArgumentError for an unknown name).
    Returns:
        out: (batch_size, seqlen_q, nheads, headdim_v); with return_attn_probs,
        (out, softmax_lse (batch_size, nheads, seqlen_q) fp32, None).
    A query row that sees no key gets out = 0 and softmax_lse = +inf.
    """
    return _attention(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size, softcap,
                      alibi_slopes, deterministic, return_attn_probs, path)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                              path="auto"):
    """flash_attn_func on qkv (batch_size, seqlen, 3, nheads, headdim); the gradient is one tensor like qkv."""
    q, k, v = qkv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs, path=path)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             path="auto"):
    """flash_attn_func on q and kv (batch_size, seqlen_k, 2, nheads_k, headdim)."""
    k, v = kv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs, path=path)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, path="auto"):
    """flash_attn_func on variable-length sequences packed along the first dimension.

    Arguments:
        q: (total_q, nheads, headdim); k: (total_k, nheads_k, headdim); v: (total_k, nheads_k, headdim_v)
        cu_seqlens_q, cu_seqlens_k: (batch_size + 1,) int32 cumulative offsets into q and k/v.
        max_seqlen_q, max_seqlen_k: the longest query / key sequence of the batch.
        block_table: must be None (paged KV is not supported yet: NotImplementedError).
        The rest (path included) as flash_attn_func; masks are per sequence.
    Returns:
        out: (total_q, nheads, headdim_v); with return_attn_probs, (out, softmax_lse (nheads, total_q), None).
    """
    return _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                      causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs, path, block_table)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, path="auto"):
    """flash_attn_varlen_func on qkv (total, 3, nheads, headdim), one cu_seqlens for queries and keys."""
    q, k, v = qkv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, path=path)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, path="auto"):
    """flash_attn_varlen_func on q (total_q, nheads, headdim) and kv (total_k, 2, nheads_k, headdim)."""
    k, v = kv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, path=path)
