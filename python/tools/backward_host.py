"""Host time of one backward on the GPU machine: how long `torch.autograd.grad` takes to return (all
kernels enqueued, the GPU idle before the call), ours against SDPA's flash backend, and ours with
pieces taken away, to find where the ~50 µs by which our first backward kernel starts later than
FlashAttention-2's goes (docs/python.md).

Ways (median wall-clock µs of the call on the CPU, synchronized before each; no CUDA events):
  autograd            torch.autograd.grad of flash_attn_func's output (what the benchmark times)
  autograd, no lib    the same with the library call skipped (_C.set_skip_library_calls): torch's
                      engine, our node, the operator's checks and allocations, no plan and no launch
  op                  torch.ops.flashattn.bwd called directly (no engine)
  op, no lib          the same, library call skipped
  sdpa-flash          torch.autograd.grad of SDPA's output, flash backend
Each also timed to the first kernel's start is not possible without a profiler; the host time to
return bounds it from above.

  python python/tools/backward_host.py [--seqlen 1024 --hdim 128 --causal] [--reps 50]
"""
import os
import statistics
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from flashattn import _C, _ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gap_timing import cell_args  # noqa: E402


def host_us(fn, reps):
    for _ in range(3):
        fn()
    t = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        t.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(t)


def main():
    a = cell_args(__doc__, seqlen=1024, hdim=128, reps=50, lib=False, profile=False)
    s, d, b, h = a.seqlen, a.hdim, a.batch, a.heads
    _C.set_poison_outputs(False)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    o = flashattn.flash_attn_func(qg, kg, vg, causal=a.causal)
    out, lse = _ops.attention(q, k, v, None, None, 0, 0, d ** -0.5, a.causal, -1, 0 if a.causal else -1, 0.0, False,
                              "auto")
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o_sdpa = torch.nn.functional.scaled_dot_product_attention(
            qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2), is_causal=a.causal)
    do_t = do.transpose(1, 2)

    def op():
        _ops.bwd(do, q, k, v, out, lse, None, None, 0, 0, d ** -0.5, a.causal, -1, 0 if a.causal else -1, 0.0, False)

    def grad():
        torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)

    def skipped(fn):
        def run():
            _C.set_skip_library_calls(True)
            try:
                fn()
            finally:
                _C.set_skip_library_calls(False)
        return run

    ways = {
        "autograd": grad,
        "autograd, no lib": skipped(grad),
        "op": op,
        "op, no lib": skipped(op),
        "sdpa-flash": lambda: torch.autograd.grad(o_sdpa, (qg, kg, vg), do_t, retain_graph=True),
    }
    print(f"batch {b}, seqlen {s}, heads {h}, hdim {d}, causal {a.causal}: host µs per call (median of {a.reps})")
    for name, fn in ways.items():
        print(f"  {name:18s} {host_us(fn, a.reps):8.1f}")


if __name__ == "__main__":
    main()
