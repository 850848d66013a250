"""flash_attn_varlen_func: packed variable-length batches, including empty sequences."""
import pytest
import torch

from conftest import DEVICE_DTYPES, DEVICES, DEFAULT_DTYPE
from flashattn import flash_attn_varlen_func
import reference
from test_attention import check_forward_backward, reference_options

OPTIONS = [
    pytest.param({}, id="full"),
    pytest.param({"causal": True}, id="causal"),
    pytest.param({"window_size": (6, 2)}, id="window6-2"),
    pytest.param({"causal": True, "softcap": 3.0}, id="causal-softcap"),
]
# (seqlens_q, seqlens_k, heads_q, heads_kv, hdim): an empty query sequence, an empty key sequence
# (its queries see nothing), queries longer than keys, GQA.
CPU_CASES = [
    ([5, 0, 17, 33], [9, 3, 0, 33], 4, 2, 64),
    ([1, 40, 7], [30, 12, 7], 2, 2, 40),
    ([64], [64], 3, 1, 32),
]
CUDA_CASES = [
    ([5, 0, 170, 333], [9, 3, 0, 333], 8, 2, 128),
    ([1, 400, 77, 129], [300, 120, 77, 1], 4, 4, 64),
    ([512, 256], [512, 1024], 4, 1, 256),
]


def cu_seqlens(lengths, device):
    return torch.tensor([0] + lengths, dtype=torch.int32, device=device).cumsum(0, dtype=torch.int32)


def cases():
    for p in DEVICE_DTYPES:
        device, dtype = p.values
        for i, case in enumerate(CPU_CASES if device == "cpu" else CUDA_CASES):
            yield pytest.param(device, dtype, case, marks=p.marks, id=f"{p.id}-case{i}")


@pytest.mark.parametrize("opts", OPTIONS)
@pytest.mark.parametrize("device,dtype,case", list(cases()))
def test_varlen_forward_backward(device, dtype, case, opts):
    lens_q, lens_k, h, hk, d = case
    cu_q, cu_k = cu_seqlens(lens_q, device), cu_seqlens(lens_k, device)
    q = torch.randn(sum(lens_q), h, d, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(sum(lens_k), hk, d, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(sum(lens_k), hk, d, device=device, dtype=dtype, requires_grad=True)
    out, lse, _ = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), return_attn_probs=True,
                                         **opts)
    assert out.shape == q.shape and lse.shape == (h, sum(lens_q))
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    check_forward_backward(q, k, v, out, lse, grads, dout, dtype, reference_options(opts), varlen=(cu_q, cu_k))


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_equals_padded_batch(device):
    """Equal lengths packed as varlen give the padded batch's result."""
    from flashattn import flash_attn_func
    dtype = DEFAULT_DTYPE[device]
    b, s, h, d = 3, 21, 2, 64
    q, k, v = (torch.randn(b, s, h, d, device=device, dtype=dtype) for _ in range(3))
    cu = cu_seqlens([s] * b, device)
    out = flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu, cu, s, s, causal=True)
    out_padded = flash_attn_func(q, k, v, causal=True)
    out_ref, _ = reference.attention(q, k, v, causal=True)
    out_pt, _ = reference.attention(q, k, v, causal=True, upcast=False)
    reference.assert_by_rule("out", out.view(b, s, h, d), out_ref, out_pt, dtype)
    reference.assert_by_rule("out_padded", out_padded, out_ref, out_pt, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_offsets(device):
    """cu_seqlens views that are not contiguous (read by the library as plain arrays) are copied."""
    dtype = DEFAULT_DTYPE[device]
    lens = [3, 11, 6]
    cu = cu_seqlens(lens, device)
    cu_strided = torch.stack((cu, torch.full_like(cu, -7)), dim=1)[:, 0]
    assert not cu_strided.is_contiguous()
    q, k, v = (torch.randn(sum(lens), 2, 64, device=device, dtype=dtype) for _ in range(3))
    out = flash_attn_varlen_func(q, k, v, cu_strided, cu_strided, max(lens), max(lens), causal=True)
    torch.testing.assert_close(out, flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True),
                               atol=0, rtol=0)
