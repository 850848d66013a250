// Tile shapes of the sm80 forward kernel and everything derived from them: the one place that says
// how a (head dim, dtype, mask) instance is shaped. Host (dispatch, launch) and device (kernel) both
// read it; no other table exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/common/smem_tile.cuh"
#include "cuda/ptx/mma.cuh"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda::sm80 {

struct FwdTileShape {
  int block_m;    // query rows per thread block
  int block_n;    // keys per K/V tile
  int warps;      // each warp owns block_m / warps query rows (16 or 32)
  int kv_stages;  // K/V shared-memory buffers: 2 = double-buffered, 1 = FlashAttention-2's single
};

// Chosen for H100/H200 (and valid on A100: every shape's shared memory is ≤ 163 KB), after
// FlashAttention-2's tuned shapes; see docs/kernels-sm80-forward.md. dtype and the mask do not
// change the shape today; they are parameters so that they can.
constexpr FwdTileShape fwd_tile_shape(int head_dim, DType /*dtype*/, bool /*masked*/) {
  if (head_dim <= 64) return {128, 128, 4, 2};
  if (head_dim <= 128) return {128, 64, 4, 2};
  if (head_dim <= 192) return {128, 64, 8, 2};
  return {128, 64, 8, 1};
}

template <class Tag>
constexpr DType dtype_of() {
  return std::is_same_v<Tag, ptx::BF16> ? DType::bf16 : DType::f16;
}

template <class Tag_, int kHeadDim_, bool kMasked_>
struct FwdTraits {
  using Tag = Tag_;                       // ptx::F16 or ptx::BF16
  static constexpr int kHeadDim = kHeadDim_;  // instance head dim D (tiles are D wide; d ≤ D runs here)
  static constexpr bool kMasked = kMasked_;   // causal / local window: block skipping + element masks
  static constexpr FwdTileShape kShape = fwd_tile_shape(kHeadDim, dtype_of<Tag>(), kMasked);

  static constexpr int kBlockM = kShape.block_m;
  static constexpr int kBlockN = kShape.block_n;
  static constexpr int kWarps = kShape.warps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStages = kShape.kv_stages;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // 16-row mma tiles per warp
  static constexpr int kNTiles = kBlockN / 8;        // 8-key n-tiles of S
  static constexpr int kDTiles = kHeadDim / 8;       // 8-column n-tiles of O
  static constexpr int kQKSteps = kHeadDim / 16;     // k-steps of Q·Kᵀ
  static constexpr int kPVSteps = kBlockN / 16;      // k-steps of P·V
  static_assert(kBlockM % (16 * kWarps) == 0 && kStages >= 1 && kStages <= 2);

  using QTile = SmemTile<kBlockM, kHeadDim>;  // also the O tile of the epilogue (same rows, D wide)
  using KVTile = SmemTile<kBlockN, kHeadDim>;

  // Shared storage: Q | K stages | V stages. The epilogue's O tile reuses Q's bytes.
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQOffset + QTile::kBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * KVTile::kBytes;
  static constexpr std::size_t kSmemBytes = kVOffset + kStages * KVTile::kBytes;
};

// Shared memory of the instance that runs (dtype, head dim D, masked); for the host check.
template <class Tag, int kHeadDim>
constexpr std::size_t fwd_smem_bytes(bool masked) {
  return masked ? FwdTraits<Tag, kHeadDim, true>::kSmemBytes : FwdTraits<Tag, kHeadDim, false>::kSmemBytes;
}

}  // namespace flashattn::cuda::sm80
