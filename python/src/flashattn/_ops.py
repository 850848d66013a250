"""The calls into the library, their autograd link, and the two PyTorch custom operators
flashattn::fwd and flashattn::bwd.

Everything torch-related lives here: output allocation (PyTorch's allocator), the current CUDA
stream, the device guard, layout fixes, fake (meta) implementations for torch.compile, and the
autograd formula (the forward saves O and LSE, never P; the backward recomputes P in the kernel).
The extension flashattn._C only turns (pointer, dtype, device, shape, strides) tuples and named
options into the C++ API's arguments and returns its Status.

Two routes reach the same run_forward / run_backward:
- eager (attention(), what flash_attn_func calls): a plain torch.autograd.Function, or no autograd
  at all when nothing needs a gradient. This is the per-call hot path: a tiny problem pays every µs
  of host work before its kernel launch, and the custom-op dispatcher's Python wrappers cost more
  than the rest of the call together (docs/python.md, "Host overhead").
- torch.compile (torch.compiler.is_compiling()): the custom operators, which dynamo traces without
  graph breaks (fake implementations give the shapes).
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _C

__all__ = ["FlashAttnError", "InvalidArgumentError", "NotSupportedError", "CudaError", "attention", "fwd", "bwd",
           "forward_path", "families"]


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
assert (_C.DEVICE_CPU, _C.DEVICE_CUDA) == (0, 1), "_view passes t.is_cuda as the device code"

# Testing aid: fill every output with NaN before the kernel runs, so an element it fails to write
# cannot pass for a correct one. Set FLASHATTN_POISON=1 (the test suite does).
POISON_OUTPUTS = os.environ.get("FLASHATTN_POISON", "0") == "1"


def families() -> list:
    """The kernel families of this build ("sm90", "sm80", "cpu", ...), in the order path="auto" tries them."""
    return _C.families()


def _raise(status: Tuple) -> None:
    code, message = status
    raise _ERRORS.get(code, FlashAttnError)(f"flashattn: {message}", code)


# ---- tensors as the binding takes them ------------------------------------------------------------

# The CUDA tensor-core kernels move 16-byte vectors: they take a view only when its data pointer is
# 16-byte aligned and its strides are multiples of 8 elements (the C++ API reports others as
# not_supported). Such views are copied here instead, as are views whose last dimension is strided.
_CUDA_ALIGN_BYTES = 16
_CUDA_STRIDE_MULTIPLE = 8


def _usable(t: Tensor) -> Tensor:
    """`t` itself when the library takes its layout (any non-negative strides, last dimension
    contiguous; on CUDA also aligned as above), else a contiguous copy."""
    if t.dim() == 0:
        return t
    if t.is_contiguous():
        # The common case, decided without reading the strides: a contiguous tensor's strides are
        # products of its inner sizes, multiples of 8 when the head dim is (the library ignores the
        # stride of a dimension of size 1, as is_contiguous does).
        if not t.is_cuda or (t.data_ptr() % _CUDA_ALIGN_BYTES == 0 and t.shape[-1] % _CUDA_STRIDE_MULTIPLE == 0):
            return t
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        return t.contiguous()
    if t.is_cuda and t.numel() > 0 and (
            t.data_ptr() % _CUDA_ALIGN_BYTES != 0 or any(st % _CUDA_STRIDE_MULTIPLE for st in t.stride()[:-1])):
        return torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)
    return t


def _view(name: str, t: Tensor):
    """A tensor as the binding takes it: (data_ptr, dtype code, device code, shape, strides)."""
    dtype = _DTYPES.get(t.dtype)
    if dtype is None:
        raise InvalidArgumentError(
            f"flashattn: {name}: dtype {t.dtype} is not supported (float16 or bfloat16 on CUDA; float32, "
            f"float16 or bfloat16 on the CPU; int32 for cu_seqlens)")
    # The device code: run_forward / run_backward made sure q is on the CPU or CUDA, and the other
    # tensors on q's device (or at least of q's type, which the library checks).
    return (t.data_ptr(), dtype, t.is_cuda, t.shape, t.stride())


def _offsets(name: str, t: Optional[Tensor]):
    """cu_seqlens are read as plain int32 arrays: contiguous. Returns (tensor, view); the tensor
    must stay referenced until the call returns (the view holds its pointer)."""
    if t is None:
        return None, None
    t = t.contiguous()
    return t, _view(name, t)


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
                  cu_seqlens_k: Optional[Tensor], *more: Tensor) -> bool:
    """What allocation needs before the C++ validation runs: ranks, one device. Returns varlen.
    (The C++ API checks device types, not CUDA device indices: those are compared here.)"""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    rank = 3 if varlen else 4
    if q.dim() != rank or k.dim() != rank or v.dim() != rank:
        _refuse_ranks(q, k, v, rank, varlen)
    device = q.get_device()
    if (k.get_device() != device or v.get_device() != device
            or any(t is not None and t.get_device() != device for t in (cu_seqlens_q, cu_seqlens_k, *more))):
        _refuse_devices(q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                        **dict(zip(("out", "lse", "dout"), more)))
    return varlen


def _check_device_type(q: Tensor) -> None:
    """The kernels run on the CPU or CUDA (the fake implementations take any device, meta included)."""
    if not (q.is_cuda or q.is_cpu):
        raise InvalidArgumentError(f"flashattn: q: device {q.device} is not supported (cpu or cuda)")


def _refuse_ranks(q, k, v, rank, varlen):
    layout = "[total, heads, headdim] (varlen)" if varlen else "[batch, seqlen, heads, headdim]"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != rank:
            raise InvalidArgumentError(f"flashattn: {name}: rank {t.dim()} (shape {list(t.shape)}), expected "
                                       f"{rank}: {layout}")


def _refuse_devices(q, **tensors):
    for name, t in tensors.items():
        if t is not None and t.device != q.device:
            raise InvalidArgumentError(f"flashattn: {name}: on {t.device}, expected {q.device} (as q)")


def _empty(shape, dtype: torch.dtype, like: Tensor) -> Tensor:
    t = like.new_empty(shape, dtype=dtype)
    if POISON_OUTPUTS:
        t.fill_(float("nan") if dtype.is_floating_point else -1)
    return t


def _rows(shape, like: Tensor, cu_seqlens: Optional[Tensor]) -> Tensor:
    """A varlen output (out, dq, dk, dv) whose packed rows outside [cu_seqlens[0], cu_seqlens[-1])
    -- rows of no sequence, which the kernels do not write -- are 0. Without the offsets' values
    (reading them would synchronize with the GPU) that means zeros throughout; under
    FLASHATTN_POISON the rows the kernels must write stay NaN (a testing aid: it reads them)."""
    if not POISON_OUTPUTS or cu_seqlens is None or cu_seqlens.numel() == 0:
        return like.new_zeros(shape)
    t = _empty(shape, like.dtype, like)
    first, last = max(0, int(cu_seqlens[0])), max(0, int(cu_seqlens[-1]))
    t[:first].zero_()
    t[last:].zero_()
    return t


def _out_shapes(q: Tensor, v: Tensor, varlen: bool):
    out = (*q.shape[:-1], v.shape[-1])
    lse = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    return out, lse


# ---- where the kernels run: stream, device, workspace ---------------------------------------------

def _cpu_workspace(nbytes: int) -> Tensor:
    return torch.empty(nbytes, dtype=torch.uint8)


class _CudaWorkspace:
    """workspace_alloc for one CUDA device: freed when the call returns; PyTorch's stream-ordered
    allocator keeps the memory for the kernel enqueued on the current stream."""

    def __init__(self, index: int):
        self.device = torch.device("cuda", index)

    def __call__(self, nbytes: int) -> Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)


_CUDA_WORKSPACES = {}


def _call(run, q: Tensor, *args, **kwargs) -> None:
    """Calls _C.forward / _C.backward for tensors on q's device: on the CPU directly; on CUDA on the
    current stream of q's device, which is made current for the call when it is not (kernels launch
    on the current device). Raises the library's error."""
    if not q.is_cuda:
        status = run(*args, **kwargs, workspace_alloc=_cpu_workspace)
    else:
        index = q.get_device()
        alloc = _CUDA_WORKSPACES.get(index) or _CUDA_WORKSPACES.setdefault(index, _CudaWorkspace(index))
        stream = torch._C._cuda_getCurrentRawStream(index)
        if torch._C._cuda_getDevice() == index:
            status = run(*args, **kwargs, stream=stream, workspace_alloc=alloc)
        else:
            with torch.cuda.device(index):
                status = run(*args, **kwargs, stream=stream, workspace_alloc=alloc)
    if status is not None:
        _raise(status)


