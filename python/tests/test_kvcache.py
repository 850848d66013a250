"""flash_attn_with_kvcache on the CPU against a plain-PyTorch reference that appends (rotating the
new keys), rotates q and attends per sequence: out and lse by the error rule, the caches after the
call (old rows untouched, appended rows as the reference's), paged against contiguous, errors."""
import pytest
import torch

import flashattn
from conftest import DEVICE_DTYPES, needs_cuda
from flashattn import InvalidArgumentError, NotSupportedError, flash_attn_with_kvcache
import reference


def rotary_tables(positions, rotary_dim, dtype, device):
    inv_freq = 10000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(positions, dtype=torch.float64).view(-1, 1) * inv_freq
    return angles.cos().to(dtype).to(device), angles.sin().to(dtype).to(device)


def rotate(x, cos, sin, positions, interleaved):
    """x [n, h, d] turned to positions [n] (rows of the tables), in x's dtype."""
    half = cos.shape[1]
    c, s = cos[positions].to(x.dtype).unsqueeze(1), sin[positions].to(x.dtype).unsqueeze(1)
    x = x.clone()
    i0 = slice(0, 2 * half, 2) if interleaved else slice(0, half)
    i1 = slice(1, 2 * half, 2) if interleaved else slice(half, 2 * half)
    x0, x1 = x[..., i0].clone(), x[..., i1].clone()
    x[..., i0], x[..., i1] = x0 * c - x1 * s, x0 * s + x1 * c
    return x


def cache_rows(cache, b, positions, cache_batch_idx, block_table):
    """(page or row index, row within it) of sequence b's keys at `positions` (a LongTensor)."""
    if block_table is not None:
        page_size = cache.shape[1]
        return block_table[b, positions // page_size].long(), positions % page_size
    row = b if cache_batch_idx is None else int(cache_batch_idx[b])
    return torch.full_like(positions, row), positions


def kvcache_reference(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens, cache_batch_idx, block_table, causal,
                      window, softcap, interleaved, upcast):
    """(out, lse, k_cache after, v_cache after): appended rows rotated in float64 (or the dtype) and
    stored in the dtype, q rotated in float64 (or the dtype), attention per sequence."""
    dt = torch.float64 if upcast else q.dtype
    k_after, v_after = k_cache.clone(), v_cache.clone()
    per_query = causal or window != (-1, -1)
    outs, lses = [], []
    for b in range(q.shape[0]):
        cached, new = int(cache_seqlens[b]), 0 if k is None else k.shape[1]
        pos_new = torch.arange(cached, cached + new)
        if new:
            k_new = k[b].to(dt)
            if cos is not None:
                k_new = rotate(k_new, cos, sin, pos_new, interleaved)
            page, row = cache_rows(k_after, b, pos_new, cache_batch_idx, block_table)
            k_after[page, row] = k_new.to(q.dtype)
            v_after[page, row] = v[b]
        page, row = cache_rows(k_after, b, torch.arange(cached + new), cache_batch_idx, block_table)
        keys, values = k_after[page, row], v_after[page, row]
        qb = q[b].to(dt)
        if cos is not None:
            pos_q = cached + (torch.arange(q.shape[1]) if per_query else torch.zeros(q.shape[1], dtype=torch.long))
            qb = rotate(qb, cos, sin, pos_q, interleaved)
            if not upcast:
                qb = qb.to(q.dtype)
        out, lse = reference.attention(qb.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0), causal=causal,
                                       window=window, softcap=softcap, upcast=upcast)
        outs.append(out[0])
        lses.append(lse[0])
    return torch.stack(outs), torch.stack(lses), k_after, v_after


