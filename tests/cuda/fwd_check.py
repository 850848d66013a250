"""Randomized GPU check of the CUDA forward (sm80 path) against a float64 reference, through the C ABI.

  python3 tests/cuda/fwd_check.py --lib build/libflashattn_c.so [--quick] [--bench]

For every case: fresh normal inputs, out/lse poisoned with NaN, then
  max|out - ref| <= 2 * max|naive - ref| + atol   (naive: same dtype, fp32 softmax, P rounded)
  lse within 1e-3 relative, fully masked rows exactly out = 0 and lse = +inf, no NaN anywhere.
Prints one line per failure and a closing 'N passed, N failed'. --bench times a few cells of the
benchmark grid next to PyTorch's flash backend (FlashAttention-2).
"""
import argparse
import math
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))
from flashattn_ctypes import FlashAttn  # noqa: E402
from reference import visible  # noqa: E402  (the Python suite's mask rule)


def attention_one(q, k, v, scale, softcap, causal, window, dtype_sim=None):
    """q [sq, h, d], k/v [sk, hk, d] (one sequence) -> out [sq, h, dv], lse [h, sq].
    dtype_sim None: float64 reference; else the naive same-precision computation."""
    h, hk = q.shape[1], k.shape[1]
    g = h // hk
    if dtype_sim is None:
        q, k, v = q.double(), k.double(), v.double()
    else:
        q, k, v = q.float(), k.float(), v.float()
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    ok = visible(q.shape[0], k.shape[0], causal, window, q.device)
    s = s.masked_fill(~ok[None], float("-inf"))
    if s.shape[-1] == 0:  # no keys: out = 0, lse = +inf
        out = torch.zeros(q.shape[0], h, v.shape[-1], dtype=torch.float64 if dtype_sim is None else dtype_sim,
                          device=q.device)
        return out, torch.full((h, q.shape[0]), float("inf"), dtype=torch.float64, device=q.device)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    lse = torch.where(l[..., 0] > 0, (m[..., 0] + torch.log(l[..., 0])), torch.full_like(l[..., 0], float("inf")))
    p = p / torch.where(l > 0, l, torch.ones_like(l))
    if dtype_sim is not None:
        p = p.to(dtype_sim).float()
    out = torch.einsum("hqk,khd->qhd", p, v)
    if dtype_sim is not None:
        out = out.to(dtype_sim)
    return out, lse


def strided(shape, dtype, device, mode):
    """A random tensor of `shape` [.., rows, heads, d] with a non-trivial layout per `mode`."""
    if mode == "contig":
        return torch.randn(shape, dtype=dtype, device=device)
    if mode == "pad":  # padded last dim and padded heads: row/head strides not the dense ones
        big = list(shape)
        big[-1] += 24
        big[-2] += 1
        t = torch.randn(big, dtype=dtype, device=device)
        return t[..., : shape[-2], : shape[-1]]
    if mode == "bhsd":  # [b, h, s, d] memory, viewed as [b, s, h, d]
        if len(shape) == 4:
            b, s, h, d = shape
            return torch.randn(b, h, s, d, dtype=dtype, device=device).permute(0, 2, 1, 3)
        r, h, d = shape
        return torch.randn(h, r, d, dtype=dtype, device=device).permute(1, 0, 2)
    raise ValueError(mode)


class Case:
    def __init__(self, **kw):
        self.dtype = torch.bfloat16
        self.batch, self.sq, self.sk, self.h, self.hk, self.d, self.dv = 2, 128, 128, 4, 4, 128, 128
        self.causal, self.window, self.softcap, self.scale = False, (-1, -1), 0.0, None
        self.varlen, self.layout, self.lse = False, "contig", True
        self.__dict__.update(kw)

    def __repr__(self):
        keys = ("dtype", "batch", "sq", "sk", "h", "hk", "d", "dv", "causal", "window", "softcap", "scale",
                "varlen", "layout", "lse")
        return " ".join(f"{k}={getattr(self, k)}" for k in keys)


