"""Bad arguments are refused at the Python boundary with the library's errors, naming the argument
(never a ZeroDivisionError, IndexError or unpacking error from inside, nor a silent conversion);
varlen rows that belong to no sequence are 0 in out and in the gradients."""
import pytest
import torch
from conftest import DEVICE_DTYPES

from flashattn import (InvalidArgumentError, NotSupportedError, flash_attn_func, flash_attn_kvpacked_func,
                       flash_attn_qkvpacked_func, flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                       flash_attn_varlen_qkvpacked_func)


def qkv(b=1, s=8, h=2, d=16):
    return tuple(torch.randn(b, s, h, d) for _ in range(3))


def test_head_dim_zero_is_refused_by_the_library():  # D3
    q = torch.randn(1, 4, 2, 0)
    with pytest.raises(NotSupportedError, match=r"hdim_qk .* = 0 is not supported"):
        flash_attn_func(q, q, q)


@pytest.mark.parametrize("bad", ["q", "k", "v"])
def test_zero_dim_tensors_are_refused_by_rank(bad):  # D4
    q, k, v = qkv()
    args = {"q": q, "k": k, "v": v}
    args[bad] = torch.tensor(1.0)
    with pytest.raises(InvalidArgumentError, match=rf"{bad}: rank 0 .*expected 4"):
        flash_attn_func(**args)


def test_zero_dim_tensors_are_refused_by_rank_varlen():  # D4
    q, k, v = (t[0] for t in qkv())
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(InvalidArgumentError, match=r"q: rank 0 .*expected 3"):
        flash_attn_varlen_func(torch.tensor(1.0), k, v, cu, cu, 8, 8)
    with pytest.raises(InvalidArgumentError, match=r"qkv: shape \[\], expected"):
        flash_attn_qkvpacked_func(torch.tensor(1.0))


@pytest.mark.parametrize("p", [float("nan"), float("inf"), -0.1, 1.0])
def test_dropout_out_of_range(p):  # D5
    with pytest.raises(ValueError, match="dropout_p"):
        flash_attn_func(*qkv(), dropout_p=p)


def test_dropout_of_a_wrong_type():
    with pytest.raises(TypeError, match="dropout_p"):
        flash_attn_func(*qkv(), dropout_p="0.1")


@pytest.mark.parametrize("window", [(1.7, 2.9), (1, 2.0), ("1", 2), (True, 2), (torch.tensor(1.5), 2)])
def test_window_of_non_ints(window):  # D6
    with pytest.raises(InvalidArgumentError, match=r"window_size = .* must be a pair \(left, right\) of ints"):
        flash_attn_func(*qkv(), window_size=window)


def test_window_beyond_int64_is_unbounded():  # D6: clamped to 2**63 - 1, i.e. unbounded
    q, k, v = qkv()
    ref = flash_attn_func(q, k, v)
    torch.testing.assert_close(flash_attn_func(q, k, v, window_size=(2**64, 2**100)), ref, atol=0, rtol=0)
    torch.testing.assert_close(flash_attn_func(q, k, v, window_size=(2**64, 0)),
                               flash_attn_func(q, k, v, causal=True), atol=0, rtol=0)
    with pytest.raises(InvalidArgumentError, match="window_left"):  # far below -1: the library's range error
        flash_attn_func(q, k, v, window_size=(-2**64, 0))


def test_window_of_numpy_or_tensor_ints_is_accepted():
    np = pytest.importorskip("numpy")
    q, k, v = qkv()
    ref = flash_attn_func(q, k, v, window_size=(2, 1))
    torch.testing.assert_close(flash_attn_func(q, k, v, window_size=(np.int64(2), torch.tensor(1))), ref,
                               atol=0, rtol=0)