def make_cache(batch, capacity, heads_kv, d, dv, dtype, page_size, cache_lens, new, batch_idx=False):
    """Caches (contiguous, or paged with shuffled pages), NaN wherever no sequence holds a key."""
    if page_size:
        max_pages = -(-capacity // page_size)
        pool = batch * max_pages + 2
        k_cache = torch.full((pool, page_size, heads_kv, d), float("nan"), dtype=dtype)
        v_cache = torch.full((pool, page_size, heads_kv, dv), float("nan"), dtype=dtype)
        block_table = torch.randperm(pool)[:batch * max_pages].view(batch, max_pages).to(torch.int32)
        idx = None
    else:
        rows = batch + 2 if batch_idx else batch
        k_cache = torch.full((rows, capacity, heads_kv, d), float("nan"), dtype=dtype)
        v_cache = torch.full((rows, capacity, heads_kv, dv), float("nan"), dtype=dtype)
        block_table = None
        idx = torch.randperm(rows)[:batch].to(torch.int32) if batch_idx else None
    for b, n in enumerate(cache_lens):
        page, row = cache_rows(k_cache, b, torch.arange(n), idx, block_table)
        k_cache[page, row] = torch.randn(n, heads_kv, d).to(dtype)
        v_cache[page, row] = torch.randn(n, heads_kv, dv).to(dtype)
    return k_cache, v_cache, block_table, idx


def assert_caches(k_got, v_got, k_want, v_want, rotated, dtype):
    """The caches after a call: bitwise where nothing was appended (NaN stays NaN); appended keys
    within a rounding when they were rotated, values bitwise."""
    for name, got, want in (("k_cache", k_got, k_want), ("v_cache", v_got, v_want)):
        same = (got == want) | (got.isnan() & want.isnan())
        if not rotated or name == "v_cache":
            assert bool(same.all()), f"{name}: {int((~same).sum())} elements differ from the reference's cache"
        else:
            tol = 2 * reference.UNIT_ROUNDOFF.get(dtype, 2.0**-24) * want.abs().double() + 1e-5
            close = same | ((got.double() - want.double()).abs() <= tol)
            assert bool(close.all()), f"{name}: {int((~close).sum())} elements off"


CASES = [
    pytest.param(dict(), id="plain"),
    pytest.param(dict(new=1), id="append1"),
    pytest.param(dict(new=3, rotary=True, interleaved=True, seqlen_q=3, causal=True), id="append3-rotint-causal"),
    pytest.param(dict(new=2, rotary=True, interleaved=False, rotary_dim=16), id="append2-rothalf16"),
    pytest.param(dict(page_size=1, new=2, rotary=True), id="page1-rot"),
    pytest.param(dict(page_size=16, new=4, seqlen_q=4, causal=True), id="page16-causal"),
    pytest.param(dict(page_size=5, window=(6, 0), seqlen_q=2, new=2, softcap=4.0), id="page5-window-softcap"),
    pytest.param(dict(batch_idx=True, new=1, rotary=True), id="batchidx-rot"),
]


def on(device, *tensors):
    return [None if t is None else t.to(device) for t in tensors]


# "auto" picks the cpu family for host tensors and the decode family for CUDA ones.
PATH = {"cpu": "auto", "cuda": "auto"}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_matches_reference(device, dtype, case):
    batch, heads_q, heads_kv, d, dv, capacity = 3, 4, 2, 32, 32, 40
    cache_lens, new, seqlen_q = [7, 0, 30], case.get("new", 0), case.get("seqlen_q", 1)
    k_cache, v_cache, block_table, idx = make_cache(batch, capacity, heads_kv, d, dv, dtype, case.get("page_size", 0),
                                                    cache_lens, new, case.get("batch_idx", False))
    q = torch.randn(batch, seqlen_q, heads_q, d).to(dtype)
    k = torch.randn(batch, new, heads_kv, d).to(dtype) if new else None
    v = torch.randn(batch, new, heads_kv, dv).to(dtype) if new else None
    cos = sin = None
    if case.get("rotary"):
        cos, sin = rotary_tables(capacity + seqlen_q, case.get("rotary_dim", d), dtype, "cpu")
    seqlens = torch.tensor(cache_lens, dtype=torch.int32)
    causal, window, softcap = case.get("causal", False), case.get("window", (-1, -1)), case.get("softcap", 0.0)
    interleaved = case.get("interleaved", True)
    args = (k_cache, v_cache, k, v, cos, sin, seqlens, idx, block_table, causal, window, softcap, interleaved)
    out_ref, lse_ref, k_ref, v_ref = kvcache_reference(q, *args, upcast=True)
    out_pt, lse_pt, _, _ = kvcache_reference(q, *args, upcast=False)
    qd, kcd, vcd, kd, vd, cosd, sind, seqd, idxd, tabled = on(device, q, k_cache, v_cache, k, v, cos, sin, seqlens, idx,
                                                               block_table)
    out, lse = flash_attn_with_kvcache(qd, kcd, vcd, kd, vd, rotary_cos=cosd, rotary_sin=sind, cache_seqlens=seqd,
                                       cache_batch_idx=idxd, block_table=tabled, causal=causal, window_size=window,
                                       softcap=softcap, rotary_interleaved=interleaved, return_softmax_lse=True,
                                       path=PATH[device])
    reference.assert_by_rule("out", out.cpu(), out_ref, out_pt, dtype)
    reference.assert_by_rule("lse", lse.cpu(), lse_ref, lse_pt, dtype)
    assert_caches(kcd.cpu(), vcd.cpu(), k_ref, v_ref, bool(case.get("rotary")), dtype)


@pytest.mark.parametrize("opts", [pytest.param(dict(), id="plain"),
                                  pytest.param(dict(new=2, rotary=True, causal=True), id="append2-rot-causal")])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_cache_leftpad(device, dtype, opts):
    """cache_leftpad: sequence b's keys are cache rows [cache_leftpad[b], cache_seqlens[b] + new); the rows
    before are padding (NaN here: never read). The reference is the call on the cache from the padding
    on, with the rotary tables from the same row (positions are cache rows)."""
    batch, heads_q, heads_kv, d, capacity = 3, 4, 2, 32, 200
    pads, lens, new = [0, 5, 130], [40, 100, 1], opts.get("new", 0)
    causal, seqlen_q = opts.get("causal", False), 2 if opts.get("causal") else 1
    k_cache = torch.full((batch, capacity, heads_kv, d), float("nan"), dtype=dtype)
    v_cache = torch.full((batch, capacity, heads_kv, d), float("nan"), dtype=dtype)
    for b in range(batch):
        k_cache[b, pads[b]:pads[b] + lens[b]] = torch.randn(lens[b], heads_kv, d).to(dtype)
        v_cache[b, pads[b]:pads[b] + lens[b]] = torch.randn(lens[b], heads_kv, d).to(dtype)
    q = torch.randn(batch, seqlen_q, heads_q, d).to(dtype)
    k = torch.randn(batch, new, heads_kv, d).to(dtype) if new else None
    v = torch.randn(batch, new, heads_kv, d).to(dtype) if new else None
    cos, sin = rotary_tables(capacity + seqlen_q, d, dtype, "cpu") if opts.get("rotary") else (None, None)
    outs, lses, outs_pt, lses_pt = [], [], [], []
    k_want, v_want = k_cache.clone(), v_cache.clone()
    for b in range(batch):
        p = pads[b]
        one = lambda t: None if t is None else t[b:b + 1]  # noqa: E731
        args = (k_cache[b:b + 1, p:], v_cache[b:b + 1, p:], one(k), one(v), None if cos is None else cos[p:],
                None if sin is None else sin[p:], torch.tensor([lens[b]], dtype=torch.int32), None, None, causal,
                (-1, -1), 0.0, True)
        out_b, lse_b, k_b, v_b = kvcache_reference(q[b:b + 1], *args, upcast=True)
        out_pt_b, lse_pt_b, _, _ = kvcache_reference(q[b:b + 1], *args, upcast=False)
        outs.append(out_b), lses.append(lse_b), outs_pt.append(out_pt_b), lses_pt.append(lse_pt_b)
        k_want[b, p:], v_want[b, p:] = k_b[0], v_b[0]
    seqlens = torch.tensor([p + n for p, n in zip(pads, lens)], dtype=torch.int32)
    leftpad = torch.tensor(pads, dtype=torch.int32)
    qd, kcd, vcd, kd, vd, cosd, sind, seqd, padd = on(device, q, k_cache, v_cache, k, v, cos, sin, seqlens, leftpad)
    out, lse = flash_attn_with_kvcache(qd, kcd, vcd, kd, vd, rotary_cos=cosd, rotary_sin=sind, cache_seqlens=seqd,
                                       cache_leftpad=padd, causal=causal, return_softmax_lse=True, path=PATH[device])
    reference.assert_by_rule("out", out.cpu(), torch.cat(outs), torch.cat(outs_pt), dtype)
    reference.assert_by_rule("lse", lse.cpu(), torch.cat(lses), torch.cat(lses_pt), dtype)
    assert_caches(kcd.cpu(), vcd.cpu(), k_want, v_want, bool(opts.get("rotary")), dtype)


def decode_problem(batch, cache_len, heads_q, heads_kv, d, dtype, page_size=0, seed=0):
    """A decode step at inference scale: one query token, GQA, every sequence `cache_len` keys."""
    torch.manual_seed(seed)
    k_cache, v_cache, table, _ = make_cache(batch, cache_len + 1, heads_kv, d, d, dtype, page_size,
                                            [cache_len] * batch, 1)
    q = torch.randn(batch, 1, heads_q, d).to(dtype)
    k, v = torch.randn(batch, 1, heads_kv, d).to(dtype), torch.randn(batch, 1, heads_kv, d).to(dtype)
    seqlens = torch.full((batch,), cache_len, dtype=torch.int32)
    return q, k_cache, v_cache, k, v, seqlens, table


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 3, 40, 128, 0])
@pytest.mark.parametrize("page_size", [0, 16, 256])
def test_decode_splits_and_pages_match_reference(num_splits, page_size):
    dtype = torch.bfloat16
    q, k_cache, v_cache, k, v, seqlens, table = decode_problem(2, 3000, 32, 8, 128, dtype, page_size)
    args = (k_cache, v_cache, k, v, None, None, seqlens, None, table, False, (-1, -1), 0.0, True)
    out_ref, lse_ref, _, _ = kvcache_reference(q, *args, upcast=True)
    out_pt, lse_pt, _, _ = kvcache_reference(q, *args, upcast=False)
    qd, kcd, vcd, kd, vd, seqd, tabled = on("cuda", q, k_cache, v_cache, k, v, seqlens, table)
    out, lse = flash_attn_with_kvcache(qd, kcd, vcd, kd, vd, cache_seqlens=seqd, block_table=tabled,
                                       num_splits=num_splits, return_softmax_lse=True, path="decode")
    reference.assert_by_rule("out", out.cpu(), out_ref, out_pt, dtype)
    reference.assert_by_rule("lse", lse.cpu(), lse_ref, lse_pt, dtype)


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("batch,d,page,tokens,causal,new_lens,seed", [
    pytest.param(4, 64, 16, 1, False, [999, 5, 640, 1], 1, id="decode-kernel"),
    pytest.param(3, 128, 64, 256, True, [999, 300, 640], 2, id="forward-route"),
])
def test_captured_in_a_cuda_graph_replays_exactly(batch, d, page, tokens, causal, new_lens, seed):
    """No synchronization and no allocation in the call, on either route (the forward route's
    sequence index is written on the device into the planned workspace): a CUDA graph captures it,
    and a replay with new inputs copied in gives what an eager call gives on them (bitwise)."""
    dtype = torch.bfloat16
    q, k_cache, v_cache, _, _, seqlens, table = decode_problem(batch, 1000, 16, 4, d, dtype, page, seed=seed)
    qd, kcd, vcd, seqd, tabled = on("cuda", q.expand(-1, tokens, -1, -1).contiguous(), k_cache, v_cache, seqlens,
                                    table)
    kw = dict(cache_seqlens=seqd, block_table=tabled, causal=causal, return_softmax_lse=True, path="decode")
    flash_attn_with_kvcache(qd, kcd, vcd, **kw)  # warm-up: one-time host work before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_g, lse_g = flash_attn_with_kvcache(qd, kcd, vcd, **kw)
    qd.copy_(torch.randn_like(qd))
    seqd.copy_(torch.tensor(new_lens, dtype=torch.int32))
    graph.replay()
    out_e, lse_e = flash_attn_with_kvcache(qd, kcd, vcd, **kw)
    torch.cuda.synchronize()
    assert torch.equal(out_g, out_e) and torch.equal(lse_g, lse_e)
    assert not out_g.isnan().any()


