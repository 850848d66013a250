"""Chunked prefill against a KV cache: flash_attn_with_kvcache with many query tokens, on each of the
decode family's routes (the decode kernel, the forward, and "auto"), beside the same attention
through flash_attn_varlen_func on packed K/V. bf16, causal (bottom-right), GQA 32/8, hdim 128; the
cache holds `cache` keys before the call and the call's tokens are appended first (k, v given).
CUDA events around each call, the GPU idle before it, median of --reps interleaved calls.

    python3 bench/kvcache_prefill.py --caches 4096,16384 --tokens 16,64,128,256,512,2048 --batches 1,4
"""
import argparse
import statistics

import torch

import flashattn
from flashattn import flash_attn_varlen_func, flash_attn_with_kvcache

HEADS, HEADS_KV, D = 32, 8, 128


def causal_flops(batch, tokens, keys):
    """Bottom-right causal: query i of `tokens` sees keys - tokens + i + 1 of `keys`."""
    seen = tokens * (keys - tokens) + tokens * (tokens + 1) // 2
    return 4 * batch * HEADS * D * seen


def time_calls(calls, reps):
    times = {name: [] for name in calls}
    for fn in calls.values():
        fn()
    torch.cuda.synchronize()
    names = list(calls)
    for r in range(reps):
        for name in (names if r % 2 == 0 else names[::-1]):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            calls[name]()
            b.record()
            torch.cuda.synchronize()
            times[name].append(a.elapsed_time(b))
    return {name: statistics.median(t) for name, t in times.items()}


def routed(route, fn):
    def call():
        flashattn._C.set_kvcache_route(route)
        try:
            return fn()
        finally:
            flashattn._C.set_kvcache_route("auto")
    return call


def cell(batch, cache, tokens, page, reps, splits=()):
    dev, dt = "cuda", torch.bfloat16
    capacity = cache + tokens
    capacity += -capacity % 256  # whole pages, and whole key blocks for the sm90 forward
    q = torch.randn(batch, tokens, HEADS, D, device=dev, dtype=dt)
    k_new = torch.randn(batch, tokens, HEADS_KV, D, device=dev, dtype=dt)
    v_new = torch.randn_like(k_new)
    if page:
        pages = batch * capacity // page
        k_cache = torch.randn(pages, page, HEADS_KV, D, device=dev, dtype=dt)
        table = torch.randperm(pages, device=dev, dtype=torch.int32).view(batch, capacity // page)
    else:
        k_cache = torch.randn(batch, capacity, HEADS_KV, D, device=dev, dtype=dt)
        table = None
    v_cache = torch.randn_like(k_cache)
    seqlens = torch.full((batch,), cache, device=dev, dtype=torch.int32)
    keys = cache + tokens
    kp, vp = (torch.randn(batch * keys, HEADS_KV, D, device=dev, dtype=dt) for _ in range(2))
    qp = q.view(batch * tokens, HEADS, D)
    cu_q = torch.arange(0, (batch + 1) * tokens, tokens, device=dev, dtype=torch.int32)
    cu_k = torch.arange(0, (batch + 1) * keys, keys, device=dev, dtype=torch.int32)

    def kvcache(num_splits=0):
        # Same lengths every call: the append rewrites rows cache..cache+tokens.
        return flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, block_table=table,
                                       causal=True, num_splits=num_splits)

    calls = {
        "decode kernel": routed("decode", kvcache),
        "forward route": routed("forward", kvcache),
        "auto": kvcache,
        "varlen (packed K/V)": lambda: flash_attn_varlen_func(qp, kp, vp, cu_q, cu_k, tokens, keys, causal=True),
    }
    for s in splits:  # the decode kernel with num_splits = s (a given num_splits keeps it)
        calls[f"decode, {s} splits"] = lambda s=s: kvcache(s)
    ms = time_calls(calls, reps)
    flops = causal_flops(batch, tokens, keys)
    return {name: (t, flops / t / 1e9) for name, t in ms.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--caches", default="4096,16384")
    ap.add_argument("--tokens", default="16,64,128,256,512,2048")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--pages", default="0,64")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--splits", default="", help="also the decode kernel at these num_splits (tuning)")
    args = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}: flash_attn_with_kvcache with many query "
          f"tokens (bf16, causal, GQA {HEADS}/{HEADS_KV}, hdim {D}); TFLOP/s (µs per call)\n")
    splits = ints(args.splits) if args.splits else []
    names = ["decode kernel", "forward route", "auto", "varlen (packed K/V)"] + [f"decode, {s} splits" for s in splits]
    print("| batch | cache | tokens | page | " + " | ".join(names) + " | forward / decode |")
    print("|---" * (5 + len(names)) + "|")
    for batch in ints(args.batches):
        for cache in ints(args.caches):
            for page in ints(args.pages):
                for tokens in ints(args.tokens):
                    r = cell(batch, cache, tokens, page, args.reps, splits)
                    row = " | ".join(f"{r[n][1]:.1f} ({r[n][0] * 1e3:.0f})" for n in names)
                    ratio = r["decode kernel"][0] / r["forward route"][0]
                    print(f"| {batch} | {cache} | {tokens} | {page or '-'} | {row} | {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
