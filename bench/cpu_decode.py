"""The KV-cache call on the CPU: flashattn's flash_attn_with_kvcache against PyTorch's CPU
scaled_dot_product_attention (enable_gqa) on the same cache, in one process (docs/kvcache.md, "What
the CPU does"). Needs torch and the flashattn package.

  python3 bench/cpu_decode.py --out bench/results/$(date +%F)-cpu-decode-$(git rev-parse --short HEAD).json

Rate: bytes of K and V the call attends to (batch · keys · kv heads · (d + dv) · element size) / time,
GB/s. Timing: perf_counter around one call, the two implementations alternating call by call (one
warm-up each), median of --reps. SDPA gets K and V viewed [batch, kv heads, keys, d] (no copy), the
query [batch, heads, q, d]; causal calls (queries aligned to the cache's end, as flash-attn's) give
SDPA the same mask as a boolean tensor. Paged rows (pages shuffled over the pool) run flashattn only.
Every row also reports the largest difference between the two outputs (paged: against the
contiguous call's output).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    import flashattn
except ImportError as e:  # pragma: no cover
    print(f"cpu_decode: {e}; nothing to do", file=sys.stderr)
    sys.exit(3)

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}

# (batch, keys, heads, kv heads, head dim, query tokens, causal)
SHAPES = [
    (1, 8192, 32, 8, 128, 1, False),
    (1, 32768, 32, 8, 128, 1, False),
    (8, 4096, 32, 8, 128, 1, False),
    (32, 1024, 32, 8, 128, 1, False),
    (1, 32768, 32, 1, 128, 1, False),
    (1, 8192, 32, 32, 128, 1, False),
    (4, 8192, 32, 8, 128, 4, True),
    (8, 4096, 16, 4, 256, 1, False),
]
PAGES = (16, 256)


def sdpa_call(q, k_cache, v_cache, causal):
    qt, kt, vt = q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2)
    mask = None
    if causal:  # query i sees keys up to keys - q + i (bottom-right)
        sq, sk = q.shape[1], k_cache.shape[1]
        mask = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
    return lambda: F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True).transpose(1, 2)


def paged(k_cache, v_cache, page, gen):
    b, s, hk, d = k_cache.shape
    per = s // page
    order = torch.randperm(b * per, generator=gen)
    k_pages = torch.empty(b * per, page, hk, d, dtype=k_cache.dtype)
    v_pages = torch.empty_like(k_pages)
    k_pages[order] = k_cache.reshape(b * per, page, hk, d)
    v_pages[order] = v_cache.reshape(b * per, page, hk, d)
    return k_pages, v_pages, order.reshape(b, per).to(torch.int32)


def time_pair(calls, reps):
    for f in calls.values():
        f()
    times = {name: [] for name in calls}
    for _ in range(reps):
        for name, f in calls.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: its default); flashattn "
                    "uses OpenMP's default (OMP_NUM_THREADS)")
    ap.add_argument("--out", help="JSON record")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    rows = []
    print(f"{'dtype':5s} {'shape':34s} {'flashattn':>10s} {'sdpa':>8s} {'ratio':>6s}  GB/s   max|diff|")
    for name in args.dtypes.split(","):
        dtype = DT[name]
        for b, s, h, hk, d, sq, causal in SHAPES:
            q = torch.randn(b, sq, h, d, generator=gen).to(dtype)
            k_cache = torch.randn(b, s, hk, d, generator=gen).to(dtype)
            v_cache = torch.randn(b, s, hk, d, generator=gen).to(dtype)
            lens = torch.full((b,), s, dtype=torch.int32)
            fa = lambda: flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, causal=causal)
            calls = {"flashattn": fa, "torch-sdpa-cpu": sdpa_call(q, k_cache, v_cache, causal)}
            t = time_pair(calls, args.reps)
            out = fa().float()
            diff = (out - calls["torch-sdpa-cpu"]().float()).abs().max().item()
            nbytes = 2 * k_cache.numel() * k_cache.element_size()
            shape = f"{b}x{s} h{h}/{hk} d{d} q{sq}{' causal' if causal else ''}"
            base = dict(dtype=name, batch=b, seqlen_k=s, heads=h, heads_kv=hk, hdim=d, seqlen_q=sq, causal=causal,
                        page_size=0, bytes=nbytes)
            for impl, sec in t.items():
                rows.append(dict(base, impl=impl, ms=sec * 1e3, gbps=nbytes / sec / 1e9, max_abs_diff=diff))
            print(f"{name:5s} {shape:34s} {t['flashattn'] * 1e3:8.2f}ms {t['torch-sdpa-cpu'] * 1e3:6.2f}ms "
                  f"{t['torch-sdpa-cpu'] / t['flashattn']:6.2f} {nbytes / t['flashattn'] / 1e9:6.1f}  {diff:.2e}",
                  flush=True)
            if (b, s, sq) != (8, 4096, 1) or h != 32:
                continue
            for page in PAGES:
                kp, vp, table = paged(k_cache, v_cache, page, gen)
                call = lambda: flashattn.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table)
                sec = time_pair({"flashattn": call}, args.reps)["flashattn"]
                pdiff = (call().float() - out).abs().max().item()
                rows.append(dict(base, impl="flashattn", page_size=page, ms=sec * 1e3, gbps=nbytes / sec / 1e9,
                                 max_abs_diff=pdiff))
                print(f"{name:5s} {shape + f' page{page}':34s} {sec * 1e3:8.2f}ms {'':>8s} {'':>6s} "
                      f"{nbytes / sec / 1e9:6.1f}  {pdiff:.2e} (vs contiguous)", flush=True)
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        record = {"machine": "cpu", "commit": commit, "threads": torch.get_num_threads(), "torch": torch.__version__,
                  "date": time.strftime("%Y-%m-%d"), "rows": rows}
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
