"""flashattn.context_parallel: ring attention over 2, 3 and 4 CPU processes (gloo), each rank's out, lse
and gradients against the float64 reference on the full sequence by the error rule; the zigzag
layout's visibility rule against the causal mask; the helpers; bad inputs.

One spawn per world size runs every case (process start-up is most of the cost); each case is then
reported as its own test from the ranks' results."""
import datetime
import json
import os
import time
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import _BASE_SEED
from flashattn.context_parallel import _causal_step, ring_attention, zigzag_shard, zigzag_unshard
import reference

WORLDS = [2, 3, 4]
TIMEOUT_S = 90  # a world whose ranks take this long (normally a few seconds) fails instead of hanging

# id: (batch, seqlen, heads_q, heads_kv, hdim, dtype, options). Sequence lengths are multiples of 24
# (2·world chunks for every world here); 120 gives odd chunks of 15 rows at world 4; head dim 36 is
# zero-padded to 40 for the kernels. Non-causal cases shard contiguously (any sharding works without
# a mask), causal ones in the zigzag layout.
CASES = {
    "full-mha-f32": (2, 96, 4, 4, 32, torch.float32, {}),
    "causal-mha-f32": (1, 192, 4, 4, 64, torch.float32, {"causal": True}),
    "causal-gqa-bf16": (2, 120, 4, 2, 64, torch.bfloat16, {"causal": True}),
    "full-mqa-bf16": (1, 144, 4, 1, 32, torch.bfloat16, {}),
    "causal-mqa-f16-softcap-scale-hdim36": (1, 120, 3, 1, 36, torch.float16,
                                            {"causal": True, "softcap": 3.0, "softmax_scale": 0.2}),
}


def _shard(x, rank, world, causal, dim=1):
    return zigzag_shard(x, rank, world, dim) if causal else x.chunk(world, dim)[rank]


def _run_case(case_id, rank, world, seed):
    """Runs the ring on this rank's shards and checks them; raises AssertionError on a mismatch.
    All communication (the ring forward and backward, the gather) happens before the first check,
    so a failing rank cannot leave the others waiting."""
    batch, seqlen, heads, heads_kv, hdim, dtype, opts = CASES[case_id]
    causal = opts.get("causal", False)
    gen = torch.Generator().manual_seed(seed)  # the same full tensors on every rank
    full = [torch.randn(batch, seqlen, h, hdim, generator=gen).to(dtype) for h in (heads, heads_kv, heads_kv)]
    dout_full = torch.randn(batch, seqlen, heads, hdim, generator=gen).to(dtype)

    q, k, v = (_shard(t, rank, world, causal).requires_grad_() for t in full)
    out, lse = ring_attention(q, k, v, return_lse=True, **opts)
    grads = torch.autograd.grad(out, (q, k, v), _shard(dout_full, rank, world, causal))
    gathered = [torch.empty_like(out) for _ in range(world)]
    dist.all_gather(gathered, out.detach().contiguous())

    qf, kf, vf = (t.clone().requires_grad_() for t in full)
    ref_opts = dict(causal=causal, softcap=opts.get("softcap", 0.0), softmax_scale=opts.get("softmax_scale"))
    out_ref, lse_ref = reference.attention(qf, kf, vf, upcast=True, **ref_opts)
    out_pt, lse_pt = reference.attention(qf, kf, vf, upcast=False, **ref_opts)
    grads_ref = torch.autograd.grad(out_ref, (qf, kf, vf), dout_full.double())
    grads_pt = torch.autograd.grad(out_pt, (qf, kf, vf), dout_full)

    assert out.dtype == dtype and out.shape == q.shape and lse.shape == (batch, heads, q.shape[1])
    reference.assert_by_rule("out", out, _shard(out_ref, rank, world, causal), _shard(out_pt, rank, world, causal),
                             dtype)
    reference.assert_by_rule("lse", lse, _shard(lse_ref, rank, world, causal, dim=2),
                             _shard(lse_pt, rank, world, causal, dim=2), dtype)
    for name, g, g_ref, g_pt in zip(("dq", "dk", "dv"), grads, grads_ref, grads_pt):
        assert g.dtype == dtype
        reference.assert_by_rule(name, g, _shard(g_ref, rank, world, causal), _shard(g_pt, rank, world, causal),
                                 dtype)
    whole = zigzag_unshard(gathered) if causal else torch.cat(gathered, 1)
    reference.assert_by_rule("gathered out", whole, out_ref, out_pt, dtype)


