"""flash-attn's Python API (names, arguments, defaults, return values) on flashattn's kernels.

Layout is flash-attn's: q (batch, seqlen_q, heads, headdim), k/v (batch, seqlen_k, heads_kv, headdim);
varlen: (total_tokens, heads, headdim) with int32 cu_seqlens. Supported: fp16/bf16 on CUDA,
fp32/fp16/bf16 on the CPU; causal (aligned bottom-right), sliding windows, softcap, GQA/MQA.
flash_attn_with_kvcache: contiguous (optionally left-padded) or paged caches, in-place append, rotary.
flash_attn_varlen_func with block_table (paged prefill): the forward only (cpu, sm80 and sm90 families).
Not supported yet, and refused with NotImplementedError rather than ignored: dropout_p > 0,
alibi_slopes, gradients through a block_table call.
"""
from __future__ import annotations

import inspect
import numbers
import operator
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _ops
from ._ops import InvalidArgumentError

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache"]

_HEAD_DIM_MULTIPLE = 8  # the kernels take head dims that are multiples of 8; others are zero-padded
_MAX_HEAD_DIM = 256


_INT64_MAX = 2**63 - 1
_NO_WINDOW = (-1, -1)


# ---- argument checks: every public function's arguments are checked once, here -------------------
# The common call (float or None scale, bool flags, int window) is decided by a few `type(x) is`
# tests; anything else takes the slow path, which accepts what is equivalent (ints for floats,
# numpy scalars) and refuses the rest by name.

def _refuse_unsupported(dropout_p, alibi_slopes) -> None:
    if dropout_p == 0.0 and alibi_slopes is None:
        return  # what every call passes: decided in one comparison
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"flashattn: dropout_p must be a float, got {type(dropout_p).__name__}")
    if not 0.0 <= dropout_p < 1.0:  # NaN fails too
        raise ValueError(f"flashattn: dropout_p = {dropout_p} must be in [0, 1)")
    if dropout_p > 0.0:
        raise NotImplementedError(
            f"flashattn: dropout_p = {dropout_p} is not supported yet (attention dropout); pass dropout_p=0.0")
    if alibi_slopes is not None:
        raise NotImplementedError("flashattn: alibi_slopes is not supported yet (ALiBi bias); pass alibi_slopes=None")


def _real(name: str, x) -> float:
    """x as a float: a Python or numpy real number, not a bool, str or tensor. The value (finite,
    in range) is the library's to check."""
    if type(x) is float:
        return x
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"flashattn: {name} must be a float, got {type(x).__name__} {x!r}")
    return float(x)


def _flag(name: str, x) -> bool:
    """x as a bool: a bool or an int (0 or 1), not a str, None or tensor."""
    if type(x) is bool:
        return x
    if isinstance(x, int) and x in (0, 1):
        return bool(x)
    raise TypeError(f"flashattn: {name} must be a bool, got {type(x).__name__} {x!r}")


def _integer(name: str, x) -> int:
    """x as an int64: an int (or anything with __index__, numpy ints), not a float; values beyond
    int64 are clamped (a window or sequence length that large is as good as unbounded)."""
    if type(x) is not int:
        if isinstance(x, bool):
            raise TypeError(f"flashattn: {name} must be an int, got bool {x!r}")
        try:
            x = operator.index(x)
        except TypeError:
            raise TypeError(f"flashattn: {name} must be an int, got {type(x).__name__} {x!r}") from None
    return x if -_INT64_MAX <= x <= _INT64_MAX else max(-_INT64_MAX - 1, min(x, _INT64_MAX))


def _window(window_size, causal: bool) -> Tuple[int, int]:
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"flashattn: window_size = {window_size!r} must be a pair (left, right) of ints, "
                                   f"-1 meaning unbounded") from None
    if type(left) is not int or type(right) is not int or not (
            -1 <= left <= _INT64_MAX and -1 <= right <= _INT64_MAX):
        try:
            left, right = _integer("window_size", left), _integer("window_size", right)
        except TypeError:
            raise InvalidArgumentError(f"flashattn: window_size = {window_size!r} must be a pair (left, right) of "
                                       f"ints, -1 meaning unbounded") from None
    # As flash-attn: causal means right = 0, whatever window_size says (HF passes (w, w) with causal).
    return left, 0 if causal else right


