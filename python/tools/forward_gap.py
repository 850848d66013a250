"""Where a short forward through flash_attn_func loses to the C API (the sm90 grid's 512-1k cells:
C API 1.04-1.18x cuDNN, flash_attn_func 0.94-1.0x): one cell, timed four ways in one process,
interleaved, CUDA events around each call (GPU idle before, as the benchmark):
  c-api         fa_forward through ctypes, outputs and workspace preallocated
  py            flashattn.flash_attn_func (what the benchmark's flashattn-py times)
  sdpa-cudnn    PyTorch SDPA, cuDNN backend (the benchmark's cudnn)
  sdpa-flash    PyTorch SDPA, flash backend (torch-flash)
With --profile, per way: from the call's start to its first kernel and to its last kernel's end, the
kernels' GPU time and the CUDA runtime calls (gap_timing.profile_way).

  python python/tools/forward_gap.py --lib build/libflashattn_c.so [--seqlen 512 --hdim 64 --causal]
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from flashattn_ctypes import FlashAttn  # noqa: E402
from gap_timing import ForwardCell, cell_args, report_interleaved  # noqa: E402


def main():
    a = cell_args(__doc__, seqlen=512, hdim=64, reps=30)
    s, d, b, h = a.seqlen, a.hdim, a.batch, a.heads
    fa = FlashAttn(a.lib)
    cell = ForwardCell(a, fa)
    q, k, v, args, qt, kt, vt = cell.q, cell.k, cell.v, cell.args, cell.qt, cell.kt, cell.vt

    def sdpa(backend):
        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=a.causal)
        return call

    ways = {
        "c-api": lambda: fa.forward(args),
        "py": lambda: flashattn.flash_attn_func(q, k, v, causal=a.causal),
        "sdpa-cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "sdpa-flash": sdpa(SDPBackend.FLASH_ATTENTION),
    }
    report_interleaved(ways, a.reps, 4 * b * h * s * s * d / (2 if a.causal else 1), a.profile)


if __name__ == "__main__":
    main()