@pytest.mark.parametrize("fn,packed,msg", [
    ("qkvpacked", torch.randn(1, 8, 4, 2, 16), r"qkv: shape \[1, 8, 4, 2, 16\], expected .*size 3 in dimension 2"),
    ("kvpacked", torch.randn(1, 8, 3, 2, 16), r"kv: shape \[1, 8, 3, 2, 16\], expected .*size 2 in dimension 2"),
    ("varlen_qkvpacked", torch.randn(8, 4, 2, 16), r"qkv: shape \[8, 4, 2, 16\], expected .*size 3 in dimension 1"),
    ("varlen_kvpacked", torch.randn(8, 3, 2, 16), r"kv: shape \[8, 3, 2, 16\], expected .*size 2 in dimension 1"),
])
def test_wrong_packing_size(fn, packed, msg):  # D6
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(InvalidArgumentError, match=msg):
        if fn == "qkvpacked":
            flash_attn_qkvpacked_func(packed)
        elif fn == "kvpacked":
            flash_attn_kvpacked_func(torch.randn(1, 8, 2, 16), packed)
        elif fn == "varlen_qkvpacked":
            flash_attn_varlen_qkvpacked_func(packed, cu, 8)
        else:
            flash_attn_varlen_kvpacked_func(torch.randn(8, 2, 16), packed, cu, cu, 8, 8)


@pytest.mark.parametrize("name,value", [
    ("softmax_scale", "0.1"), ("softmax_scale", True), ("softmax_scale", torch.tensor(0.1)),
    ("softcap", "30"), ("softcap", None), ("causal", "False"), ("causal", None), ("causal", 2),
    ("deterministic", "yes"), ("return_attn_probs", 1.0), ("path", None),
])
def test_options_of_a_wrong_type(name, value):  # D6
    with pytest.raises(TypeError, match=name):
        flash_attn_func(*qkv(), **{name: value})


def test_options_of_equivalent_types_are_accepted():
    np = pytest.importorskip("numpy")
    q, k, v = qkv()
    ref = flash_attn_func(q, k, v, softmax_scale=0.5, causal=True, softcap=2.0)
    for kwargs in ({"softmax_scale": np.float32(0.5), "causal": 1, "softcap": 2},
                   {"softmax_scale": np.float64(0.5), "causal": True, "softcap": np.float32(2.0)}):
        torch.testing.assert_close(flash_attn_func(q, k, v, **kwargs), ref, atol=0, rtol=0)


def test_max_seqlen_of_a_wrong_type():
    q, k, v = (t[0] for t in qkv())
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(TypeError, match="max_seqlen_q"):
        flash_attn_varlen_func(q, k, v, cu, cu, 8.0, 8)
    torch.testing.assert_close(flash_attn_varlen_func(q, k, v, cu, cu, torch.tensor(8), 8),
                               flash_attn_varlen_func(q, k, v, cu, cu, 8, 8), atol=0, rtol=0)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("offsets", [[2, 6, 11], [0, 5, 16], [0, 16], [3, 3], [4, 4, 9]],
                         ids=["both-ends", "none", "one-sequence", "no-rows", "empty-sequence"])
def test_varlen_rows_outside_the_sequences_are_zero(device, dtype, offsets):  # D7
    """Rows before the first and after the last sequence belong to none: 0 in out and in the
    gradients, written by the library from the offsets on the device (under FLASHATTN_POISON, which
    the suite sets, they start as NaN), every other row computed."""
    torch.manual_seed(0)
    total, h, d = 16, 2, 64
    q, k, v = (torch.randn(total, h, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    cu = torch.tensor(offsets, dtype=torch.int32, device=device)
    longest = max(b - a for a, b in zip(offsets, offsets[1:]))
    out = flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, causal=True)
    out.backward(torch.randn_like(out))
    outside = torch.tensor([not offsets[0] <= r < offsets[-1] for r in range(total)], device=device)
    for name, t in (("out", out), ("q.grad", q.grad), ("k.grad", k.grad), ("v.grad", v.grad)):
        assert torch.all(t[outside] == 0), name
        assert torch.isfinite(t[~outside]).all(), name
