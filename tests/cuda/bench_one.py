"""One call of flashattn and of PyTorch's flash backend (FlashAttention-2) on the same shapes, for ncu
or a quick timing: the forward, or with --backward one backward of each (the forward outside).

  python3 tests/cuda/bench_one.py --lib build/libflashattn_c.so [--hdim 128] [--seqlen 4096] [--causal] [--backward]
      [--path auto|sm90|sm80]
  ncu -k regex:"fwd_kernel|flash_fwd" -c 2 python3 tests/cuda/bench_one.py ...
  ncu -k regex:"bwd_main|flash_bwd" -c 4 python3 tests/cuda/bench_one.py --backward ...
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from flashattn_ctypes import FlashAttn  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--lib", default="build/libflashattn_c.so")
ap.add_argument("--hdim", type=int, default=128)
ap.add_argument("--seqlen", type=int, default=4096)
ap.add_argument("--causal", action="store_true")
ap.add_argument("--backward", action="store_true")
ap.add_argument("--reps", type=int, default=1)
ap.add_argument("--path", default="auto", help="this library's kernel family (flashattn::families())")
args = ap.parse_args()
fa = FlashAttn(args.lib)
s, d = args.seqlen, args.hdim
b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out = torch.empty_like(q)
lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
a = fa.args(q, k, v, out=out, lse=lse, causal=args.causal, path=args.path)
ws_fwd = fa.with_workspace(a, False, "cuda")  # noqa: F841 (the sm90 forward's tile counter)
qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
if args.backward:
    fa.forward(a)
    dout = torch.randn_like(out)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    a = fa.args(q, k, v, out=out, lse=lse, dout=dout, dq=dq, dk=dk, dv=dv, causal=args.causal, path=args.path)
    ws = fa.with_workspace(a, True, "cuda")  # noqa: F841
    qt, kt, vt = (x.detach().requires_grad_() for x in (qt, kt, vt))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)
for _ in range(args.reps):
    if args.backward:
        fa.backward(a)
        torch.autograd.grad(o, (qt, kt, vt), dout.transpose(1, 2), retain_graph=True)
    else:
        fa.forward(a)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)
torch.cuda.synchronize()
print("ok")
