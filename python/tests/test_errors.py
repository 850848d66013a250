"""Unsupported arguments are refused by name; wrong devices, dtypes and shapes give clear errors,
with the C++ Status message surfaced as the Python exception."""
import pytest
import torch

import flashattn
from conftest import CUDA_OK, DEVICES, DEFAULT_DTYPE, needs_cuda
from flashattn import (FlashAttnError, InvalidArgumentError, NotSupportedError, flash_attn_func,
                       flash_attn_kvpacked_func, flash_attn_qkvpacked_func, flash_attn_varlen_func)


def qkv(device="cpu", dtype=torch.float32, b=1, s=8, h=2, hk=2, d=64):
    return (torch.randn(b, s, h, d, device=device, dtype=dtype), torch.randn(b, s, hk, d, device=device, dtype=dtype),
            torch.randn(b, s, hk, d, device=device, dtype=dtype))


@pytest.mark.parametrize("kwargs,names", [
    ({"dropout_p": 0.1}, "dropout_p"),
    ({"alibi_slopes": torch.ones(2)}, "alibi_slopes"),
])
@pytest.mark.parametrize("fn", ["plain", "qkvpacked", "kvpacked", "varlen"])
def test_unsupported_arguments_are_refused_by_name(fn, kwargs, names):
    q, k, v = qkv()
    with pytest.raises(NotImplementedError, match=names):
        if fn == "plain":
            flash_attn_func(q, k, v, **kwargs)
        elif fn == "qkvpacked":
            flash_attn_qkvpacked_func(torch.stack((q, k, v), 2), **kwargs)
        elif fn == "kvpacked":
            flash_attn_kvpacked_func(q, torch.stack((k, v), 2), **kwargs)
        else:
            cu = torch.tensor([0, 8], dtype=torch.int32)
            flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 8, 8, **kwargs)


def test_block_table_needs_page_pools():
    """block_table (paged prefill, tests/test_paged_prefill.py) takes k, v as page pools of rank 4."""
    q, k, v = qkv()
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(InvalidArgumentError, match=r"k: rank 3 .*\[num_pages, page_size, heads, headdim\]"):
        flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 8, 8, block_table=torch.zeros(1, 1, dtype=torch.int32))


def test_dropout_zero_and_eval_defaults_are_accepted():
    q, k, v = qkv()
    flash_attn_func(q, k, v, dropout_p=0.0, alibi_slopes=None, deterministic=True)
    with pytest.raises(ValueError, match="dropout_p"):
        flash_attn_func(q, k, v, dropout_p=-0.5)


def test_unsupported_dtype():
    q, k, v = qkv(dtype=torch.float64)
    with pytest.raises(InvalidArgumentError, match=r"q: dtype torch.float64 is not supported"):
        flash_attn_func(q, k, v)


def test_mixed_dtypes_surface_the_cpp_status():
    q, k, v = qkv()
    with pytest.raises(InvalidArgumentError, match=r"flashattn: k: dtype f16, expected f32"):
        flash_attn_func(q, k.half(), v)


def test_wrong_rank():
    q, k, v = qkv()
    with pytest.raises(InvalidArgumentError, match=r"q: rank 3 .* expected 4"):
        flash_attn_func(q[0], k, v)


def test_shape_mismatch_surfaces_the_cpp_status():
    q, k, v = qkv()
    with pytest.raises(InvalidArgumentError, match=r"v: shape \[1, 7, 2, 64\]"):
        flash_attn_func(q, k, v[:, :7])


def test_heads_not_a_multiple():
    q, k, v = qkv(h=3, hk=2)
    with pytest.raises(InvalidArgumentError, match=r"heads_q = 3 is not a multiple of heads_kv = 2"):
        flash_attn_func(q, k, v)


def test_head_dim_too_large_is_not_supported():
    q, k, v = qkv(d=264)
    with pytest.raises(NotSupportedError, match=r"hdim_qk .* = 264 is not supported"):
        flash_attn_func(q, k, v)


