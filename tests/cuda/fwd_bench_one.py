"""One forward call of flashattn and of PyTorch's flash backend on the same shapes (for ncu / timing).

  python3 tests/cuda/fwd_bench_one.py --lib build/libflashattn_c.so [--hdim 128] [--seqlen 4096] [--causal]
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
ap.add_argument("--reps", type=int, default=1)
args = ap.parse_args()
fa = FlashAttn(args.lib)
s, d = args.seqlen, args.hdim
b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out = torch.empty_like(q)
lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
a = fa.args(q, k, v, out=out, lse=lse, causal=args.causal)
qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
for _ in range(args.reps):
    fa.forward(a)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)
torch.cuda.synchronize()
print("ok")
