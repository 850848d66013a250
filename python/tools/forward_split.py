"""Where the benchmark's time of one forward goes, way by way: the CUDA-event time (GPU idle before the
call, as bench_gpu.py times it) split into the launch delay (from the call's start on the CPU to its
first kernel's start on the GPU) and the attention kernel's own duration (the call's longest kernel), from
torch.profiler over the same interleaved calls. Ways:
  c-api          fa_forward through ctypes, out, lse and workspace preallocated (the benchmark's flashattn)
  c-api-no-lse   the same without the LSE (what flash_attn_func asks for outside autograd)
  c-api-fresh    out, lse and workspace allocated per call by torch.empty, the arguments built per call
  py             flashattn.flash_attn_func (the benchmark's flashattn-py)
  py-lse         flash_attn_func(..., return_attn_probs=True): the LSE written too
  sdpa-cudnn     PyTorch SDPA, cuDNN backend

  python python/tools/forward_split.py --lib build/libflashattn_c.so [--seqlen 2048 --hdim 128 --causal]
"""
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from bench_gpu import balanced_orders, rounded_reps  # noqa: E402
from flashattn_ctypes import FlashAttn  # noqa: E402
from gap_timing import ForwardCell, cell_args, interleaved_medians  # noqa: E402


def make_ways(a, fa):
    cell = ForwardCell(a, fa)
    q, k, v, qt, kt, vt = cell.q, cell.k, cell.v, cell.qt, cell.kt, cell.vt
    b, h, s = a.batch, a.heads, a.seqlen
    no_lse = fa.args(q, k, v, cell.out, None, causal=a.causal)
    keep = [cell, fa.with_workspace(no_lse, False, q.device)]

    def fresh():
        o, m = torch.empty_like(q), torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        args = fa.args(q, k, v, o, m, causal=a.causal)
        ws = fa.with_workspace(args, False, q.device)
        fa.forward(args)
        return o, m, ws

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=a.causal, enable_gqa=a.heads_kv != h)

    ways = {
        "c-api": lambda: fa.forward(cell.args),
        "c-api-no-lse": lambda: fa.forward(no_lse),
        "c-api-fresh": fresh,
        "py": lambda: flashattn.flash_attn_func(q, k, v, causal=a.causal),
        "py-lse": lambda: flashattn.flash_attn_func(q, k, v, causal=a.causal, return_attn_probs=True),
        "sdpa-cudnn": cudnn,
    }
    return ways, keep


def profiled_split(ways, reps):
    """Per way, medians over reps interleaved calls: launch delay and the longest kernel's duration (µs)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    names, orders = list(ways), balanced_orders(len(ways))
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for r in range(rounded_reps(reps, len(orders))):
            for n in (names[i] for i in orders[r % len(orders)]):
                torch.cuda.synchronize()
                with record_function(f"way:{n}"):
                    ways[n]()
                torch.cuda.synchronize()
    events = prof.events()
    marks = sorted((e for e in events if e.name.startswith("way:") and e.device_type == torch.autograd.DeviceType.CPU),
                   key=lambda e: e.time_range.start)
    kernels = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CUDA
                      and not e.name.startswith("way:")), key=lambda e: e.time_range.start)
    delay, kernel = {n: [] for n in ways}, {n: [] for n in ways}
    for i, m in enumerate(marks):
        end = marks[i + 1].time_range.start if i + 1 < len(marks) else float("inf")
        ks = [k for k in kernels if m.time_range.start <= k.time_range.start < end]
        if ks:
            n = m.name[4:]
            delay[n].append(ks[0].time_range.start - m.time_range.start)
            kernel[n].append(max(k.time_range.end - k.time_range.start for k in ks))
    return ({n: statistics.median(t) for n, t in delay.items() if t},
            {n: statistics.median(t) for n, t in kernel.items() if t})


def main():
    a = cell_args(__doc__, seqlen=2048, hdim=128, reps=30, profile=False)
    ways, keep = make_ways(a, FlashAttn(a.lib))
    ev = {n: ms * 1e3 for n, ms in interleaved_medians(ways, a.reps).items()}
    delay, kernel = profiled_split(ways, a.reps)
    print(f"seqlen {a.seqlen} hdim {a.hdim} batch {a.batch} heads {a.heads}/{a.heads_kv} causal {a.causal}: "
          f"medians of {a.reps}, us")
    print(f"  {'way':13s} {'events':>9s} {'delay':>8s} {'kernel':>9s}")
    for n in ways:
        print(f"  {n:13s} {ev[n]:9.1f} {delay.get(n, float('nan')):8.1f} {kernel.get(n, float('nan')):9.1f}")
    del keep


if __name__ == "__main__":
    main()
