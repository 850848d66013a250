// Tile shapes of the sm80 backward, one constexpr table shared by the host (grid, workspace,
// shared-memory checks) and the kernels (warp layout, loops). Nothing else states a tile size.
//
// A thread block owns one key block (block_n keys of one kv head of one sequence) and loops over
// query blocks of block_m rows. Its 8 warps split the three kinds of product differently:
//   S = Q·Kᵀ, dP = dO·Vᵀ   [block_m × block_n]:  warps_m_sdp × (8 / warps_m_sdp) warp tiles
//   dV += Pᵀ·dO, dK += dSᵀ·Q [block_n × hdim]:   warps_n_dkv × (8 / warps_n_dkv)
//   dQ = dS·K              [block_m × hdim]:      warps_m_dq  × (8 / warps_m_dq)
// stages = 2 double-buffers the Q and dO tiles (the next query block loads during this one's
// math); stages = 1 is the fallback for GPUs with less shared memory (A100: 163 KB per block).
#pragma once

#include "cuda/common/host_device.cuh"

namespace flashattn::cuda::sm80 {

inline constexpr int kBwdWarps = 8;
inline constexpr int kBwdThreads = kBwdWarps * 32;

struct BwdTile {
  int head_dim = 0;  // the instance: hdim_qk and hdim_v both ≤ head_dim (zero-padded)
  int block_m = 0, block_n = 0;
  int warps_m_sdp = 0, warps_n_dkv = 0, warps_m_dq = 0;
  int stages = 0;
  // Recompute lane-derived shared-memory addresses inside the main loop instead of letting the
  // compiler hoist them (bwd_gemm.cuh's opaque()): which one avoids spills depends on the tile.
  bool remat_lane = false;
  // dQ reds of 4 floats per lane (red.global.add.v4.f32, one per mma C fragment) on sm_90+ instead
  // of 2: half the reds. Measured per head dim (H200, docs/kernels-sm80-backward.md): +1–3 % at 256,
  // −0.5 % at 64, −5 % at 128 (where it also spills 8 B); the others keep .v2.
  bool wide_dq_reds = false;
  // Split (bwd_params.cuh): the grid's last, partial wave, or under a mask every block of a grid
  // whose longest block outlasts an SM's share, runs as parts of blocks, in a second kernel
  // (bwd_tail_kernel), compiled only where this is on and only for scores of constant slope
  // (scores.cuh). Measured (H200, non-causal): hdim 64 +1…+3.4 %, 128 +0.5…+3.6 % (when the split
  // code was in the main kernel), 256 +2.2…+2.7 % at 4k–16k (as its own kernel); causal MQA at
  // batch 1: 2–11× (docs/kernels-sm80-backward.md).
  // At 96 and 192 since 2026-12-04 (the split's kernel spills 64 B and 16 B there on sm_90a, the
  // main kernels are untouched): non-causal +0.5…+2.8 % at 1k–16k, MQA at batch 1 causal 8k 3.8×
  // (96) and 1.9× (192).
  bool split_tail = false;

  // Whether the grid may run key blocks outer (scheduler.cuh's bwd_block_index; the plan turns it
  // on under masks with edges): longest blocks first, at the cost of the L2 reuse of a head's Q, dO
  // and dQ sums by its key blocks running together. Tiles without it compile no decode of that
  // order. Measured on the H200 (docs/kernels-sm80-backward.md): on at 64 and 128 (up to +5 % on the
  // grid's causal cells, +55 % for MQA); off at 256, whose 64-key tile moves twice the bytes per
  // product through that reuse (-15 % at 512 and 1k), and at 192 (also 64 keys, untimed); off at 96
  // (untimed: ptxas sm_90a spilled 68 B with the decode compiled in).
  bool longest_first = false;

  // dQ summed over a pair of key blocks before its reds (bwd_pair.cuh): the two blocks of one head
  // (key blocks 2c and 2c + 1) run as a cluster of two CTAs (sm_90+) that walk the same query
  // tiles; each sends its dS tile into the other's P buffer and adds dS·K of both blocks for one half
  // of the head dim, so the fp32 reds into L2 are halved. Costs a second K half in shared memory
  // (block_n × head_dim / 2). Used where the plan allows it (bwd_plan.cu's pair_dq_applies); the
  // split tail and every other call run the unpaired body. Measured at hdim 256 on the H100
  // (docs/kernels-sm80-backward.md, "dQ summed over a pair"): half the reds alone +9–12 %.
  bool pair_dq = false;