def _score_options(hdim_qk: int, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0) -> tuple:
    """(softmax_scale, causal, window_left, window_right, softcap): the score-level options checked
    and normalized, in the order the operators (fwd, bwd, kvcache) take them, so that every caller
    passes them on whole. A head dim of 0 gets a placeholder scale: the library refuses the call by
    hdim's value."""
    if softmax_scale is None:
        scale = hdim_qk ** -0.5 if hdim_qk > 0 else 1.0
    else:
        scale = _real("softmax_scale", softmax_scale)
    causal = causal if type(causal) is bool else _flag("causal", causal)
    if type(window_size) is tuple and window_size == _NO_WINDOW:  # the default, decided in one test
        window_left, window_right = -1, 0 if causal else -1
    else:
        window_left, window_right = _window(window_size, causal)
    softcap = softcap if type(softcap) is float else _real("softcap", softcap)
    return scale, causal, window_left, window_right, softcap


def _score_options_by_name(hdim_qk: int, **options) -> tuple:
    """_score_options from keyword arguments (a caller that passes flash_attn_func's score options on
    without naming them), refusing a name it does not take."""
    unknown = set(options) - _SCORE_OPTION_NAMES
    if unknown:
        raise TypeError(f"flashattn: unknown score options {sorted(unknown)}; flash_attn_func's are "
                        f"{sorted(_SCORE_OPTION_NAMES)}")
    return _score_options(hdim_qk, **options)


_SCORE_OPTION_NAMES = frozenset(inspect.signature(_score_options).parameters) - {"hdim_qk"}


def _with_mask(options: tuple, causal: bool) -> tuple:
    """The options of _score_options with the mask replaced by `causal` (no window): for calls on
    blocks of a sequence whose mask the caller works out per block (ring attention)."""
    return (options[0], causal, -1, 0 if causal else -1) + options[4:]


def _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k, block_table=None) -> None:
    """q, k, v are tensors of the layout's rank (checked before their shapes are read; paged k, v:
    rank 4); cu_seqlens and block_table int32."""
    if not (isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, Tensor):
                raise TypeError(f"flashattn: {name} must be a torch.Tensor, got {type(t).__name__}")
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    paged = block_table is not None
    rank = 3 if varlen else 4
    kv_rank = 4 if paged else rank
    if q.dim() != rank or k.dim() != kv_rank or v.dim() != kv_rank:
        _ops._check_ranks(q, k, v, varlen, paged)
    if paged and (not isinstance(block_table, Tensor) or block_table.dtype != torch.int32):
        got = block_table.dtype if isinstance(block_table, Tensor) else type(block_table).__name__
        raise InvalidArgumentError(f"flashattn: block_table: dtype {got}, expected torch.int32")
    if varlen:
        for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if not isinstance(t, Tensor) or t.dtype != torch.int32:
                got = t.dtype if isinstance(t, Tensor) else type(t).__name__
                raise InvalidArgumentError(f"flashattn: {name}: dtype {got}, expected torch.int32")


