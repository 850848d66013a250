"""Where a thread block's time goes in the sm80 backward: per-block %globaltimer stamps from a
diagnostic build (scripts/bwd_block_trace.patch, never the shipped library).

The patch makes thread 0 of every block of the main kernel (and of the split tail's parts) write
  e0 the block starts                e1 its first step's tiles have landed (the first barrier)
  e2 its steps are done              e3 its epilogue's stores are issued
with its SM and step count. Per cell this prints the medians of the phases (prologue e1-e0, steps
e2-e1 and per step, epilogue e3-e2), the gap on an SM between one block's e3 and the next block's e0
there, and the kernel's span split into the sum over SMs of those pieces: how much of an SM's time
is not the steps (what a persistent or stream-K schedule could win back).

  VARIANTS="trace=scripts/bwd_block_trace.patch" scripts/sm90_prebuild.sh     (here)
  python3 bench/bwd_block_trace.py $B/variants/trace.so                       (on the GPU machine)
"""
import ctypes
import os
import statistics
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashattn_ctypes import FlashAttn  # noqa: E402

SLOTS, EVENTS = 8192, 8
CELLS = [(1024, 256, False), (4096, 256, False), (1024, 128, False), (512, 128, True), (4096, 64, False)]


def trace_cell(fa, lib, seqlen, hdim, causal, reps=3):
    b, h = 16384 // seqlen, 2048 // hdim
    q, k, v, do = (torch.randn(b, seqlen, h, hdim, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out = torch.empty_like(q)
    lse = torch.empty(b, h, seqlen, device="cuda", dtype=torch.float32)
    fwd = fa.args(q, k, v, out, lse, causal=causal, path="sm80")
    keep_f = fa.with_workspace(fwd, False, q.device)  # noqa: F841
    fa.forward(fwd)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = fa.args(q, k, v, out, lse, do, dq, dk, dv, causal=causal, path="sm80")
    keep = fa.with_workspace(args, True, q.device)  # noqa: F841
    host = (ctypes.c_longlong * (SLOTS * EVENTS))()
    rows = []
    for r in range(reps + 1):
        fa.backward(args)
        lib.fa_sm80_bwd_trace_read(host, 1)
        if r > 0:  # the first call warms up
            rows.append([[host[s * EVENTS + e] for e in range(EVENTS)] for s in range(SLOTS)])
    report(seqlen, hdim, causal, rows)


def report(seqlen, hdim, causal, runs):
    pro, steps, per_step, epi, gaps, idle_share, spans, nblocks, ntail = [], [], [], [], [], [], [], [], []
    for rows in runs:
        blocks = [r for r in rows if r[0] and r[3]]
        main = [r for i, r in enumerate(rows) if i < 4096 and r[0] and r[3]]
        nblocks.append(len(main))
        ntail.append(len(blocks) - len(main))
        for r in main:
            pro.append(r[1] - r[0] if r[1] else float("nan"))
            steps.append(r[2] - r[1] if r[1] else 0)
            if r[1] and r[7] > 0:
                per_step.append((r[2] - r[1]) / r[7])
            epi.append(r[3] - r[2])
        first_start = min(r[0] for r in blocks)
        last_end = max(r[3] for r in blocks)
        spans.append(last_end - first_start)
        by_sm = defaultdict(list)
        for r in blocks:
            by_sm[r[6]].append(r)
        busy_steps = 0
        for sm, rs in by_sm.items():
            rs.sort(key=lambda r: r[0])
            for a, c in zip(rs, rs[1:]):
                gaps.append(c[0] - a[3])
            busy_steps += sum(r[2] - r[1] for r in rs if r[1])
        idle_share.append(1 - busy_steps / (len(by_sm) * (last_end - first_start)))

    def med(x):
        x = [v for v in x if v == v]
        return statistics.median(x) / 1000 if x else float("nan")
    print(f"seqlen {seqlen:5d} hdim {hdim:3d} {'causal' if causal else 'full  '}: main blocks {nblocks[0]}, "
          f"tail parts {ntail[0]}, span {statistics.median(spans) / 1000:8.1f} us; per block (median, us): "
          f"prologue {med(pro):6.2f}, steps {med(steps):7.2f} ({med(per_step):5.2f}/step), epilogue {med(epi):5.2f}, "
          f"gap to the next block on the SM {med(gaps):5.2f} (p90 "
          f"{sorted(gaps)[int(0.9 * len(gaps))] / 1000 if gaps else float('nan'):5.2f}); "
          f"share of SM time not in steps {statistics.median(idle_share):5.3f}")


def main():
    path = sys.argv[1]
    fa = FlashAttn(path)
    lib = ctypes.CDLL(path)
    lib.fa_sm80_bwd_trace_read.argtypes = [ctypes.POINTER(ctypes.c_longlong), ctypes.c_int]
    print(torch.cuda.get_device_name())
    for cell in CELLS:
        trace_cell(fa, lib, *cell)


if __name__ == "__main__":
    main()
