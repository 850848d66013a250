"""How well the sm80 backward's grid order fills the GPU: a model, not a measurement.

Each grid block (one key block of one kv head of one sequence) takes as many time units as loop
steps it walks (query heads of its group x visible query blocks) plus one for its prologue and
epilogue; blocks are handed out in grid order to whichever of the SMs frees first (one block per SM,
as the backward's shared memory allows). Prints the fill (work / (SMs x makespan)) of the grid in
its two orders (scheduler.cuh's bwd_block_index): heads outer (key blocks fastest) and key blocks
outer (every head's key block 0 first: longest first under a causal mask).

  python3 bench/bwd_schedule_sim.py [--sms 132]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
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
