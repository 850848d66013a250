"""Where a short forward's time goes before its kernel, on the GPU host: for one grid cell, the host time
each way takes to return (perf_counter, the GPU idle before each call) and the benchmark's time (CUDA
events around the call, GPU idle before), interleaved, medians:
  c-api          fa_forward through ctypes, outputs and workspace preallocated
  py             flashattn.flash_attn_func
  py-no-lib      the same with the library call skipped (_C.set_skip_library_calls): Python, dispatch, allocation
  alloc          torch.empty_like(q): one allocation from the caching allocator
  sdpa-cudnn     PyTorch SDPA, cuDNN backend

  python python/tools/forward_host.py --lib build/libflashattn_c.so [--seqlen 512 --hdim 64 --causal]
"""
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from flashattn import _C

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from flashattn_ctypes import FlashAttn  # noqa: E402
from gap_timing import ForwardCell, cell_args, timed  # noqa: E402


def host_us(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt * 1e6


def main():
    a = cell_args(__doc__, seqlen=512, hdim=128, reps=40, profile=False)
    s, d, b, h = a.seqlen, a.hdim, a.batch, a.heads
    fa = FlashAttn(a.lib)
    cell = ForwardCell(a, fa)
    q, k, v, args, qt, kt, vt = cell.q, cell.k, cell.v, cell.args, cell.qt, cell.kt, cell.vt

    def skipped():
        _C.set_skip_library_calls(True)
        try:
            flashattn.flash_attn_func(q, k, v, causal=a.causal)
        finally:
            _C.set_skip_library_calls(False)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=a.causal)

    ways = {"c-api": lambda: fa.forward(args), "py": lambda: flashattn.flash_attn_func(q, k, v, causal=a.causal),
            "py-no-lib": skipped, "alloc": lambda: torch.empty_like(q), "sdpa-cudnn": cudnn}
    for fn in ways.values():
        for _ in range(5):
            fn()
    host = {n: [] for n in ways}
    gpu = {n: [] for n in ways}
    names = list(ways)
    for r in range(a.reps):
        order = names if r % 2 == 0 else names[::-1]
        for n in order:
            host[n].append(host_us(ways[n]))
            gpu[n].append(timed(ways[n]) * 1e3)
    print(f"seqlen {s} hdim {d} batch {b} heads {h} causal {a.causal}: median of {a.reps}")
    for n in names:
        print(f"  {n:11s} host {statistics.median(host[n]):8.1f} us   events {statistics.median(gpu[n]):8.1f} us")


if __name__ == "__main__":
    main()
