"""The qkv-/kv-packed variants, and inputs with strides: each must give what the plain call gives."""
import pytest
import torch

from conftest import DEVICES, DEFAULT_DTYPE
from flashattn import _ops
from flashattn._ops import InvalidArgumentError
from flashattn import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func, flash_attn_varlen_func,
                       flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func)


def grads(out, inputs, dout):
    return torch.autograd.grad(out, inputs, dout)


def assert_same(a, b, what):
    # The same kernel on the same values: equal up to reduction order (bitwise in practice).
    torch.testing.assert_close(a, b, atol=1e-6 if a.dtype == torch.float32 else 1e-2, rtol=0, msg=what)


@pytest.mark.parametrize("device", DEVICES)
def test_qkvpacked(device):
    dtype = DEFAULT_DTYPE[device]
    qkv = torch.randn(2, 19, 3, 4, 64, device=device, dtype=dtype, requires_grad=True)
    out = flash_attn_qkvpacked_func(qkv, causal=True)
    q, k, v = (qkv[:, :, i].detach().clone().requires_grad_() for i in range(3))
    out_plain = flash_attn_func(q, k, v, causal=True)
    assert_same(out, out_plain, "out")
    dout = torch.randn_like(out)
    (dqkv,) = grads(out, (qkv,), dout)
    assert dqkv.shape == qkv.shape
    assert_same(dqkv, torch.stack(grads(out_plain, (q, k, v), dout), dim=2), "dqkv")


@pytest.mark.parametrize("device", DEVICES)
def test_kvpacked_gqa(device):
    dtype = DEFAULT_DTYPE[device]
    q = torch.randn(2, 11, 6, 64, device=device, dtype=dtype, requires_grad=True)
    kv = torch.randn(2, 23, 2, 2, 64, device=device, dtype=dtype, requires_grad=True)
    out = flash_attn_kvpacked_func(q, kv, window_size=(4, 4), softcap=5.0)
    k, v = (kv[:, :, i].detach().clone().requires_grad_() for i in range(2))
    out_plain = flash_attn_func(q, k, v, window_size=(4, 4), softcap=5.0)
    assert_same(out, out_plain, "out")
    dout = torch.randn_like(out)
    dq, dkv = grads(out, (q, kv), dout)
    dq_plain, dk, dv = grads(out_plain, (q, k, v), dout)
    assert_same(dq, dq_plain, "dq")
    assert_same(dkv, torch.stack((dk, dv), dim=2), "dkv")


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_packed(device):
    dtype = DEFAULT_DTYPE[device]
    lens = [7, 0, 30]
    cu = torch.tensor([0, 7, 7, 37], dtype=torch.int32, device=device)
    qkv = torch.randn(sum(lens), 3, 2, 64, device=device, dtype=dtype, requires_grad=True)
    out = flash_attn_varlen_qkvpacked_func(qkv, cu, max(lens), causal=True)
    q, k, v = (qkv[:, i].detach().clone().requires_grad_() for i in range(3))
    out_plain = flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)
    assert_same(out, out_plain, "out (qkvpacked)")
    dout = torch.randn_like(out)
    assert_same(grads(out, (qkv,), dout)[0], torch.stack(grads(out_plain, (q, k, v), dout), dim=1), "dqkv")

    kv = torch.stack((k, v), dim=1).detach().requires_grad_()
    out_kv = flash_attn_varlen_kvpacked_func(q, kv, cu, cu, max(lens), max(lens), causal=True)
    assert_same(out_kv, out_plain, "out (kvpacked)")


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs(device):
    """Views the C++ API takes as they are (transposed heads/seqlen, batch-broadcast k) and views it
    cannot (non-contiguous last dimension, copied) all give the contiguous inputs' result."""
    dtype = DEFAULT_DTYPE[device]
    b, s, h, d = 2, 33, 4, 64
    q_bhsd = torch.randn(b, h, s, d, device=device, dtype=dtype)  # [b, h, s, d] → .transpose(1, 2)
    k_one = torch.randn(1, s, h, d, device=device, dtype=dtype)
    v_t = torch.randn(b, s, h, d, device=device, dtype=dtype).transpose(-1, -2).contiguous()  # [b, s, d, h]
    q = q_bhsd.transpose(1, 2)
    k = k_one.expand(b, s, h, d)  # batch stride 0
    v = v_t.transpose(-1, -2)     # last dimension strided: must be copied
    assert not q.is_contiguous() and k.stride(0) == 0 and v.stride(-1) != 1
    leaves = [t.requires_grad_() for t in (q_bhsd, k_one, v_t)]
    q, k, v = leaves[0].transpose(1, 2), leaves[1].expand(b, s, h, d), leaves[2].transpose(-1, -2)
    out = flash_attn_func(q, k, v, causal=True)
    qc, kc, vc = (t.detach().contiguous().requires_grad_() for t in (q, k, v))
    out_c = flash_attn_func(qc, kc, vc, causal=True)
    assert_same(out, out_c, "out")
    dout = torch.randn_like(out).transpose(1, 2).contiguous().transpose(1, 2)  # a strided incoming gradient
    dq, dk, dv = grads(out, (q, k, v), dout)
    dqc, dkc, dvc = grads(out_c, (qc, kc, vc), dout.contiguous())
    assert_same(dq, dqc, "dq")
    assert_same(dk, dkc, "dk")
    assert_same(dv, dvc, "dv")


