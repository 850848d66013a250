"""Host overhead of flash_attn_func, piece by piece, on CPU tensors (no GPU needed).

The tiny problem of the benchmark's overhead rows (batch 1, seqlen 128, 8 heads, hdim 64). The C
calls are replaced by no-ops (--noop, the default) so that only the Python and binding work is
timed, not the CPU kernel (milliseconds here, which would drown the µs). Prints µs per call, best
of 7 rounds.

  python python/tools/host_overhead.py [--real] [--threads 1]
"""
import argparse
import time

import torch

import flashattn
from flashattn import _C, _ops
from flashattn.interface import _pad_head_dim


class NoopC:
    """_C with forward and backward doing nothing (every other name is the real module's)."""

    def __getattr__(self, name):
        return getattr(_C, name)

    @staticmethod
    def forward(*args, **kwargs):
        return None

    @staticmethod
    def backward(*args, **kwargs):
        return None


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
    p.add_argument("--real", action="store_true", help="time the real C calls too (CPU kernels run)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    q, k, v = (torch.randn(1, 128, 8, 64) for _ in range(3))
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    dout = torch.randn_like(q)
    out, lse = torch.empty_like(q), torch.empty(1, 8, 128)
    views = [_ops._view(n, t) for n, t in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse))]

    def fwd_bwd():
        o = flashattn.flash_attn_func(qg, kg, vg)
        torch.autograd.grad(o, (qg, kg, vg), dout)

    rows = {}
    if not args.real:
        _ops._C = NoopC()
    rows["flash_attn_func forward, no grad"] = us_per_call(lambda: flashattn.flash_attn_func(q, k, v))
    rows["flash_attn_func forward, inputs require grad"] = us_per_call(lambda: flashattn.flash_attn_func(qg, kg, vg))
    rows["flash_attn_func forward + autograd.grad"] = us_per_call(fwd_bwd, 1000)
    rows["  torch.ops.flashattn.fwd (custom op, no grad)"] = us_per_call(
        lambda: torch.ops.flashattn.fwd(q, k, v, None, None, 0, 0, 0.125, False, -1, -1, 0.0, False))
    rows["  run_forward (no autograd, no dispatch)"] = us_per_call(
        lambda: _ops.run_forward(q, k, v, None, None, 0, 0, 0.125, False, -1, -1, 0.0))
    rows["  _check_inputs"] = us_per_call(lambda: _ops._check_inputs(q, k, v, None, None))
    rows["  _usable x3"] = us_per_call(lambda: (_ops._usable(q), _ops._usable(k), _ops._usable(v)))
    rows["  _view x5"] = us_per_call(lambda: [_ops._view("q", t) for t in (q, k, v, out, lse)])
    rows["  out + lse allocation"] = us_per_call(
        lambda: (_ops._empty((1, 128, 8, 64), q.dtype, q), _ops._empty((1, 8, 128), torch.float32, q)))
    rows["  _pad_head_dim x3"] = us_per_call(lambda: (_pad_head_dim(q), _pad_head_dim(k), _pad_head_dim(v)))
    bviews = views + [_ops._view("dout", dout), _ops._view("dq", q), _ops._view("dk", k), _ops._view("dv", v)]
    rows["  _C.forward, path 'nope' (binding, validation)"] = us_per_call(
        lambda: _C.forward(*views, causal=False, path="nope", stream=0))
    rows["  _C.backward, path 'nope' (binding, validation)"] = us_per_call(
        lambda: _C.backward(*bviews, False, causal=False, path="nope", stream=0))
    tiny = torch.randn(8, requires_grad=True)
    ones = torch.ones(8)
    rows["  torch.autograd.grad of 8 elements (autograd's floor)"] = us_per_call(
        lambda: torch.autograd.grad(tiny * 2, (tiny,), ones), 1000)
    for name, us in rows.items():
        print(f"{name:52s} {us:8.2f} µs")


if __name__ == "__main__":
    main()
