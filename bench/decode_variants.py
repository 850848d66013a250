"""BENCHMARK.md's decode rows (bf16, GQA 32/8, hdim 128; contiguous and paged at 16/64/256) through the C
ABI (fa_kvcache_forward, path "decode") for several builds of the library in one process, beside cuDNN
(PyTorch SDPA): what a kernel change (a load hint, a schedule) moves, each build against the same
caches. Timed as bench_gpu.py's decode part: a CUDA graph of 20 calls per build and page size, replays
interleaved in balanced orders, median. A tool for comparing builds, not a record (the record times
flash_attn_with_kvcache, what users call).

    python3 bench/decode_variants.py --lib main=build/libflashattn_c.so --lib hint=other/libflashattn_c.so \
        [--shapes 1:8192:1,128:2048:1] [--json OUT]

A build may carry a split count, NAME=LIB@SPLITS (the C ABI's num_splits; 0 or none: the library's
choice), so that one library at several split counts is timed the same way: --lib s1=LIB@1 --lib s2=LIB@2.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import (DECODE_PAGE_SIZES, DecodeInputs, decode_cells, decode_tbps_beside_cudnn,  # noqa: E402
                       graph_timed)
from flashattn_ctypes import FlashAttn  # noqa: E402


def c_api_call(fa, x, page, splits=0):
    """One decode call of build fa on the contiguous cache (page 0) or the paged copy, with `splits` key
    splits (0: the library's choice): fn and its output."""
    table, kc, vc = (None, x.k, x.v) if page == 0 else x.paged[page]
    out = torch.empty_like(x.q)
    args = lambda: fa.kvcache_args(x.q, kc, vc, x.cache_seqlens, out, block_table=table,  # noqa: E731
                                   path="decode", num_splits=splits)
    keep = fa.kvcache_with_workspace(args(), x.q.device)

    def fn():
        a = args()  # the stream current now: the capture's inside graph_timed
        a.workspace, a.workspace_bytes = keep.data_ptr(), keep.numel()
        fa.kvcache_forward(a)
        return out
    fn.keep = keep
    return fn, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", required=True, metavar="NAME=LIB")
    ap.add_argument("--shapes", default=None, help="batch:seqlen_k:seqlen_q,... (default: the decode rows)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    builds = []
    for spec in args.lib:
        name, lib = spec.split("=", 1)
        lib, _, splits = lib.partition("@")
        builds.append((name, FlashAttn(lib), int(splits or 0)))
    rows = []
    for cell in decode_cells(args.shapes):
        batch, seqlen_k, seqlen_q = cell["batch"], cell["seqlen_k"], cell["seqlen_q"]
        x = DecodeInputs(cell, "cuda")
        names, timers, outs, calls = [], [], [], []
        for name, fa, splits in builds:
            for page in DECODE_PAGE_SIZES:
                fn, out = c_api_call(fa, x, page, splits)
                fn()
                outs.append(out.clone())
                timers.append(graph_timed(fn))
                calls.append(fn)  # its output and workspace, which the graph writes, live as long as the graph
                names.append((name, page))
        tbps = decode_tbps_beside_cudnn(cell, x, names, timers)
        ref = outs[0].float()
        first = builds[0][0]
        for (name, page), out in zip(names, outs):
            diff = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            t = tbps[(name, page)]
            row = dict(batch=batch, seqlen_k=seqlen_k, seqlen_q=seqlen_q, build=name, page_size=page, tbps=t,
                       vs_cudnn=t / tbps.get(("cudnn", 0), float("nan")), vs_contiguous=t / tbps[(name, 0)],
                       vs_first=t / tbps[(first, page)], max_rel_diff=diff)
            rows.append(row)
            print(f"{batch:4d} x {seqlen_k:6d} q {seqlen_q}  {name:8s} page {page:3d}  {t:.3f} TB/s  "
                  f"vs cuDNN {row['vs_cudnn']:.3f}  vs contiguous {row['vs_contiguous']:.3f}  "
                  f"vs {first} {row['vs_first']:.3f}  diff {diff:.1e}", flush=True)
        print(f"{batch:4d} x {seqlen_k:6d} q {seqlen_q}  cudnn {tbps.get(('cudnn', 0), float('nan')):.3f} TB/s", flush=True)
        del x, timers, calls
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), builds=[n for n, _, _ in builds],
                                                   rows=rows), indent=1))


if __name__ == "__main__":
    main()
