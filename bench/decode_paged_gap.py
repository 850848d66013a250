"""1 x 8k decode (bf16, GQA 32/8, hdim 128): where the paged call's gap lives. The same bytes (pages of 64
dealt in order: the pool is the contiguous cache's layout) read (a) contiguous from the cache, (b)
contiguous from the pool viewed as [1, 8192, 8, 128], (c) paged from the pool with an identity table,
(d) paged from a shuffled pool; on cp.async and on TMA loads (flashattn._C.set_decode_loads). One process,
CUDA graphs of 20 calls, replays interleaved, two rounds. A diagnostic tool, not a record.

    python3 bench/decode_paged_gap.py
"""
import sys
sys.path.insert(0, "bench")
import torch, flashattn
from bench_gpu import graph_timed, median_ms_interleaved
torch.manual_seed(0)
b, n, hk, d, page = 1, 8192, 8, 128, 64
q = torch.randn(b, 1, 32, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(b, n, hk, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
seq = torch.full((b,), n, dtype=torch.int32, device="cuda")
pool_k = k.reshape(n // page, page, hk, d).clone()
pool_v = v.reshape(n // page, page, hk, d).clone()
ident = torch.arange(n // page, dtype=torch.int32, device="cuda").view(1, -1)
perm = torch.randperm(n // page, device="cuda")
shuf_k = torch.empty_like(pool_k); shuf_k[perm] = pool_k
shuf_v = torch.empty_like(pool_v); shuf_v[perm] = pool_v
shuf_t = perm.view(1, -1).to(torch.int32)
cases = {
    "contig x.k": lambda: flashattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seq, path="decode"),
    "contig pool view": lambda: flashattn.flash_attn_with_kvcache(q, pool_k.view(1, n, hk, d), pool_v.view(1, n, hk, d), cache_seqlens=seq, path="decode"),
    "paged identity": lambda: flashattn.flash_attn_with_kvcache(q, pool_k, pool_v, cache_seqlens=seq, block_table=ident, path="decode"),
    "paged shuffled": lambda: flashattn.flash_attn_with_kvcache(q, shuf_k, shuf_v, cache_seqlens=seq, block_table=shuf_t, path="decode"),
}
names, timers = [], []
for loads in ("cp_async", "tma"):
    for name, fn in cases.items():
        flashattn._C.set_decode_loads(loads)
        fn()
        timers.append(graph_timed(fn)); names.append(f"{loads:8s} {name}")
flashattn._C.set_decode_loads("auto")
gb = 2 * k.numel() * 2 / 1e9
for rnd in range(2):
    times = median_ms_interleaved(timers)
    for nm, ms in zip(names, times):
        print(f"round {rnd}  {nm:28s} {ms*1e3:7.2f} us  {gb/ms:.3f} TB/s")
