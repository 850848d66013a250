"""PyTorch's CPU scaled_dot_product_attention on the CPU benchmark's grid (bench_cpu's shapes), for
the side-by-side rows "torch-sdpa-cpu" of docs/cpu-benchmark.md. Optional: needs torch.

  python3 bench/cpu_torch_sdpa.py --merge bench/results/<file>.json   # add rows to bench_cpu's JSON
  python3 bench/cpu_torch_sdpa.py --out torch.json                    # or a JSON of its own

Same FLOP formula (forward 4*b*h*s*s*d, halved for causal; backward 2.5x forward), same timing
rule (perf_counter around the call, one warm-up, median of max(--reps, --target seconds worth,
<= --max-reps) calls), fresh normal inputs per cell; the backward is timed alone (its forward runs
once, untimed; torch.autograd.grad with retain_graph). Without --merge, --seqlens etc. give the grid;
with --merge, the grid is read from the file's flashattn rows (shapes, dtypes, thread counts).
"""
import argparse
import json
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    print("cpu_torch_sdpa: torch is not importable; nothing to do", file=sys.stderr)
    sys.exit(3)

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def time_calls(fn, reps, max_reps, target_s):
    t0 = time.perf_counter()
    fn()  # warm-up
    warm = time.perf_counter() - t0
    n = min(max(reps, math.ceil(target_s / warm) if warm > 0 else reps), max_reps)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times), n


def flops(b, h, s, d, causal, mode):
    f = 4.0 * b * h * s * s * d
    if causal:
        f *= 0.5
    if mode == "bwd":
        f *= 2.5
    return f


def run_cell(cell, args):
    b, h, s, d = cell["batch"], cell["heads"], cell["seqlen"], cell["hdim"]
    torch.set_num_threads(cell["threads"])
    gen = torch.Generator().manual_seed(1000003 * s + 1009 * d + int(cell["causal"]))
    shape = (b, h, s, d)  # torch's layout; bench_cpu uses [b, s, h, d]: the same FLOPs
    dt = DT[cell["dtype"]]
    q, k, v, dout = (torch.randn(shape, generator=gen).to(dt) for _ in range(4))
    causal = cell["causal"]
    if cell["mode"] == "fwd":
        with torch.no_grad():
            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
            med, best, worst, n = time_calls(fn, args.reps, args.max_reps, args.target)
    else:
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        fn = lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True)  # noqa: E731
        med, best, worst, n = time_calls(fn, args.reps, args.max_reps, args.target)
    f = flops(b, h, s, d, causal, cell["mode"])
    row = {"impl": "torch-sdpa-cpu", "path": "torch", "mode": cell["mode"], "causal": causal,
           "dtype": cell["dtype"], "hdim": d, "seqlen": s, "batch": b, "heads": h, "threads": cell["threads"],
           "gflops": round(f / med * 1e-9, 3), "gflops_best": round(f / best * 1e-9, 3),
           "ms": round(med * 1e3, 4), "ms_min": round(best * 1e3, 4), "ms_max": round(worst * 1e3, 4), "reps": n}
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--merge", help="bench_cpu JSON: read its grid, add torch rows and vs_torch, rewrite it")
    ap.add_argument("--out", help="write a JSON of the torch rows only")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192")
    ap.add_argument("--hdims", default="64,128")
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--modes", default="fwd,bwd")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-reps", type=int, default=50)
    ap.add_argument("--target", type=float, default=1.0)
    args = ap.parse_args()

    doc = None
    if args.merge:
        with open(args.merge) as f:
            doc = json.load(f)
        cells = [{k: r[k] for k in ("mode", "causal", "dtype", "hdim", "seqlen", "batch", "heads", "threads")}
                 for r in doc["rows"] if r["impl"] == "flashattn"]
    else:
        cells = [{"mode": m, "causal": c, "dtype": dt, "hdim": int(d), "seqlen": int(s), "batch": args.batch,
                  "heads": args.heads, "threads": int(t)}
                 for t in args.threads.split(",") for dt in args.dtype.split(",") for d in args.hdims.split(",")
                 for c in (False, True) for s in args.seqlens.split(",") for m in args.modes.split(",")]

    rows = []
    for cell in cells:
        row = run_cell(cell, args)
        rows.append(row)
        print(f"{row['threads']:<3} {row['dtype']:<5} {row['mode']:<4} {'yes' if row['causal'] else 'no':<6} "
              f"{row['hdim']:5} {row['seqlen']:6} | torch {row['gflops']:9.2f} GF/s (best {row['gflops_best']:.2f}, "
              f"{row['reps']} reps)", flush=True)

    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)
    if doc is not None:
        key = lambda r: tuple(r[k] for k in ("mode", "causal", "dtype", "hdim", "seqlen", "threads"))  # noqa: E731
        by_cell = {key(r): r for r in rows}
        for r in doc["rows"]:
            if r["impl"] == "flashattn" and key(r) in by_cell and r.get("gflops"):
                r["vs_torch"] = round(r["gflops"] / by_cell[key(r)]["gflops"], 4)
        doc["rows"] = [r for r in doc["rows"] if r["impl"] != "torch-sdpa-cpu"] + rows
        doc["torch"] = torch.__version__
        with open(args.merge, "w") as f:
            f.write(dumps_rows(doc))


def dumps_rows(doc):
    """The bench_cpu layout: header keys, then one row per line."""
    head = {k: v for k, v in doc.items() if k != "rows"}
    text = json.dumps(head)[:-1] + ',\n "rows": [\n'
    text += ",\n".join("  " + json.dumps(r) for r in doc["rows"])
    return text + "\n]}\n"


if __name__ == "__main__":
    main()