def _worker(rank, world, init_file, seed, results_dir):
    torch.set_num_threads(1)  # world processes share the machine's cores
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    results = {}
    try:
        for i, case_id in enumerate(CASES):
            try:
                _run_case(case_id, rank, world, seed + i)
                results[case_id] = ""
            except AssertionError:
                results[case_id] = traceback.format_exc(limit=-2)
    finally:
        dist.destroy_process_group()
        with open(os.path.join(results_dir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)


@pytest.fixture(scope="module")
def ring_results(tmp_path_factory):
    """world -> {rank: {case id: "" or the failure}}, one spawn of `world` processes per world size."""
    cache = {}
    # The ranks fork from one server that has imported torch (and what autograd imports on its first
    # call) once, instead of each importing it again: that was most of the time.
    mp.get_context("forkserver").set_forkserver_preload(
        ["torch", "torch.fx.experimental.symbolic_shapes", "flashattn", __name__])

    def run(world):
        if world not in cache:
            tmp = tmp_path_factory.mktemp(f"ring{world}")
            seed = (_BASE_SEED + 7919 * world) % 2**31
            ranks = mp.start_processes(_worker, args=(world, str(tmp / "store"), seed, str(tmp)), nprocs=world,
                                       join=False, start_method="forkserver")
            # A wait on a point-to-point receive has no timeout: a ring that lost a message hangs. The
            # deadline turns that into a failure of this world's tests.
            deadline = time.monotonic() + TIMEOUT_S
            while not ranks.join(timeout=max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    for p in ranks.processes:
                        p.kill()
                    cache[world] = f"world {world}: the ranks did not finish within {TIMEOUT_S} s (a hang on the ring?)"
                    break
            else:
                cache[world] = {r: json.loads((tmp / f"rank{r}.json").read_text()) for r in range(world)}
        if isinstance(cache[world], str):
            pytest.fail(cache[world])
        return cache[world]

    return run


@pytest.mark.parametrize("case_id", list(CASES))
@pytest.mark.parametrize("world", WORLDS)
def test_ring_attention_matches_reference(ring_results, world, case_id):
    failures = [f"rank {r}:\n{res[case_id]}" for r, res in ring_results(world).items() if res.get(case_id) != ""]
    assert not failures, "\n".join(failures)


# ---- the zigzag layout -------------------------------------------------------------------------

@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_causal_step_is_the_causal_mask(world):
    """What _causal_step computes of each (rank, source) pair is exactly the causal mask between
    rank's zigzag query rows and source's zigzag key rows, and off the diagonal every rank does the
    same half block at every step (the load balance)."""
    chunk = 3
    seqlen = 2 * world * chunk
    mask = reference.visible(seqlen, seqlen, True, (-1, -1), "cpu")
    positions = torch.arange(seqlen)
    local = 2 * chunk
    front, back = slice(0, chunk), slice(chunk, local)
    for rank in range(world):
        rows = zigzag_shard(positions, rank, world, dim=0)
        for source in range(world):
            keys = zigzag_shard(positions, source, world, dim=0)
            expected = mask[rows][:, keys]
            q_rows, k_rows, causal = _causal_step(rank, source, front, back)
            computed = torch.zeros(local, local, dtype=torch.bool)
            part = computed[q_rows, k_rows]
            part.copy_(torch.ones_like(part).tril() if causal else torch.ones_like(part))
            assert torch.equal(computed, expected), f"rank {rank}, source {source}"
            if source != rank:
                assert part.numel() == local * local // 2


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_zigzag_round_trip(world):
    x = torch.randn(2, 4 * world * 3, 5)
    shards = [zigzag_shard(x, r, world) for r in range(world)]
    assert torch.equal(zigzag_unshard(shards), x)
    if world > 1:  # rank 0 holds the first and the last chunk
        chunk = x.shape[1] // (2 * world)
        assert torch.equal(shards[0], torch.cat([x[:, :chunk], x[:, -chunk:]], 1))


def test_zigzag_refuses_indivisible_length():
    with pytest.raises(ValueError, match="x: length 10 .* not divisible by 2·world = 4"):
        zigzag_shard(torch.randn(1, 10, 2), 0, 2)
    with pytest.raises(ValueError, match="rank = 2"):
        zigzag_shard(torch.randn(1, 8, 2), 2, 2)
    with pytest.raises(ValueError, match=r"shards\[1\]: odd length"):
        zigzag_unshard([torch.randn(1, 4), torch.randn(1, 3)])


# ---- one process: a world of one, bad inputs ----------------------------------------------------

@pytest.fixture
def world_of_one(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _qkv(seqlen=16, heads=4, heads_kv=2, hdim=32, requires_grad=False):
    return [torch.randn(1, seqlen, h, hdim, requires_grad=requires_grad) for h in (heads, heads_kv, heads_kv)]


def test_refuses_without_process_group():
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="group: torch.distributed is not initialized"):
        ring_attention(*_qkv())


@pytest.mark.parametrize("causal", [False, True])
def test_world_of_one_is_attention(world_of_one, causal):
    q, k, v = _qkv(requires_grad=True)
    out = ring_attention(q, k, v, causal=causal)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    out_ref, _ = reference.attention(q, k, v, causal=causal)
    out_pt, _ = reference.attention(q, k, v, causal=causal, upcast=False)
    grads_ref = torch.autograd.grad(out_ref, (q, k, v), dout.double())
    grads_pt = torch.autograd.grad(out_pt, (q, k, v), dout)
    reference.assert_by_rule("out", out, out_ref, out_pt, torch.float32)
    for name, g, g_ref, g_pt in zip(("dq", "dk", "dv"), grads, grads_ref, grads_pt):
        reference.assert_by_rule(name, g, g_ref, g_pt, torch.float32)


def test_bad_inputs(world_of_one):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="q: seqlen 15 per rank is odd"):
        ring_attention(*_qkv(seqlen=15), causal=True)
    with pytest.raises(ValueError, match="k: 3 heads do not divide q's 4"):
        ring_attention(q, k.repeat(1, 1, 2, 1)[:, :, :3], v.repeat(1, 1, 2, 1)[:, :, :3])
    with pytest.raises(ValueError, match="k: seqlen 8 per rank, expected q's 16"):
        ring_attention(q, k[:, :8], v[:, :8], causal=True)
    with pytest.raises(ValueError, match="v: shape"):
        ring_attention(q, k, v[:, :8])
    with pytest.raises(ValueError, match="q: rank 3"):
        ring_attention(q[0], k, v)
    with pytest.raises(NotImplementedError, match="window_size"):
        ring_attention(q, k, v, window_size=(4, 0))
    with pytest.raises(TypeError, match=r"unknown score options \['softmax_scal'\]"):
        ring_attention(q, k, v, softmax_scal=0.1)
    other = dist.new_group([0])
    assert ring_attention(q, k, v, group=other).shape == q.shape  # a group other than the default works
