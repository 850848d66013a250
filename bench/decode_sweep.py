"""Decode tuning sweep on the GPU: flash_attn_with_kvcache(path="decode") TB/s over num_splits for the
decode rows of BENCHMARK.md (bf16, GQA 32/8, hdim 128, one query token), contiguous and paged, timed
like bench_gpu.py's decode part (a CUDA graph of 20 calls, median of replays). A tool for choosing the
split heuristic (src/cuda/decode/family.cu), not a record.

    python3 bench/decode_sweep.py [--splits 0,8,16,32,64,128] [--pages 0,16] [--page-order shuffled] [--loads auto]

--page-order sequential gives each sequence consecutive pool pages (the contiguous cache's bytes in
the same order): against shuffled it separates what scattered pages cost the memory system from
what the paged kernel's own work costs.
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import graph_timed  # noqa: E402

import flashattn  # noqa: E402

SHAPES = [(1, 8192), (1, 32768), (1, 131072), (8, 32768), (32, 8192), (128, 2048)]


def cache(batch, length, page, heads_kv=8, d=128, order="shuffled"):
    k = torch.randn(batch, length, heads_kv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    if not page:
        return k, v, None
    pages = length // page
    if order == "shuffled":
        perm = torch.randperm(batch * pages, device="cuda")
    else:
        perm = torch.arange(batch * pages, device="cuda")
    kp = torch.empty(batch * pages, page, heads_kv, d, device="cuda", dtype=k.dtype)
    vp = torch.empty_like(kp)
    kp[perm] = k.reshape(batch * pages, page, heads_kv, d)
    vp[perm] = v.reshape(batch * pages, page, heads_kv, d)
    return kp, vp, perm.view(batch, pages).to(torch.int32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--splits", default="0,8,16,32,64,128")
    ap.add_argument("--pages", default="0,16")
    ap.add_argument("--page-order", default="shuffled", choices=["shuffled", "sequential"])
    ap.add_argument("--shapes", default=None, help="batch:seqlen,... (default: the decode rows)")
    ap.add_argument("--loads", default="auto", help="the decode kernel's K/V loads: auto, cp_async, tma "
                    "(flashattn._C.set_decode_loads)")
    args = ap.parse_args()
    flashattn._C.set_decode_loads(args.loads)
    shapes = SHAPES if args.shapes is None else [tuple(int(v) for v in x.split(":")) for x in args.shapes.split(",")]
    for page in [int(x) for x in args.pages.split(",")]:
        for batch, length in shapes:
            kc, vc, table = cache(batch, length, page, order=args.page_order)
            q = torch.randn(batch, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
            lens = torch.full((batch,), length, device="cuda", dtype=torch.int32)
            gbytes = 2 * batch * length * 8 * 128 * 2 / 1e9
            cells = []
            for splits in [int(x) for x in args.splits.split(",")]:
                fn = lambda: flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table,  # noqa: E731
                                                               num_splits=splits, path="decode")
                one_ms = graph_timed(fn)
                ms = statistics.median(one_ms() for _ in range(9))
                cells.append(f"{splits}:{gbytes / ms:.2f}")
            print(f"{args.loads:8s} {args.page_order if page else 'contiguous':10s} page {page:3d} batch {batch:3d} L {length:6d}  TB/s by splits  " + "  ".join(cells), flush=True)
            del kc, vc, table


if __name__ == "__main__":
    main()