def run_case(fa, c, dev):
    dt = c.dtype
    scale = c.scale if c.scale is not None else 1.0 / math.sqrt(c.d)
    if c.varlen:
        lens_q = [random.choice([0, 1, 7, c.sq // 2, c.sq]) for _ in range(c.batch)]
        lens_k = [random.choice([0, 1, 9, c.sk // 3, c.sk]) for _ in range(c.batch)]
        lens_q[0], lens_k[0] = c.sq, c.sk  # the maxima are attained
        cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device=dev)
        cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device=dev)
        tq, tk = int(cu_q[-1]), int(cu_k[-1])
        q = strided((tq, c.h, c.d), dt, dev, c.layout)
        k = strided((tk, c.hk, c.d), dt, dev, c.layout)
        v = strided((tk, c.hk, c.dv), dt, dev, c.layout)
        out = torch.full((tq, c.h, c.dv), float("nan"), dtype=dt, device=dev)
        lse = torch.full((c.h, tq), float("nan"), dtype=torch.float32, device=dev) if c.lse else None
        a = fa.args(q, k, v, out=out, lse=lse, causal=c.causal, softmax_scale=scale, window=c.window,
                    softcap=c.softcap, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=c.sq, max_seqlen_k=c.sk)
        seqs = [(int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])) for b in range(c.batch)]
    else:
        q = strided((c.batch, c.sq, c.h, c.d), dt, dev, c.layout)
        k = strided((c.batch, c.sk, c.hk, c.d), dt, dev, c.layout)
        v = strided((c.batch, c.sk, c.hk, c.dv), dt, dev, c.layout)
        out = torch.full((c.batch, c.sq, c.h, c.dv), float("nan"), dtype=dt, device=dev)
        lse = torch.full((c.batch, c.h, c.sq), float("nan"), dtype=torch.float32, device=dev) if c.lse else None
        a = fa.args(q, k, v, out=out, lse=lse, causal=c.causal, softmax_scale=scale, window=c.window,
                    softcap=c.softcap)
        seqs = None
    path = fa.path(a)
    if path != "sm80":
        return f"path {path!r}, expected 'sm80'"
    fa.forward(a)
    torch.cuda.synchronize()

    errs = []
    for b in range(c.batch):
        if seqs is None:
            qb, kb, vb, ob = q[b], k[b], v[b], out[b]
            lb = lse[b] if lse is not None else None
        else:
            q0, q1, k0, k1 = seqs[b]
            qb, kb, vb, ob = q[q0:q1], k[k0:k1], v[k0:k1], out[q0:q1]
            lb = lse[:, q0:q1] if lse is not None else None
        if qb.shape[0] == 0:
            continue
        ref, ref_lse = attention_one(qb, kb, vb, scale, c.softcap, c.causal, c.window)
        naive, _ = attention_one(qb, kb, vb, scale, c.softcap, c.causal, c.window, dtype_sim=dt)
        o = ob.double()
        if torch.isnan(o).any():
            errs.append(f"batch {b}: NaN in out at {torch.nonzero(torch.isnan(o))[:4].tolist()}")
            continue
        err = (o - ref).abs().max().item()
        tol = 2 * (naive.double() - ref).abs().max().item() + 1e-3
        if err > tol:
            idx = torch.nonzero((o - ref).abs() == err)[0].tolist()
            errs.append(f"batch {b}: out max err {err:.3e} > tol {tol:.3e} at (row, head, d) = {idx}")
        if lb is not None:
            lg = lb.double()
            if torch.isnan(lg).any():
                errs.append(f"batch {b}: NaN in lse")
            else:
                inf_ref = torch.isinf(ref_lse)
                if not torch.equal(torch.isinf(lg), inf_ref):
                    errs.append(f"batch {b}: lse +inf pattern differs (ref {int(inf_ref.sum())} inf rows)")
                fin = ~inf_ref
                if fin.any():
                    le = ((lg[fin] - ref_lse[fin]).abs() / ref_lse[fin].abs().clamp(min=1)).max().item()
                    if le > 2e-3:
                        errs.append(f"batch {b}: lse rel err {le:.3e}")
    return "; ".join(errs)


def cases(quick):
    out = []
    dts = [torch.bfloat16, torch.float16]
    hd = [(64, 64), (96, 96), (128, 128), (192, 192), (256, 256), (32, 32), (40, 40), (72, 72), (160, 160),
          (192, 128), (128, 64), (64, 128), (8, 8)]
    for dt in dts:
        for d, dv in hd:
            out.append(Case(dtype=dt, d=d, dv=dv, sq=133, sk=257))
            out.append(Case(dtype=dt, d=d, dv=dv, sq=200, sk=77, causal=True))
    for sq, sk in [(1, 1), (1, 300), (300, 1), (17, 33), (128, 128), (129, 64), (64, 129), (1000, 1000), (513, 1025),
                   (1025, 513), (128, 0), (5, 0)]:
        for causal in (False, True):
            for d in (64, 128, 256):
                out.append(Case(sq=sq, sk=sk, causal=causal, d=d, dv=d, dtype=random.choice(dts)))
    for window in [(32, 0), (10, 20), (0, 0), (100, -1), (-1, 5), (0, -1), (300, 300), (1 << 40, 3)]:
        for sq, sk in [(256, 256), (100, 300), (300, 100)]:
            out.append(Case(sq=sq, sk=sk, window=window, d=random.choice([64, 96, 128, 192, 256]),
                            dtype=random.choice(dts)))
            out[-1].dv = out[-1].d
    for softcap in (5.0, 30.0):
        for causal in (False, True):
            out.append(Case(softcap=softcap, causal=causal, sq=300, sk=300, d=128, dv=128))
    for scale in (-0.3, 0.0, 2.0):
        out.append(Case(scale=scale, sq=150, sk=190, d=64, dv=64))
        out.append(Case(scale=scale, sq=150, sk=190, d=64, dv=64, causal=True))
    for h, hk in [(8, 2), (8, 1), (6, 3)]:
        out.append(Case(h=h, hk=hk, sq=200, sk=300, d=128, dv=128))
        out.append(Case(h=h, hk=hk, sq=200, sk=300, d=64, dv=64, causal=True))
    for layout in ("pad", "bhsd"):
        for d in (64, 96, 128, 256):
            out.append(Case(layout=layout, d=d, dv=d, sq=190, sk=230, causal=random.choice([False, True])))
    for d in (64, 128, 192, 256):
        for causal in (False, True):
            out.append(Case(varlen=True, batch=5, sq=300, sk=260, d=d, dv=d, causal=causal,
                            layout=random.choice(["contig", "pad"])))
    out.append(Case(varlen=True, batch=4, sq=100, sk=100, window=(20, 3), d=128, dv=128))
    out.append(Case(lse=False, sq=100, sk=100))
    out.append(Case(batch=1, h=2, hk=1, sq=4096, sk=4096, d=128, dv=128, causal=True))
    out.append(Case(batch=1, h=2, hk=2, sq=3000, sk=5000, d=64, dv=64))
    if quick:
        out = out[::4]
    return out


def bench(fa):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from bench_gpu import median_ms  # the benchmark's timing rule (CUDA events, median)

    print("dtype hdim seqlen causal  flashattn  torch-flash  ratio   (TFLOP/s)")
    for d in (64, 128, 256):
        for s in (1024, 4096, 16384):
            for causal in (False, True):
                b, h = 16384 // s, 2048 // d
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                out = torch.empty_like(q)
                lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                a = fa.args(q, k, v, out=out, lse=lse, causal=causal)
                t = median_ms(lambda: fa.forward(a))
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    tt = median_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
                fl = 4.0 * b * h * s * s * d / (2 if causal else 1)
                print(f"bf16 {d:4d} {s:6d} {int(causal):6d} {fl / t / 1e9:10.1f} {fl / tt / 1e9:12.1f} {tt / t:7.3f}",
                      flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libflashattn_c.so")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    fa = FlashAttn(args.lib)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    passed = failed = 0
    for c in cases(args.quick):
        try:
            msg = run_case(fa, c, "cuda")
        except Exception as e:  # noqa: BLE001
            msg = f"exception: {e}"
        if msg:
            failed += 1
            print(f"FAIL {c}: {msg}", flush=True)
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed", flush=True)
    if args.bench:
        bench(fa)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