def _unpack(name: str, t, dim: int, n: int, layout: str):
    """The n tensors packed along `dim` of t (qkv: 3, kv: 2), refused by name when t is not so packed."""
    if not isinstance(t, Tensor):
        raise TypeError(f"flashattn: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != len(layout.split(",")) or t.shape[dim] != n:
        raise InvalidArgumentError(f"flashattn: {name}: shape {list(t.shape)}, expected [{layout}] "
                                   f"(size {n} in dimension {dim})")
    return t.unbind(dim)


def _pad_head_dim(x: Tensor, d: int) -> Tensor:
    """x, whose head dim (last dimension) is d, zero-padded to the kernels' multiple of it."""
    if not _padded(d):
        return x
    return F.pad(x, (0, _HEAD_DIM_MULTIPLE - d % _HEAD_DIM_MULTIPLE))


def _padded(d: int) -> bool:
    """Whether a head dim d is padded (a head dim over the maximum is left for the library to report
    by value)."""
    return d % _HEAD_DIM_MULTIPLE != 0 and d <= _MAX_HEAD_DIM


def _pad_head_dims(q: Tensor, k: Tensor, v: Tensor):
    """(q, k, v padded, hdim_qk, hdim_v): each shape read once (a tensor's .shape costs about as
    much host time as the rest of a check)."""
    hdim_qk, hdim_k, hdim_v = q.shape[-1], k.shape[-1], v.shape[-1]
    if not (hdim_qk | hdim_k | hdim_v) % _HEAD_DIM_MULTIPLE:  # every one a multiple (8 is a power of 2)
        return q, k, v, hdim_qk, hdim_v
    return _pad_head_dim(q, hdim_qk), _pad_head_dim(k, hdim_k), _pad_head_dim(v, hdim_v), hdim_qk, hdim_v


def _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
               window_size, softcap, alibi_slopes, deterministic, return_attn_probs, path, block_table=None,
               packed=None):
    """The attention call of every public function. `packed` = (tensor, dim): q, k, v (3 along dim) or
    k, v (2) are slices of that tensor, which the operators then take whole, so that the backward
    writes one gradient for it (unless head dims are padded: then the slices, padded, as if apart)."""
    _refuse_unsupported(dropout_p, alibi_slopes)
    _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k, block_table)
    q_in, k_in, v_in = q, k, v
    q, k, v, hdim_qk, hdim_v = _pad_head_dims(q, k, v)
    packed_dim = -1
    if packed is not None and q is q_in and k is k_in and v is v_in:
        whole, packed_dim = packed
        q, k, v = (whole, whole, whole) if whole.shape[packed_dim] == 3 else (q, whole, whole)
    options = _score_options(hdim_qk, softmax_scale, causal, window_size, softcap)
    deterministic = deterministic if type(deterministic) is bool else _flag("deterministic", deterministic)
    return_attn_probs = (return_attn_probs if type(return_attn_probs) is bool
                         else _flag("return_attn_probs", return_attn_probs))
    if type(path) is not str:
        raise TypeError(f"flashattn: path must be a str, got {type(path).__name__} {path!r}")
    if type(max_seqlen_q) is not int or type(max_seqlen_k) is not int:
        max_seqlen_q, max_seqlen_k = _integer("max_seqlen_q", max_seqlen_q), _integer("max_seqlen_k", max_seqlen_k)
    # The LSE only when asked for (or when autograd keeps it for the backward): inference skips it.
    out, lse = _ops.attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *options,
                              deterministic, path, block_table, return_attn_probs, packed_dim)
    if hdim_v % _HEAD_DIM_MULTIPLE and _padded(hdim_v):
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
    q, k, v = _unpack("qkv", qkv, 2, 3, "batch, seqlen, 3, heads, headdim")
    return _attention(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size, softcap,
                      alibi_slopes, deterministic, return_attn_probs, path, packed=(qkv, 2))


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             path="auto"):
    """flash_attn_func on q and kv (batch_size, seqlen_k, 2, nheads_k, headdim)."""
    k, v = _unpack("kv", kv, 2, 2, "batch, seqlen_k, 2, heads_k, headdim")
    return _attention(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size, softcap,
                      alibi_slopes, deterministic, return_attn_probs, path, packed=(kv, 2))


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, path="auto"):
    """flash_attn_func on variable-length sequences packed along the first dimension.

    Arguments:
        q: (total_q, nheads, headdim); k: (total_k, nheads_k, headdim); v: (total_k, nheads_k, headdim_v)
        cu_seqlens_q, cu_seqlens_k: (batch_size + 1,) int32 cumulative offsets into q and k/v.
        max_seqlen_q, max_seqlen_k: the longest query / key sequence of the batch.
        block_table: None, or int32 (batch_size, max_blocks_per_sequence) for paged k, v (paged prefill):
            k (num_blocks, page_block_size, nheads_k, headdim), v (..., headdim_v), any page_block_size >= 1;
            sequence b's key t is row t % page_block_size of block block_table[b, t // page_block_size],
            cu_seqlens_k gives each sequence's length (its keys are not packed). Forward only:
            NotSupportedError when q, k or v requires grad. Runs on the cpu and sm80 families at any
            page size, on sm90 (Hopper) at page sizes that are multiples of 16 dividing its key block
            (128 keys; 64 at head dim 256) or multiples of it; "auto" takes sm80 for the others.
        The rest (path included) as flash_attn_func; masks are per sequence.
    Returns:
        out: (total_q, nheads, headdim_v); with return_attn_probs, (out, softmax_lse (nheads, total_q), None).
    Packed rows outside [cu_seqlens_q[0], cu_seqlens_q[-1]) (of k/v: cu_seqlens_k) belong to no sequence:
    they are 0 in out and in the gradients (softmax_lse there is unspecified).
    """
    return _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                      causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs, path, block_table)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, path="auto"):
    """flash_attn_varlen_func on qkv (total, 3, nheads, headdim), one cu_seqlens for queries and keys."""
    q, k, v = _unpack("qkv", qkv, 1, 3, "total, 3, heads, headdim")
    return _attention(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                      window_size, softcap, alibi_slopes, deterministic, return_attn_probs, path, packed=(qkv, 1))


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, path="auto"):
    """flash_attn_varlen_func on q (total_q, nheads, headdim) and kv (total_k, 2, nheads_k, headdim)."""
    k, v = _unpack("kv", kv, 1, 2, "total_k, 2, heads_k, headdim")
    return _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                      causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs, path,
                      packed=(kv, 1))