def test_bad_options():
    q, k, v = qkv()
    with pytest.raises(InvalidArgumentError, match="softcap"):
        flash_attn_func(q, k, v, softcap=-1.0)
    with pytest.raises(InvalidArgumentError, match="window_left"):
        flash_attn_func(q, k, v, window_size=(-2, 0))
    with pytest.raises(InvalidArgumentError, match="window_size"):
        flash_attn_func(q, k, v, window_size=5)


def test_causal_overrides_window_right_as_flash_attn():
    """flash-attn (and Hugging Face, which passes (w, w) with causal=True) takes causal as right = 0."""
    q, k, v = qkv(s=20)
    torch.testing.assert_close(flash_attn_func(q, k, v, causal=True, window_size=(4, 4)),
                               flash_attn_func(q, k, v, window_size=(4, 0)), atol=0, rtol=0)


def test_varlen_offsets():
    q, k, v = qkv(s=10)
    q, k, v = q[0], k[0], v[0]
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(InvalidArgumentError, match="cu_seqlens_q: dtype torch.int64, expected torch.int32"):
        flash_attn_varlen_func(q, k, v, cu.long(), cu, 6, 6)
    with pytest.raises(InvalidArgumentError, match=r"cu_seqlens_q: sequence 1 has length 6 > max_seqlen_q = 5"):
        flash_attn_varlen_func(q, k, v, cu, cu, 5, 6)
    with pytest.raises(InvalidArgumentError, match=r"exceeds the 10 packed rows"):
        flash_attn_varlen_func(q, k, v, torch.tensor([0, 4, 11], dtype=torch.int32), cu, 7, 6)


def test_errors_are_flashattn_errors_with_codes():
    q, k, v = qkv(h=3, hk=2)
    with pytest.raises(FlashAttnError) as info:
        flash_attn_func(q, k, v)
    assert isinstance(info.value, ValueError) and info.value.code == 1  # StatusCode::invalid_argument
    with pytest.raises(InvalidArgumentError) as info:  # raised by the Python layer: the same code
        flash_attn_func(q.double(), k, v)
    assert info.value.code == 1
    with pytest.raises(NotSupportedError) as info:
        flash_attn_func(*qkv(d=264))
    assert info.value.code == 2  # StatusCode::not_supported


@needs_cuda
@pytest.mark.gpu
def test_cuda_fp32_is_not_supported():
    q, k, v = qkv("cuda", torch.float32)
    with pytest.raises(NotSupportedError):
        flash_attn_func(q, k, v)


@needs_cuda
@pytest.mark.gpu
def test_device_mismatch():
    q, k, v = qkv("cuda", torch.float16)
    with pytest.raises(InvalidArgumentError, match=r"k: on cpu, expected cuda"):
        flash_attn_func(q, k.cpu(), v)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(InvalidArgumentError, match=r"cu_seqlens_q: on cpu, expected cuda"):
        flash_attn_varlen_func(q[0], k[0], v[0], cu, cu.cuda(), 8, 8)


def test_cuda_build_matches_torch():
    """On a machine where PyTorch sees a GPU, a build without CUDA would skip every GPU test: fail
    loudly instead (set FLASHATTN_ALLOW_NO_CUDA=1 to accept a CPU-only build there)."""
    import os
    if torch.cuda.is_available() and os.environ.get("FLASHATTN_ALLOW_NO_CUDA") != "1":
        assert flashattn.cuda_available(), "PyTorch sees a GPU but flashattn was built without CUDA"


@pytest.mark.parametrize("device", DEVICES)
def test_forward_path(device):
    q, k, v = qkv(device, DEFAULT_DTYPE[device])
    path = flashattn.forward_path(q, k, v)
    assert path == "cpu" if device == "cpu" else path.startswith("sm")
