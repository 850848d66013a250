"""path= picks a kernel family or says why it cannot; flashattn.families() lists them; the eager fast
path (autograd.Function calling _C) and the custom operators (torch.compile's route) give identical
results; poisoned outputs reach the fast path too."""
import pytest
import torch

import flashattn
from conftest import DEVICES, DEFAULT_DTYPE
from flashattn import (InvalidArgumentError, NotSupportedError, flash_attn_func, flash_attn_kvpacked_func,
                       flash_attn_qkvpacked_func, flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                       flash_attn_varlen_qkvpacked_func)
from flashattn import _ops


def qkv(device="cpu", dtype=torch.float32, s=16, requires_grad=False):
    return [torch.randn(2, s, 4, 64, device=device, dtype=dtype, requires_grad=requires_grad) for _ in range(3)]


def test_families_lists_the_builds_kernel_families():
    names = flashattn.families()
    assert isinstance(names, list) and "cpu" in names and all(isinstance(n, str) and n for n in names)
    assert "auto" not in names


def test_path_cpu_runs_cpu_tensors_like_auto():
    q, k, v = qkv()
    torch.testing.assert_close(flash_attn_func(q, k, v, causal=True, path="cpu"),
                               flash_attn_func(q, k, v, causal=True), atol=0, rtol=0)


def test_path_of_another_device_raises_not_supported_naming_it():
    q, k, v = qkv()
    with pytest.raises(NotSupportedError, match="sm80"):
        flash_attn_func(q, k, v, path="sm80")


def test_unknown_path_raises_invalid_argument():
    q, k, v = qkv()
    with pytest.raises(InvalidArgumentError, match="nope"):
        flash_attn_func(q, k, v, path="nope")


def test_path_reaches_the_backward():
    q, k, v = qkv(requires_grad=True)
    out = flash_attn_func(q, k, v, path="cpu")
    torch.autograd.grad(out.sum(), (q, k, v))  # runs: "cpu" is accepted by the backward too


@pytest.mark.parametrize("fn", ["qkvpacked", "kvpacked", "varlen", "varlen_qkvpacked", "varlen_kvpacked"])
def test_every_public_function_takes_path(fn):
    q, k, v = qkv()
    cu = torch.tensor([0, 16, 32], dtype=torch.int32)
    flat = [t.flatten(0, 1) for t in (q, k, v)]
    calls = {
        "qkvpacked": lambda p: flash_attn_qkvpacked_func(torch.stack((q, k, v), 2), path=p),
        "kvpacked": lambda p: flash_attn_kvpacked_func(q, torch.stack((k, v), 2), path=p),
        "varlen": lambda p: flash_attn_varlen_func(*flat, cu, cu, 16, 16, path=p),
        "varlen_qkvpacked": lambda p: flash_attn_varlen_qkvpacked_func(torch.stack(flat, 1), cu, 16, path=p),
        "varlen_kvpacked": lambda p: flash_attn_varlen_kvpacked_func(flat[0], torch.stack(flat[1:], 1), cu, cu,
                                                                     16, 16, path=p),
    }
    calls[fn]("cpu")
    with pytest.raises(InvalidArgumentError, match="nope"):
        calls[fn]("nope")


def test_forward_path_takes_path():
    q, k, v = qkv()
    assert flashattn.forward_path(q, k, v, path="cpu") == "cpu"
    assert flashattn.forward_path(q, k, v, path="sm80") == ""


