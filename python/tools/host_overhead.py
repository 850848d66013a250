"""Host overhead of flash_attn_func, piece by piece, on CPU tensors (no GPU needed).

The tiny problem of the benchmark's overhead rows (batch 1, seqlen 128, 8 heads, hdim 64). The
operators skip the library call (`_C.set_skip_library_calls`, the default here) so that only the
Python, dispatch, allocation and autograd work is timed, not the CPU kernel (milliseconds here, which
would drown the µs). Prints µs per call, best of 7 rounds.

  python python/tools/host_overhead.py [--real] [--threads 1]
"""
import argparse
import time

import torch

import flashattn
from flashattn import _C, _ops
from flashattn.interface import _check_tensors, _pad_head_dims, _score_options


def us_per_call(fn, n=2000, rounds=7):
    for _ in range(n // 10):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--real", action="store_true", help="time the library calls too (CPU kernels run)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    _C.set_poison_outputs(False)
    q, k, v = (torch.randn(1, 128, 8, 64) for _ in range(3))
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    dout = torch.randn_like(q)
    out, lse = torch.empty_like(q), torch.empty(1, 8, 128)
    fwd_args = (None, None, 0, 0, 0.125, False, -1, -1, 0.0, False)

    def fwd_bwd():
        o = flashattn.flash_attn_func(qg, kg, vg)
        torch.autograd.grad(o, (qg, kg, vg), dout)

    rows = {}
    _C.set_skip_library_calls(not args.real)
    rows["flash_attn_func forward, no grad"] = us_per_call(lambda: flashattn.flash_attn_func(q, k, v))
    rows["flash_attn_func forward, inputs require grad"] = us_per_call(lambda: flashattn.flash_attn_func(qg, kg, vg))
    rows["flash_attn_func forward + autograd.grad"] = us_per_call(fwd_bwd, 1000)
    rows["  _ops.attention (the operator's C++ callable)"] = us_per_call(lambda: _ops.attention(q, k, v, *fwd_args))
    rows["  torch.ops.flashattn.fwd.default (OpOverload)"] = us_per_call(lambda: _ops.fwd(q, k, v, *fwd_args))
    rows["  torch.ops.flashattn.bwd.default (OpOverload)"] = us_per_call(
        lambda: _ops.bwd(dout, q, k, v, out, lse, *fwd_args[:-1], False))
    rows["  out + lse allocation (torch.empty)"] = us_per_call(
        lambda: (torch.empty((1, 128, 8, 64)), torch.empty((1, 8, 128))))
    rows["  _check_tensors"] = us_per_call(lambda: _check_tensors(q, k, v, None, None, None))
    rows["  _pad_head_dims"] = us_per_call(lambda: _pad_head_dims(q, k, v))
    rows["  _score_options"] = us_per_call(lambda: _score_options(64, None, False, (-1, -1), 0.0))
    _C.set_skip_library_calls(False)
    rows["  fwd op, path 'nope' (checks, allocation, validation, error)"] = us_per_call(
        lambda: _try(lambda: _ops.fwd(q, k, v, *fwd_args, "nope")), 500)
    tiny = torch.randn(8, requires_grad=True)
    ones = torch.ones(8)
    rows["  torch.autograd.grad of 8 elements (autograd's floor)"] = us_per_call(
        lambda: torch.autograd.grad(tiny * 2, (tiny,), ones), 1000)
    for name, us in rows.items():
        print(f"{name:62s} {us:8.2f} µs")


def _try(fn):
    try:
        fn()
    except ValueError:
        pass


if __name__ == "__main__":
    main()
