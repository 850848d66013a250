"""Host overhead of flash_attn_func, piece by piece, on CPU tensors (no GPU needed), or with --device
cuda on the GPU's (where the allocator, the device guard and the stream query are CUDA's).

The tiny problem of the benchmark's overhead rows (batch 1, seqlen 128, 8 heads, hdim 64). The
operators skip the library call (`_C.set_skip_library_calls`, the default here) so that only the
Python, dispatch, allocation and autograd work is timed, not the CPU kernel (milliseconds here, which
would drown the µs). Prints µs per call, best of 7 rounds.

  python python/tools/host_overhead.py [--real] [--threads 1] [--device cuda]
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
    p.add_argument("--device", default="cpu")
    p.add_argument("--lib", default=None, help="libflashattn_c.so: also the C API's rows (--device cuda)")
    args = p.parse_args()
    dev = torch.device(args.device)
    if args.lib and dev.type != "cuda":
        p.error("--lib: the C API's rows time CUDA launches; add --device cuda")
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.set_num_threads(args.threads)
    _C.set_poison_outputs(False)
    q, k, v = (torch.randn(1, 128, 8, 64, device=dev, dtype=dt) for _ in range(3))
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    dout = torch.randn_like(q)
    out, lse = torch.empty_like(q), torch.empty(1, 8, 128, device=dev)
    rows = {}
    if args.lib:
        c_api_rows(rows, args.lib, q, k, v, out, lse)
    fwd_args = (None, None, 0, 0, 0.125, False, -1, -1, 0.0, False)

    def fwd_bwd():
        o = flashattn.flash_attn_func(qg, kg, vg)
        torch.autograd.grad(o, (qg, kg, vg), dout)

    _C.set_skip_library_calls(not args.real)
    rows["flash_attn_func forward, no grad"] = us_per_call(lambda: flashattn.flash_attn_func(q, k, v))
    rows["flash_attn_func forward, inputs require grad"] = us_per_call(lambda: flashattn.flash_attn_func(qg, kg, vg))
    rows["flash_attn_func forward + autograd.grad"] = us_per_call(fwd_bwd, 1000)
    rows["  _ops.attention (the operator's C++ callable)"] = us_per_call(lambda: _ops.attention(q, k, v, *fwd_args))
    rows["  torch.ops.flashattn.fwd.default (OpOverload)"] = us_per_call(lambda: _ops.fwd(q, k, v, *fwd_args))
    rows["  torch.ops.flashattn.bwd.default (OpOverload)"] = us_per_call(
        lambda: _ops.bwd(dout, q, k, v, out, lse, *fwd_args[:-1], False))
    rows["  out + lse allocation (torch.empty)"] = us_per_call(
        lambda: (torch.empty((1, 128, 8, 64), device=dev), torch.empty((1, 8, 128), device=dev)))
    rows["  one allocation (torch.empty_like(q))"] = us_per_call(lambda: torch.empty_like(q))
    rows["  _C.attention (the fast-call entry, no Python checks)"] = us_per_call(
        lambda: _C.attention(q, k, v, *fwd_args))
    # One decode step of a GQA model (batch 8, 32 query heads over 8 kv heads of 128, 1k cached keys):
    # what an eager generation loop pays per layer and token.
    qd = torch.randn(8, 1, 32, 128, device=dev, dtype=dt)
    caches = (torch.randn(8, 1024, 8, 128, device=dev, dtype=dt), torch.randn(8, 1024, 8, 128, device=dev, dtype=dt))
    lens = torch.full((8,), 500, dtype=torch.int32, device=dev)
    kv_args = (None, None, None, None, lens, None, None, 128 ** -0.5, False, -1, -1, 0.0, True, 0, "auto", None,
               False)
    rows["flash_attn_with_kvcache, decode step"] = us_per_call(
        lambda: flashattn.flash_attn_with_kvcache(qd, *caches, cache_seqlens=lens))
    rows["  torch.ops.flashattn.kvcache.default (OpOverload)"] = us_per_call(
        lambda: torch.ops.flashattn.kvcache.default(qd, *caches, *kv_args))
    rows["  _C.kvcache (the fast-call entry, no Python checks)"] = us_per_call(lambda: _C.kvcache(qd, *caches, *kv_args))
    rows["  _check_tensors"] = us_per_call(lambda: _check_tensors(q, k, v, None, None, None))
    rows["  _pad_head_dims"] = us_per_call(lambda: _pad_head_dims(q, k, v))
    rows["  _score_options"] = us_per_call(lambda: _score_options(64, None, False, (-1, -1), 0.0))
    _C.set_skip_library_calls(False)
    rows["  fwd op, path 'nope' (checks, allocation, validation, error)"] = us_per_call(
        lambda: _try(lambda: _ops.fwd(q, k, v, *fwd_args, "nope")), 500)
    if dev.type == "cuda":
        rows["  flash_attn_func forward, no grad, library called"] = us_per_call(lambda: flashattn.flash_attn_func(q, k, v))
        rows["  torch.cuda.current_stream()"] = us_per_call(torch.cuda.current_stream)
        torch.cuda.synchronize()
    tiny = torch.randn(8, requires_grad=True, device=dev)
    ones = torch.ones(8, device=dev)
    rows["  torch.autograd.grad of 8 elements (autograd's floor)"] = us_per_call(
        lambda: torch.autograd.grad(tiny * 2, (tiny,), ones), 1000)
    for name, us in rows.items():
        print(f"{name:62s} {us:8.2f} µs")


def c_api_rows(rows, lib, q, k, v, out, lse):
    """The C API on the same problem (ctypes, preallocated outputs): a trivial call (ctypes' floor), the
    plan without a launch (fa_forward_path), the whole call with its launch; and a torch op's launch."""
    import ctypes
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    from flashattn_ctypes import FaOptions, FlashAttn
    fa = FlashAttn(lib)
    a = fa.args(q, k, v, out, lse)
    keep = fa.with_workspace(a, False, q.device)
    o = FaOptions()
    rows["C API: fa_options_init (ctypes' floor)"] = us_per_call(lambda: fa.lib.fa_options_init(ctypes.byref(o)))
    rows["C API: fa_forward_path (validation, family choice, plan)"] = us_per_call(lambda: fa.path(a))
    rows["C API: fa_forward (the call, with its launch)"] = us_per_call(lambda: fa.forward(a))
    rows["torch: q.add_(0) (one elementwise launch)"] = us_per_call(lambda: q.add_(0))
    torch.cuda.synchronize()
    del keep


def _try(fn):
    try:
        fn()
    except ValueError:
        pass


if __name__ == "__main__":
    main()
