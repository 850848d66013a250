"""The decode kernel's ways of loading K/V side by side on the GPU: BENCHMARK.md's decode rows (bf16,
GQA 32/8, hdim 128; contiguous and paged at 16/64/256) through flash_attn_with_kvcache(path="decode"),
once with each (flashattn._C.set_decode_loads: "cp_async", 16-byte chunks by every thread; "tma", TMA
boxes of the caches' tensor maps, sm_90; "producer_cp_async", the same chunks by a producer warpgroup,
sm_90), with cuDNN (PyTorch SDPA) in the same process. Timed as bench_gpu.py's
decode part: a CUDA graph of 20 calls per implementation (the loads are fixed when the graph is
captured), replays interleaved in balanced orders, median. A tool for choosing between them, not a
record.

    python3 bench/decode_loads.py [--loads cp_async,tma,producer_cp_async] [--shapes 1:8192:1,128:2048:1] [--json OUT]
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import (DECODE_PAGE_SIZES, DecodeInputs, decode_cells, decode_tbps_beside_cudnn,  # noqa: E402
                       graph_timed)

import flashattn  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", default="cp_async,tma")
    ap.add_argument("--shapes", default=None, help="batch:seqlen_k:seqlen_q,... (default: the decode rows)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    loads = args.loads.split(",")
    rows = []
    for cell in decode_cells(args.shapes):
        batch, seqlen_k, seqlen_q = cell["batch"], cell["seqlen_k"], cell["seqlen_q"]
        x = DecodeInputs(cell, "cuda")
        names, timers, outs = [], [], []
        for kernel in loads:
            for page in DECODE_PAGE_SIZES:
                table, kc, vc = (None, x.k, x.v) if page == 0 else x.paged[page]

                def fn(kc=kc, vc=vc, table=table):
                    return flashattn.flash_attn_with_kvcache(x.q, kc, vc, cache_seqlens=x.cache_seqlens,
                                                             block_table=table, path="decode")
                flashattn._C.set_decode_loads(kernel)
                outs.append(fn())
                timers.append(graph_timed(fn))
                names.append((kernel, page))
        flashattn._C.set_decode_loads("auto")
        tbps = decode_tbps_beside_cudnn(cell, x, names, timers)
        ref = outs[0].float()
        for (kernel, page), out in zip(names, outs):
            diff = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            row = dict(batch=batch, seqlen_k=seqlen_k, seqlen_q=seqlen_q, loads=kernel, page_size=page,
                       tbps=tbps[(kernel, page)], vs_cudnn=tbps[(kernel, page)] / tbps.get(("cudnn", 0), float("nan")),
                       vs_contiguous=tbps[(kernel, page)] / tbps[(kernel, 0)],
                       vs_cp_async=tbps[(kernel, page)] / tbps.get(("cp_async", page), float("nan")), max_rel_diff=diff)
            rows.append(row)
            print(f"{batch:4d} x {seqlen_k:6d} q {seqlen_q}  {kernel:8s} page {page:3d}  {row['tbps']:.3f} TB/s  "
                  f"vs cuDNN {row['vs_cudnn']:.3f}  vs contiguous {row['vs_contiguous']:.3f}  "
                  f"vs cp.async {row['vs_cp_async']:.3f}  diff {diff:.1e}", flush=True)
        print(f"{batch:4d} x {seqlen_k:6d} q {seqlen_q}  cudnn {tbps.get(('cudnn', 0), float('nan')):.3f} TB/s", flush=True)
        del x, timers
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
