"""flash_attn_varlen_func with block_table (paged prefill): k and v are page pools addressed through
block_table, cu_seqlens_k gives each sequence's length. On the CPU the result is bitwise the plain
varlen call's on the same keys packed, and so on CUDA through the sm80 family and the sm90 family (at
page sizes that make up whole key blocks; it refuses others by name); there is no backward."""
import pytest
import torch

import flashattn

from conftest import needs_cuda
from flashattn import InvalidArgumentError, NotSupportedError, flash_attn_varlen_func


def cu_seqlens(lengths, device="cpu"):
    return torch.tensor([0] + lengths, dtype=torch.int32, device=device).cumsum(0, dtype=torch.int32)


def paged(x, lens, page_size, table=None, spare_pages=2):
    """x's packed rows, sequence by sequence, on shuffled pages of a NaN pool, and the block_table
    mapping them (entries past a sequence's pages hold -1: never read). With `table`, the pool of
    that table (the same page order for k and v)."""
    pages_of = [(n + page_size - 1) // page_size for n in lens]
    num_pages = sum(pages_of) + spare_pages
    if table is None:
        order = torch.randperm(num_pages).tolist()
        table = torch.full((len(lens), max(pages_of) + 1), -1, dtype=torch.int32)
        used = 0
        for b, n in enumerate(pages_of):
            table[b, :n] = torch.tensor(order[used:used + n], dtype=torch.int32)
            used += n
    pool = torch.full((num_pages, page_size, *x.shape[1:]), float("nan"), dtype=x.dtype)
    start = 0
    for b, n in enumerate(lens):
        for t in range(n):
            pool[table[b, t // page_size], t % page_size] = x[start + t]
        start += n
    return pool, table


def problem(lens_q, lens_k, h, hk, d, dtype, page_size):
    q = torch.randn(sum(lens_q), h, d, dtype=dtype)
    k = torch.randn(sum(lens_k), hk, d, dtype=dtype)
    v = torch.randn(sum(lens_k), hk, d, dtype=dtype)
    k_pages, table = paged(k, lens_k, page_size)
    v_pages, _ = paged(v, lens_k, page_size, table)
    return q, k, v, k_pages, v_pages, table


@pytest.mark.parametrize("page_size", [1, 3, 16, 64, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("opts", [{}, {"causal": True}, {"window_size": (6, 2), "softcap": 3.0}],
                         ids=["full", "causal", "window-softcap"])
def test_paged_equals_packed(page_size, dtype, opts):
    lens_q, lens_k = [5, 0, 40, 1], [9, 3, 70, 300]
    q, k, v, k_pages, v_pages, table = problem(lens_q, lens_k, 4, 2, 64, dtype, page_size)
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
    args = (cu_q, cu_k, max(lens_q), max(lens_k))
    out, lse, _ = flash_attn_varlen_func(q, k, v, *args, return_attn_probs=True, **opts)
    out_p, lse_p, _ = flash_attn_varlen_func(q, k_pages, v_pages, *args, return_attn_probs=True,
                                             block_table=table, **opts)
    assert not out_p.isnan().any()
    assert torch.equal(out_p, out)  # the same tiles in the same order
    assert torch.equal(lse_p, lse)


def test_hdim_v_and_padded_head_dim():
    """hdim_v ≠ hdim_qk, and a head dim the wrapper pads to a multiple of 8 (the pools are padded too)."""
    lens = [7, 20]
    q = torch.randn(27, 2, 36)
    k, v = torch.randn(27, 1, 36), torch.randn(27, 1, 16)
    k_pages, table = paged(k, lens, 4)
    v_pages, _ = paged(v, lens, 4, table)
    cu = cu_seqlens(lens)
    out = flash_attn_varlen_func(q, k, v, cu, cu, 20, 20, causal=True)
    out_p = flash_attn_varlen_func(q, k_pages, v_pages, cu, cu, 20, 20, causal=True, block_table=table)
    assert out_p.shape == (27, 2, 16)
    assert torch.equal(out_p, out)


def test_no_backward():
    q, _, _, k_pages, v_pages, table = problem([3], [5], 2, 2, 64, torch.float32, 4)
    cu_q, cu_k = cu_seqlens([3]), cu_seqlens([5])
    q.requires_grad_()
    with pytest.raises(NotSupportedError, match="block_table: the paged forward has no backward"):
        flash_attn_varlen_func(q, k_pages, v_pages, cu_q, cu_k, 3, 5, block_table=table)
    with torch.no_grad():
        out = flash_attn_varlen_func(q, k_pages, v_pages, cu_q, cu_k, 3, 5, block_table=table)
    assert out.shape == (3, 2, 64) and not out.isnan().any()


def test_errors_name_the_argument():
    q, k, _, k_pages, v_pages, table = problem([3, 4], [5, 6], 2, 2, 64, torch.float32, 4)
    cu_q, cu_k = cu_seqlens([3, 4]), cu_seqlens([5, 6])
    args = (cu_q, cu_k, 4, 6)
    with pytest.raises(InvalidArgumentError, match=r"block_table: dtype torch.int64"):
        flash_attn_varlen_func(q, k_pages, v_pages, *args, block_table=table.long())
    with pytest.raises(InvalidArgumentError, match=r"k: rank 3 .*expected 4: \[num_pages, page_size"):
        flash_attn_varlen_func(q, k, v_pages, *args, block_table=table)
    bad = table.clone()
    n = bad[1, 1] = k_pages.shape[0]
    with pytest.raises(InvalidArgumentError, match=rf"block_table\[1\]\[1\] = {n} is outside the pages \[0, {n}\)"):
        flash_attn_varlen_func(q, k_pages, v_pages, *args, block_table=bad)
    with pytest.raises(InvalidArgumentError, match=r"cu_seqlens_k: sequence 0 has length 5 > max_pages \* page_size = 4"):
        flash_attn_varlen_func(q, k_pages, v_pages, *args, block_table=table[:, :1])
    with pytest.raises(InvalidArgumentError, match=r"block_table: shape \[1, 3\], expected \[batch = 2"):
        flash_attn_varlen_func(q, k_pages, v_pages, *args, block_table=table[:1])


def test_opcheck_and_compile():
    q, _, _, k_pages, v_pages, table = problem([3, 9], [5, 17], 4, 2, 64, torch.float32, 4)
    cu_q, cu_k = cu_seqlens([3, 9]), cu_seqlens([5, 17])
    torch.library.opcheck(torch.ops.flashattn.fwd, (q, k_pages, v_pages, cu_q, cu_k, 9, 17, 0.125, True, -1, 0, 0.0,
                                                    False, "auto", table))
    torch._dynamo.reset()

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(q, k, v, table):
        return flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 17, causal=True, block_table=table)

    torch.testing.assert_close(f(q, k_pages, v_pages, table),
                               flash_attn_varlen_func(q, k_pages, v_pages, cu_q, cu_k, 9, 17, causal=True,
                                                      block_table=table), atol=0, rtol=0)


def cuda_families():
    """The CUDA families this GPU runs the forward on ("sm80", and "sm90" on compute capability 9.0)."""
    if not torch.cuda.is_available():
        return []
    hopper = torch.cuda.get_device_capability() == (9, 0)
    return [f for f in ("sm80", "sm90") if f in flashattn.families() and (f != "sm90" or hopper)]


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [1, 3, 16, 64, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("opts", [{}, {"causal": True}, {"window_size": (6, 2), "softcap": 3.0}],
                         ids=["full", "causal", "window-softcap"])
def test_cuda_paged_equals_packed(page_size, dtype, opts):
    """Each CUDA family reads the pages with the tiles of its packed call, so gives bitwise the same
    out and lse, except sm90 without a mask (its paged kernel has the masked instance's 128-key
    blocks, the packed call 176: equal within rounding). sm90 takes pages that make up whole key
    blocks (16, 64, 256 here) and refuses 1 and 3 by name (auto then runs sm80)."""
    lens_q, lens_k = [5, 0, 140, 1], [9, 3, 170, 300]
    q, k, v, k_pages, v_pages, table = problem(lens_q, lens_k, 4, 2, 128, dtype, page_size)
    q, k, v, k_pages, v_pages, table = (t.cuda() for t in (q, k, v, k_pages, v_pages, table))
    cu_q, cu_k = cu_seqlens(lens_q, "cuda"), cu_seqlens(lens_k, "cuda")
    args = (cu_q, cu_k, max(lens_q), max(lens_k))
    ref = flash_attn_varlen_func(q.cpu().float(), k.cpu().float(), v.cpu().float(), cu_q.cpu(), cu_k.cpu(),
                                 max(lens_q), max(lens_k), **opts)
    for family in cuda_families():
        if family == "sm90" and page_size < 16:
            with pytest.raises(NotSupportedError, match="block_table: page_size"):
                flash_attn_varlen_func(q, k_pages, v_pages, *args, block_table=table, path=family, **opts)
            continue
        out, lse, _ = flash_attn_varlen_func(q, k, v, *args, return_attn_probs=True, path=family, **opts)
        out_p, lse_p, _ = flash_attn_varlen_func(q, k_pages, v_pages, *args, return_attn_probs=True,
                                                 block_table=table, path=family, **opts)
        assert not out_p.isnan().any(), family
        if family == "sm80" or opts:
            assert torch.equal(out_p, out), family
            assert torch.equal(lse_p, lse), family
        else:
            torch.testing.assert_close(out_p, out, atol=1e-2, rtol=1e-2)
            torch.testing.assert_close(lse_p, lse, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(out_p.float().cpu(), ref, atol=2e-2, rtol=2e-2)


@needs_cuda
@pytest.mark.gpu
def test_cuda_sm90_refuses_by_name():
    """A page size the sm90 kernels do not take (4: not a multiple of 16)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 family runs on compute capability 9.0 only")
    q, _, _, k_pages, v_pages, table = problem([3], [5], 2, 2, 64, torch.bfloat16, 4)
    cu_q, cu_k = cu_seqlens([3], "cuda"), cu_seqlens([5], "cuda")
    with pytest.raises(NotSupportedError, match="block_table"):
        flash_attn_varlen_func(q.cuda(), k_pages.cuda(), v_pages.cuda(), cu_q, cu_k, 3, 5, block_table=table.cuda(),
                               path="sm90")