@pytest.mark.parametrize("device", DEVICES)
def test_sliced_heads_of_a_fused_projection(device):
    """q, k, v as slices of one [b, s, 3·h·d] projection (row stride 3·h·d), as models make them."""
    dtype = DEFAULT_DTYPE[device]
    b, s, h, d = 2, 17, 2, 64
    proj = torch.randn(b, s, 3 * h * d, device=device, dtype=dtype)
    q, k, v = proj.view(b, s, 3, h, d).unbind(2)
    assert q.stride(1) == 3 * h * d
    torch.testing.assert_close(flash_attn_func(q, k, v), flash_attn_func(q.contiguous(), k.contiguous(),
                                                                          v.contiguous()), atol=0, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_unaligned_views(device):
    """Views starting 1 element into a buffer (a pointer the CUDA kernels cannot take as is, which
    the package then copies) give the contiguous result, forward and backward."""
    dtype = DEFAULT_DTYPE[device]
    b, s, h, d = 2, 19, 2, 64
    bufs = [torch.randn(b, s, h, d + 8, device=device, dtype=dtype, requires_grad=True) for _ in range(3)]
    q, k, v = (buf[..., 1:d + 1] for buf in bufs)
    assert q.data_ptr() % 16 != 0
    out = flash_attn_func(q, k, v, causal=True)
    qc, kc, vc = (t.detach().contiguous().requires_grad_() for t in (q, k, v))
    out_c = flash_attn_func(qc, kc, vc, causal=True)
    assert_same(out, out_c, "out")
    dout = torch.randn_like(out)
    for g, gc, name in zip(grads(out, (q, k, v), dout), grads(out_c, (qc, kc, vc), dout), ("dq", "dk", "dv")):
        assert_same(g, gc, name)


def _leaves_of(out):
    """The tensors autograd sends out's gradient to directly (the inputs of its node)."""
    return [fn.variable for fn, _ in out.grad_fn.next_functions if hasattr(fn, "variable")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("varlen", [False, True], ids=["padded", "varlen"])
def test_packed_gradient_is_written_once(device, varlen):
    """A packed call's gradient is the operator's own tensor shaped like qkv (kv), written in place by
    the backward, with nothing between the node and the packed leaf (no unbind for autograd to stack
    again), and bitwise the unpacked call's gradients side by side (deterministic: no atomics)."""
    dtype = DEFAULT_DTYPE[device]
    lens = [13, 0, 29]
    cu = torch.tensor([0, 13, 13, 42], dtype=torch.int32, device=device)
    shape = (sum(lens), 3, 4, 64) if varlen else (2, 21, 3, 4, 64)
    dim = 1 if varlen else 2
    qkv = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    lengths = (cu, cu, max(lens), max(lens)) if varlen else ()
    packed_qkv = flash_attn_varlen_qkvpacked_func if varlen else flash_attn_qkvpacked_func
    plain = flash_attn_varlen_func if varlen else flash_attn_func
    out = packed_qkv(qkv, *((cu, max(lens)) if varlen else ()), causal=True, deterministic=True)
    assert _leaves_of(out) == [qkv, qkv, qkv]
    q, k, v = (qkv.select(dim, i).detach().clone().requires_grad_() for i in range(3))
    out_plain = plain(q, k, v, *lengths, causal=True, deterministic=True)
    torch.testing.assert_close(out, out_plain, atol=0, rtol=0)
    dout = torch.randn_like(out)
    (dqkv,) = grads(out, (qkv,), dout)
    dq_plain, dk, dv = grads(out_plain, (q, k, v), dout)
    assert dqkv.shape == qkv.shape and dqkv.is_contiguous()
    torch.testing.assert_close(dqkv, torch.stack((dq_plain, dk, dv), dim=dim), atol=0, rtol=0)

    q = q.detach().requires_grad_()
    kv = torch.stack((k, v), dim=dim).detach().requires_grad_()  # GQA: 4 query heads over 4 kv heads here
    packed_kv = flash_attn_varlen_kvpacked_func if varlen else flash_attn_kvpacked_func
    out = packed_kv(q, kv, *lengths, causal=True, deterministic=True)
    assert _leaves_of(out) == [q, kv, kv]
    torch.testing.assert_close(out, out_plain, atol=0, rtol=0)
    dq, dkv = grads(out, (q, kv), dout)
    torch.testing.assert_close(dq, dq_plain, atol=0, rtol=0)
    torch.testing.assert_close(dkv, torch.stack((dk, dv), dim=dim), atol=0, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_packed_with_padded_head_dim(device):
    """A head dim the kernels pad (60): the slices are padded apart, and the gradient still reaches qkv."""
    dtype = DEFAULT_DTYPE[device]
    qkv = torch.randn(2, 17, 3, 2, 60, device=device, dtype=dtype, requires_grad=True)
    out = flash_attn_qkvpacked_func(qkv, window_size=(5, 3))
    q, k, v = (qkv[:, :, i].detach().clone().requires_grad_() for i in range(3))
    out_plain = flash_attn_func(q, k, v, window_size=(5, 3))
    assert_same(out, out_plain, "out")
    dout = torch.randn_like(out)
    assert_same(grads(out, (qkv,), dout)[0], torch.stack(grads(out_plain, (q, k, v), dout), dim=2), "dqkv")


def test_packed_operator_refuses_what_is_not_packed():
    """The operators' packed_dim names the packed tensor when its size there is neither 3 nor 2, and,
    where autograd routes the gradient, when q, k, v are not the one tensor it says."""
    qkv = torch.randn(1, 8, 3, 2, 64)
    kv = torch.randn(1, 8, 2, 2, 64, requires_grad=True)
    q = torch.randn(1, 8, 2, 64)
    options = (None, None, 0, 0, 0.125, False, -1, -1, 0.0, False, "auto", None, True)
    with pytest.raises(InvalidArgumentError, match=r"packed_dim 1: k \(the packed tensor\) has shape \[1, 8, 3, 2, "
                                                   r"64\], expected size 3 \(qkv\) or 2 \(kv\)"):
        _ops.attention(qkv, qkv, qkv, *options, 1)
    with pytest.raises(InvalidArgumentError, match=r"packed_dim 7: k \(the packed tensor\) has shape"):
        _ops.attention(q, kv, kv, *options, 7)
    with pytest.raises(InvalidArgumentError, match="kv: packed_dim 2 given, but k and v are not the one packed"):
        _ops.attention(q, kv, kv.detach().clone().requires_grad_(), *options, 2)
    qkv.requires_grad_()
    with pytest.raises(InvalidArgumentError, match="qkv: packed_dim 2 given, but q, k and v are not the one packed"):
        _ops.attention(qkv.detach(), qkv, qkv, *options, 2)

