"""Where a tile's time goes in the sm90 forward: per-tile clock64 stamps of the first four CTAs,
read from a diagnostic build (never the shipped one).

The stamps come from scripts/sm90_tile_trace.patch, which makes the kernel write clock64() at these
points of each tile j < 32 into shared memory (so that the stamps cost no global stores in the
middle of the kernel) and copies them out at the CTA's end; consumers (thread 0 of each warpgroup):
  e0 tile index taken   e1 Q has landed   e2 K of the first block has landed   e3 S(0) done
  e6 key loop done      e4 last P·V done  e5 epilogue's stores issued
and the producer: e0 tile published, e1 Q's load issued, e2 the tile's loads all issued. The clock
is the SM's, so only stamps of one CTA compare.

  git apply scripts/sm90_tile_trace.patch && cmake --build build --target flashattn_c; git checkout src/
  python3 bench/sm90_tile_trace.py build/libflashattn_c.so      # on the GPU machine

Prints, per CTA and consumer, the median over its tiles of each phase in cycles.
"""
import ctypes
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashattn_ctypes import FlashAttn  # noqa: E402

CTAS, ROLES, TILES, EVENTS = 4, 4, 64, 8  # the patch's buffer: [cta][role][tile][event]
PHASES = {"Q wait (e1-e0)": (1, 0), "K0 wait (e2-e1)": (2, 1), "S(0) (e3-e2)": (3, 2), "loop (e6-e3)": (6, 3),
          "last PV (e4-e6)": (4, 6), "epilogue (e5-e4)": (5, 4)}
CELLS = [(512, 128, False), (2048, 128, False), (4096, 128, False), (512, 64, True)]


def main():
    fa = FlashAttn(sys.argv[1])
    read = fa.lib.fa_sm90_trace_read
    read.argtypes = [ctypes.POINTER(ctypes.c_longlong), ctypes.c_int]
    buf = (ctypes.c_longlong * (CTAS * ROLES * TILES * EVENTS))()

    def at(c, r, j, e):
        return buf[((c * ROLES + r) * TILES + j) * EVENTS + e]

    def plausible(a, b):  # stamps of tiles the CTA ran (the shared buffer is not zeroed)
        return 0 < a - b < 5_000_000

    for s, d, causal in CELLS:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        out, lse = torch.empty_like(q), torch.empty(b, h, s, device="cuda")
        a = fa.args(q, k, v, out, lse, causal=causal)
        keep = fa.with_workspace(a, False, q.device)  # noqa: F841 (alive for the calls)
        for _ in range(5):
            fa.forward(a)
        torch.cuda.synchronize()
        read(buf, 1)
        fa.forward(a)
        torch.cuda.synchronize()
        read(buf, 0)
        print(f"== seqlen {s} hdim {d} causal {causal} (cycles, median over the CTA's tiles)")
        for c in range(2):
            for r in range(2):
                tiles = [j for j in range(1, 30) if plausible(at(c, r, j + 1, 0), at(c, r, j, 0))
                         and plausible(at(c, r, j, 5), at(c, r, j, 0))]
                if not tiles:
                    continue
                period = statistics.median(at(c, r, j + 1, 0) - at(c, r, j, 0) for j in tiles)
                gap = statistics.median(at(c, r, j + 1, 0) - at(c, r, j, 5) for j in tiles)
                phases = "  ".join(f"{n} {statistics.median(at(c, r, j, x) - at(c, r, j, y) for j in tiles):.0f}"
                                   for n, (x, y) in PHASES.items())
                print(f"cta {c} consumer {r}: {len(tiles)} tiles, period {period:.0f}  {phases}  take gap {gap:.0f}")
            tiles = [j for j in range(1, 30) if plausible(at(c, 0, j, 1), at(c, 3, j, 1))]
            if tiles:
                lead = statistics.median(at(c, 0, j, 1) - at(c, 3, j, 1) for j in tiles)
                after = statistics.median(at(c, 3, j, 1) - at(c, 0, j - 1, 6) for j in tiles)
                print(f"cta {c} producer: Q issued {after:.0f} after consumer 0's previous key loop ended, "
                      f"landed {lead:.0f} later")


if __name__ == "__main__":
    main()
