"""GPU benchmark: flashattn side by side with PyTorch SDPA's cuDNN and flash (FlashAttention-2)
backends, in one process, as docs/BENCHMARK.md (shared/docs) describes. Writes one JSON file.

Parts (--parts, all by default):
  grid      the standard grid (--modes, --causal, --dtypes, --hdims, --seqlens)
  gqa       GQA/MQA: bf16, hdim 128, causal, 32 query heads over 8, 4, 1 KV heads, seqlen 2k/4k/16k
  varlen    variable-length batches: bf16, hdim 128, causal, 16 heads, lengths uniform 128..4096 (seed 0)
            packed to 32k tokens
  decode    KV-cache decode (flash_attn_with_kvcache, path="decode"): bf16, GQA 32/8, hdim 128, 1 query
            token (4 in a few speculative-decoding rows), cache lengths x batches 1x8k, 1x32k, 1x128k,
            8x32k, 32x8k, 128x2k, contiguous and paged (pages of 16, 64, 256, shuffled), beside SDPA's
            cuDNN and flash backends on the contiguous cache; each timed inside a CUDA graph of 20 calls,
            median of 15 replays, tbps = bytes of K and V read / time per call; plus the ceiling rows
            (impl "ceiling"): a device-to-device copy and a read-only pass
  overhead  host overhead: µs per call of a tiny problem called 300 times back to back
Every grid, GQA and varlen cell times the library through the C API on preallocated buffers
(impl flashattn) and through flashattn.flash_attn_func with autograd, as a PyTorch user calls it
(impl flashattn-py), interleaved with the PyTorch rows. Decode cells time flashattn-py alone (the C API
wrapper has no KV-cache call).

  python3 bench/bench_gpu.py --out results.json [--parts grid,gqa,varlen,decode,overhead] [--modes fwd,bwd]
      [--hdims 64,128,256] [--seqlens 512,...,16384] [--dtypes bf16] [--reps 30] [--lib build/libflashattn_c.so]
      [--path auto|sm90|sm80|...]   (the family flashattn's grid, GQA and varlen rows run on; default auto)
  python3 bench/bench_gpu.py --smoke --out /tmp/x.json [--lib cpu-build/libflashattn_c.so]
      one tiny cell of each part on CPU tensors with a perf_counter timer (rows that need CUDA skip)
"""
import argparse
import contextlib
import datetime
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
from flashattn_ctypes import FlashAttn  # noqa: E402
from summarize import markdown  # noqa: E402

try:
    import flashattn
except ImportError as e:  # the flashattn-py rows need the package: pip install --no-build-isolation ./python
    flashattn = None
    FLASHATTN_IMPORT_ERROR = str(e)

DT = {"bf16": torch.bfloat16, "fp16": torch.float16}
SDPA_BACKENDS = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("torch-flash", SDPBackend.FLASH_ATTENTION))
PARTS = ("grid", "gqa", "varlen", "decode", "overhead")


# ---- timing -----------------------------------------------------------------------------------------

