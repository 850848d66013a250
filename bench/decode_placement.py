"""Does the L2-resident decode row (1 x 8k, 32 MB of K/V) depend on where its cache lies in memory? The
same logical cache (bf16, GQA 32/8, hdim 128) in several allocations, contiguous and paged (pages dealt
in order, so paged and contiguous read the same bytes in the same order), through
flash_attn_with_kvcache(path="decode"), timed as bench_gpu.py's decode part (a CUDA graph of 20 calls,
replays interleaved in balanced orders, median), in two rounds. A probe, not a record.

    python3 bench/decode_placement.py [--batch 1 --seqlen 8192] [--copies 3]
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import graph_timed, median_ms_interleaved  # noqa: E402

import flashattn  # noqa: E402


def paged_copy(x, page):
    """x (b, n, h, d) as pages of `page` keys, sequence b's pages consecutive in the pool (in order)."""
    b, n, h, d = x.shape
    return x.reshape(b * (n // page), page, h, d).clone()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--copies", type=int, default=3)
    args = ap.parse_args()
    b, n = args.batch, args.seqlen
    q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, n, 8, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    lens = torch.full((b,), n, device="cuda", dtype=torch.int32)
    layouts = [("contiguous (original)", k, v, None)]
    spacers = []
    for c in range(args.copies):
        spacers.append(torch.empty(int(7e6) * (c + 1), device="cuda", dtype=torch.uint8))  # shifts later allocations
        layouts.append((f"contiguous copy {c}", k.clone(), v.clone(), None))
    for page in (16, 256):
        for c in range(2):
            table = torch.arange(b * (n // page), device="cuda", dtype=torch.int32).view(b, n // page)
            layouts.append((f"page {page} in order, pool {c}", paged_copy(k, page), paged_copy(v, page), table))
    gb = 2 * b * n * 8 * 128 * 2 / 1e9
    timers = []
    for name, kc, vc, table in layouts:
        def fn(kc=kc, vc=vc, table=table):
            return flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table, path="decode")
        timers.append(graph_timed(fn))
    for r in range(2):
        times = median_ms_interleaved(timers)
        for (name, *_), ms in zip(layouts, times):
            print(f"round {r}  {b} x {n}  {name:28s} {gb / ms:.3f} TB/s", flush=True)


if __name__ == "__main__":
    main()
