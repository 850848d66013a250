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

  // Shared memory: K, V (block_n × d), Q and dO (stages × block_m × d), P and dS (block_m ×
  // block_n), all 16-bit; LSE·log2e and D = rowsum(dO∘O) (stages × block_m fp32 each).
  FLASHATTN_HD constexpr int smem_k_bytes() const { return block_n * head_dim * 2; }
  FLASHATTN_HD constexpr int smem_q_bytes() const { return block_m * head_dim * 2; }
  FLASHATTN_HD constexpr int smem_p_bytes() const { return block_m * block_n * 2; }
  FLASHATTN_HD constexpr int smem_row_bytes() const { return block_m * 4; }
  FLASHATTN_HD constexpr int smem_bytes() const {
    return 2 * smem_k_bytes() + 2 * stages * smem_q_bytes() + 2 * smem_p_bytes() + 2 * stages * smem_row_bytes();
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
  //                                d    bm   bn  wS wKV wQ stages remat_lane
  if (head_dim == 64) return BwdTile{64, 128, 128, 2, 4, 4, 2, false};
  if (head_dim == 96) return BwdTile{96, 64, 128, 2, 4, 4, 2, false};
  if (head_dim == 128) return BwdTile{128, 64, 128, 2, 4, 2, 2, true};
  if (head_dim == 192) return BwdTile{192, 64, 64, 4, 2, 2, 2, false};
  if (head_dim == 256) {
    return big_smem ? BwdTile{256, 64, 64, 4, 2, 2, 2, false} : BwdTile{256, 64, 64, 4, 2, 2, 1, false};
  }
  return BwdTile{};
}

// Where element (r, c) of a query tile's dQ accumulator (block_m × head_dim fp32, contiguous in the
// workspace) lives: the dQ GEMM's accumulator fragments in lane order, so that one warp-wide
// red.global.add.v2.f32 covers 256 contiguous bytes (two whole 128-byte lines) instead of 8 rows ×
// 32 bytes. With the dQ warp grid of the tile (warp w = wm + warps_m·wd owns rows wm·Tm ..,
// columns wd·Td ..) and r = wm·Tm + 16mi + 8half + g, c = wd·Td + 8ni + 2t + e (the mma C layout):
//   index = (((w·F + (mi·Nt + ni)·2 + half)·32 + 4g + t)·2 + e,   F = 2·Mt·Nt, Mt = Tm/16, Nt = Td/8.
// The map is linear in its pieces, so index(r0 + r, c0 + c) = index(r0, c0) + index(r, c) whenever
// (r0, c0) is a lane's first element and (r, c) a multiple of (8, 8) inside the warp tile — the
// kernel's lane pointer plus compile-time offsets. 8 consecutive columns from a multiple of 8 are 8
// consecutive floats (t = 0..3, e = 0..1): the postprocess reads them as two float4.
struct DqLayout {
  int warps_m = 1, tile_m = 16, tile_d = 8;

  FLASHATTN_HD constexpr explicit DqLayout(const BwdTile& t)
      : warps_m(t.warps_m_dq), tile_m(t.block_m / t.warps_m_dq), tile_d(t.head_dim / (kBwdWarps / t.warps_m_dq)) {}
  FLASHATTN_HD constexpr int index(int r, int c) const {
    const int w = r / tile_m + warps_m * (c / tile_d);
    const int rr = r % tile_m, cc = c % tile_d;
    const int mi = rr / 16, half = rr / 8 % 2, g = rr % 8, ni = cc / 8, t = cc % 8 / 2, e = cc % 2;
    const int frags = 2 * (tile_m / 16) * (tile_d / 8);
    return ((w * frags + (mi * (tile_d / 8) + ni) * 2 + half) * 32 + 4 * g + t) * 2 + e;
  }
};

}  // namespace flashattn::cuda::sm80
