"""The library's PyTorch operators and the exceptions they raise.

torch.ops.flashattn.fwd and torch.ops.flashattn.bwd are registered in C++ (csrc/torch_ops.cpp), with
their CPU and CUDA kernels and their autograd kernel (torch.ops.flashattn.kvcache, inference only,
without one): a call crosses from Python into C++ once, and
the backward runs on the autograd engine's thread without Python, as PyTorch's own attention does
(docs/python.md, "Host overhead"). Allocation is PyTorch's, on the current stream of q's device.
This module adds what is Python's to add: flashattn's exception classes for the library's errors,
the fake (meta) implementations that torch.compile traces, and the entry point the public
functions call.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _C

__all__ = ["FlashAttnError", "InvalidArgumentError", "NotSupportedError", "CudaError", "attention", "fwd", "bwd",
           "kvcache", "forward_path", "families"]


class FlashAttnError(RuntimeError):
    """A call the library refused or failed; `code` is the C++ StatusCode, the message its Status."""

    default_code = _C.STATUS_INTERNAL

    def __init__(self, message: str, code: Optional[int] = None):
        super().__init__(message)
        self.code = self.default_code if code is None else code


class InvalidArgumentError(FlashAttnError, ValueError):
    """A malformed call: a shape, stride, dtype, device or option is wrong (StatusCode invalid_argument)."""

    default_code = _C.STATUS_INVALID_ARGUMENT


class NotSupportedError(FlashAttnError, NotImplementedError):
    """A well-formed call that no backend here implements, e.g. fp32 on CUDA (StatusCode not_supported)."""

    default_code = _C.STATUS_NOT_SUPPORTED


class CudaError(FlashAttnError):
    """The CUDA runtime reported an error (StatusCode cuda_error)."""

    default_code = _C.STATUS_CUDA_ERROR


_ERRORS = {
    _C.STATUS_INVALID_ARGUMENT: InvalidArgumentError,
    _C.STATUS_NOT_SUPPORTED: NotSupportedError,
    _C.STATUS_CUDA_ERROR: CudaError,
}
# What the operators raise, by the Python exception PyTorch makes of the C++ one (the operators'
# messages start with "flashattn: "); the StatusCode itself is read back when it is this thread's.
_BY_TYPE = ((ValueError, _C.STATUS_INVALID_ARGUMENT), (NotImplementedError, _C.STATUS_NOT_SUPPORTED),
            (RuntimeError, _C.STATUS_INTERNAL))

# Testing aid: fill every output with NaN before the kernel runs, so an element it fails to write
# cannot pass for a correct one. Set FLASHATTN_POISON=1 (the test suite does).
POISON_OUTPUTS = os.environ.get("FLASHATTN_POISON", "0") == "1"
_C.set_poison_outputs(POISON_OUTPUTS)


def families() -> list:
    """The kernel families of this build ("sm90", "sm80", "cpu", ...), in the order path="auto" tries them."""
    return _C.families()


def _library_error(e: Exception) -> Exception:
    """The flashattn exception for an operator's error `e`, or `e` itself when it is not the library's."""
    message = str(e)
    if isinstance(e, FlashAttnError) or not message.startswith("flashattn: "):
        return e
    code = _C.last_error_code()
    if code not in _ERRORS:
        code = next(c for cls, c in _BY_TYPE if isinstance(e, cls))
    return _ERRORS.get(code, FlashAttnError)(message, code)


fwd = torch.ops.flashattn.fwd.default
bwd = torch.ops.flashattn.bwd.default
_torch_function_mode = torch._C._is_torch_function_mode_enabled


def _fast(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """True when the call may skip the operator's Python binding for _C.attention or _C.kvcache (the
    same operator through the dispatcher, without __torch_function__): plain tensors, no torch function
    mode, not traced by dynamo. (A tensor argument of a subclass further on makes the fast call return
    NotImplemented.)"""
    return (type(q) is Tensor and type(k) is Tensor and type(v) is Tensor and not _torch_function_mode()
            and not torch.compiler.is_compiling())


def attention(q: Tensor, k: Tensor, v: Tensor, *args) -> Tuple[Tensor, Tensor]:
    """(out, lse) of torch.ops.flashattn.fwd(q, k, v, *args) (the schema's order: cu_seqlens_q,
    cu_seqlens_k, max_seqlen_q, max_seqlen_k, the options, deterministic, path, block_table,
    return_lse: False gives an empty lse unless autograd needs it, packed_dim: >= 0 when q, k, v are
    one packed qkv tensor, or k, v one packed kv tensor, along that dimension),
    differentiable in q, k, v (the operator's autograd kernel; not with a block_table), raising
    flashattn's errors. Eager calls on plain tensors
    take the fast-call entry point: the operator's Python binding costs more host time than the rest
    of a tiny call together."""
    try:
        if _fast(q, k, v):
            result = _C.attention(q, k, v, *args)
            if result is not NotImplemented:
                return result
        return fwd(q, k, v, *args)
    except (ValueError, NotImplementedError, RuntimeError) as e:
        if torch.compiler.is_compiling():
            raise
        raise _library_error(e) from None


def kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, *args) -> Tuple[Tensor, Tensor]:
    """(out, lse) of torch.ops.flashattn.kvcache(q, k_cache, v_cache, *args) (the schema's order: k, v,
    rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, block_table, the options, rotary_interleaved,
    num_splits, path, cache_leftpad, return_lse: False gives an empty lse), which first appends k, v into
    the caches in place; raising flashattn's errors.
    Inference only: no gradient flows through it. Eager calls on plain tensors take the fast-call
    entry point, as attention's do."""
    try:
        if _fast(q, k_cache, v_cache):
            result = _C.kvcache(q, k_cache, v_cache, *args)
            if result is not NotImplemented:
                return result
        return torch.ops.flashattn.kvcache(q, k_cache, v_cache, *args)
    except (ValueError, NotImplementedError, RuntimeError) as e:
        if torch.compiler.is_compiling():
            raise
        raise _library_error(e) from None


# ---- torch.compile: shapes without data -----------------------------------------------------------

def _out_shapes(q: Tensor, v: Tensor, varlen: bool):
    out = (*q.shape[:-1], v.shape[-1])
    lse = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    return out, lse


def _check_ranks(q: Tensor, k: Tensor, v: Tensor, varlen: bool, paged: bool = False) -> None:
    rank = 3 if varlen else 4
    layout = "[total, heads, headdim] (varlen)" if varlen else "[batch, seqlen, heads, headdim]"
    kv_rank, kv_layout = (4, "[num_pages, page_size, heads, headdim] (paged, block_table given)") if paged else (
        rank, layout)
    for name, t, want, want_layout in (("q", q, rank, layout), ("k", k, kv_rank, kv_layout),
                                       ("v", v, kv_rank, kv_layout)):
        if t.dim() != want:
            raise InvalidArgumentError(f"flashattn: {name}: rank {t.dim()} (shape {list(t.shape)}), expected "
                                       f"{want}: {want_layout}")


_FWD_BLOCK_TABLE = 9  # block_table's place in fwd's arguments after cu_seqlens_k (the schema's order)
_FWD_RETURN_LSE = 10  # and return_lse's
_FWD_PACKED_DIM = 11  # and packed_dim's
_BWD_PACKED_DIM = 9  # packed_dim's place in bwd's arguments after cu_seqlens_k


def _unpacked(q: Tensor, k: Tensor, v: Tensor, packed_dim: int):
    """q, k, v as the operators read them when packed_dim >= 0: k is the packed tensor, qkv (q, k, v all
    it; size 3 along packed_dim) or kv (k, v it, beside q; size 2) (csrc/torch_ops.cpp, "packed q, k, v")."""
    if packed_dim < 0:
        return q, k, v
    if packed_dim >= k.dim() or k.shape[packed_dim] not in (2, 3):
        raise InvalidArgumentError(f"flashattn: packed_dim {packed_dim}: k (the packed tensor) has shape "
                                   f"{list(k.shape)}, expected size 3 (qkv) or 2 (kv) in that dimension")
    if k.shape[packed_dim] == 3:
        return k.select(packed_dim, 0), k.select(packed_dim, 1), k.select(packed_dim, 2)
    return q, k.select(packed_dim, 0), k.select(packed_dim, 1)


@torch.library.register_fake("flashattn::fwd")
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, *options, block_table=None, return_lse=True, packed_dim=-1):
    if len(options) > _FWD_BLOCK_TABLE:
        block_table = options[_FWD_BLOCK_TABLE]
    if len(options) > _FWD_RETURN_LSE:
        return_lse = options[_FWD_RETURN_LSE]
    if len(options) > _FWD_PACKED_DIM:
        packed_dim = options[_FWD_PACKED_DIM]
    q, k, v = _unpacked(q, k, v, packed_dim)
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    _check_ranks(q, k, v, varlen, paged=block_table is not None)
    out_shape, lse_shape = _out_shapes(q, v, varlen)
    return q.new_empty(out_shape), q.new_empty(lse_shape if return_lse else (0,), dtype=torch.float32)


