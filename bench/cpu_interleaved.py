"""flashattn's CPU backend and PyTorch's CPU SDPA timed interleaved in one process, with any number of
flashattn builds side by side (each a libflashattn_c.so loaded through the C ABI), for before/after
comparisons on a shared machine: every round calls each implementation once (order alternating), a
short sleep between calls lets the other OpenMP runtime's threads go idle, and the table gives the
median and the best time of the rounds. Forward by default, --bwd for the backward alone (torch:
autograd.grad of SDPA with retain_graph), --fwdbwd for forward + backward in one timed call (torch:
SDPA with grad, then autograd.grad; the FLOPs are 3.5 forwards). Inputs [batch, seqlen, heads, d] for flashattn, contiguous
[batch, heads, seqlen, d] copies for torch; the last column checks flashattn's out (dq) against torch's.

  OMP_NUM_THREADS=2 python bench/cpu_interleaved.py --lib before=/tmp/a/libflashattn_c.so \
      --lib after=build/libflashattn_c.so --dtypes f32,bf16 --seqlens 1024,2048,4096

--py adds flash_attn_func (the installed flashattn package, CPU tensors, autograd: what users call) as
the implementation "flashattn-py", timed the way the torch rows are:

  OMP_NUM_THREADS=2 python bench/cpu_interleaved.py --py --fwdbwd --rounds 9 --hdims 64,128 \
      --seqlens 512,1024,2048,4096

Used for docs/cpu-benchmark.md's comparison with PyTorch. --json FILE also writes the cells as a
record (BENCHMARK.md's format with gflops; one row per implementation and cell, vs_torch on
flashattn's; the CPU model, its ISA flags and torch's CPU capability at the top); with --append, the
rows of this run are added to FILE's (e.g. the backward after the forward).
"""
import argparse
import datetime
import json
import os
import subprocess
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn.functional as F
from flashattn_ctypes import FlashAttn

ap = argparse.ArgumentParser()
ap.add_argument("--lib", action="append", default=[], help="label=path")
ap.add_argument("--seqlens", default="1024,4096")
ap.add_argument("--hdims", default="64,128")
ap.add_argument("--dtypes", default="f32,bf16")
ap.add_argument("--causal", default="0,1")
ap.add_argument("--heads", type=int, default=2)
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--bwd", action="store_true", help="the backward alone (its forward outside the timing)")
ap.add_argument("--fwdbwd", action="store_true", help="forward + backward in one timed call (torch: SDPA with grad, "
                "then autograd.grad), as a training step runs them")
ap.add_argument("--cpu-time", action="store_true",
                help="time the calling thread's CPU time instead of wall time (needs --threads 1: every "
                     "implementation then computes on the calling thread); robust to other processes "
                     "taking the cores, not to what they do to the caches")
ap.add_argument("--py", action="store_true", help="also flash_attn_func (the installed package) as flashattn-py")
ap.add_argument("--json", help="write the cells to this file")
ap.add_argument("--append", action="store_true", help="add to --json's rows instead of replacing the file")
a = ap.parse_args()
if a.bwd and a.fwdbwd:
    sys.exit("--bwd and --fwdbwd are exclusive")
MODE = "fwd+bwd" if a.fwdbwd else "bwd" if a.bwd else "fwd"
rows = []
if a.cpu_time and a.threads != 1:
    sys.exit("--cpu-time needs --threads 1")
clock = time.thread_time if a.cpu_time else time.perf_counter


def cpu_info():
    model, flags = "", []
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and not model:
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            flags = line.split(":", 1)[1].split()
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in flags]
    return model, isa
torch.set_num_threads(a.threads)
libs = [(s.split("=")[0], FlashAttn(s.split("=")[1])) for s in a.lib]
if a.py:
    import flashattn
PY = ["flashattn-py"] if a.py else []
ours = [l for l, _ in libs] + PY  # the implementations compared with torch
DT = {"f32": torch.float32, "bf16": torch.bfloat16}
print(f"threads {a.threads}, batch {a.batch}, heads {a.heads}, load {open('/proc/loadavg').read().split()[:3]}")
hdr = (["dtype", "hd", "seq", "causal"] + [f"{l} GF/s med(min ms)" for l in ours] + ["torch GF/s med(min ms)"]
       + [f"{l}/torch" for l in ours])
