"""The custom operators pass torch.library.opcheck, and torch.compile(fullgraph=True) traces the
public functions, forward and backward, without graph breaks and with eager's results."""
import pytest
import torch

from conftest import DEVICES, DEFAULT_DTYPE
from flashattn import flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func, flash_attn_varlen_func

fwd = torch.ops.flashattn.fwd
bwd = torch.ops.flashattn.bwd


def padded_args(device, dtype, requires_grad, causal=True, window=(-1, -1), softcap=0.0):
    q = torch.randn(2, 13, 4, 64, device=device, dtype=dtype, requires_grad=requires_grad)
    k = torch.randn(2, 21, 2, 64, device=device, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(2, 21, 2, 64, device=device, dtype=dtype, requires_grad=requires_grad)
    return (q, k, v, None, None, 0, 0, 0.125, causal, window[0], window[1], softcap, False)


def varlen_args(device, dtype, requires_grad):
    cu_q = torch.tensor([0, 5, 5, 18], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 9, 12, 12], dtype=torch.int32, device=device)
    q = torch.randn(18, 4, 64, device=device, dtype=dtype, requires_grad=requires_grad)
    k = torch.randn(12, 1, 64, device=device, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(12, 1, 64, device=device, dtype=dtype, requires_grad=requires_grad)
    return (q, k, v, cu_q, cu_k, 13, 9, 0.125, False, 4, 1, 0.0, True)


@pytest.mark.parametrize("return_lse", [True, False], ids=["lse", "nolse"])
@pytest.mark.parametrize("make_args", [padded_args, varlen_args], ids=["padded", "varlen"])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_fwd(device, requires_grad, make_args, return_lse):
    args = make_args(device, DEFAULT_DTYPE[device], requires_grad)
    torch.library.opcheck(fwd, args if return_lse else args + ("auto", None, False))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_bwd(device):
    dtype = DEFAULT_DTYPE[device]
    args = padded_args(device, dtype, False, softcap=4.0)
    out, lse = fwd(*args)
    dout = torch.randn_like(out)
    q, k, v, cu_q, cu_k, mq, mk, scale, causal, wl, wr, softcap, det = args
    torch.library.opcheck(bwd, (dout, q, k, v, out, lse, cu_q, cu_k, mq, mk, scale, causal, wl, wr, softcap, det))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_packed(device):
    """fwd and bwd with packed_dim (qkv, kv). Without grad: opcheck clones every argument apart, and where
    autograd routes the packed gradient the operator asks q, k, v to be the one tensor (that path is
    traced in test_compile_fullgraph_packed_backward)."""
    dtype = DEFAULT_DTYPE[device]
    qkv = torch.randn(2, 9, 3, 2, 64, device=device, dtype=dtype)
    q, kv = (torch.randn(2, 9, 4, 64, device=device, dtype=dtype),
             torch.randn(2, 11, 2, 2, 64, device=device, dtype=dtype))
    options = (None, None, 0, 0, 0.125, True, -1, 0, 0.0, False, "auto", None, True)
    for packed in ((qkv, qkv, qkv), (q, kv, kv)):
        torch.library.opcheck(fwd, (*packed, *options, 2))
        out, lse = fwd(*packed, *options, 2)
        torch.library.opcheck(bwd, (torch.randn_like(out), *packed, out, lse, *options[:11], 2))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_packed_backward(device, backend):
    """The packed calls, whose backward writes one gradient for qkv (kv), compiled forward and backward."""
    dtype = DEFAULT_DTYPE[device]
    torch._dynamo.reset()
    qkv = torch.randn(2, 12, 3, 2, 64, device=device, dtype=dtype, requires_grad=True)
    q = torch.randn(2, 12, 4, 64, device=device, dtype=dtype, requires_grad=True)
    kv = torch.randn(2, 17, 2, 2, 64, device=device, dtype=dtype, requires_grad=True)

    def f(qkv, q, kv):
        a = flash_attn_qkvpacked_func(qkv, causal=True, deterministic=True)
        b = flash_attn_kvpacked_func(q, kv, window_size=(6, 2), deterministic=True)
        return (a.float() ** 2).sum() + (b.float() ** 2).sum()

    grads = torch.autograd.grad(torch.compile(f, fullgraph=True, backend=backend)(qkv, q, kv), (qkv, q, kv))
    grads_eager = torch.autograd.grad(f(qkv, q, kv), (qkv, q, kv))
    for g, g_eager in zip(grads, grads_eager):
        torch.testing.assert_close(g, g_eager)


def step(q, k, v, w):
    out = flash_attn_func(q, k, v, causal=True, window_size=(8, 8), softcap=10.0)
    return (out.float() * w).sum(), out


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_forward_backward(device, backend):
    dtype = DEFAULT_DTYPE[device]
    q, k, v = (torch.randn(2, 24, 4, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    w = torch.randn(2, 24, 4, 64, device=device)
    torch._dynamo.reset()
    loss, out = torch.compile(step, fullgraph=True, backend=backend)(q, k, v, w)
    grads = torch.autograd.grad(loss, (q, k, v))
    loss_eager, out_eager = step(q, k, v, w)
    grads_eager = torch.autograd.grad(loss_eager, (q, k, v))
    torch.testing.assert_close(out, out_eager, atol=0, rtol=0)  # the same kernel on the same inputs
    torch.testing.assert_close(loss, loss_eager, atol=1e-4, rtol=1e-4)  # the sum's order may differ
    for g, g_eager in zip(grads, grads_eager):
        torch.testing.assert_close(g, g_eager)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_packed_varlen_and_padded_head_dim(device):
    """The wrappers' Python (unbind, head-dim padding, varlen offsets) traces too, with dynamic shapes."""
    dtype = DEFAULT_DTYPE[device]
    torch._dynamo.reset()

    @torch.compile(fullgraph=True, backend="aot_eager", dynamic=True)
    def f(qkv, q, k, v, cu, max_seqlen):
        a = flash_attn_qkvpacked_func(qkv, causal=True)
        b = flash_attn_varlen_func(q, k, v, cu, cu, max_seqlen, max_seqlen, causal=True)
        return a.sum() + b.sum()

    qkv = torch.randn(2, 10, 3, 2, 36, device=device, dtype=dtype, requires_grad=True)  # hdim 36 → padded to 40
    q, k, v = (torch.randn(15, 2, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0, 6, 15], dtype=torch.int32, device=device)
    loss = f(qkv, q, k, v, cu, 9)
    loss.backward()
    expected = flash_attn_qkvpacked_func(qkv, causal=True).sum() + flash_attn_varlen_func(
        q, k, v, cu, cu, 9, 9, causal=True).sum()
    torch.testing.assert_close(loss, expected)
    assert qkv.grad is not None and qkv.grad.shape == qkv.shape and not torch.isnan(qkv.grad).any()