@pytest.fixture
def kvcache_route():
    """Sets the GPU's KV-cache route for one test (flashattn._C.set_kvcache_route), then "auto" again."""
    yield flashattn._C.set_kvcache_route
    flashattn._C.set_kvcache_route("auto")


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("route", ["auto", "forward", "decode"])
@pytest.mark.parametrize("page_size", [0, 16, 256])
def test_long_queries_match_reference_on_each_route(route, page_size, kvcache_route):
    """Chunked prefill against a cache (160 new tokens appended and attended, causal, rotary, GQA):
    from 128 query rows the decode family runs the forward ("auto"); forced either way, the same answer.
    A capacity of 640 keys makes whole key blocks (sm90's forward); 600 does not (sm80's)."""
    kvcache_route(route)
    dtype, batch, heads_q, heads_kv, d, new = torch.bfloat16, 2, 8, 2, 128, 160
    for capacity in (640, 600):
        cache_lens = [300, 17]
        k_cache, v_cache, table, _ = make_cache(batch, capacity, heads_kv, d, d, dtype, page_size, cache_lens, new)
        q = torch.randn(batch, new, heads_q, d).to(dtype)
        k, v = torch.randn(batch, new, heads_kv, d).to(dtype), torch.randn(batch, new, heads_kv, d).to(dtype)
        cos, sin = rotary_tables(capacity + new, d, dtype, "cpu")
        seqlens = torch.tensor(cache_lens, dtype=torch.int32)
        args = (k_cache, v_cache, k, v, cos, sin, seqlens, None, table, True, (-1, -1), 0.0, False)
        out_ref, lse_ref, k_ref, v_ref = kvcache_reference(q, *args, upcast=True)
        out_pt, lse_pt, _, _ = kvcache_reference(q, *args, upcast=False)
        qd, kcd, vcd, kd, vd, cosd, sind, seqd, tabled = on("cuda", q, k_cache, v_cache, k, v, cos, sin, seqlens, table)
        out, lse = flash_attn_with_kvcache(qd, kcd, vcd, kd, vd, rotary_cos=cosd, rotary_sin=sind, cache_seqlens=seqd,
                                           block_table=tabled, causal=True, rotary_interleaved=False,
                                           return_softmax_lse=True, path="decode")
        reference.assert_by_rule("out", out.cpu(), out_ref, out_pt, dtype)
        reference.assert_by_rule("lse", lse.cpu(), lse_ref, lse_pt, dtype)
        assert_caches(kcd.cpu(), vcd.cpu(), k_ref, v_ref, True, dtype)


