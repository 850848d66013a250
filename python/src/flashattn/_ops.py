"""The two PyTorch custom operators, flashattn::fwd and flashattn::bwd, and their autograd link.

Everything torch-related lives here: output allocation (PyTorch's allocator), the current CUDA
stream, the device guard, layout fixes, fake (meta) implementations for torch.compile, and the
autograd formula (the forward saves O and LSE, never P; the backward recomputes P in the kernel).
The extension flashattn._C only turns (pointer, dtype, device, shape, strides) tuples into the C++
API's tensor views and returns its Status.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import _C

__all__ = ["FlashAttnError", "InvalidArgumentError", "NotSupportedError", "CudaError", "fwd", "bwd",
           "forward_path"]


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
_DTYPES = {torch.float32: _C.DTYPE_F32, torch.float16: _C.DTYPE_F16, torch.bfloat16: _C.DTYPE_BF16,
           torch.int32: _C.DTYPE_I32}
_DEVICES = {"cpu": _C.DEVICE_CPU, "cuda": _C.DEVICE_CUDA}

# Testing aid: fill every output with NaN before the kernel runs, so an element it fails to write
# cannot pass for a correct one. Set FLASHATTN_POISON=1 (the test suite does).
POISON_OUTPUTS = os.environ.get("FLASHATTN_POISON", "0") == "1"


def _check(status: Tuple) -> None:
    code, message = status[0], status[1]
    if code != _C.STATUS_OK:
        raise _ERRORS.get(code, FlashAttnError)(f"flashattn: {message}", code)


def _empty(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> Tensor:
    t = torch.empty(shape, dtype=dtype, device=device)
    if POISON_OUTPUTS:
        t.fill_(float("nan") if dtype.is_floating_point else -1)
    return t


# The CUDA tensor-core kernels move 16-byte vectors: they take a view only when its data pointer is
# 16-byte aligned and its strides are multiples of 8 elements (the C++ API reports others as
# not_supported). Such views are copied here instead, as are views whose last dimension is strided.
_CUDA_ALIGN_BYTES = 16
_CUDA_STRIDE_MULTIPLE = 8


def _usable(t: Optional[Tensor]) -> Optional[Tensor]:
    """`t` itself when the library takes its layout (any non-negative strides, last dimension
    contiguous; on CUDA also aligned as above), else a contiguous copy."""
    if t is None or t.dim() == 0:
        return t
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        return t.contiguous()
    if t.device.type == "cuda" and t.numel() > 0 and (
            t.data_ptr() % _CUDA_ALIGN_BYTES != 0 or any(st % _CUDA_STRIDE_MULTIPLE for st in t.stride()[:-1])):
        return torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)
    return t


def _usable_offsets(t: Optional[Tensor]) -> Optional[Tensor]:
    """cu_seqlens are read as plain int32 arrays: contiguous."""
    return None if t is None else t.contiguous()


def _view(name: str, t: Optional[Tensor]):
    """A tensor as the binding takes it: (data_ptr, dtype code, device code, shape, strides)."""
    if t is None:
        return None
    dtype = _DTYPES.get(t.dtype)
    if dtype is None:
        raise InvalidArgumentError(
            f"flashattn: {name}: dtype {t.dtype} is not supported (float16 or bfloat16 on CUDA; float32, "
            f"float16 or bfloat16 on the CPU; int32 for cu_seqlens)")
    device = _DEVICES.get(t.device.type)
    if device is None:
        raise InvalidArgumentError(f"flashattn: {name}: device {t.device} is not supported (cpu or cuda)")
    return (t.data_ptr(), dtype, device, tuple(t.shape), t.stride())


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
                  cu_seqlens_k: Optional[Tensor], **more: Optional[Tensor]) -> bool:
    """What allocation needs before the C++ validation runs: ranks, one device. Returns varlen."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    rank = 3 if varlen else 4
    layout = "[total, heads, headdim] (varlen)" if varlen else "[batch, seqlen, heads, headdim]"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != rank:
            raise InvalidArgumentError(f"flashattn: {name}: rank {t.dim()} (shape {list(t.shape)}), expected "
                                       f"{rank}: {layout}")
    tensors = dict(k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, **more)
    for name, t in tensors.items():
        if t is not None and t.device != q.device:
            raise InvalidArgumentError(f"flashattn: {name}: on {t.device}, expected {q.device} (as q)",
                                       )
    return varlen


def _options(q: Tensor, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
             window_left, window_right, softcap):
    stream = torch.cuda.current_stream(q.device).cuda_stream if q.device.type == "cuda" else 0
    return (_view("cu_seqlens_q", cu_seqlens_q), _view("cu_seqlens_k", cu_seqlens_k), int(max_seqlen_q),
            int(max_seqlen_k), float(softmax_scale), bool(causal), int(window_left), int(window_right),
            float(softcap), stream)