@pytest.mark.parametrize("requires_grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("device", DEVICES)
def test_attention_and_the_operator_are_identical(device, requires_grad):
    """The entry point flash_attn_func uses (the C++ callable beneath the operator) and the operator
    itself (what torch.compile traces) give bitwise the same outputs and gradients."""
    dtype = DEFAULT_DTYPE[device]
    q, k, v = qkv(device, dtype, s=24, requires_grad=requires_grad)
    args = (None, None, 0, 0, 0.125, True, 8, 0, 5.0, False)
    out, lse = _ops.attention(q, k, v, *args)
    out_op, lse_op = torch.ops.flashattn.fwd(q, k, v, *args)
    torch.testing.assert_close(out, out_op, atol=0, rtol=0)
    torch.testing.assert_close(lse, lse_op, atol=0, rtol=0)
    assert (out.grad_fn is not None) == requires_grad
    assert not lse.requires_grad  # no gradient flows through the LSE
    if requires_grad:
        dout = torch.randn_like(out)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        grads_op = torch.autograd.grad(out_op, (q, k, v), dout)
        for g, g_op in zip(grads, grads_op):
            torch.testing.assert_close(g, g_op, atol=0, rtol=0)


@pytest.mark.parametrize("varlen", [False, True], ids=["padded", "varlen"])
def test_outputs_are_poisoned_before_the_kernel(varlen):
    """With poisoning on (the suite's default) the outputs start as NaN, gradients included: a kernel
    that skipped an element would show it. Here the library is not called at all, so all stay NaN,
    varlen rows of no sequence too (the library zeroes those after its kernels: test_bad_input)."""
    q, k, v = qkv(requires_grad=True)
    kwargs = {}
    if varlen:
        q, k, v = (t.detach().flatten(0, 1).requires_grad_() for t in (q, k, v))
        cu = torch.tensor([0, q.shape[0] - 2], dtype=torch.int32)
        kwargs = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=q.shape[0], max_seqlen_k=q.shape[0])
    flashattn._C.set_skip_library_calls(True)
    try:
        if varlen:
            out = flashattn.flash_attn_varlen_func(q, k, v, **kwargs)
        else:
            out = flash_attn_func(q, k, v)
        grads = torch.autograd.grad(out.sum(), (q, k, v))
    finally:
        flashattn._C.set_skip_library_calls(False)
    assert out.isnan().all()
    assert all(g.isnan().all() for g in grads)


def test_no_grad_call_builds_no_graph():
    q, k, v = qkv(requires_grad=True)
    with torch.no_grad():
        assert flash_attn_func(q, k, v).grad_fn is None


def test_forward_path_of_a_varlen_call():
    q, k, v = (torch.randn(20, 2, 64) for _ in range(3))
    cu = torch.tensor([0, 8, 20], dtype=torch.int32)
    assert flashattn.forward_path(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=12, max_seqlen_k=12) == "cpu"
    assert flashattn.forward_path(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=12) == ""


def test_meta_and_fake_tensors_take_the_custom_op():
    """Shape inference on meta tensors (or under FakeTensorMode) gets the fake implementation."""
    q, k, v = (torch.randn(2, 16, 4, 64, device="meta") for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    assert out.shape == (2, 16, 4, 64) and out.is_meta
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q, k, v = (torch.randn(2, 16, 4, 64) for _ in range(3))
        assert flash_attn_func(q, k, v).shape == (2, 16, 4, 64)


class _Marked(torch.Tensor):
    """A tensor subclass (its __torch_function__ is torch.Tensor's)."""


def test_fast_call_defers_subclass_arguments():
    """A subclass tensor among the arguments the Python side does not look at (cu_seqlens) makes the
    fast-call entry return NotImplemented, and _ops.attention answers through the operator instead."""
    q, k, v = (torch.randn(10, 2, 64) for _ in range(3))
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    args = (6, 6, 0.125, True, -1, 0, 0.0, False)
    marked = cu.as_subclass(_Marked)
    assert flashattn._C.attention(q, k, v, marked, cu, *args) is NotImplemented
    out, _ = _ops.attention(q, k, v, marked, cu, *args)
    expected, _ = flashattn._C.attention(q, k, v, cu, cu, *args)
    torch.testing.assert_close(out.as_subclass(torch.Tensor), expected, atol=0, rtol=0)
