"""GPU benchmark: flashattn side by side with PyTorch SDPA's cuDNN and flash (FlashAttention-2)
backends, in one process, on the grid of docs/BENCHMARK.md (shared/docs). Writes one JSON file.

  python3 bench/bench_gpu.py --out results.json [--modes fwd,bwd] [--hdims 64,128,256]
      [--seqlens 512,...,16384] [--dtypes bf16] [--reps 30] [--lib build/libflashattn_c.so]
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashattn_ctypes import FlashAttn  # noqa: E402

DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def median_ms(fn, reps=30, warmup=5):
    return median_ms_each([fn], reps, warmup)[0]


def time_one_call(fn):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b)


def median_ms_each(fns, reps=30, warmup=5):
    """Median time of one call of each function, CUDA events around the call, the GPU idle before
    each. The calls are interleaved (rep r calls every function once, in forward order on even
    reps and backward on odd ones), so clock and temperature drift during a cell reaches every
    implementation alike instead of deciding a ratio."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times = [[] for _ in fns]
    for r in range(reps):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            times[i].append(time_one_call(fns[i]))
    return [sorted(t)[len(t) // 2] for t in times]


def warm_up_gpu(seconds=2.0):
    """Bring the GPU to its working clocks before the first cell (a cold GPU starts at idle clocks,
    which used to penalize whichever implementation the first cell timed first)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def flops(mode, causal, b, h, s, d):
    f = 4.0 * b * h * s * s * d / (2 if causal else 1)
    return f * (2.5 if mode == "bwd" else 1.0)


def ceilings(reps):
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bm = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm = median_ms(lambda: a @ bm, reps)
    x = torch.randn(1 << 30, device="cuda", dtype=torch.float16)  # 2 GiB
    y = torch.empty_like(x)
    cp = median_ms(lambda: y.copy_(x), reps)
    return {"bf16_matmul_tflops_8192cube": 2 * n**3 / mm / 1e9, "device_copy_tbps": 2 * x.numel() * 2 / cp / 1e9}


def bench_cell(fa, mode, causal, dtype, d, s, reps, variants=()):
    b, h = 16384 // s, 2048 // d
    dt = DT[dtype]
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(3))
    fl = flops(mode, causal, b, h, s, d)
    base = {"mode": mode, "causal": causal, "dtype": dtype, "hdim": d, "seqlen": s, "batch": b, "heads": h}
    dout = torch.randn_like(q) if mode == "bwd" else None

    # Every implementation is prepared first (a callable, or the error row), then all are timed
    # together, interleaved (median_ms_each). flashattn first, then each build variant on the same
    # inputs, checked against the first's outputs.
    preps = [prepare_library(fa, "flashattn", mode, causal, q, k, v, dout, base)]
    ref = preps[0].get("outputs")
    for name, fv in variants if ref is not None else ():
        preps.append(prepare_library(fv, f"flashattn:{name}", mode, causal, q, k, v, dout, base))
    # PyTorch SDPA, (b, h, s, d) views of the same (b, s, h, d) storage
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    for impl, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("torch-flash", SDPBackend.FLASH_ATTENTION)):
        preps.append(prepare_sdpa(impl, backend, mode, causal, qt, kt, vt, base))

    timed = [p for p in preps if "fn" in p]
    for p, ms in zip(timed, median_ms_each([p["fn"] for p in timed], reps)):
        p["row"].update(tflops=fl / ms / 1e9, ms=ms)
    rows = []
    for p in preps:
        if ref is not None and p.get("outputs") is not None and p is not preps[0]:
            p["row"]["max_rel_diff"] = max(
                ((g.float() - r.float()).abs().max() / r.float().abs().max().clamp_min(1e-30)).item()
                for g, r in zip(p["outputs"], ref))
        rows.append(p["row"])
    return rows


def prepare_sdpa(impl, backend, mode, causal, qt, kt, vt, base):
    """PyTorch SDPA with one backend: {"row", "fn"} (fn is one call), or {"row"} with the error."""
    def fwd():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    try:
        if mode == "fwd":
            fwd()
            fn = fwd
        else:
            qg, kg, vg = (x.detach().requires_grad_() for x in (qt, kt, vt))
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
            do = torch.randn_like(o)
            fn = lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)  # noqa: E731
            fn()
        return {"row": dict(impl=impl, **base), "fn": fn}
    except RuntimeError as e:
        return {"row": dict(impl=impl, **base, error=str(e)[:200])}


def prepare_library(fa, impl, mode, causal, q, k, v, dout, base):
    """One build of the library (the main one, or a variant: another libflashattn_c.so, e.g. a
    tile-shape experiment) set up on the given inputs: {"row", "fn", "outputs"} where outputs are
    the tensors fn writes (out, lse or dq, dk, dv), filled by one call here; {"row"} with the error
    when the call failed."""
    out, lse = torch.empty_like(q), torch.empty(q.shape[0], q.shape[2], q.shape[1], device="cuda")
    try:
        a = fa.args(q, k, v, out=out, lse=lse, causal=causal)
        keep = [fa.with_workspace(a, False, "cuda")]  # workspaces: alive as long as the returned dict
        if mode == "fwd":
            path = fa.path(a)
            fn = lambda: fa.forward(a)  # noqa: E731
            got = (out, lse)
        else:
            fa.forward(a)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            ab = fa.args(q, k, v, out=out, lse=lse, dout=dout, dq=dq, dk=dk, dv=dv, causal=causal)
            keep.append(fa.with_workspace(ab, True, "cuda"))
            path = fa.path(ab, backward=True)
            fn = lambda: fa.backward(ab)  # noqa: E731
            got = (dq, dk, dv)
        fn()
        torch.cuda.synchronize()
        return {"row": dict(impl=impl, path=path, **base), "fn": fn, "outputs": got, "keep": keep}
    except RuntimeError as e:
        return {"row": dict(impl=impl, **base, error=str(e)[:300])}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--modes", default="fwd,bwd")
    p.add_argument("--causal", default="0,1")
    p.add_argument("--dtypes", default="bf16")
    p.add_argument("--hdims", default="64,128,256")
    p.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--lib", default=None)
    p.add_argument("--anchors", default=None, help="anchors JSON to print goal ratios beside ours")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=LIB",
                   help="also time another build of the library (e.g. a tuning variant) in the same run")
    args = p.parse_args()

    fa = FlashAttn(args.lib)
    warm_up_gpu()
    variants = [(nv.split("=", 1)[0], FlashAttn(nv.split("=", 1)[1])) for nv in args.variant]
    torch.manual_seed(0)
    commit = os.environ.get("FLASHATTN_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"gpu": torch.cuda.get_device_name(), "commit": commit,
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "ceilings": ceilings(10), "rows": [],
              "timing": "interleaved: each rep times one call of every implementation (order alternating), "
                        "CUDA events around the call, median per implementation; 2 s GPU warm-up first"}
    for mode in args.modes.split(","):
        for dtype in args.dtypes.split(","):
            for causal in (bool(int(c)) for c in args.causal.split(",")):
                for d in (int(x) for x in args.hdims.split(",")):
                    for s in (int(x) for x in args.seqlens.split(",")):
                        rows = bench_cell(fa, mode, causal, dtype, d, s, args.reps, variants)
                        result["rows"].extend(rows)
                        by = {r["impl"]: r.get("tflops", float("nan")) for r in rows}
                        for r in rows:
                            if r["impl"].startswith("flashattn:"):
                                print(f"    {r['impl']:24s} {r.get('tflops', float('nan')):6.1f}  vs fa2 "
                                      f"{r.get('tflops', float('nan')) / by['torch-flash']:.3f}  max_rel_diff "
                                      f"{r.get('max_rel_diff', float('nan')):.2e} {r.get('error', '')}", flush=True)
                        print(f"{mode} causal={int(causal)} {dtype} d={d:3d} s={s:5d}  flashattn {by['flashattn']:6.1f}"
                              f"  cudnn {by['cudnn']:6.1f}  torch-flash {by['torch-flash']:6.1f}"
                              f"  vs cudnn {by['flashattn'] / by['cudnn']:.3f}  vs fa2 {by['flashattn'] / by['torch-flash']:.3f}",
                              flush=True)
                        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    summary(result)


def summary(result):
    rows = result["rows"]
    ours = [r for r in rows if r["impl"] == "flashattn"]
    lost = 0
    for r in ours:
        key = lambda x: (x["mode"], x["causal"], x["dtype"], x["hdim"], x["seqlen"])  # noqa: E731
        fa2 = next((x for x in rows if x["impl"] == "torch-flash" and key(x) == key(r)), {})
        if "tflops" not in r or "tflops" not in fa2 or r["tflops"] < fa2["tflops"]:
            lost += 1
    print(f"cells: {len(ours)}; below torch-flash: {lost}; ceilings: {result['ceilings']}")


if __name__ == "__main__":
    main()
