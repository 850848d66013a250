// The sm90 forward's tile shape per head-dim instance: one table, read by the host (plan, tensor
// maps, grid, shared memory) and by the kernel (fwd_kernel.cuh), so the two cannot disagree.
//
// Step 1 (docs/kernels-sm90.md, "forward, step 1"): two consumer warpgroups, 64 query rows each
// (wgmma's M), no producer warp; K and V through a 2-stage ring. Shared memory holds Q (block_m ×
// D), and per stage one K and one V tile (block_n × D), all 16-bit, in the TMA 128B swizzle: chunks
// of 64 columns (128 bytes per row), each chunk the tile's rows one after the other.
#pragma once

#include <cstddef>

namespace flashattn::cuda::sm90 {

inline constexpr int kFwdWarpgroups = 2;         // consumer warpgroups
inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kWarpgroupRows = 64;        // wgmma's M: the rows one warpgroup owns
inline constexpr int kFwdStages = 2;             // K/V ring depth
inline constexpr int kSwizzleCols = 64;          // 16-bit columns in one 128B-swizzle row (a chunk)
inline constexpr int kSwizzleRowBytes = 128;
inline constexpr int kSwizzleAtomBytes = 1024;   // 8 rows of 128 B: swizzled tiles start on it

struct FwdShape {
  int head_dim;  // D: the instance's (padded) head dim for Q·Kᵀ and P·V, a multiple of 64
  int block_m;   // query rows per CTA
  int block_n;   // keys per K/V block

  constexpr int threads() const { return kFwdWarpgroups * kWarpgroupThreads; }
  constexpr int chunks() const { return head_dim / kSwizzleCols; }
  constexpr std::size_t q_bytes() const { return std::size_t(block_m) * head_dim * 2; }
  constexpr std::size_t kv_tile_bytes() const { return std::size_t(block_n) * head_dim * 2; }
  // Dynamic shared memory: Q, the K and V stages, and the slack to align the base to the swizzle atom.
  constexpr std::size_t smem_bytes() const {
    return kSwizzleAtomBytes + q_bytes() + 2 * std::size_t(kFwdStages) * kv_tile_bytes();
  }
};

// block_n = 128 up to D = 128 (160 KB of shared memory at D = 128); 64 at D = 256 (192 KB): the
// S tile (block_n / 2 floats per thread) beside the O accumulator (D / 2) stays within 255 registers.
constexpr FwdShape fwd_shape(int head_dim) {
  return FwdShape{head_dim, kFwdWarpgroups * kWarpgroupRows, head_dim <= 128 ? 128 : 64};
}

// The head dims the sm90 forward has instances for (sm90.cmake compiles those of FLASHATTN_HEADDIMS).
constexpr bool is_fwd_head_dim(int d) { return d == 64 || d == 128 || d == 256; }

}  // namespace flashattn::cuda::sm90