def test_set_kvcache_route_names_its_choices():
    with pytest.raises(ValueError, match="route"):
        flashattn._C.set_kvcache_route("fastest")


def test_set_decode_loads_names_its_choices():
    with pytest.raises(ValueError, match='loads: "bulk" is not one of "auto", "cp_async", "tma", "producer_cp_async"'):
        flashattn._C.set_decode_loads("bulk")
    flashattn._C.set_decode_loads("auto")


def test_paged_equals_contiguous_bitwise():
    torch.manual_seed(0)
    batch, capacity, heads_kv, d = 2, 48, 2, 64
    lens, new = [20, 44], 3
    q = torch.randn(batch, 3, 4, d, dtype=torch.bfloat16)
    k, v = torch.randn(batch, new, heads_kv, d, dtype=torch.bfloat16), torch.randn(batch, new, heads_kv, d, dtype=torch.bfloat16)
    cos, sin = rotary_tables(capacity + 3, d, torch.bfloat16, "cpu")
    kc, vc, _, _ = make_cache(batch, capacity, heads_kv, d, d, torch.bfloat16, 0, lens, new)
    kp, vp, table, _ = make_cache(batch, capacity, heads_kv, d, d, torch.bfloat16, 16, lens, new)
    for b, n in enumerate(lens):  # the same logical keys in both layouts
        page, row = cache_rows(kp, b, torch.arange(n), None, table)
        kp[page, row], vp[page, row] = kc[b, :n], vc[b, :n]
    kw = dict(rotary_cos=cos, rotary_sin=sin, cache_seqlens=torch.tensor(lens, dtype=torch.int32), causal=True,
              return_softmax_lse=True)
    out_c, lse_c = flash_attn_with_kvcache(q, kc, vc, k, v, **kw)
    out_p, lse_p = flash_attn_with_kvcache(q, kp, vp, k, v, block_table=table, **kw)
    assert torch.equal(out_c, out_p) and torch.equal(lse_c, lse_p)


