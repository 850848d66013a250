"""Desk-check model of src/cuda/sm90/bwd_kernel.cuh (BwdTraits) at D = 64 and D = 128, without a GPU:
TMA's swizzled stores, the threads' dSᵀ stores and wgmma's descriptor reads emulated in numpy at the
kernel's shared-memory offsets, every product of a step checked against the matrix product, then
planted errors that it must catch. It mirrors the traits (BwdLayout, bwd_tile.cuh) and the mainloop's
offsets by hand: change it with them.   python3 scripts/sm90_bwd_layout_model.py   (exit 1 on a miss)

Shared memory is modelled at 2-byte granularity (one bf16 element per slot, stored as float64 of small
integers so every product is exact). Readings used:
  * TMA SWIZZLE_128B: byte address a (absolute, tile 1024-aligned) holds logical byte a with 16B chunk
    bits [4:6] XORed with row bits [7:9]:  phys(a) = a ^ (((a >> 7) & 7) << 4).
  * wgmma descriptor (PTX ISA 9.7.15.5.1 "Matrix Descriptor Format" / canonical layouts, CUTLASS
    mma_sm90_desc.hpp): start = bits0-13 <<4, LBO = bits16-29 <<4, SBO = bits32-45 <<4, swizzle bits62-63.
    SW128, 16-bit, K-major  ((8,m),(64,k)) : element (i, k) at start + (i//8)*SBO + (i%8)*128 + 2k
                                              (LBO unused for a k-step inside the 128-byte row);
    SW128, 16-bit, MN-major ((64,m),(8,k)) : element (i, k) at start + (i//64)*LBO + (k//8)*SBO + (k%8)*128 + 2(i%64);
    the swizzle XOR is applied to that (absolute) address.
  * Accumulator m64nN: warp w, g = lane/4, t = lane%4: d[4j+e] = D[16w+g+8(e>=2)][8j+2t+(e&1)].
    RS A: a[0]=A[16w+g][2t..], a[1]=A[16w+g+8][2t..], a[2]=A[16w+g][2t+8..], a[3]=A[16w+g+8][2t+8..],
    lower k in the low half (cvt.rn.bf16x2.f32 d, hi, lo).
"""
import sys
import numpy as np

KSW_COLS, KROW, KATOM, WG_ROWS, WG_THREADS = 64, 128, 1024, 64, 128


class Traits:
    def __init__(self, D, bm=None, stages=3, keys=128):
        self.kD = D
        self.kBlockN = keys
        self.kBlockM = bm if bm is not None else (128 if D == 64 else 64)
        assert self.kBlockM % KSW_COLS == 0
        self.kThreads = 2 * WG_THREADS
        self.kStages = stages
        self.kChunks = D // KSW_COLS
        self.kKVChunkBytes = self.kBlockN * KROW
        self.kKVBytes = self.kChunks * self.kKVChunkBytes
        self.kQChunkBytes = self.kBlockM * KROW
        self.kQBytes = self.kChunks * self.kQChunkBytes
        self.kDsChunkBytes = self.kBlockN * KROW
        self.kDsBytes = self.kBlockM // KSW_COLS * self.kDsChunkBytes
        self.kK, self.kV, self.kQ = 0, self.kKVBytes, 2 * self.kKVBytes
        self.kDO = self.kQ + stages * self.kQBytes
        self.kDS = self.kDO + stages * self.kQBytes
        self.kRowScalars = self.kDS + 2 * self.kDsBytes
        self.kSmemBytes = self.kRowScalars + stages * 2 * self.kBlockM * 4 + KATOM
        self.kDqColChunks = D // KSW_COLS
        assert self.kBlockM // KSW_COLS * self.kDqColChunks == 2
        self.kDqCols = KSW_COLS


# ---- ptx/wgmma.cuh ----------------------------------------------------------------------------------
def make_desc(addr, lbo, sbo, swz=1):
    enc = lambda x: (x & 0x3FFFF) >> 4
    return enc(addr) | (enc(lbo) << 16) | (enc(sbo) << 32) | (swz << 62)