  // Shared memory: K, V (block_n × d), Q and dO (stages × block_m × d), P and dS (block_m ×
  // block_n), all 16-bit; LSE·log2e and D = rowsum(dO∘O) (stages × block_m fp32 each).
  FLASHATTN_HD constexpr int smem_k_bytes() const { return block_n * head_dim * 2; }
  FLASHATTN_HD constexpr int smem_q_bytes() const { return block_m * head_dim * 2; }
  FLASHATTN_HD constexpr int smem_p_bytes() const { return block_m * block_n * 2; }
  FLASHATTN_HD constexpr int smem_row_bytes() const { return block_m * 4; }
  // The pair's K half of the other key block and its mbarrier (8 bytes, 16 kept aligned).
  FLASHATTN_HD constexpr int smem_pair_bytes() const { return pair_dq ? smem_k_bytes() / 2 + 16 : 0; }
  FLASHATTN_HD constexpr int smem_bytes() const {
    return 2 * smem_k_bytes() + 2 * stages * smem_q_bytes() + 2 * smem_p_bytes() + 2 * stages * smem_row_bytes() +
           smem_pair_bytes();
  }
};

// Head-dim instances the kernels can be compiled for (FLASHATTN_HEADDIMS picks a subset).
FLASHATTN_HD constexpr bool bwd_is_instance(int head_dim) {
  return head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 192 || head_dim == 256;
}

// The tile for an instance. `big_smem`: the GPU gives a block at least
// bwd_tile(head_dim, true).smem_bytes() of shared memory (Hopper's 227 KB does); only head dim 256
// needs it to double-buffer, every other tile fits an A100's 163 KB either way. block_m and
// block_n never depend on big_smem (the workspace layout and the grid use them).
FLASHATTN_HD constexpr BwdTile bwd_tile(int head_dim, bool big_smem) {
  //                                d    bm   bn  wS wKV wQ stages remat_lane wide_dq_reds split_tail longest_first
  //                                pair_dq
  if (head_dim == 64) return BwdTile{64, 128, 128, 2, 4, 4, 2, false, false, true, true};
  if (head_dim == 96) return BwdTile{96, 64, 128, 2, 4, 4, 2, false, false, true, false};
  if (head_dim == 128) return BwdTile{128, 64, 128, 2, 4, 2, 2, true, false, true, true};
  if (head_dim == 192) return BwdTile{192, 64, 64, 4, 2, 2, 2, false, false, true, false};
  if (head_dim == 256) {
    return big_smem ? BwdTile{256, 64, 64, 4, 2, 2, 2, false, true, true, false, true}
                    : BwdTile{256, 64, 64, 4, 2, 2, 1, false, true, true, false};
  }
  return BwdTile{};
}

// Floats per lane in one red of the tile's dQ accumulator: 4 (red.global.add.v4.f32, one red per
// mma C fragment) for tiles with wide_dq_reds on sm_90+; otherwise 2 (.v2; before sm_90 there is no
// vector red and the wrapper issues scalar reds, which in the width-2 layout still cover 256
// contiguous bytes per warp at half density, where width 4 would spread them over 512). The main
// kernel and the postprocess are compiled for the same architecture, so they agree; host code (the
// layout test) takes the sm_90 answer.
FLASHATTN_HD constexpr int dq_red_width(const BwdTile& t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  return 2 + 0 * t.head_dim;
#else
  return t.wide_dq_reds ? 4 : 2;
#endif
}

// Where element (r, c) of a query tile's dQ accumulator (block_m × head_dim fp32, contiguous in the
// workspace) lives: the dQ GEMM's accumulator fragments in lane order, so that one warp-wide
// red covers 32·vec contiguous floats (vec = 4: 512 bytes, four whole 128-byte lines; vec = 2: 256
// bytes) instead of 8 rows × 32 bytes. With the dQ warp grid of the tile (warp w = wm + warps_m·wd
// owns rows wm·Tm .., columns wd·Td ..) and r = wm·Tm + 16mi + 8half + g, c = wd·Td + 8ni + 2t + e
// (the mma C layout; C tile (mi, ni) of a lane holds (half, e) = (0,0) (0,1) (1,0) (1,1)):
//   vec 4: index = ((w·T + mi·Nt + ni)·32 + 4g + t)·4 + 2half + e,
//   vec 2: index = (((w·T + mi·Nt + ni)·2 + half)·32 + 4g + t)·2 + e,    T = Mt·Nt, Mt = Tm/16, Nt = Td/8.
// The map is linear in its pieces, so index(r0 + r, c0 + c) = index(r0, c0) + index(r, c) whenever
// (r0, c0) is a lane's first element and (r, c) a multiple of (8, 8) inside the warp tile — the
// kernel's lane pointer plus compile-time offsets. The postprocess reads a chunk: 8 columns from a
// multiple of 8 of chunk_rows(vec) rows (r with half = 0, and r + 8 for vec 4), which are
// 8·chunk_rows(vec) consecutive floats; element (row r + 8h, column c + 2t + e) is at
// chunk_offset(vec, h, t, e) from the chunk's first.
struct DqLayout {
  int warps_m = 1, tile_m = 16, tile_d = 8, vec = 2;

  FLASHATTN_HD constexpr DqLayout(const BwdTile& t, int red_width)
      : warps_m(t.warps_m_dq),
        tile_m(t.block_m / t.warps_m_dq),
        tile_d(t.head_dim / (kBwdWarps / t.warps_m_dq)),
        vec(red_width) {}
  FLASHATTN_HD constexpr int index(int r, int c) const {
    const int w = r / tile_m + warps_m * (c / tile_d);
    const int rr = r % tile_m, cc = c % tile_d;
    const int mi = rr / 16, half = rr / 8 % 2, g = rr % 8, ni = cc / 8, t = cc % 8 / 2, e = cc % 2;
    const int tile = w * (tile_m / 16) * (tile_d / 8) + mi * (tile_d / 8) + ni;
    if (vec == 4) return (tile * 32 + 4 * g + t) * 4 + 2 * half + e;
    return ((tile * 2 + half) * 32 + 4 * g + t) * 2 + e;
  }
  FLASHATTN_HD static constexpr int chunk_rows(int vec) { return vec / 2; }
  FLASHATTN_HD static constexpr int chunk_offset(int vec, int h, int t, int e) {
    return vec == 4 ? 4 * t + 2 * h + e : 2 * t + e;
  }
};

}  // namespace flashattn::cuda::sm80