def test_int_cache_seqlens_and_defaults():
    k_cache, v_cache = torch.randn(2, 10, 1, 32), torch.randn(2, 10, 1, 32)
    q = torch.randn(2, 1, 2, 32)
    out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=6)
    out_ref, _ = reference.attention(q, k_cache[:, :6], v_cache[:, :6])
    torch.testing.assert_close(out.double(), out_ref, atol=1e-5, rtol=1e-5)
    full = flash_attn_with_kvcache(q, k_cache, v_cache)  # no cache_seqlens: the whole cache
    torch.testing.assert_close(full.double(), reference.attention(q, k_cache, v_cache)[0], atol=1e-5, rtol=1e-5)


def test_errors_name_the_argument():
    k_cache, v_cache = torch.randn(4, 8, 1, 32), torch.randn(4, 8, 1, 32)
    q = torch.randn(1, 1, 2, 32)
    table = torch.tensor([[0, 9]], dtype=torch.int32)
    with pytest.raises(InvalidArgumentError, match=r"cache_leftpad\[0\] = 2 is outside \[0, cache_seqlens\[0\] = 1\]"):
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=1, cache_leftpad=torch.full((1,), 2, dtype=torch.int32))
    with pytest.raises(NotSupportedError, match="cache_leftpad: given with block_table"):
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=1, block_table=table,
                                cache_leftpad=torch.zeros(1, dtype=torch.int32))
    with pytest.raises(NotImplementedError, match="alibi_slopes"):
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=1, alibi_slopes=torch.zeros(2))
    with pytest.raises(InvalidArgumentError, match=r"block_table\[0\]\[1\] = 9"):
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor([12], dtype=torch.int32),
                                block_table=table)
    with pytest.raises(InvalidArgumentError, match="cache_seqlens"):
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=-1)
    with pytest.raises(InvalidArgumentError, match="v_new"):
        flash_attn_with_kvcache(q, k_cache[:1], v_cache[:1], k=torch.randn(1, 1, 1, 32), cache_seqlens=1)
    before = k_cache.clone()
    with pytest.raises(InvalidArgumentError, match="capacity"):
        flash_attn_with_kvcache(q, k_cache[:1], v_cache[:1], torch.randn(1, 2, 1, 32), torch.randn(1, 2, 1, 32),
                                cache_seqlens=7)
    assert torch.equal(before, k_cache), "a refused call appended"