def desc_k_major(addr): return make_desc(addr, 16, 8 * 128)
def desc_mn_major(addr, chunk_bytes): return make_desc(addr, chunk_bytes, 8 * 128)
def desc_advance(desc, nbytes): return desc + (nbytes >> 4)
def decode(desc):
    assert desc >> 62 == 1, "swizzle 128B"
    return (desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4
def k_step_bytes(ks, chunk_bytes): return (ks // 4) * chunk_bytes + 32 * (ks % 4)
def swizzle_128b_offset(row, byte): return row * 128 + (((byte >> 4) ^ (row & 7)) << 4) + (byte & 15)
def phys(a): return a ^ (((a >> 7) & 7) << 4)


class Smem:
    def __init__(self, nbytes):
        self.v = np.full(nbytes // 2, np.nan)          # NaN: never written
        self.owner = np.zeros(nbytes // 2, dtype=np.int64)
    def put(self, byte_addr, x):
        assert byte_addr % 2 == 0 and 0 <= byte_addr < 2 * len(self.v), byte_addr
        self.v[byte_addr // 2] = x
    def get(self, byte_addr):
        assert byte_addr % 2 == 0 and 0 <= byte_addr < 2 * len(self.v), byte_addr
        return self.v[byte_addr // 2]


def tma_store(sm, addr, box):
    """TMA load of a rows x 64 box into a 128B-swizzled tile at addr (1024-aligned)."""
    assert addr % KATOM == 0 and box.shape[1] == 64
    for r in range(box.shape[0]):
        for c in range(64):
            sm.put(phys(addr + r * 128 + 2 * c), box[r, c])


def read_operand(sm, desc, major, rows):
    """rows x 16 operand (row index: m or n; column: k) as wgmma reads it through desc."""
    start, lbo, sbo = decode(desc)
    out = np.empty((rows, 16))
    for i in range(rows):
        for k in range(16):
            if major == "K":
                a = start + (i // 8) * sbo + (i % 8) * 128 + 2 * k
            else:
                a = start + (i // 64) * lbo + (k // 8) * sbo + (k % 8) * 128 + 2 * (i % 64)
            out[i, k] = sm.get(phys(a))
    return out


def wgmma_ss(d, sm, desc_a, desc_b, N, major_a, major_b, accumulate):
    A = read_operand(sm, desc_a, major_a, 64)           # [m][k]
    B = read_operand(sm, desc_b, major_b, N)            # [n][k]
    return (d if accumulate else 0) + A @ B.T


def frag_to_matrix(frags, N):
    """frags[thread 0..127][N/2] accumulator fragments -> 64 x N matrix (checks full coverage)."""
    M = np.full((64, N), np.nan)
    seen = np.zeros((64, N), dtype=bool)
    for tid in range(128):
        w, lane = tid // 32, tid % 32
        g, t = lane // 4, lane % 4
        for j in range(N // 8):
            for e in range(4):
                r, c = 16 * w + g + 8 * (e >= 2), 8 * j + 2 * t + (e & 1)
                assert not seen[r, c]
                seen[r, c] = True
                M[r, c] = frags[tid][4 * j + e]
    assert seen.all()
    return M


def matrix_to_frag(M):
    N = M.shape[1]
    frags = np.empty((128, N // 2))
    for tid in range(128):
        w, lane = tid // 32, tid % 32
        g, t = lane // 4, lane % 4
        for j in range(N // 8):
            for e in range(4):
                frags[tid][4 * j + e] = M[16 * w + g + 8 * (e >= 2), 8 * j + 2 * t + (e & 1)]
    return frags


def rs_a_matrix(a_regs):
    """a_regs[thread][4][2] (lo, hi) -> 64 x 16 A matrix as the RS register layout defines it."""
    A = np.full((64, 16), np.nan)
    for tid in range(128):
        w, lane = tid // 32, tid % 32
        g, t = lane // 4, lane % 4
        for r, (row, col) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
            A[16 * w + row, col], A[16 * w + row, col + 1] = a_regs[tid][r]
    assert not np.isnan(A).any()
    return A


# ---- the kernel's pieces (bwd_kernel.cuh, bwd_tile.cuh), per warpgroup ------------------------------
class Kernel:
    def __init__(self, T, bugs=()):
        self.T, self.bugs = T, set(bugs)
        self.kN = T.kBlockM
    def dq_query_chunk(self, wg): return wg if self.T.kDqColChunks == 1 else 0
    def dq_col_chunk(self, wg): return 0 if self.T.kDqColChunks == 1 else wg

    def issue_transposed_scores(self, sm, wg, rows_tile, step_tile):
        T = self.T
        desc_a = desc_k_major(rows_tile + wg * WG_ROWS * KROW)
        desc_b = desc_k_major(step_tile)
        acc = None
        for ks in range(T.kD // 16):
            acc = wgmma_ss(acc, sm, desc_advance(desc_a, k_step_bytes(ks, T.kKVChunkBytes)),
                           desc_advance(desc_b, k_step_bytes(ks, T.kQChunkBytes)), self.kN, "K", "K", ks > 0)
        return matrix_to_frag(acc)                  # the hardware hands out fragments

    @staticmethod
    def pack(x, kN):                                 # BwdMainloop::pack
        return [[[(x[tid][8 * kk + 2 * r], x[tid][8 * kk + 2 * r + 1]) for r in range(4)] for kk in range(kN // 16)]
                for tid in range(128)]

    def issue_key_side(self, sm, a, step_tile):
        T = self.T
        desc_b = desc_mn_major(step_tile, T.kQChunkBytes)
        acc = np.zeros((64, T.kD))
        for kk in range(self.kN // 16):
            A = rs_a_matrix([a[tid][kk] for tid in range(128)])
            B = read_operand(sm, desc_advance(desc_b, kk * 16 * KROW), "MN", T.kD)
            acc = acc + A @ B.T
        return acc

    def store_fragment(self, sm, wg, x, tile):       # store_fragment<Tag, kN, kDsChunkBytes>
        T = self.T
        for tid in range(128):
            lane, warp = tid % 32, tid // 32
            g, t = lane // 4, lane % 4
            key0, query0 = wg * WG_ROWS + warp * 16, 0      # row0, BwdMainloop::score_tile's query0
            key = lambda e: key0 + g + (8 if e >= 2 else 0)
            query = lambda j, e: query0 + 8 * j + 2 * t + (e & 1)
            for half in range(2):
                for j in range(self.kN // 8):
                    chunk, in_chunk = j // 8, j % 8
                    if "store_no_chunk" in self.bugs: chunk, in_chunk = 0, j
                    addr = tile + chunk * T.kDsChunkBytes + swizzle_128b_offset(key(2 * half), 2 * query(in_chunk, 0))
                    assert addr % 4 == 0
                    sm.put(addr, x[tid][4 * j + 2 * half])          # low half: lower address
                    sm.put(addr + 2, x[tid][4 * j + 2 * half + 1])
                    sm.owner[addr // 2] += 1; sm.owner[addr // 2 + 1] += 1

    def issue_dq(self, sm, wg, ds_tile, k_tile):
        T = self.T
        qc = 0 if "dq_no_chunk" in self.bugs else self.dq_query_chunk(wg)
        lbo_a = T.kDsBytes if "dq_lbo_dsbytes" in self.bugs else T.kDsChunkBytes
        desc_a = desc_mn_major(ds_tile + qc * T.kDsChunkBytes, lbo_a)
        desc_b = desc_mn_major(k_tile + self.dq_col_chunk(wg) * T.kKVChunkBytes, T.kKVChunkBytes)
        acc = None
        for kk in range(T.kBlockN // 16):
            acc = wgmma_ss(acc, sm, desc_advance(desc_a, kk * 16 * KROW), desc_advance(desc_b, kk * 16 * KROW),
                           T.kDqCols, "MN", "MN", kk > 0)
        return matrix_to_frag(acc)

    def add_dq(self, grid_val, grid_cnt, wg, dq, ws_row):
        T = self.T
        for tid in range(128):
            lane, warp = tid % 32, tid // 32
            g, t = lane // 4, lane % 4
            row0 = wg * WG_ROWS + warp * 16
            qc = 0 if "add_no_chunk" in self.bugs else self.dq_query_chunk(wg)
            row = ws_row + qc * KSW_COLS + row0 % WG_ROWS + g
            col0 = self.dq_col_chunk(wg) * T.kDqCols
            for j in range(T.kDqCols // 8):              # add_dq_fragment<kD, kDqCols>
                for h in range(2):
                    for v in range(2):
                        r, c = row + 8 * h - ws_row, col0 + 8 * j + 2 * t + v
                        assert 0 <= c < T.kD
                        grid_val[r, c] += dq[tid][4 * j + 2 * h + v]
                        grid_cnt[r, c] += 1


def check_regions(T):
    regs = [("K", T.kK, T.kKVBytes), ("V", T.kV, T.kKVBytes)]
    regs += [(f"Q{s}", T.kQ + s * T.kQBytes, T.kQBytes) for s in range(T.kStages)]
    regs += [(f"dO{s}", T.kDO + s * T.kQBytes, T.kQBytes) for s in range(T.kStages)]
    regs += [(f"dS{b}", T.kDS + b * T.kDsBytes, T.kDsBytes) for b in range(2)]
    regs += [("rowscalars", T.kRowScalars, T.kStages * 2 * T.kBlockM * 4)]
    regs.sort(key=lambda r: r[1])
    for (n0, a0, s0), (n1, a1, s1) in zip(regs, regs[1:]):
        assert a0 + s0 <= a1, f"{n0} overlaps {n1}"
    for n, a, s in regs[:-1]:
        assert a % KATOM == 0, f"{n} not on a swizzle atom"
    end = regs[-1][1] + regs[-1][2]
    assert end + KATOM <= T.kSmemBytes <= 227 * 1024, (end, T.kSmemBytes)
    # the TMA expect_tx of a step and of K/V
    return regs


def check_row_scalars(T):
    LSE, DD = np.arange(T.kBlockM) + 1000.0, np.arange(T.kBlockM) + 5000.0
    for s in range(T.kStages):
        mem = np.full(T.kStages * 2 * T.kBlockM, np.nan)
        base = s * 2 * T.kBlockM                                        # row_scalars_at(s), in floats
        mem[base:base + T.kBlockM] = LSE                                # load_step: the LSE rows' bulk copy
        mem[base + T.kBlockM:base + 2 * T.kBlockM] = DD                 # then D's, kRowBytes further
        lse = lambda q: mem[s * 2 * T.kBlockM + q]
        dsum = lambda q: mem[s * 2 * T.kBlockM + T.kBlockM + q]
        for q in range(T.kBlockM):                                      # BwdScoreTile::pair, query < kN
            assert lse(q) == LSE[q] and dsum(q) == DD[q], (s, q)


def run_step(T, bugs=(), seed=0, stage=1, buf=1, verbose=True):
    rng = np.random.default_rng(seed)
    ri = lambda *shape: rng.integers(-3, 4, size=shape).astype(np.float64)
    Kt, Vt, Q, dO = ri(T.kBlockN, T.kD), ri(T.kBlockN, T.kD), ri(T.kBlockM, T.kD), ri(T.kBlockM, T.kD)
    sm = Smem(T.kSmemBytes)
    ker = Kernel(T, bugs)
    for c in range(T.kChunks):                       # BwdLoads::start / load_step
        tma_store(sm, T.kK + c * T.kKVChunkBytes, Kt[:, 64 * c:64 * c + 64])
        tma_store(sm, T.kV + c * T.kKVChunkBytes, Vt[:, 64 * c:64 * c + 64])
        tma_store(sm, T.kQ + stage * T.kQBytes + c * T.kQChunkBytes, Q[:, 64 * c:64 * c + 64])
        tma_store(sm, T.kDO + stage * T.kQBytes + c * T.kQChunkBytes, dO[:, 64 * c:64 * c + 64])
    q_tile, do_tile = T.kQ + stage * T.kQBytes, T.kDO + stage * T.kQBytes
    ok = True
    def expect(name, got, want):
        nonlocal ok
        good = got.shape == want.shape and np.array_equal(got, want)
        if verbose or not good:
            print(f"  {'ok ' if good else 'BAD'} {name}" + ("" if good else f"  (max |diff| {np.nanmax(np.abs(got - want)) if got.shape == want.shape else 'shape'})"))
        ok &= good
    dS_T = np.zeros((T.kBlockN, T.kBlockM))          # the logical dSᵀ, [key][query]
    frags = {}
    for wg in range(2):
        st = ker.issue_transposed_scores(sm, wg, T.kK, q_tile)
        dpt = ker.issue_transposed_scores(sm, wg, T.kV, do_tile)
        keys = slice(64 * wg, 64 * wg + 64)
        expect(f"wg{wg} S^T = K_w Q^T", frag_to_matrix(st, ker.kN), Kt[keys] @ Q.T)
        expect(f"wg{wg} dP^T = V_w dO^T", frag_to_matrix(dpt, ker.kN), Vt[keys] @ dO.T)
        # stand-ins for P and dS (elementwise; the layouts are the question): small integers
        p = np.mod(st, 5) - 2
        ds = np.mod(dpt * 3 + st, 7) - 3
        Pm, dSm = frag_to_matrix(p, ker.kN), frag_to_matrix(ds, ker.kN)
        dS_T[keys] = dSm
        frags[wg] = (p, ds, Pm, dSm)
    for wg in range(2):                              # both warpgroups' stores, then the named barrier
        ker.store_fragment(sm, wg, frags[wg][1], T.kDS + buf * T.kDsBytes)
    own = sm.owner[(T.kDS + buf * T.kDsBytes) // 2:(T.kDS + (buf + 1) * T.kDsBytes) // 2]
    expect("dS^T tile: every element written exactly once", own, np.ones_like(own))
    outside = np.concatenate([sm.owner[:(T.kDS + buf * T.kDsBytes) // 2], sm.owner[(T.kDS + (buf + 1) * T.kDsBytes) // 2:]])
    expect("no dS^T store outside its buffer", outside, np.zeros_like(outside))
    for wg in range(2):
        p, ds, Pm, dSm = frags[wg]
        keys = slice(64 * wg, 64 * wg + 64)
        dv = ker.issue_key_side(sm, Kernel.pack(p, ker.kN), do_tile)
        dk = ker.issue_key_side(sm, Kernel.pack(ds, ker.kN), q_tile)
        expect(f"wg{wg} dV = P^T dO (RS)", dv, Pm @ dO)
        expect(f"wg{wg} dK = dS^T Q (RS)", dk, dSm @ Q)
    dS = dS_T.T                                      # [query][key]
    grid_val, grid_cnt = np.zeros((T.kBlockM, T.kD)), np.zeros((T.kBlockM, T.kD), dtype=int)
    ws_row = 7 * T.kBlockM
    for wg in range(2):
        dq = ker.issue_dq(sm, wg, T.kDS + buf * T.kDsBytes, T.kK)
        qs = slice(64 * ker.dq_query_chunk(wg), 64 * ker.dq_query_chunk(wg) + 64)
        cs = slice(64 * ker.dq_col_chunk(wg), 64 * ker.dq_col_chunk(wg) + 64)
        expect(f"wg{wg} dQ part = dS[{qs.start}:{qs.stop}, :] K[:, {cs.start}:{cs.stop}]", frag_to_matrix(dq, 64),
               dS[qs] @ Kt[:, cs])
        ker.add_dq(grid_val, grid_cnt, wg, dq, ws_row)
    expect("add_dq covers each of the step's dQ elements once", grid_cnt, np.ones_like(grid_cnt))
    expect("add_dq sum = dS K", grid_val, dS @ Kt)
    return ok


def main():
    for D in (64, 128):
        T = Traits(D)
        print(f"D = {D}: kBlockM {T.kBlockM} kBlockN {T.kBlockN}  kK {T.kK} kV {T.kV} kQ {T.kQ} kDO {T.kDO} kDS {T.kDS} "
              f"kRowScalars {T.kRowScalars} kSmemBytes {T.kSmemBytes} ({T.kSmemBytes / 1024:.1f} KB of 227)  "
              f"kKVChunkBytes {T.kKVChunkBytes} kQChunkBytes {T.kQChunkBytes} kQBytes {T.kQBytes} "
              f"kDsChunkBytes {T.kDsChunkBytes} kDsBytes {T.kDsBytes}  expect_tx step {2 * T.kQBytes} kv {2 * T.kKVBytes}")
        for n, a, s in check_regions(T):
            print(f"    {n:10s} [{a:6d}, {a + s:6d})")
        check_row_scalars(T); print("  ok row scalars: the two bulk copies cover", T.kBlockM, "LSE and", T.kBlockM, "D per stage")
        good = all(run_step(T, seed=s, stage=st, buf=b, verbose=(s == 0)) for s, st, b in [(0, 1, 1), (1, 0, 0), (2, 2, 1)])
        print(f"D = {D}: {'ALL OK' if good else 'FAILED'}\n")
        if not good: sys.exit(1)
    T = Traits(64)
    # dq_lbo_dsbytes is harmless at D = 64: M = 64 is one 64-element block, so the A operand's LBO is
    # never read; the model must say so rather than flag it.
    for bug, should_catch in (("dq_no_chunk", True), ("store_no_chunk", True), ("add_no_chunk", True),
                              ("dq_lbo_dsbytes", False)):
        caught = not run_step(T, bugs=(bug,), verbose=False)
        print(f"planted {bug}: {'caught' if caught else 'not caught'} (expected: {'caught' if should_catch else 'harmless'})\n")
        if caught != should_catch: sys.exit(1)


if __name__ == "__main__":
    main()
