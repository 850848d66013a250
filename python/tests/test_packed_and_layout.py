"""The qkv-/kv-packed variants, and inputs with strides: each must give what the plain call gives."""
import pytest
import torch

from conftest import DEVICES, DEFAULT_DTYPE
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