def test_fake_shapes():
    q = torch.randn(2, 3, 4, 32, device="meta")
    k_cache, v_cache = torch.randn(2, 10, 2, 32, device="meta"), torch.randn(2, 10, 2, 16, device="meta")
    out, lse = flashattn._ops._kvcache_fake(q, k_cache, v_cache, None, None, None, None, None, None, None, 1.0,
                                            False, -1, -1, 0.0, True, 0)
    assert out.shape == (2, 3, 4, 16) and lse.shape == (2, 4, 3) and lse.dtype == torch.float32
    _, no_lse = flashattn._ops._kvcache_fake(q, k_cache, v_cache, None, None, None, None, None, None, None, 1.0,
                                             False, -1, -1, 0.0, True, 0, "auto", None, False)
    assert no_lse.shape == (0,)


def test_lse_only_when_asked_for():
    """Without return_softmax_lse the operator computes no LSE (an empty tensor comes back) and the
    same out bitwise; the cache is appended to the same way."""
    k_cache, v_cache = torch.randn(2, 12, 1, 32), torch.randn(2, 12, 1, 32)
    q, k, v = torch.randn(2, 1, 2, 32), torch.randn(2, 1, 1, 32), torch.randn(2, 1, 1, 32)
    caches = [(k_cache.clone(), v_cache.clone()) for _ in range(2)]
    out_lse, lse = flash_attn_with_kvcache(q, *caches[0], k, v, cache_seqlens=5, return_softmax_lse=True)
    out = flash_attn_with_kvcache(q, *caches[1], k, v, cache_seqlens=5)
    assert torch.equal(out, out_lse) and lse.shape == (2, 2, 1)
    assert torch.equal(caches[0][0], caches[1][0]) and torch.equal(caches[0][1], caches[1][1])
    args = (None, None, None, None, torch.full((2,), 5, dtype=torch.int32), None, None, 32 ** -0.5, False, -1, -1,
            0.0, True, 0, "auto", None)
    _, empty = flashattn._ops.kvcache(q, k_cache.clone(), v_cache.clone(), *args, False)
    assert empty.numel() == 0


