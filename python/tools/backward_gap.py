"""Where the backward through flash_attn_func loses to the C API on a long sequence (2-5 % at 16k
in the 2026-12-01 grid, far more than its host time): one cell, timed four ways in one process,
interleaved, CUDA events around each call (GPU idle before, as the benchmark):
  c-api         fa_backward through ctypes, workspace preallocated
  c-api+alloc   the same with dq, dk, dv and the workspace allocated per call (torch.empty)
  bwd-op        torch.ops.flashattn.bwd called directly (the operator without autograd)
  autograd      torch.autograd.grad of flash_attn_func's output (what the benchmark's flashattn-py times)
  sdpa-flash    torch.autograd.grad of PyTorch's SDPA output, flash backend (the benchmark's torch-flash)

  python python/tools/backward_gap.py --lib build/libflashattn_c.so [--seqlen 16384 --hdim 128 --causal]
"""
import argparse
import os
import sys

import torch

import flashattn
from flashattn import _ops

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from flashattn_ctypes import FlashAttn  # noqa: E402


def timed(fn):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", required=True)
    p.add_argument("--seqlen", type=int, default=16384)
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--profile", action="store_true",
                   help="also profile 3 calls of each way: launch delay, kernels, CUDA API calls")
    a = p.parse_args()
    s, d = a.seqlen, a.hdim
    b, h = 16384 // s, 2048 // d
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    fa = FlashAttn(a.lib)
    out = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    fa.forward(fa.args(q, k, v, out, lse, causal=a.causal))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = fa.args(q, k, v, out, lse, do, dq, dk, dv, causal=a.causal)
    keep = fa.with_workspace(args, True, q.device)

    def c_api_alloc():
        g = [torch.empty_like(t) for t in (q, k, v)]
        x = fa.args(q, k, v, out, lse, do, *g, causal=a.causal)
        ws = fa.with_workspace(x, True, q.device)
        fa.backward(x)
        return ws

    scale = d ** -0.5
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    o = flashattn.flash_attn_func(qg, kg, vg, causal=a.causal)
    # PyTorch's FlashAttention-2 through the same autograd call: the engine's own cost, paid by both.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o_sdpa = torch.nn.functional.scaled_dot_product_attention(
            qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2), is_causal=a.causal)
    do_t = do.transpose(1, 2)
    ways = {
        "c-api": lambda: fa.backward(args),
        "c-api+alloc": c_api_alloc,
        "bwd-op": lambda: _ops.bwd(do, q, k, v, out, lse, None, None, 0, 0, scale, a.causal, -1,
                                   0 if a.causal else -1, 0.0, False),
        "autograd": lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True),
        "sdpa-flash": lambda: torch.autograd.grad(o_sdpa, (qg, kg, vg), do_t, retain_graph=True),
    }
    for fn in ways.values():
        fn()
    times = {n: [] for n in ways}
    for r in range(a.reps):
        for n in (list(ways) if r % 2 == 0 else reversed(list(ways))):
            times[n].append(timed(ways[n]))
    flops = 2.5 * 4 * b * h * s * s * d / (2 if a.causal else 1)
    for n, t in times.items():
        m = sorted(t)[len(t) // 2]
        print(f"{n:14s} {m:8.3f} ms  {flops / m / 1e9:7.1f} TFLOP/s")

    if a.profile:
        for n, fn in ways.items():
            profile_way(n, fn)


def profile_way(name, fn, calls=3):
    """Per call: from the call's start (CPU) to its first kernel's start and to its last kernel's end
    (Kineto puts both clocks on one time base); the kernels and CUDA runtime calls, averaged."""
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            torch.cuda.synchronize()
            with record_function(f"call{i}"):
                fn()
            torch.cuda.synchronize()
    events = prof.events()
    marks = sorted((e for e in events if e.name.startswith("call")), key=lambda e: e.time_range.start)
    kernels = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    print(f"-- {name}")
    for i, m in enumerate(marks):
        end = marks[i + 1].time_range.start if i + 1 < len(marks) else float("inf")
        ks = [k for k in kernels if m.time_range.start <= k.time_range.start < end]
        if ks:
            print(f"  call {i}: first kernel +{ks[0].time_range.start - m.time_range.start:8.1f} us, last end "
                  f"+{ks[-1].time_range.end - m.time_range.start:8.1f} us, {len(ks)} kernels, cpu "
                  f"{m.time_range.end - m.time_range.start:8.1f} us")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=8, max_name_column_width=60))


if __name__ == "__main__":
    main()