# ---- the two calls: tensors in, new tensors out ---------------------------------------------------

def run_forward(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
                max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int,
                window_right: int, softcap: float, path: str = "auto") -> Tuple[Tensor, Tensor]:
    """Attention forward: returns (out, lse)."""
    varlen = _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k)
    _check_device_type(q)
    # The copies _usable and _offsets may make stay referenced until the call returns: they are
    # passed by pointer.
    q, k, v = _usable(q), _usable(k), _usable(v)
    cu_seqlens_q, cu_q = _offsets("cu_seqlens_q", cu_seqlens_q)
    cu_seqlens_k, cu_k = _offsets("cu_seqlens_k", cu_seqlens_k)
    out_shape, lse_shape = _out_shapes(q, v, varlen)
    out = _rows(out_shape, q, cu_seqlens_q) if varlen else _empty(out_shape, q.dtype, q)
    lse = _empty(lse_shape, torch.float32, q)
    _call(_C.forward, q, _view("q", q), _view("k", k), _view("v", v), _view("out", out), _view("lse", lse),
          cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
          softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
          softcap=softcap, path=path)
    return out, lse


def run_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                 cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int,
                 max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int, window_right: int,
                 softcap: float, deterministic: bool, path: str = "auto") -> Tuple[Tensor, Tensor, Tensor]:
    """Attention backward from the forward's out and lse: returns (dq, dk, dv)."""
    varlen = _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, dout)
    _check_device_type(q)
    q, k, v, out, dout = _usable(q), _usable(k), _usable(v), _usable(out), _usable(dout)
    cu_seqlens_q, cu_q = _offsets("cu_seqlens_q", cu_seqlens_q)
    cu_seqlens_k, cu_k = _offsets("cu_seqlens_k", cu_seqlens_k)
    if lse.stride(-1) != 1 and lse.shape[-1] > 1:
        lse = lse.contiguous()
    if varlen:  # rows outside the sequences are 0 in the gradients, as in out
        dq, dk, dv = _rows(q.shape, q, cu_seqlens_q), _rows(k.shape, k, cu_seqlens_k), _rows(v.shape, v, cu_seqlens_k)
    else:
        dq, dk, dv = _empty(q.shape, q.dtype, q), _empty(k.shape, k.dtype, k), _empty(v.shape, v.dtype, v)
    _call(_C.backward, q, _view("q", q), _view("k", k), _view("v", v), _view("out", out), _view("lse", lse),
          _view("dout", dout), _view("dq", dq), _view("dk", dk), _view("dv", dv), deterministic,
          cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
          softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
          softcap=softcap, path=path)
    return dq, dk, dv


