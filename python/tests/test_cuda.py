"""CUDA-only behaviour: the call runs on PyTorch's current stream of the tensors' device, never
synchronizes (so it can be captured in a CUDA graph), and outputs come from PyTorch's allocator."""
import pytest
import torch

from conftest import needs_cuda
from flashattn import flash_attn_func
import reference

pytestmark = [needs_cuda, pytest.mark.gpu]


def qkv(device="cuda", dtype=torch.bfloat16, b=2, s=256, h=4, d=128):
    return [torch.randn(b, s, h, d, device=device, dtype=dtype) for _ in range(3)]


def test_runs_on_the_current_stream():
    """Inputs written on a side stream after a long spin: a kernel launched on any other stream would
    read them before they exist."""
    q, k, v = qkv()
    expected = flash_attn_func(q, k, v, causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of spinning on the side stream
        q2, k2, v2 = (t * 1 for t in (q, k, v))
        out = flash_attn_func(q2, k2, v2, causal=True)
    side.synchronize()
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_backward_runs_on_the_current_stream():
    q, k, v = (t.requires_grad_() for t in qkv())
    dout = torch.randn_like(q)
    expected = torch.autograd.grad(flash_attn_func(q, k, v), (q, k, v), dout)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = flash_attn_func(q, k, v)
        torch.cuda._sleep(200_000_000)
        dout2 = dout * 1
        got = torch.autograd.grad(out, (q, k, v), dout2)
    side.synchronize()
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


def test_cuda_graph_capture():
    """No synchronization and no allocation outside PyTorch's allocator: forward and backward capture."""
    q, k, v = qkv(s=128)
    dout = torch.randn_like(q)
    fwd, bwd = torch.ops.flashattn.fwd, torch.ops.flashattn.bwd
    # cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, window, softcap, deterministic
    args = (None, None, 0, 0, 128 ** -0.5, True, -1, -1, 0.0, False)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture
        out, lse = fwd(q, k, v, *args)
        bwd(dout, q, k, v, out, lse, *args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out, g_lse = fwd(q, k, v, *args)
        g_dq, g_dk, g_dv = bwd(dout, q, k, v, g_out, g_lse, *args)
    for t in (q, k, v):
        t.normal_()
    graph.replay()
    torch.cuda.synchronize()
    out_ref, _ = reference.attention(q, k, v, causal=True)
    out_pt, _ = reference.attention(q, k, v, causal=True, upcast=False)
    reference.assert_by_rule("out (graph replay)", g_out, out_ref, out_pt, q.dtype)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_another_device():
    q, k, v = qkv("cuda:1")
    with torch.cuda.device(0):
        out = flash_attn_func(q, k, v, causal=True)
    assert out.device == torch.device("cuda:1")
    out_ref, _ = reference.attention(q, k, v, causal=True)
    out_pt, _ = reference.attention(q, k, v, causal=True, upcast=False)
    reference.assert_by_rule("out", out, out_ref, out_pt, q.dtype)


def test_long_sequence_bf16():
    """A longer sequence than the parametrized cases, forward and backward, GQA, causal."""
    b, s, h, hk, d = 1, 4096, 8, 2, 128
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = flash_attn_func(q, k, v, causal=True)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    out_ref, _ = reference.attention(q, k, v, causal=True)
    out_pt, _ = reference.attention(q, k, v, causal=True, upcast=False)
    reference.assert_by_rule("out", out, out_ref, out_pt, q.dtype)
    grads_ref = torch.autograd.grad(out_ref, (q, k, v), dout.double())
    grads_pt = torch.autograd.grad(out_pt, (q, k, v), dout)
    for name, g, gr, gp in zip(("dq", "dk", "dv"), grads, grads_ref, grads_pt):
        reference.assert_by_rule(name, g, gr, gp, q.dtype)