@torch.library.register_fake("flashattn::bwd")
def _bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *options, packed_dim=-1):
    if len(options) > _BWD_PACKED_DIM:
        packed_dim = options[_BWD_PACKED_DIM]
    packed = k
    q, k, v = _unpacked(q, k, v, packed_dim)
    _check_ranks(q, k, v, cu_seqlens_q is not None or cu_seqlens_k is not None)
    if packed_dim < 0:
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    # Packed: the packed tensor's gradient in its first member's place, 0-element tensors in the others'.
    if packed.shape[packed_dim] == 3:
        return packed.new_empty(packed.shape), q.new_empty((0,)), q.new_empty((0,))
    return q.new_empty(q.shape), packed.new_empty(packed.shape), q.new_empty((0,))


_KVCACHE_RETURN_LSE = 16  # return_lse's place in kvcache's arguments after v_cache (the schema's order)


@torch.library.register_fake("flashattn::kvcache")
def _kvcache_fake(q, k_cache, v_cache, *options, return_lse=True):
    if len(options) > _KVCACHE_RETURN_LSE:
        return_lse = options[_KVCACHE_RETURN_LSE]
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4:
            raise InvalidArgumentError(f"flashattn: {name}: rank {t.dim()} (shape {list(t.shape)}), expected 4")
    batch, seqlen_q, heads_q, _ = q.shape
    return (q.new_empty((batch, seqlen_q, heads_q, v_cache.shape[-1])),
            q.new_empty((batch, heads_q, seqlen_q) if return_lse else (0,), dtype=torch.float32))


def forward_path(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, path: str = "auto",
                 cu_seqlens_q: Optional[Tensor] = None, cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0,
                 max_seqlen_k: int = 0) -> str:
    """The kernel family that would run this forward (padded, or varlen with the offsets given):
    "cpu", "sm80", ... or "" if none."""
    try:
        return torch.ops.flashattn.forward_path(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                causal, path)
    except (ValueError, NotImplementedError, RuntimeError) as e:
        raise _library_error(e) from None