# ---- eager: a plain autograd.Function around the two calls ----------------------------------------

class _Attention(torch.autograd.Function):
    """The forward saves q, k, v, O and LSE; the backward recomputes P in the kernel."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                window_left, window_right, softcap, deterministic, path):
        out, lse = run_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                               causal, window_left, window_right, softcap, path)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
        ctx.options = (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap,
                       deterministic, path)
        # The LSE is returned for inspection (return_attn_probs); no gradient flows through it.
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
        dq, dk, dv = run_backward(grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *ctx.options)
        return (dq, dk, dv) + (None,) * 11


# Function.apply's Python wrapper only binds default arguments (none here) and unwraps functorch's
# dead wrappers when functorch transforms are active (attention() sends those calls to the custom
# op); on a tiny problem it is ~20% of the eager forward's host time. The C apply beneath it is the
# same call without them.
_apply = super(torch.autograd.Function, _Attention).apply


def _eager(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """True when the call can skip the custom operator: not traced by torch.compile or export, no
    torch.func transform active, and plain tensors with data (fake and meta tensors, and tensor
    subclasses, get the operator's dispatch: its fake implementation, or the subclass's handling)."""
    return (type(q) is Tensor and type(k) is Tensor and type(v) is Tensor and not q.is_meta
            and not torch.compiler.is_compiling() and not torch._C._are_functorch_transforms_active())


def attention(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
              max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int,
              window_right: int, softcap: float, deterministic: bool, path: str = "auto") -> Tuple[Tensor, Tensor]:
    """(out, lse), differentiable in q, k, v: the eager fast path on plain tensors, else the custom
    operator (the same kernels on the same arguments: identical results)."""
    if not _eager(q, k, v):
        return fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                   window_left, window_right, softcap, deterministic, path)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                      window_left, window_right, softcap, deterministic, path)
    return run_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                       window_left, window_right, softcap, path)


# ---- torch.compile: the custom operators ----------------------------------------------------------

@torch.library.custom_op("flashattn::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
        max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int,
        window_right: int, softcap: float, deterministic: bool, path: str = "auto") -> Tuple[Tensor, Tensor]:
    """Attention forward: returns (out, lse). `deterministic` is only carried to the backward."""
    return run_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                       window_left, window_right, softcap, path)


@fwd.register_fake
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
              window_left, window_right, softcap, deterministic, path="auto"):
    varlen = _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k)
    out_shape, lse_shape = _out_shapes(q, v, varlen)
    return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("flashattn::bwd", mutates_args=())
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
        cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
        softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
        deterministic: bool, path: str = "auto") -> Tuple[Tensor, Tensor, Tensor]:
    """Attention backward from the forward's out and lse: returns (dq, dk, dv)."""
    return run_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        softmax_scale, causal, window_left, window_right, softcap, deterministic, path)


@bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
              causal, window_left, window_right, softcap, deterministic, path="auto"):
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, dout)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left,
     window_right, softcap, deterministic, path) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
    ctx.options = (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap,
                   deterministic, path)
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    dq, dk, dv = bwd(grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *ctx.options)
    return (dq, dk, dv) + (None,) * 11


fwd.register_autograd(_backward, setup_context=_setup_context)


def forward_path(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, path: str = "auto",
                 cu_seqlens_q: Optional[Tensor] = None, cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0,
                 max_seqlen_k: int = 0) -> str:
    """The kernel family that would run this forward (padded, or varlen with the offsets given):
    "cpu", "sm80", ... or "" if none."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    q, k, v = _usable(q), _usable(k), _usable(v)
    cu_seqlens_q, cu_q = _offsets("cu_seqlens_q", cu_seqlens_q)
    cu_seqlens_k, cu_k = _offsets("cu_seqlens_k", cu_seqlens_k)
    out = q.new_empty(_out_shapes(q, v, varlen)[0])
    stream = torch._C._cuda_getCurrentRawStream(q.get_device()) if q.is_cuda else 0
    return _C.forward_path(_view("q", q), _view("k", k), _view("v", v), _view("out", out), None,
                           cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_seqlen_q,
                           max_seqlen_k=max_seqlen_k, causal=causal, path=path, stream=stream)
