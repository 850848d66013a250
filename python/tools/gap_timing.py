"""What backward_gap.py and forward_gap.py share: the cell's arguments, one call between CUDA events
with the GPU idle before it (as the benchmark times), the ways of a cell timed interleaved, and the
profile of a few calls of one way."""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from bench_gpu import balanced_orders, rounded_reps  # noqa: E402


def cell_args(doc, seqlen, hdim, reps, lib=True, profile=True, placement=False, packed=False, path=False):
    """--seqlen, --hdim, --causal, --reps, and --lib, --profile, --placement, --packed and --path where asked for; the grid's batch =
    16k / seqlen and heads = 2048 / hdim unless --batch / --heads say otherwise; --heads-kv for GQA
    (default: heads)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if lib:
        p.add_argument("--lib", required=True, help="libflashattn_c.so")
    p.add_argument("--seqlen", type=int, default=seqlen)
    p.add_argument("--hdim", type=int, default=hdim)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--reps", type=int, default=reps)
    if profile:
        p.add_argument("--profile", action="store_true",
                       help="also profile 3 calls of each way: launch delay, kernels, CUDA API calls")
    if placement:
        p.add_argument("--placement", action="store_true", help="also the buffer-placement ways")
    if packed:
        p.add_argument("--packed", action="store_true", help="also the qkv-packed ways")
    if path:
        p.add_argument("--path", default="auto", help="kernel family of our calls (auto, sm80, sm90, ...)")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--heads", type=int, default=0)
    p.add_argument("--heads-kv", type=int, default=0)
    a = p.parse_args()
    a.batch = a.batch or 16384 // a.seqlen
    a.heads = a.heads or 2048 // a.hdim
    a.heads_kv = a.heads_kv or a.heads
    return a


def timed(fn):
    """Milliseconds of one call of fn between CUDA events, the GPU idle before it."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b)


def interleaved_medians(ways, reps):
    """Each way once to warm up, then reps rounds in bench_gpu's balanced orders: the median ms per way."""
    for fn in ways.values():
        fn()
    times = {n: [] for n in ways}
    names, orders = list(ways), balanced_orders(len(ways))
    for r in range(rounded_reps(reps, len(orders))):
        for n in (names[i] for i in orders[r % len(orders)]):
            times[n].append(timed(ways[n]))
    return {n: sorted(t)[len(t) // 2] for n, t in times.items()}


def report_interleaved(ways, reps, flops, profile=False):
    """interleaved_medians, printed per way (µs and TFLOP/s for `flops` per call) and, with profile,
    each way's profile_way."""
    for n, ms in interleaved_medians(ways, reps).items():
        print(f"{n:14s} {ms * 1000:10.1f} us  {flops / ms / 1e9:7.1f} TFLOP/s")
    if profile:
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
    # The CPU ranges of the calls (record_function also leaves a GPU-side range of the same name).
    marks = sorted((e for e in events if e.name.startswith("call") and e.device_type == torch.autograd.DeviceType.CPU),
                   key=lambda e: e.time_range.start)
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


class ForwardCell:
    """One forward cell's inputs on the GPU (bf16, q (batch, seqlen, heads, hdim), k and v with heads_kv),
    their (b, h, s, d) views for SDPA, and the C API's arguments on preallocated out, lse and workspace
    (kept alive here)."""

    def __init__(self, a, fa):
        s, d, b, h = a.seqlen, a.hdim, a.batch, a.heads
        self.q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        self.k, self.v = (torch.randn(b, s, a.heads_kv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        self.out = torch.empty_like(self.q)
        self.lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        self.args = fa.args(self.q, self.k, self.v, self.out, self.lse, causal=a.causal)
        self.keep = fa.with_workspace(self.args, False, self.q.device)  # the sm90 tile counter
        self.qt, self.kt, self.vt = (x.transpose(1, 2) for x in (self.q, self.k, self.v))
