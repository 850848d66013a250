"""The sm80 backward on GQA/MQA shapes whose grids are few blocks of very different lengths (a few kv
heads and sequences under a mask: MQA at batch 1), where the plan splits every block into parts
(bwd_plan.cu's split_long_blocks). Per shape, interleaved in one process, CUDA events around each call
(the GPU idle before it, as bench_gpu.py times):
  <name>       fa_backward through ctypes of each --lib NAME=PATH given (workspace preallocated)
  fa2          PyTorch's FlashAttention-2 backward called directly (aten._flash_attention_backward:
               no autograd engine, so kernel against kernel with the C API rows)
  with --py, what users call, each through torch.autograd.grad (the engine's cost in both):
  py           flash_attn_func / flash_attn_varlen_func of the installed package (path sm80)
  sdpa         SDPA's flash backend (FlashAttention-2) with enable_gqa, causal shapes only
Prints TFLOP/s (backward = 2.5 x the forward's 4 * b * h * s^2 * d, halved for causal).

  python3 bench/bwd_split.py --lib new=build/libflashattn_c.so --lib old=/tmp/old.so [--json out.json]
      [--deterministic]   (ours in deterministic mode; FA2 as it is)  [--py]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tools"))
from flashattn_ctypes import FlashAttn  # noqa: E402
from gap_timing import interleaved_medians  # noqa: E402

# (batch, seqlen, heads, heads_kv, hdim, window (left, right)); window (-1, 0) is causal.
SHAPES = (
    (1, 2048, 32, 1, 128, (-1, 0)),
    (1, 4096, 32, 1, 128, (-1, 0)),
    (1, 8192, 32, 1, 128, (-1, 0)),
    (1, 16384, 32, 1, 128, (-1, 0)),
    (1, 32768, 32, 1, 128, (-1, 0)),
    (2, 16384, 32, 1, 128, (-1, 0)),  # the benchmark's MQA 16k row
    (1, 16384, 32, 2, 128, (-1, 0)),
    (1, 8192, 28, 4, 128, (-1, 0)),
    (1, 8192, 64, 8, 128, (-1, 0)),  # not split (many blocks): unchanged
    (1, 8192, 32, 1, 64, (-1, 0)),
    (1, 8192, 16, 1, 256, (-1, 0)),
    (1, 8192, 32, 1, 96, (-1, 0)),
    (1, 8192, 16, 1, 192, (-1, 0)),
    (1, 8192, 32, 1, 128, (1024, 0)),  # sliding window
    ((8192, 4096), 8192, 32, 1, 128, (-1, 0)),  # varlen: two sequences packed (batch = the lengths, seqlen their maximum)
)


def mask_of(window):
    """(causal, the window the calls take): window (-1, 0) is causal, passed as causal=True."""
    causal = window == (-1, 0)
    return causal, ((-1, -1) if causal else window)


def user_ways(q, k, v, do, cu, s, window, deterministic):
    """The py and sdpa ways (module docstring): one forward each, then each call one autograd.grad."""
    import flashattn
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    causal, win = mask_of(window)
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    opts = dict(causal=causal, window_size=win, deterministic=deterministic, path="sm80")
    if cu is None:
        o = flashattn.flash_attn_func(qg, kg, vg, **opts)
    else:
        o = flashattn.flash_attn_varlen_func(qg, kg, vg, cu, cu, s, s, **opts)
    ways = {"py": lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)}
    keep = [qg, kg, vg, o]
    if causal and cu is None:
        qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            ot = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
        dot = do.transpose(1, 2)
        ways["sdpa"] = lambda: torch.autograd.grad(ot, (qt, kt, vt), dot, retain_graph=True)
        keep += [qt, kt, vt, ot]
    return ways, keep


def shape_ways(libs, batch, s, h, hk, d, window, deterministic=False, py=False):
    """batch: a count, or a tuple of lengths for varlen (s is then their maximum)."""
    varlen = isinstance(batch, tuple)
    lead = (sum(batch),) if varlen else (batch, s)
    q, do = (torch.randn(*lead, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(*lead, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    cu = None
    if varlen:
        cu = torch.tensor([0] + [sum(batch[:i + 1]) for i in range(len(batch))], device="cuda", dtype=torch.int32)
    seq = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=s, max_seqlen_k=s) if varlen else {}
    causal, win = mask_of(window)
    ways, keep = {}, []
    first = next(iter(libs.values()))
    out = torch.empty_like(q)
    lse = torch.empty(*((h, sum(batch)) if varlen else (batch, h, s)), device="cuda", dtype=torch.float32)
    first.forward(first.args(q, k, v, out, lse, causal=causal, window=win, **seq))
    for name, fa in libs.items():
        g = [torch.empty_like(t) for t in (q, k, v)]
        a = fa.args(q, k, v, out, lse, do, *g, causal=causal, window=win, deterministic=deterministic, **seq)
        keep += [a, g, fa.with_workspace(a, True, q.device)]
        ways[name] = (lambda fa=fa, a=a: fa.backward(a))
    if causal:  # PyTorch's entry has no sliding window
        o2, lse2, rng, unused, _ = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, s, s, 0.0, True, False)
        ways["fa2"] = lambda: torch.ops.aten._flash_attention_backward(do, q, k, v, o2, lse2, cu, cu, s, s, 0.0,
                                                                       True, rng, unused)
        keep += [o2, lse2]
    if py:
        more, held = user_ways(q, k, v, do, cu, s, window, deterministic)
        ways.update(more)
        keep += held
    return ways, keep


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", action="append", required=True, metavar="NAME=PATH")
    p.add_argument("--reps", type=int, default=12)
    p.add_argument("--json", default=None)
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--py", action="store_true", help="also flash_attn_func and SDPA through autograd")
    a = p.parse_args()
    libs = {n: FlashAttn(path) for n, path in (x.split("=", 1) for x in a.lib)}
    rows = []
    for batch, s, h, hk, d, window in SHAPES:
        ways, keep = shape_ways(libs, batch, s, h, hk, d, window, a.deterministic, a.py)
        medians = interleaved_medians(ways, a.reps)
        def visible(n):
            if window[1] < 0:
                return n * n
            return sum(min(n, i + 1 + window[1]) - (max(0, i - window[0]) if window[0] >= 0 else 0) for i in range(n))
        lengths = batch if isinstance(batch, tuple) else (s,) * batch
        flops = 2.5 * 4 * h * d * sum(visible(n) for n in lengths)
        row = dict(batch=batch, seqlen=s, heads=h, heads_kv=hk, hdim=d, window=list(window))
        for n, ms in medians.items():
            row[n] = round(flops / ms / 1e9, 1)
        rows.append(row)
        print(f"b{batch} s{s} {h}/{hk} d{d} window {window}: " +
              "  ".join(f"{n} {row[n]}" for n in medians), flush=True)
        del keep, ways
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