def _cache_seqlens(cache_seqlens, q: Tensor):
    """cache_seqlens as the library takes it: None, an int32 tensor, or an int (every sequence)."""
    if cache_seqlens is None or isinstance(cache_seqlens, Tensor):
        return cache_seqlens
    n = _integer("cache_seqlens", cache_seqlens)
    return torch.full((q.shape[0],), n, dtype=torch.int32, device=q.device)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            path="auto"):
    """Attention of new queries against a KV cache (inference; no gradient): one or a few tokens per
    sequence (decoding) on the GPU's split-KV decode kernel; from 128 tokens (64 on a wide batch),
    as in chunked prefill, through the forward kernels over the cache as pages (docs/kvcache.md).

    If k and v are given, they are first written into the caches in place at positions
    cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 (rotated first when rotary tables are given);
    sequence b then attends to its first cache_seqlens[b] + seqlen_new keys (from row cache_leftpad[b]
    on, when given).

    Arguments:
        q: (batch_size, seqlen_q, nheads, headdim)
        k_cache, v_cache: (batch_size_cache, seqlen_cache, nheads_k, headdim[_v]), or with block_table
            (num_blocks, page_block_size, nheads_k, headdim[_v]) -- any page size >= 1.
        k, v: new keys and values (batch_size, seqlen_new, nheads_k, headdim[_v]), both or neither.
        rotary_cos, rotary_sin: (seqlen_ro, rotary_dim / 2), rotary_dim <= headdim; applied to k at its
            positions and to q at cache_seqlens (+ i for query i when causal or windowed).
        cache_seqlens: int32 (batch_size,) or an int: keys already cached per sequence. Required with
            block_table or k; without it every sequence holds seqlen_cache keys.
        cache_batch_idx: int32 (batch_size,): the cache row of each sequence (contiguous caches only).
        cache_leftpad: int32 (batch_size,), contiguous caches only: sequence b's keys start at cache row
            cache_leftpad[b] (0 <= cache_leftpad[b] <= cache_seqlens[b]; the rows before it are padding,
            never read). cache_seqlens still counts from row 0; masks align to the keys from the
            padding on; rotary positions are cache rows.
        block_table: int32 (batch_size, max_blocks_per_sequence): a paged cache.
        softmax_scale, causal, window_size, softcap: as flash_attn_func (aligned to each sequence's keys).
        rotary_interleaved: pairs (0, 1), (2, 3), ... if True, else (i, i + rotary_dim / 2) (GPT-NeoX).
        alibi_slopes: must be None (not supported yet: NotImplementedError).
        num_splits: key splits of the GPU decode kernel; 0 chooses from the shapes (a given value
            keeps the call on the decode kernel at any seqlen_q).
        return_softmax_lse: also return softmax_lse (batch_size, nheads, seqlen_q) fp32.
        path: (keyword only) the kernel family, as flash_attn_func's.
    Returns:
        out (batch_size, seqlen_q, nheads, headdim_v), or (out, softmax_lse) with return_softmax_lse.
    """
    if alibi_slopes is not None:
        raise NotImplementedError("flashattn: alibi_slopes is not supported yet (ALiBi bias); pass alibi_slopes=None")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, Tensor):
            raise TypeError(f"flashattn: {name} must be a torch.Tensor, got {type(t).__name__}")
    options = _score_options(q.shape[-1] if q.dim() > 0 else 0, softmax_scale, causal, window_size, softcap)
    rotary_interleaved = _flag("rotary_interleaved", rotary_interleaved)
    return_softmax_lse = _flag("return_softmax_lse", return_softmax_lse)
    num_splits = _integer("num_splits", num_splits)
    if type(path) is not str:
        raise TypeError(f"flashattn: path must be a str, got {type(path).__name__} {path!r}")
    out, lse = _ops.kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, _cache_seqlens(cache_seqlens, q),
                            cache_batch_idx, block_table, *options, rotary_interleaved, num_splits, path,
                            cache_leftpad, return_softmax_lse)
    return (out, lse) if return_softmax_lse else out
