"""How well the sm80 backward's grid order fills the GPU: a model, not a measurement.

Each grid block (one key block of one kv head of one sequence) takes as many time units as loop
steps it walks (query heads of its group x visible query blocks) plus one for its prologue and
epilogue; blocks are handed out in grid order to whichever of the SMs frees first (one block per SM,
as the backward's shared memory allows). Prints the fill (work / (SMs x makespan)) of the grid in
its two orders (scheduler.cuh's bwd_block_index): heads outer (key blocks fastest) and key blocks
outer (every head's key block 0 first: longest first under a causal mask).

With --split, the shapes where the plan runs every block as parts (bwd_plan.cu's split_long_blocks:
the longest block longer than an SM's share of all steps; each part costs 2 steps more), whole
blocks against parts.

  python3 bench/bwd_schedule_sim.py [--sms 132] [--split]
"""
import argparse
import heapq

# (block_m, block_n) of the backward tile per head dim (src/cuda/sm80/bwd_tile.cuh, H200).
TILES = {64: (128, 128), 128: (64, 128), 256: (64, 64)}


def block_steps(batch, heads_kv, group, seqlen, bm, bn, key_blocks_outer):
    """Loop steps of every grid block, in grid order (causal, seqlen_q = seqlen_k)."""
    num_n, num_m = -(-seqlen // bn), -(-seqlen // bm)

    def steps(n):
        return (num_m - n * bn // bm) * group

    heads_seqs = batch * heads_kv
    if key_blocks_outer:
        return [steps(n) for n in range(num_n) for _ in range(heads_seqs)]
    return [steps(n) for _ in range(heads_seqs) for n in range(num_n)]


def fill(steps, sms):
    free_at = [0] * sms
    for s in steps:
        heapq.heappush(free_at, heapq.heappop(free_at) + s + 1)
    return sum(steps) / (sms * max(free_at))


def split_parts(steps, sms, overhead=2, max_parts=64):
    """Parts per block as bwd_plan.cu's split_long_blocks chooses them (1: not split)."""
    total, longest = sum(steps), max(steps)
    if longest * sms <= total:
        return 1
    piece = max(total // (4 * sms), 16 * overhead)
    k = min(-(-longest // piece), max_parts)
    return k if k >= 2 else 1


def split_fill(steps, sms, overhead=2):
    """Fill with every block split into split_parts parts (grid order, parts consecutive)."""
    k = split_parts(steps, sms, overhead)
    if k == 1:
        return fill(steps, sms), 1
    free_at = [0] * sms
    for s in steps:
        for part in range(k):
            length = s * (part + 1) // k - s * part // k
            heapq.heappush(free_at, heapq.heappop(free_at) + length + overhead)
    return sum(steps) / (sms * max(free_at)), k


def main_split(sms):
    print("shape (causal unless a window is named)        whole blocks  parts   k")
    tiles = {64: (128, 128), 128: (64, 128), 256: (64, 64)}
    rows = [(f"MQA 32/1 batch 1 {s}", 1, 1, 32, s, 128) for s in (2048, 4096, 8192, 16384, 32768)]
    rows += [("MQA 32/1 batch 2 16384 (the GQA row)", 2, 1, 32, 16384, 128),
             ("GQA 32/2 batch 1 16384", 1, 2, 16, 16384, 128), ("GQA 28/4 batch 1 8192", 1, 4, 7, 8192, 128),
             ("GQA 64/8 batch 1 8192", 1, 8, 8, 8192, 128), ("MQA 32/1 batch 1 8192 hdim 64", 1, 1, 32, 8192, 64),
             ("MQA 16/1 batch 1 8192 hdim 256", 1, 1, 16, 8192, 256)]
    for name, batch, heads_kv, group, s, d in rows:
        bm, bn = tiles[d]
        steps = block_steps(batch, heads_kv, group, s, bm, bn, d != 256)
        whole = fill(steps, sms)
        parts, k = split_fill(steps, sms)
        print(f"{name:46s} {whole:12.3f} {parts:6.3f} {k:3d}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--split", action="store_true")
    args = ap.parse_args()
    if args.split:
        main_split(args.sms)
        return
    print("shape                                   heads outer  key blocks outer")
    rows = []
    for d, (bm, bn) in TILES.items():
        for s in (512, 1024, 2048, 4096, 8192, 16384):
            rows.append((f"grid hdim {d} causal {s}", 16384 // s, 2048 // d, 1, s, bm, bn))
    for s in (2048, 4096, 16384):
        for kv in (8, 4, 1):
            rows.append((f"GQA 32/{kv} hdim 128 causal {s}", 32768 // s, kv, 32 // kv, s, 64, 128))
    for name, batch, heads_kv, group, s, bm, bn in rows:
        a = fill(block_steps(batch, heads_kv, group, s, bm, bn, False), args.sms)
        b = fill(block_steps(batch, heads_kv, group, s, bm, bn, True), args.sms)
        print(f"{name:40s} {a:11.3f} {b:17.3f}   x{b / a:.3f}")


if __name__ == "__main__":
    main()