class _Marked(torch.Tensor):
    """A tensor subclass (its __torch_function__ is torch.Tensor's): the fast-call entries must leave
    calls with one to the operators' Python binding."""


def test_fast_call_equals_the_operator_and_defers_subclasses():
    """_C.kvcache (the eager entry) and torch.ops.flashattn.kvcache give the same out, LSE and appended
    caches bitwise; a subclass tensor anywhere among the arguments (here cache_seqlens) makes the
    fast call return NotImplemented before anything runs, and flash_attn_with_kvcache still answers
    through the operator."""
    q, k, v = torch.randn(2, 2, 4, 32), torch.randn(2, 2, 2, 32), torch.randn(2, 2, 2, 32)
    cache_seqlens = torch.tensor([3, 6], dtype=torch.int32)
    k_cache, v_cache = torch.randn(2, 12, 2, 32), torch.randn(2, 12, 2, 32)
    caches = [(k_cache.clone(), v_cache.clone()) for _ in range(3)]
    options = (None, None, 32 ** -0.5, True, -1, 0, 0.0, True, 0, "auto", None, True)
    fast = flashattn._C.kvcache(q, *caches[0], k, v, None, None, cache_seqlens, *options)
    slow = torch.ops.flashattn.kvcache(q, *caches[1], k, v, None, None, cache_seqlens, *options)
    assert all(torch.equal(a, b) for a, b in zip(fast, slow))
    assert all(torch.equal(a, b) for a, b in zip(caches[0], caches[1]))
    marked = cache_seqlens.as_subclass(_Marked)
    assert flashattn._C.kvcache(q, *caches[2], k, v, None, None, marked, *options) is NotImplemented
    assert torch.equal(caches[2][0], k_cache) and torch.equal(caches[2][1], v_cache), "a deferred call appended"
    out = flash_attn_with_kvcache(q, *caches[2], k, v, cache_seqlens=marked, causal=True)
    assert torch.equal(out.as_subclass(torch.Tensor), fast[0])
    assert all(torch.equal(a, b) for a, b in zip(caches[2], caches[0]))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_decode_step_appends_and_attends_as_eager(backend):
    """A decode step (append k, v at cache_seqlens, then attend) under torch.compile(fullgraph=True):
    the operator mutates the caches (schema a!, b!), which functionalization must carry back; out
    and both caches bitwise as eager. Then opcheck on the operator itself."""
    torch._dynamo.reset()

    def step(q, k_cache, v_cache, k, v, lens):
        return flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, causal=True)

    q, k, v = torch.randn(2, 2, 4, 64), torch.randn(2, 2, 2, 64), torch.randn(2, 2, 2, 64)
    k_cache, v_cache = torch.randn(2, 32, 2, 64), torch.randn(2, 32, 2, 64)
    lens = torch.tensor([5, 17], dtype=torch.int32)
    compiled_caches, eager_caches = (k_cache.clone(), v_cache.clone()), (k_cache.clone(), v_cache.clone())
    out = torch.compile(step, fullgraph=True, backend=backend)(q, *compiled_caches, k, v, lens)
    out_eager = step(q, *eager_caches, k, v, lens)
    assert torch.equal(out, out_eager)
    assert all(torch.equal(a, b) for a, b in zip(compiled_caches, eager_caches))
    assert not torch.equal(eager_caches[0], k_cache), "the step appended nothing"
    torch.library.opcheck(torch.ops.flashattn.kvcache, (q, k_cache, v_cache, k, v, None, None, lens, None, None,
                                                        0.125, True, -1, 0, 0.0, True, 0, "auto", None, True))