class _DeviceGuard:
    """Makes q's CUDA device current for the call (kernels launch on the current device)."""

    def __init__(self, device: torch.device):
        self.guard = torch.cuda.device(device) if device.type == "cuda" else None

    def __enter__(self):
        if self.guard is not None:
            self.guard.__enter__()

    def __exit__(self, *exc):
        if self.guard is not None:
            self.guard.__exit__(*exc)


def _workspace(status: Tuple, device: torch.device) -> Tuple[Optional[Tensor], int, int]:
    _check(status)
    nbytes = status[2]
    if nbytes == 0:
        return None, 0, 0
    # Freed when the call returns; PyTorch's stream-ordered allocator keeps it until the kernel is done.
    ws = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return ws, ws.data_ptr(), nbytes


def _out_shapes(q: Tensor, v: Tensor, varlen: bool):
    out = (*q.shape[:-1], v.shape[-1])
    lse = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    return out, lse


# ---- forward -------------------------------------------------------------------------------------

@torch.library.custom_op("flashattn::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
        max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int,
        window_right: int, softcap: float, deterministic: bool) -> Tuple[Tensor, Tensor]:
    """Attention forward: returns (out, lse). `deterministic` is only carried to the backward."""
    varlen = _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k)
    # The copies _usable may make must stay referenced until the call returns: they are passed by pointer.
    q, k, v = _usable(q), _usable(k), _usable(v)
    cu_seqlens_q, cu_seqlens_k = _usable_offsets(cu_seqlens_q), _usable_offsets(cu_seqlens_k)
    out_shape, lse_shape = _out_shapes(q, v, varlen)
    out = _empty(out_shape, q.dtype, q.device)
    lse = _empty(lse_shape, torch.float32, q.device)
    with _DeviceGuard(q.device):
        opts = _options(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                        window_left, window_right, softcap)
        views = (_view("q", q), _view("k", k), _view("v", v), _view("out", out), _view("lse", lse))
        ws, ws_ptr, ws_bytes = _workspace(_C.forward_workspace_size(*views, opts), q.device)
        _check(_C.forward(*views, opts, ws_ptr, ws_bytes))
    return out, lse


@fwd.register_fake
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
              window_left, window_right, softcap, deterministic):
    varlen = _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k)
    out_shape, lse_shape = _out_shapes(q, v, varlen)
    return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)


# ---- backward ------------------------------------------------------------------------------------

@torch.library.custom_op("flashattn::bwd", mutates_args=())
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
        cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
        softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
        deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """Attention backward from the forward's out and lse: returns (dq, dk, dv)."""
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, out=out, lse=lse, dout=dout)
    q, k, v, out, dout = (_usable(t) for t in (q, k, v, out, dout))
    cu_seqlens_q, cu_seqlens_k = _usable_offsets(cu_seqlens_q), _usable_offsets(cu_seqlens_k)
    if lse.stride(-1) != 1 and lse.shape[-1] > 1:
        lse = lse.contiguous()
    dq = _empty(q.shape, q.dtype, q.device)
    dk = _empty(k.shape, k.dtype, k.device)
    dv = _empty(v.shape, v.dtype, v.device)
    with _DeviceGuard(q.device):
        opts = _options(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                        window_left, window_right, softcap)
        views = (_view("q", q), _view("k", k), _view("v", v), _view("out", out), _view("lse", lse),
                 _view("dout", dout), _view("dq", dq), _view("dk", dk), _view("dv", dv), bool(deterministic))
        ws, ws_ptr, ws_bytes = _workspace(_C.backward_workspace_size(*views, opts), q.device)
        _check(_C.backward(*views, opts, ws_ptr, ws_bytes))
    return dq, dk, dv


@bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
              causal, window_left, window_right, softcap, deterministic):
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, out=out, lse=lse, dout=dout)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


# ---- autograd: the forward saves q, k, v, O and LSE; the backward op recomputes P -----------------

def _setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left,
     window_right, softcap, deterministic) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
    ctx.options = (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap,
                   deterministic)
    # The LSE is returned for inspection (return_attn_probs); no gradient flows through it.
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    dq, dk, dv = bwd(grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *ctx.options)
    return (dq, dk, dv) + (None,) * 10


fwd.register_autograd(_backward, setup_context=_setup_context)


def forward_path(q: Tensor, k: Tensor, v: Tensor, causal: bool = False) -> str:
    """The kernel family that would run this (padded-batch) forward: "cpu", "sm80", ... or "" if none."""
    q, k, v = _usable(q), _usable(k), _usable(v)
    out_shape, _ = _out_shapes(q, v, False)
    out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    opts = _options(q, None, None, 0, 0, q.shape[-1] ** -0.5, causal, -1, -1, 0.0)
    return _C.forward_path(_view("q", q), _view("k", k), _view("v", v), _view("out", out), None, opts)
