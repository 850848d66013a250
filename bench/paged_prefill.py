"""Paged prefill on the GPU: flash_attn_varlen_func with a block_table against the same call on packed
keys, same process, CUDA graph of 20 calls (bench_gpu.py's timing), median of replays. bf16, causal,
GQA 32/8, hdim 128, a batch of equal prompts whose keys are the cache (prompt = keys); pages
shuffled over the pool; each call on the sm80 family and on "auto" (sm90 on an H100/H200, for page
sizes it takes). A measurement for docs/kvcache.md, not a record.

    python3 bench/paged_prefill.py [--batch 4] [--seqlen 4096] [--pages 16,64,256]
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import graph_timed  # noqa: E402

import flashattn  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--pages", default="16,64,256")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-kv", type=int, default=8)
    args = ap.parse_args()
    b, n, h, hk, d = args.batch, args.seqlen, args.heads, args.heads_kv, 128
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(b * n, h, d, device=dev, dtype=dt)
    k = torch.randn(b * n, hk, d, device=dev, dtype=dt)
    v = torch.randn_like(k)
    cu = torch.arange(0, (b + 1) * n, n, device=dev, dtype=torch.int32)
    flops = 4 * b * h * d * n * n / 2  # causal: half of the score matrix
    rows = []

    def timed(label, path, fn):
        one_ms = graph_timed(fn)
        ms = statistics.median(one_ms() for _ in range(9))
        rows.append((f"{label}, path {path}", path, ms, flops / ms / 1e9))

    for path in ("sm80", "auto"):
        timed("packed", path, lambda path=path: flashattn.flash_attn_varlen_func(
            q, k, v, cu, cu, n, n, causal=True, path=path))
    for page in [int(x) for x in args.pages.split(",")]:
        per_seq = -(-n // page)  # a sequence's last page may be partly empty
        perm = torch.randperm(b * per_seq, device=dev)
        kp = torch.empty(b * per_seq, page, hk, d, device=dev, dtype=dt)
        vp = torch.empty_like(kp)
        for pool, x in ((kp, k), (vp, v)):
            padded = torch.zeros(b, per_seq * page, hk, d, device=dev, dtype=dt)
            padded[:, :n] = x.view(b, n, hk, d)
            pool[perm] = padded.view(b * per_seq, page, hk, d)
        table = perm.view(b, per_seq).to(torch.int32)
        for path in ("sm80", "auto"):
            timed(f"paged {page}", path, lambda kp=kp, vp=vp, table=table, path=path:
                  flashattn.flash_attn_varlen_func(q, kp, vp, cu, cu, n, n, causal=True, block_table=table, path=path))
    packed = {path: tflops for _, path, _, tflops in rows[:2]}
    print(f"paged prefill: batch {b} x {n} tokens, heads {h}/{hk}, hdim {d}, bf16, causal ({torch.cuda.get_device_name()})")
    for label, path, ms, tflops in rows:
        print(f"  {label:24s} {ms * 1e3:9.1f} us  {tflops:6.1f} TFLOP/s  {tflops / packed[path]:5.2f} x packed, "
              f"same path  {tflops / packed['auto']:5.2f} x packed auto")


if __name__ == "__main__":
    main()