print(" | ".join(hdr))
for dt in a.dtypes.split(","):
    for d in map(int, a.hdims.split(",")):
        for s in map(int, a.seqlens.split(",")):
            for c in map(int, a.causal.split(",")):
                g = torch.Generator().manual_seed(s + d)
                q, k, v = (torch.randn(a.batch, s, a.heads, d, generator=g).to(DT[dt]) for _ in range(3))
                out = torch.empty_like(q)
                lse = torch.empty(a.batch, a.heads, s, dtype=torch.float32)
                qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
                fns = []
                if MODE == "fwd":
                    for label, fa in libs:
                        args = fa.args(q, k, v, out=out, lse=lse, causal=bool(c))
                        fns.append((label, (lambda fa=fa, args=args: fa.forward(args))))
                    if a.py:
                        with torch.no_grad():
                            out_py = flashattn.flash_attn_func(q, k, v, causal=bool(c))
                        fns.append(("flashattn-py", lambda: flashattn.flash_attn_func(q, k, v, causal=bool(c))))
                    with torch.no_grad():
                        fns.append(("torch", lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(c))))
                else:  # the backward alone (its forward run once here), or forward + backward per call
                    dout = torch.randn(a.batch, s, a.heads, d, generator=g).to(DT[dt])
                    grads = []; keep = []
                    for label, fa in libs:
                        o_l, lse_l = torch.empty_like(q), torch.empty(a.batch, a.heads, s, dtype=torch.float32)
                        dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
                        grads.append(dq); keep.append((o_l, lse_l, dq, dk, dv))
                        args_f = fa.args(q, k, v, out=o_l, lse=lse_l, causal=bool(c))
                        args_b = fa.args(q, k, v, out=o_l, lse=lse_l, dout=dout, dq=dq, dk=dk, dv=dv, causal=bool(c))
                        if MODE == "bwd":
                            fa.forward(args_f)
                            fns.append((label, (lambda fa=fa, b=args_b: fa.backward(b))))
                        else:
                            fns.append((label, (lambda fa=fa, f=args_f, b=args_b: (fa.forward(f), fa.backward(b)))))
                    if a.py:
                        qf, kf, vf = (x.clone().requires_grad_(True) for x in (q, k, v))
                        of = flashattn.flash_attn_func(qf, kf, vf, causal=bool(c))
                        grads.append(torch.autograd.grad(of, (qf,), dout, retain_graph=True)[0])
                        if MODE == "bwd":
                            fns.append(("flashattn-py", lambda: torch.autograd.grad(of, (qf, kf, vf), dout, retain_graph=True)))
                        else:
                            fns.append(("flashattn-py", lambda: torch.autograd.grad(
                                flashattn.flash_attn_func(qf, kf, vf, causal=bool(c)), (qf, kf, vf), dout)))
                    qg, kg, vg = (x.clone().requires_grad_(True) for x in (qt, kt, vt))
                    og = F.scaled_dot_product_attention(qg, kg, vg, is_causal=bool(c))
                    dot = dout.transpose(1, 2).contiguous()
                    if MODE == "bwd":
                        fns.append(("torch", lambda: torch.autograd.grad(og, (qg, kg, vg), dot, retain_graph=True)))
                    else:
                        fns.append(("torch", lambda: torch.autograd.grad(
                            F.scaled_dot_product_attention(qg, kg, vg, is_causal=bool(c)), (qg, kg, vg), dot)))
                times = {l: [] for l, _ in fns}
                for r in range(a.rounds + 1):
                    order = fns if r % 2 == 0 else fns[::-1]
                    for l, f in order:
                        time.sleep(0.005)
                        t0 = clock(); f(); t = clock() - t0
                        if r > 0: times[l].append(t)
                with torch.no_grad():
                    if MODE != "fwd":
                        dq_t = torch.autograd.grad(og, (qg,), dot, retain_graph=True)[0].transpose(1, 2)
                        err = (grads[-1].float() - dq_t.float()).abs().max().item()
                    else:
                        o_t = F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(c)).transpose(1, 2)
                        got = out_py if a.py else out
                        err = (got.float() - o_t.float()).abs().max().item()
                flops = 4.0 * a.batch * a.heads * s * s * d * (0.5 if c else 1.0) * {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}[MODE]
                med = {l: statistics.median(t) for l, t in times.items()}
                mn = {l: min(t) for l, t in times.items()}
                row = [dt, str(d), str(s), str(c)] + [f"{flops/med[l]*1e-9:.0f} ({mn[l]*1e3:.1f})" for l, _ in fns] + [f"{med['torch']/med[l]:.2f}x" for l in ours]
                print(" | ".join(row) + f"  err {err:.1e}", flush=True)
                for l, t in times.items():
                    impl = "torch-sdpa-cpu" if l == "torch" else "flashattn-py" if l in PY else "flashattn"
                    cell = {"impl": impl, "label": l,
                            "mode": MODE, "causal": bool(c), "dtype": dt, "hdim": d,
                            "seqlen": s, "batch": a.batch, "heads": a.heads, "threads": a.threads,
                            "gflops": round(flops / med[l] * 1e-9, 2), "gflops_best": round(flops / mn[l] * 1e-9, 2),
                            "ms": round(med[l] * 1e3, 3), "ms_min": round(mn[l] * 1e3, 3), "reps": len(t),
                            "clock": "thread_cpu" if a.cpu_time else "wall"}
                    if l != "torch":
                        cell["path"] = "cpu"
                        cell["vs_torch"] = round(med["torch"] / med[l], 3)
                    rows.append(cell)
if a.json:
    model, isa = cpu_info()
    here = os.path.dirname(os.path.abspath(__file__))
    commit = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    record = {"gpu": None, "cpu": model, "cpu_isa": isa, "cores": os.cpu_count(), "commit": commit,
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "libs": {l: p for l, p in (x.split("=", 1) for x in a.lib)}, "rounds": a.rounds, "rows": []}
    if a.append and os.path.exists(a.json):
        record = json.load(open(a.json))
    record.setdefault("load_avg", []).append(open("/proc/loadavg").read().split()[:3])
    record["rows"] += rows
    json.dump(record, open(a.json, "w"), indent=1)
