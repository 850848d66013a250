"""Where the backward through flash_attn_func loses to the C API on a long sequence (2-5 % at 16k
in the 2026-12-01 grid, far more than its host time): one cell, timed four ways in one process,
interleaved, CUDA events around each call (GPU idle before, as the benchmark):
  c-api         fa_backward through ctypes, workspace preallocated
  c-api+alloc   the same with dq, dk, dv and the workspace allocated per call (torch.empty)
  bwd-op        torch.ops.flashattn.bwd called directly (the operator without autograd)
  autograd      torch.autograd.grad of flash_attn_func's output (what the benchmark's flashattn-py times)
  autograd-early  the same with dq, dk, dv allocated before the library call (_C.set_late_gradients(False)),
                as before 2026-12-07: autograd-early - autograd is what allocating them after the first launch saves
  sdpa-flash    torch.autograd.grad of PyTorch's SDPA output, flash backend (the benchmark's torch-flash)
  fa2-direct    PyTorch's FlashAttention-2 backward called directly (aten._flash_attention_backward:
                no autograd engine), so that sdpa-flash - fa2-direct is the engine's cost for it as
                autograd - bwd-op is for ours
With --placement, which buffer's placement moves the kernels' own time (c-api against c-api+alloc):
  c-api+ws      the C API with the workspace allocated per call, dq/dk/dv reused
  c-api+outs    the C API with dq/dk/dv allocated per call, the workspace reused
  c-api-again   the C API on a second set of buffers allocated once, after everything else (is it
                where the buffers lie, or that they are allocated per call?)
With --packed (MHA cells), what the packed form's one gradient tensor saves:
  qkvpacked     torch.autograd.grad of flash_attn_qkvpacked_func's output (the backward writes dqkv)
  qkv-unbind    the same through qkv.unbind(2) and flash_attn_func (autograd stacks dq, dk, dv: the
                packed form before 2026-12-05)

  python python/tools/backward_gap.py --lib build/libflashattn_c.so [--seqlen 16384 --hdim 128 --causal --path sm80]
  GQA: --seqlen 16384 --batch 2 --heads 32 --heads-kv 8 --causal
"""
import os
import sys

import torch

import flashattn
from flashattn import _C, _ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from flashattn_ctypes import FlashAttn  # noqa: E402
from gap_timing import cell_args, report_interleaved  # noqa: E402


def main():
    a = cell_args(__doc__, seqlen=16384, hdim=128, reps=20, placement=True, packed=True, path=True)
    s, d, b, h, hk = a.seqlen, a.hdim, a.batch, a.heads, a.heads_kv
    q, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    fa = FlashAttn(a.lib)
    out = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    fa.forward(fa.args(q, k, v, out, lse, causal=a.causal, path=a.path))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = fa.args(q, k, v, out, lse, do, dq, dk, dv, causal=a.causal, path=a.path)
    keep = fa.with_workspace(args, True, q.device)

    def c_api_allocating(outputs, workspace):
        """The C API with dq/dk/dv (outputs) and/or the workspace allocated per call, the rest reused."""
        def call():
            g = [torch.empty_like(t) for t in (q, k, v)] if outputs else [dq, dk, dv]
            x = fa.args(q, k, v, out, lse, do, *g, causal=a.causal, path=a.path)
            if workspace:
                ws = fa.with_workspace(x, True, q.device)
            else:
                ws, (x.workspace, x.workspace_bytes) = None, (args.workspace, args.workspace_bytes)
            fa.backward(x)
            return g, ws
        return call

    def early_gradients(call):
        """The call with the backward's gradients allocated before the library call."""
        def early():
            _C.set_late_gradients(False)
            try:
                return call()
            finally:
                _C.set_late_gradients(True)
        return early

    scale = d ** -0.5
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    o = flashattn.flash_attn_func(qg, kg, vg, causal=a.causal, path=a.path)
    # PyTorch's FlashAttention-2 through the same autograd call: the engine's own cost, paid by both.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o_sdpa = torch.nn.functional.scaled_dot_product_attention(
            qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2), is_causal=a.causal, enable_gqa=hk != h)
    do_t = do.transpose(1, 2)
    o2, lse2, rng, unused, _ = torch.ops.aten._flash_attention_forward(q, k, v, None, None, s, s, 0.0, a.causal, False)
    ways = {
        "c-api": lambda: fa.backward(args),
        "c-api+alloc": c_api_allocating(outputs=True, workspace=True),
        "bwd-op": lambda: _ops.bwd(do, q, k, v, out, lse, None, None, 0, 0, scale, a.causal, -1,
                                   0 if a.causal else -1, 0.0, False, a.path),
        "autograd": lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True),
        "autograd-early": early_gradients(lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)),
        "sdpa-flash": lambda: torch.autograd.grad(o_sdpa, (qg, kg, vg), do_t, retain_graph=True),
        "fa2-direct": lambda: torch.ops.aten._flash_attention_backward(do, q, k, v, o2, lse2, None, None, s, s, 0.0,
                                                                       a.causal, rng, unused),
    }
    if a.placement:
        again = [torch.empty_like(t) for t in (q, k, v)]
        args_again = fa.args(q, k, v, out, lse, do, *again, causal=a.causal, path=a.path)
        keep_again = fa.with_workspace(args_again, True, q.device)  # noqa: F841 -- alive while the ways run
        ways.update({"c-api+ws": c_api_allocating(outputs=False, workspace=True),
                     "c-api+outs": c_api_allocating(outputs=True, workspace=False),
                     "c-api-again": lambda: fa.backward(args_again)})
    if a.packed:
        if hk != h:
            raise SystemExit("backward_gap.py: --packed times qkv-packed MHA: leave --heads-kv out")
        qkv = torch.stack((q, k, v), dim=2).requires_grad_()
        o_packed = flashattn.flash_attn_qkvpacked_func(qkv, causal=a.causal, path=a.path)
        o_unbind = flashattn.flash_attn_func(*qkv.unbind(2), causal=a.causal, path=a.path)
        ways.update({"qkvpacked": lambda: torch.autograd.grad(o_packed, (qkv,), do, retain_graph=True),
                     "qkv-unbind": lambda: torch.autograd.grad(o_unbind, (qkv,), do, retain_graph=True)})
    report_interleaved(ways, a.reps, 2.5 * 4 * b * h * s * s * d / (2 if a.causal else 1), a.profile)


if __name__ == "__main__":
    main()