class Timer:
    """Times one call: CUDA events around it with the GPU idle before (device "cuda"), or
    perf_counter around it (device "cpu", for --smoke)."""

    def __init__(self, device):
        self.device = device

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def one_call_ms(self, fn):
        if self.device != "cuda":
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b)

    def median_ms_each(self, fns, reps=30, warmup=5):
        """Median time of one call of each function. The calls are interleaved (rep r calls every
        function once, in the order balanced_orders gives), so clock and temperature drift during a
        cell reaches every implementation alike instead of deciding a ratio, and so does whatever a
        call leaves behind for the next one."""
        for fn in fns:
            for _ in range(warmup):
                fn()
        self.sync()
        times = [[] for _ in fns]
        orders = balanced_orders(len(fns))
        for r in range(rounded_reps(reps, len(orders))):
            for i in orders[r % len(orders)]:
                times[i].append(self.one_call_ms(fns[i]))
        return [sorted(t)[len(t) // 2] for t in times]

    def median_ms(self, fn, reps=30):
        return self.median_ms_each([fn], reps)[0]


def balanced_orders(n):
    """Orders of n implementations, one per rep, in which each implementation follows every other
    one equally often (a Williams design: the rows of a Latin square whose neighbours cover each
    ordered pair once; for odd n the rows and their reversals).

    Why it matters: a call inherits the state the one before it left. The autograd engine's device
    thread runs every backward timed through torch.autograd.grad (flashattn-py, cuDNN, torch-flash)
    and sleeps while a C-API row runs; woken after that longer sleep it reached our backward node
    70-270 µs after the call instead of 50-110 (H200, 2026-12-02). With the old order (forward on
    even reps, reversed on odd) flashattn-py always came right after the C-API row, so only it paid
    that: 0 of 8 short backward cells at or above torch-flash with the C-API row in the run, 5 of 8
    (the rest 0.96-0.99) without it, same build, same machine (docs/python.md)."""
    if n == 0:
        return [[]]
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        if len(first) % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    rows = [[(i + k) % n for i in first] for k in range(n)]
    return rows + [r[::-1] for r in rows] if n % 2 else rows


def rounded_reps(reps, period):
    """reps rounded up to a whole number of the balanced orders' rounds."""
    return -(-reps // period) * period


def warm_up_gpu(seconds=2.0):
    """Bring the GPU to its working clocks before the first cell (a cold GPU starts at idle clocks,
    which used to penalize whichever implementation the first cell timed first)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def ceilings(timer, reps):
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bm = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm = timer.median_ms(lambda: a @ bm, reps)
    x = torch.randn(1 << 30, device="cuda", dtype=torch.float16)  # 2 GiB
    y = torch.empty_like(x)
    cp = timer.median_ms(lambda: y.copy_(x), reps)
    return {"bf16_matmul_tflops_8192cube": 2 * n**3 / mm / 1e9, "device_copy_tbps": 2 * x.numel() * 2 / cp / 1e9}


# ---- cells: what one timed comparison runs on ---------------------------------------------------------

def attention_flops(mode, causal, heads, hdim, seqlens):
    """Forward 4·heads·s²·hdim per sequence (halved for causal), backward 2.5 × that."""
    f = sum(4.0 * heads * s * s * hdim / (2 if causal else 1) for s in seqlens)
    return f * (2.5 if mode == "bwd" else 1.0)


def grid_cells(args):
    for mode in args.modes.split(","):
        for dtype in args.dtypes.split(","):
            for causal in (bool(int(c)) for c in args.causal.split(",")):
                for d in (int(x) for x in args.hdims.split(",")):
                    for s in (int(x) for x in args.seqlens.split(",")):
                        yield dict(mode=mode, causal=causal, dtype=dtype, hdim=d, seqlen=s, batch=16384 // s,
                                   heads=2048 // d)


def gqa_cells(args):
    for mode in args.modes.split(","):
        for heads_kv in (8, 4, 1):
            for s in (2048, 4096, 16384):
                yield dict(mode=mode, causal=True, dtype="bf16", hdim=128, seqlen=s, batch=32768 // s, heads=32,
                           heads_kv=heads_kv)


def varlen_lengths(total=32768, low=128, high=4096, seed=0):
    """Lengths uniform in [low, high] (fixed seed) until `total` tokens; the last takes the remainder."""
    rng, lengths = random.Random(seed), []
    while sum(lengths) < total:
        lengths.append(min(rng.randint(low, high), total - sum(lengths)))
    return lengths


def varlen_cells(args, lengths):
    for mode in args.modes.split(","):
        yield dict(mode=mode, causal=True, dtype="bf16", hdim=128, seqlen=round(sum(lengths) / len(lengths)),
                   batch=len(lengths), heads=16, varlen=True, lengths=lengths)


def smoke_cells(part, args):
    """One tiny cell of a part, for --smoke on CPU tensors."""
    modes = args.modes.split(",")
    if part == "grid":
        return [dict(mode=m, causal=True, dtype="bf16", hdim=64, seqlen=128, batch=2, heads=2) for m in modes]
    if part == "gqa":
        return [dict(mode=m, causal=True, dtype="bf16", hdim=64, seqlen=128, batch=1, heads=4, heads_kv=1)
                for m in modes]
    if part == "decode":
        return [dict(mode="decode", dtype="bf16", hdim=64, batch=2, heads=4, heads_kv=2, seqlen_q=q, seqlen_k=100,
                     page_sizes=(0, 16)) for q in (1, 4)]
    lengths = varlen_lengths(total=512, low=16, high=256)
    return [dict(c, hdim=64, heads=2) for c in varlen_cells(args, lengths)]


class Inputs:
    """Fresh random inputs of one cell: (batch, seqlen, heads, hdim) tensors, or for varlen packed
    (total, heads, hdim) ones with int32 offsets."""

    def __init__(self, cell, device):
        dt, d, h, hk = DT[cell["dtype"]], cell["hdim"], cell["heads"], cell.get("heads_kv", cell["heads"])
        self.varlen = cell.get("varlen", False)
        if self.varlen:
            lengths = cell["lengths"]
            total, self.max_seqlen = sum(lengths), max(lengths)
            offsets = [0]
            for n in lengths:
                offsets.append(offsets[-1] + n)
            self.cu_seqlens = torch.tensor(offsets, dtype=torch.int32, device=device)
            shapes = ((total, h, d), (total, hk, d))
        else:
            b, s = cell["batch"], cell["seqlen"]
            shapes = ((b, s, h, d), (b, s, hk, d))
        self.q = torch.randn(shapes[0], device=device, dtype=dt)
        self.k, self.v = (torch.randn(shapes[1], device=device, dtype=dt) for _ in range(2))
        self.dout = torch.randn_like(self.q) if cell["mode"] == "bwd" else None

    def lse_shape(self):
        q = self.q
        return (q.shape[1], q.shape[0]) if self.varlen else (q.shape[0], q.shape[2], q.shape[1])

    def varlen_kwargs(self):
        if not self.varlen:
            return {}
        return dict(cu_seqlens_q=self.cu_seqlens, cu_seqlens_k=self.cu_seqlens, max_seqlen_q=self.max_seqlen,
                    max_seqlen_k=self.max_seqlen)


def bench_cell(env, cell, variants=()):
    """Every implementation of one cell prepared first (a callable, or the error row), then all timed
    together, interleaved. The library through the C API first, then each build variant and
    flashattn-py on the same inputs, checked against the first's outputs."""
    x = Inputs(cell, env.device)
    base = {k: v for k, v in cell.items() if k != "lengths"}
    preps = []
    if env.fa is not None:
        preps.append(prepare_library(env.fa, "flashattn", cell, x, base, env.path))
        for name, fv, family in variants:
            preps.append(prepare_library(fv or env.fa, f"flashattn:{name}", cell, x, base, family or env.path))
    py = prepare_python(cell, x, base, env.path)
    if cell["mode"] == "bwd" and preps and "path" in preps[0]["row"] and "path" in py["row"]:
        py["row"]["path"] = preps[0]["row"]["path"]  # the same library picks the same backward family
    preps.append(py)
    if env.device == "cuda":
        if x.varlen:
            preps.append(prepare_torch_flash_varlen(cell, x, base))
            if cell["mode"] == "bwd":
                preps.append(prepare_torch_flash_varlen(cell, x, base, autograd=True))
        else:
            for impl, backend in SDPA_BACKENDS:
                preps.append(prepare_sdpa(impl, backend, cell, x, base))

    timed = [p for p in preps if "fn" in p]
    fl = attention_flops(cell["mode"], cell["causal"], cell["heads"], cell["hdim"],
                         cell.get("lengths") or [cell["seqlen"]] * cell["batch"])
    for p, ms in zip(timed, env.timer.median_ms_each([p["fn"] for p in timed], env.reps)):
        p["row"].update(tflops=fl / ms / 1e9, ms=ms)
    ref = preps[0].get("outputs") if preps else None
    for p in preps[1:]:
        if ref is not None and p.get("outputs") is not None:
            p["row"]["max_rel_diff"] = max(
                ((g.float() - r.float()).abs().max() / r.float().abs().max().clamp_min(1e-30)).item()
                for g, r in zip(p["outputs"], ref))
    return [p["row"] for p in preps]


# ---- the implementations of a cell ----------------------------------------------------------------

def prepare_library(fa, impl, cell, x, base, family):
    """One build of the library (the main one, or a variant: another libflashattn_c.so, e.g. a
    tile-shape experiment) through the C API on preallocated buffers: {"row", "fn", "outputs"} where
    outputs are the tensors fn writes (out, lse or dq, dk, dv), filled by one call here; {"row"}
    with the error when the call failed. family: the kernel family asked for (--path)."""
    device, causal = x.q.device.type, cell["causal"]
    out = torch.empty(*x.q.shape[:-1], x.v.shape[-1], device=device, dtype=x.q.dtype)
    lse = torch.empty(x.lse_shape(), device=device)
    try:
        a = fa.args(x.q, x.k, x.v, out=out, lse=lse, causal=causal, path=family, **x.varlen_kwargs())
        # What the C calls read or write by pointer stays alive as long as the returned dict: the
        # workspaces, and out and lse, which the backward reads (freed, their memory would be reused
        # by the next cell's allocations and the backward would read whatever those hold).
        keep = [fa.with_workspace(a, False, device), out, lse]
        path = fa.path(a)
        if cell["mode"] == "fwd":
            fn = lambda: fa.forward(a)  # noqa: E731
            got = (out, lse)
        else:
            fa.forward(a)
            dq, dk, dv = torch.empty_like(x.q), torch.empty_like(x.k), torch.empty_like(x.v)
            ab = fa.args(x.q, x.k, x.v, out=out, lse=lse, dout=x.dout, dq=dq, dk=dk, dv=dv, causal=causal,
                         path=family, **x.varlen_kwargs())
            keep.append(fa.with_workspace(ab, True, device))
            path = fa.path(ab, backward=True)
            fn = lambda: fa.backward(ab)  # noqa: E731
            got = (dq, dk, dv)
        fn()
        Timer(device).sync()
        return {"row": dict(impl=impl, path=path, **base), "fn": fn, "outputs": got, "keep": keep}
    except RuntimeError as e:
        return {"row": dict(impl=impl, **base, error=str(e)[:300])}


def prepare_python(cell, x, base, family):
    """flashattn.flash_attn_func (or flash_attn_varlen_func) as a PyTorch user calls it: the forward
    on plain tensors (as the SDPA rows), the backward as torch.autograd.grad of the output (the
    forward outside the timed call, as the SDPA rows). family: the kernel family asked for (--path)."""
    if flashattn is None:
        return {"row": dict(impl="flashattn-py", **base, error=f"import flashattn failed: {FLASHATTN_IMPORT_ERROR}")}
    causal = cell["causal"]
    if x.varlen:
        m = x.max_seqlen
        call = lambda q, k, v: flashattn.flash_attn_varlen_func(  # noqa: E731
            q, k, v, x.cu_seqlens, x.cu_seqlens, m, m, causal=causal, path=family)
    else:
        call = lambda q, k, v: flashattn.flash_attn_func(q, k, v, causal=causal, path=family)  # noqa: E731
    path = flashattn.forward_path(x.q, x.k, x.v, causal=causal, path=family, **x.varlen_kwargs())
    try:
        if cell["mode"] == "fwd":
            fn = lambda: call(x.q, x.k, x.v)  # noqa: E731
            got = (fn(),)
        else:
            qg, kg, vg = (t.detach().requires_grad_() for t in (x.q, x.k, x.v))
            o = call(qg, kg, vg)
            fn = lambda: torch.autograd.grad(o, (qg, kg, vg), x.dout, retain_graph=True)  # noqa: E731
            got = fn()
        return {"row": dict(impl="flashattn-py", path=path, **base), "fn": fn, "outputs": got}
    except RuntimeError as e:
        return {"row": dict(impl="flashattn-py", **base, error=str(e)[:300])}


def prepare_sdpa(impl, backend, cell, x, base):
    """PyTorch SDPA with one backend on (b, h, s, d) views of the same (b, s, h, d) storage:
    {"row", "fn"} (fn is one call), or {"row"} with the error."""
    causal, gqa = cell["causal"], "heads_kv" in cell
    qt, kt, vt = (t.transpose(1, 2) for t in (x.q, x.k, x.v))

    def fwd(q=qt, k=kt, v=vt):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    try:
        if cell["mode"] == "fwd":
            fwd()
            fn = fwd
        else:
            qg, kg, vg = (t.detach().requires_grad_() for t in (qt, kt, vt))
            o = fwd(qg, kg, vg)
            do = x.dout.transpose(1, 2)
            fn = lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)  # noqa: E731
            fn()
        return {"row": dict(impl=impl, **base), "fn": fn}
    except RuntimeError as e:
        return {"row": dict(impl=impl, **base, error=str(e)[:200])}


def prepare_torch_flash_varlen(cell, x, base, autograd=False):
    """PyTorch's FlashAttention-2 varlen entry (SDPA has no varlen front door): the aten ops with
    cum_seq_q / cum_seq_k; the backward is timed alone on the forward's outputs. autograd (backward
    only; impl torch-flash-autograd): torch.autograd.grad on the forward's output instead of the
    backward op (aten._flash_attention_forward is differentiable: the route nested tensors take), so
    that it pays the autograd engine as flashattn-py does; the protocol's torch-flash row calls the
    op directly."""
    m, cu, causal = x.max_seqlen, x.cu_seqlens, cell["causal"]
    impl = "torch-flash-autograd" if autograd else "torch-flash"
    fwd = lambda q=x.q, k=x.k, v=x.v: torch.ops.aten._flash_attention_forward(  # noqa: E731
        q, k, v, cu, cu, m, m, 0.0, causal, False)
    try:
        if cell["mode"] == "fwd":
            fwd()
            fn = fwd
        elif autograd:
            q, k, v = (t.detach().requires_grad_() for t in (x.q, x.k, x.v))
            out = fwd(q, k, v)[0]
            fn = lambda: torch.autograd.grad(out, (q, k, v), x.dout, retain_graph=True)  # noqa: E731
            fn()
        else:
            out, lse, rng_state, unused, _ = fwd()
            fn = lambda: torch.ops.aten._flash_attention_backward(  # noqa: E731
                x.dout, x.q, x.k, x.v, out, lse, cu, cu, m, m, 0.0, causal, rng_state, unused)
            fn()
        return {"row": dict(impl=impl, **base), "fn": fn}
    except RuntimeError as e:
        return {"row": dict(impl=impl, **base, error=str(e)[:200])}


# ---- decode: the KV-cache call ------------------------------------------------------------------------

DECODE_SHAPES = ((1, 8192), (1, 32768), (1, 131072), (8, 32768), (32, 8192), (128, 2048))  # (batch, cache length)
DECODE_PAGE_SIZES = (0, 16, 64, 256)  # 0: contiguous
SPECULATIVE_SHAPES = ((1, 32768), (32, 8192))  # also with 4 query tokens
GRAPH_CALLS, GRAPH_REPLAYS = 20, 15
L2_RESIDENT_BYTES = 50e6  # a cache below this can stay in the H200's 60 MB L2 across replays


def decode_cells(shapes=None):
    """One cell per (batch, cache length, query tokens); its rows cover every page size. Non-causal:
    at 4 query tokens a causal mask changes no byte read, and SDPA's is_causal would align it
    top-left. shapes: "batch:seqlen_k:seqlen_q,..." (the decode tools' --shapes), default the rows of
    BENCHMARK.md."""
    if shapes is None:
        shapes = [(b, n, 1) for b, n in DECODE_SHAPES] + [(b, n, 4) for b, n in SPECULATIVE_SHAPES]
    else:
        shapes = [tuple(int(v) for v in s.split(":")) for s in shapes.split(",")]
    for batch, seqlen_k, seqlen_q in shapes:
        yield dict(mode="decode", dtype="bf16", hdim=128, batch=batch, heads=32, heads_kv=8, seqlen_q=seqlen_q,
                   seqlen_k=seqlen_k, page_sizes=DECODE_PAGE_SIZES)


def decode_kv_bytes(cell):
    """Bytes of K and V a call reads: every cached key of every sequence, for each kv head."""
    element = torch.finfo(DT[cell["dtype"]]).bits // 8
    return 2 * cell["batch"] * cell["seqlen_k"] * cell["heads_kv"] * cell["hdim"] * element


class DecodeInputs:
    """q and one logical cache (K, V: (batch, seqlen_k, heads_kv, hdim)), contiguous and as paged
    copies: pages of each size dealt to the sequences in a random order (torch.randperm)."""

    def __init__(self, cell, device):
        dt, b, n, hk, d = DT[cell["dtype"]], cell["batch"], cell["seqlen_k"], cell["heads_kv"], cell["hdim"]
        self.q = torch.randn(b, cell["seqlen_q"], cell["heads"], d, device=device, dtype=dt)
        self.k = torch.randn(b, n, hk, d, device=device, dtype=dt)
        self.v = torch.randn(b, n, hk, d, device=device, dtype=dt)
        self.cache_seqlens = torch.full((b,), n, dtype=torch.int32, device=device)
        self.paged = {}
        for page in cell["page_sizes"]:
            if page == 0:
                continue
            pages = -(-n // page)
            pool = torch.randperm(b * pages, device=device)
            block_table = pool.view(b, pages).to(torch.int32)
            self.paged[page] = (block_table, self._scatter(self.k, page, pool), self._scatter(self.v, page, pool))

    @staticmethod
    def _scatter(x, page, pool):
        """x (batch, n, heads, d) split into pages, page j of sequence b stored at pool[b * pages + j]; the
        rows of a last page past n are NaN (a read of them shows in max_rel_diff)."""
        b, n, h, d = x.shape
        pages = -(-n // page)
        padded = F.pad(x, (0, 0, 0, 0, 0, pages * page - n), value=float("nan"))
        out = torch.empty(b * pages, page, h, d, device=x.device, dtype=x.dtype)
        out[pool] = padded.reshape(b * pages, page, h, d)
        return out


def graph_timed(fn, calls=GRAPH_CALLS):
    """A function timing one replay of a CUDA graph of `calls` calls of fn, in ms per call; falls back to
    the same calls launched eagerly when capture fails (the row then says graph: false)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # outside the capture: plans, workspaces, the allocator
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        run, error = graph.replay, None
    except Exception as e:  # noqa: BLE001 -- any capture failure: time eagerly, say why
        torch.cuda.synchronize()
        graph, error = None, f"cuda graph capture failed: {str(e)[:200]}"

        def run():
            for _ in range(calls):
                fn()

    def one_ms():
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b) / calls
    one_ms.graph, one_ms.graph_error, one_ms.keep = graph is not None, error, graph
    return one_ms


def median_ms_interleaved(timers, replays=GRAPH_REPLAYS):
    """Median per timer over `replays` rounds (rounded up to whole rounds of the orders), each round
    timing every timer once in the balanced order, as Timer.median_ms_each."""
    times = [[] for _ in timers]
    orders = balanced_orders(len(timers))
    for r in range(rounded_reps(replays, len(orders))):
        for i in orders[r % len(orders)]:
            times[i].append(timers[i]())
    return [statistics.median(t) for t in times]


def decode_tbps_beside_cudnn(cell, x, names, timers):
    """The decode tools' timing: graph timers of calls on DecodeInputs x (named by names) and cuDNN's
    call on the same cache, replays interleaved; {name: TB/s}, cuDNN's as ("cudnn", 0)."""
    names, timers = list(names), list(timers)
    cudnn = prepare_sdpa_decode("cudnn", torch.nn.attention.SDPBackend.CUDNN_ATTENTION, cell, x)
    if "fn" in cudnn:
        timers.append(graph_timed(cudnn["fn"]))
        names.append(("cudnn", 0))
    gb = decode_kv_bytes(cell) / 1e9
    return {name: gb / ms for name, ms in zip(names, median_ms_interleaved(timers))}


def decode_row_base(cell, page_size):
    base = {k: v for k, v in cell.items() if k != "page_sizes"}
    base["page_size"] = page_size
    if decode_kv_bytes(cell) < L2_RESIDENT_BYTES:
        base["l2_resident"] = True
    return base


def prepare_flashattn_decode(cell, x, page_size, device):
    """flashattn.flash_attn_with_kvcache on the contiguous or a paged cache; path "decode" on the GPU
    ("auto" does not pick it), "cpu" in --smoke. {"row", "fn", "outputs"} or {"row"} with the error."""
    path = "decode" if device == "cuda" else "cpu"
    base = dict(impl="flashattn-py", path=path, **decode_row_base(cell, page_size))
    if flashattn is None:
        return {"row": dict(base, error=f"import flashattn failed: {FLASHATTN_IMPORT_ERROR}")}
    if page_size == 0:
        k_cache, v_cache, block_table = x.k, x.v, None
    else:
        block_table, k_cache, v_cache = x.paged[page_size]
    fn = lambda: flashattn.flash_attn_with_kvcache(  # noqa: E731
        x.q, k_cache, v_cache, cache_seqlens=x.cache_seqlens, block_table=block_table, path=path)
    try:
        out = fn()
        return {"row": base, "fn": fn, "outputs": (out,)}
    except Exception as e:  # noqa: BLE001 -- an unsupported cell is recorded, not fatal
        return {"row": dict(base, error=str(e)[:300])}


def prepare_sdpa_decode(impl, backend, cell, x):
    """SDPA with one backend on the contiguous cache: q (b, 32, s_q, d) against K/V (b, 8, L, d) with
    enable_gqa=True, or K/V repeated to 32 heads when the backend refuses GQA (row "gqa": "repeated";
    tbps still counts the 8 kv heads' bytes, the work the call has to do)."""
    base = dict(impl=impl, **decode_row_base(cell, 0))
    q = x.q.transpose(1, 2)
    k, v = x.k.transpose(1, 2), x.v.transpose(1, 2)
    group = cell["heads"] // cell["heads_kv"]
    errors = []
    for gqa in ("enable_gqa", "repeated"):
        if gqa == "repeated":
            k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))

        def fn(k=k, v=v, enable=gqa == "enable_gqa"):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=enable)
        try:
            out = fn()
            return {"row": dict(base, gqa=gqa), "fn": fn, "outputs": (out.transpose(1, 2),)}
        except (RuntimeError, TypeError) as e:  # TypeError: a PyTorch without enable_gqa
            errors.append(f"{gqa}: {str(e)[:150]}")
    return {"row": dict(base, error="; ".join(errors))}


def bench_decode_cell(env, cell):
    """The rows of one decode cell (decode_cell_rows), or when the cell as a whole fails (out of memory,
    a failing replay) one error row per layout, and the run goes on."""
    try:
        return decode_cell_rows(env, cell)
    except Exception as e:  # noqa: BLE001
        return [dict(impl="flashattn-py", **decode_row_base(cell, page), error=f"cell failed: {str(e)[:300]}")
                for page in cell["page_sizes"]]


def decode_cell_rows(env, cell):
    """Every layout and implementation of one decode cell on the same q and logical cache, timed together
    (interleaved), each inside a CUDA graph on the GPU; max_rel_diff of each against the first
    implementation that ran on the contiguous cache."""
    x = DecodeInputs(cell, env.device)
    preps = [prepare_flashattn_decode(cell, x, page, env.device) for page in cell["page_sizes"]]
    if env.device == "cuda":
        preps += [prepare_sdpa_decode(impl, backend, cell, x) for impl, backend in SDPA_BACKENDS]
    timed = [p for p in preps if "fn" in p]
    if env.device == "cuda":
        timers = [graph_timed(p["fn"]) for p in timed]
        for p, t in zip(timed, timers):
            p["row"]["graph"] = t.graph
            if t.graph_error:
                p["row"]["graph_error"] = t.graph_error
        times = median_ms_interleaved(timers)
    else:
        times = env.timer.median_ms_each([p["fn"] for p in timed], env.reps)
    for p, ms in zip(timed, times):
        p["row"].update(tbps=decode_kv_bytes(cell) / ms / 1e9, ms=ms)
    ref = next((p["outputs"][0] for p in preps if "outputs" in p and p["row"]["page_size"] == 0), None)
    for p in preps:
        if ref is not None and "outputs" in p and p["outputs"][0] is not ref:
            got, want = p["outputs"][0].float(), ref.float()
            p["row"]["max_rel_diff"] = ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
    return [p["row"] for p in preps]


def ceiling_rows(env):
    """What the memory system gives a streaming kernel on this GPU, timed as the decode cells (a graph of 20
    calls, median of 15 replays): a 2 GiB device-to-device copy (bytes read + written) and read-only
    passes over a 4 GiB bf16 tensor (torch.sum and amax; bytes read)."""
    src = torch.randn(1 << 30, device="cuda", dtype=torch.float16)  # 2 GiB
    dst = torch.empty_like(src)
    big = torch.randn(1 << 31, device="cuda", dtype=torch.bfloat16)  # 4 GiB
    ops = (("copy", "copy_", lambda: dst.copy_(src), 2 * src.numel() * 2),
           ("read", "sum", lambda: big.sum(), big.numel() * 2),
           ("read", "amax", lambda: big.amax(), big.numel() * 2))
    timers = [graph_timed(fn) for _, _, fn, _ in ops]
    rows = []
    for (mode, op, _, nbytes), t, ms in zip(ops, timers, median_ms_interleaved(timers)):
        rows.append(dict(impl="ceiling", mode=mode, op=op, bytes=nbytes, tbps=nbytes / ms / 1e9, ms=ms, graph=t.graph))
    return rows


def print_decode_rows(cell, rows):
    nan = float("nan")
    for r in rows:
        where = f"page {r['page_size']:3d}" if r["page_size"] else "contiguous"
        print(f"decode b={cell['batch']:3d} L={cell['seqlen_k']:6d} q={cell['seqlen_q']} {where:10s} {r['impl']:14s} "
              f"{r.get('tbps', nan):6.3f} TB/s  {r.get('ms', nan) * 1e3:8.1f} µs"
              f"{'  (L2)' if r.get('l2_resident') else ''}  {r.get('error', '')}", flush=True)


# ---- host overhead ------------------------------------------------------------------------------------

OVERHEAD_SHAPE = dict(batch=1, seqlen=128, heads=8, hdim=64)


def overhead_rows(env, calls=300, rounds=7):
    """µs per call of a tiny problem called `calls` times back to back, wall clock (synchronize
    before and after), forward and forward+backward; median of `rounds` rounds, interleaved."""
    b, s, h, d = (OVERHEAD_SHAPE[k] for k in ("batch", "seqlen", "heads", "hdim"))
    q, k, v = (torch.randn(b, s, h, d, device=env.device, dtype=torch.bfloat16) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    dout = torch.randn_like(q)
    impls = {}
    if flashattn is not None:
        impls["flashattn-py"] = (lambda: flashattn.flash_attn_func(q, k, v),
                                 lambda: torch.autograd.grad(flashattn.flash_attn_func(qg, kg, vg), (qg, kg, vg),
                                                             dout))
    else:
        print(f"warning: no flashattn-py overhead rows: import flashattn failed ({FLASHATTN_IMPORT_ERROR})")
    if env.device == "cuda":
        qt, kt, vt, qgt, kgt, vgt = (t.transpose(1, 2) for t in (q, k, v, qg, kg, vg))
        dt = dout.transpose(1, 2)
        for impl, backend in SDPA_BACKENDS:
            impls[impl] = (
                lambda: F.scaled_dot_product_attention(qt, kt, vt),
                lambda: torch.autograd.grad(F.scaled_dot_product_attention(qgt, kgt, vgt), (qg, kg, vg), dt))
    rows = []
    for mode, which in (("overhead-fwd", 0), ("overhead-fwd-bwd", 1)):
        loops = {}
        for impl, fns in impls.items():
            backend = dict(SDPA_BACKENDS).get(impl)
            loops[impl] = back_to_back(fns[which], calls, backend, env.timer)
        samples = {impl: [] for impl in loops}
        for _ in range(rounds):
            for impl, loop in loops.items():
                samples[impl].append(loop())
        for impl, us in samples.items():
            row = dict(impl=impl, mode=mode, dtype="bf16", **OVERHEAD_SHAPE, calls=calls)
            if all(u is None for u in us):
                row["error"] = "not supported here"
            else:
                row["us_per_call"] = statistics.median(u for u in us if u is not None)
            rows.append(row)
    return rows


def back_to_back(fn, calls, backend, timer):
    """A function timing `calls` calls of fn in a row: µs per call, or None when fn fails. The
    SDPA backend (if any) is selected once around the loop, not per call."""
    def loop():
        try:
            with sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext():
                for _ in range(calls // 10):
                    fn()
                timer.sync()
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                timer.sync()
                return (time.perf_counter() - start) / calls * 1e6
        except RuntimeError:
            return None
    return loop


# ---- run time estimate --------------------------------------------------------------------------------

CELL_SETUP_S = 1.0  # inputs, first calls (cuDNN plans), empty_cache: per cell, measured runs ~0.5-1.5 s


def estimate_seconds(plan, reps, results_file):
    """Expected run time: per cell (reps + warm-up + preparation calls) × the sum of its
    implementations' times, from an earlier results file's per-cell ms (the grid) or its median
    TFLOP/s for the cell's mode (other cells), plus a fixed setup per cell. Decode cells: the graph
    replays × the earlier run's ms of the cell's rows, or their bytes at 3 TB/s."""
    rows = json.load(open(results_file))["rows"] if results_file else []
    ms_of = {}
    for r in rows:
        if "ms" in r and r["impl"] in ("flashattn", "cudnn", "torch-flash") and r["mode"] in ("fwd", "bwd"):
            key = (r["mode"], r["causal"], r["hdim"], r["seqlen"])
            ms_of.setdefault(key, {})[r["impl"]] = r["ms"]
    tflops = {m: statistics.median([r["tflops"] for r in rows if r.get("mode") == m and "tflops" in r] or [200.0])
              for m in ("fwd", "bwd")}
    decode_ms = {}
    for r in rows:
        if r.get("mode") == "decode" and "ms" in r:
            decode_ms.setdefault((r["batch"], r["seqlen_q"], r["seqlen_k"]), []).append(r["ms"])
    total = 0.0
    for part, cells in plan:
        if part == "overhead":
            total += 10.0  # 2 modes × 3 impls × 7 rounds × 330 calls of ≤ 1 ms, and warm-up
            continue
        if part == "decode":
            total += 15.0  # the ceiling rows: 8 GiB of tensors, three graphs of 20 calls over 2-4 GiB
            for c in cells:
                known = decode_ms.get((c["batch"], c["seqlen_q"], c["seqlen_k"]))
                per_call = (sum(known) if known else  # or every layout and both SDPA rows at 3 TB/s
                            (len(c["page_sizes"]) + 2) * decode_kv_bytes(c) / 3e12 * 1e3)
                calls = 3 + GRAPH_REPLAYS * GRAPH_CALLS  # warm-up, then the replays (capture runs nothing)
                total += calls * per_call / 1e3 + CELL_SETUP_S
            continue
        for c in cells:
            known = ms_of.get((c["mode"], c["causal"], c["hdim"], c["seqlen"]))
            if part == "grid" and known:
                one = sum(known.values()) + known.get("flashattn", 0.0)  # flashattn-py ≈ flashattn
            else:
                fl = attention_flops(c["mode"], c["causal"], c["heads"], c["hdim"],
                                     c.get("lengths") or [c["seqlen"]] * c["batch"])
                one = 4 * fl / tflops[c["mode"]] / 1e9
            total += (reps + 5 + 3) * one / 1e3 + CELL_SETUP_S
    return total


def snapshot_commit():
    """The commit a device snapshot was made from (scripts/device_snapshot.sh writes COMMIT; the copy's
    own git HEAD, if any, is stale), or None outside a snapshot."""
    try:
        return open(os.path.join(BENCH_DIR, "..", "COMMIT")).read().strip() or None
    except OSError:
        return None


def latest_results_file():
    """The newest benchmark results file (one with rows; other records, e.g. gpu-checks, are skipped)."""
    files = sorted(f for f in glob.glob(os.path.join(BENCH_DIR, "results", "*h200*.json"))
                   if "variants" not in f and "recheck" not in f)
    for f in reversed(files):
        try:
            if "rows" in json.load(open(f)):
                return f
        except (OSError, ValueError):
            pass
    return None


# ---- main ---------------------------------------------------------------------------------------------

class Env:
    """Where and how the cells run: device, timer, repetitions, the C library (or None), and the kernel
    family (--path) the grid, GQA and varlen cells ask flashattn for."""

    def __init__(self, device, reps, fa, path="auto"):
        self.device, self.reps, self.fa, self.path, self.timer = device, reps, fa, path, Timer(device)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    p.add_argument("--modes", default="fwd,bwd", help="grid, gqa and varlen (decode has its own)")
    p.add_argument("--causal", default="0,1", help="grid only")
    p.add_argument("--dtypes", default="bf16", help="grid only")
    p.add_argument("--hdims", default="64,128,256", help="grid only")
    p.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384", help="grid only")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--path", default="auto", help="kernel family flashattn runs the grid, GQA and varlen cells on "
                   "(auto, sm90, sm80, cpu, ...): a family that refuses a cell gives its rows the reason as the error")
    p.add_argument("--lib", default=None, help="libflashattn_c.so (default $FLASHATTN_C_LIB or build/...)")
    p.add_argument("--anchors", default=None, help="anchors JSON to print goal ratios beside ours")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=[LIB][@PATH]",
                   help="also time another build of the library (e.g. a tuning variant) in the same run, and/or "
                   "another kernel family of it: sm80=@sm80 runs the main library on path sm80 beside --path's")
    p.add_argument("--estimate-from", default=None, help="results JSON for the run time estimate "
                   "(default: the newest bench/results/*h200*.json)")
    p.add_argument("--smoke", action="store_true", help="one tiny cell of each part on CPU tensors, "
                   "perf_counter timer; rows that need CUDA skip; --lib optional (a CPU build)")
    return p.parse_args()


def parse_variant(text):
    """NAME=[LIB][@PATH] → (name, the library or None for the main one, the family or None for --path's)."""
    name, _, spec = text.partition("=")
    lib, _, family = spec.partition("@")
    if not name or not (lib or family):
        sys.exit(f"--variant {text!r}: expected NAME=LIB, NAME=@PATH or NAME=LIB@PATH")
    return name, FlashAttn(lib) if lib else None, family or None


def plan_of(args):
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        sys.exit(f"unknown --parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    if args.smoke:
        return [(p, [] if p == "overhead" else smoke_cells(p, args)) for p in parts]
    makers = {"grid": lambda: list(grid_cells(args)), "gqa": lambda: list(gqa_cells(args)),
              "varlen": lambda: list(varlen_cells(args, varlen_lengths())), "decode": lambda: list(decode_cells()),
              "overhead": lambda: []}
    return [(p, makers[p]()) for p in parts]


def load_library(args):
    if args.smoke and args.lib is None:
        print("smoke: no --lib given: the C API rows (impl flashattn) skip")
        return None
    try:
        return FlashAttn(args.lib)
    except OSError as e:
        print(f"warning: no C API rows (impl flashattn): cannot load the C library ({e}); pass --lib")
        return None


def main():
    args = parse_args()
    device = "cpu" if args.smoke else "cuda"
    if flashattn is None:
        print(f"warning: import flashattn failed ({FLASHATTN_IMPORT_ERROR}): the flashattn-py rows carry the "
              f"error; install the package on this machine: pip install --no-build-isolation ./python")
    plan = plan_of(args)
    reps = 3 if args.smoke else args.reps
    if not args.smoke:
        source = args.estimate_from or latest_results_file()
        est = estimate_seconds(plan, reps, source)
        cells = sum(len(c) for _, c in plan)
        print(f"plan: {cells} cells in parts {args.parts}; expected run time ≈ {est / 60:.1f} min "
              f"(from {os.path.basename(source) if source else 'a default throughput'})", flush=True)
    env = Env(device, reps, load_library(args), args.path)
    variants = [parse_variant(nv) for nv in args.variant]
    start = time.perf_counter()
    if not args.smoke:
        warm_up_gpu()
    torch.manual_seed(0)
    commit = os.environ.get("FLASHATTN_COMMIT") or snapshot_commit() or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=BENCH_DIR).stdout.strip()
    result = {"gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)", "commit": commit,
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version() if device == "cuda" else None,
              "ceilings": ceilings(env.timer, 10) if device == "cuda" else {}, "rows": [],
              "timing": "interleaved: each rep times one call of every implementation (balanced orders: each follows "
                        "every other equally often), "
                        "CUDA events around the call, median per implementation; 2 s GPU warm-up first"}
    for part, cells in plan:
        if part == "varlen" and cells:
            result["varlen_lengths"] = cells[0]["lengths"]  # the rows carry only their mean and count
        if part == "overhead":
            rows = overhead_rows(env, calls=20 if args.smoke else 300, rounds=3 if args.smoke else 7)
            result["rows"].extend(rows)
            for r in rows:
                print(f"{r['mode']:18s} {r['impl']:14s} {r.get('us_per_call', float('nan')):8.1f} µs/call", flush=True)
            continue
        if part == "decode" and device == "cuda":
            rows = ceiling_rows(env)
            result["rows"].extend(rows)
            for r in rows:
                print(f"ceiling {r['mode']:4s} {r['op']:6s} {r['tbps']:6.3f} TB/s", flush=True)
            torch.cuda.empty_cache()
        for cell in cells:
            if part == "decode":
                rows = bench_decode_cell(env, cell)
                print_decode_rows(cell, rows)
            else:
                rows = bench_cell(env, cell, variants)
                print_cell(part, cell, rows)
            result["rows"].extend(rows)
            if device == "cuda":
                torch.cuda.empty_cache()
    result["wall_s"] = time.perf_counter() - start
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    goals = {}
    if args.anchors:
        goals = {(c["mode"], c["causal"], c["hdim"], c["seqlen"]): c for c in json.load(open(args.anchors))["cells"]}
    print()
    print(markdown(result, goals))
    print(f"\nwall time {result['wall_s'] / 60:.1f} min")


def print_cell(part, cell, rows):
    by = {r["impl"]: r.get("tflops", float("nan")) for r in rows}
    nan = float("nan")
    for r in rows:
        if r["impl"].startswith("flashattn:") or "error" in r:
            print(f"    {r['impl']:24s} {r.get('tflops', nan):6.1f}  max_rel_diff {r.get('max_rel_diff', nan):.2e}"
                  f" {r.get('error', '')}", flush=True)
    heads = f"h={cell['heads']}/{cell['heads_kv']}" if "heads_kv" in cell else f"h={cell['heads']}"
    print(f"{part:6s} {cell['mode']} causal={int(cell['causal'])} {cell['dtype']} d={cell['hdim']:3d} "
          f"s={cell['seqlen']:5d} {heads:7s}" + "".join(
              f"  {impl} {by.get(impl, nan):6.1f}" for impl in ("flashattn", "flashattn-py", "cudnn", "torch-flash")),
          flush=True)


if __name__ == "__main__":
    main()
