"""Where the host time of flash_attn_func goes on a GPU: cProfile over back-to-back calls of the
benchmark's overhead problem (batch 1, seqlen 128, 8 heads, hdim 64), forward and forward+backward,
beside the µs per call of SDPA's flash backend. Prints the top entries by own time.

  python python/tools/host_profile.py [--calls 300] [--top 25]
"""
import argparse
import cProfile
import pstats
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashattn import flash_attn_func


def us_per_call(fn, calls):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    q, k, v = (torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))

    def ours_fwd():
        with torch.no_grad():
            flash_attn_func(q, k, v)

    def ours_fwd_bwd():
        out = flash_attn_func(q, k, v)
        torch.autograd.grad(out, (q, k, v), out)

    def sdpa_fwd():
        with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(qt, kt, vt)

    def sdpa_fwd_bwd():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(qt, kt, vt)
        torch.autograd.grad(out, (qt, kt, vt), out)

    for name, fn in (("flashattn-py fwd", ours_fwd), ("sdpa-flash fwd", sdpa_fwd), ("flashattn-py fwd+bwd", ours_fwd_bwd),
                     ("sdpa-flash fwd+bwd", sdpa_fwd_bwd)):
        print(f"{name:24s} {us_per_call(fn, a.calls):8.1f} us/call")
    for name, fn in (("forward", ours_fwd), ("forward+backward", ours_fwd_bwd)):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.calls):
            fn()
        torch.cuda.synchronize()
        prof.disable()
        print(f"\n== cProfile, flash_attn_func {name}, {a.calls} calls (times are totals) ==")
        pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
