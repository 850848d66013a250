// Tile shapes of the sm80 forward kernel and everything derived from them: the one place that says
// how a (head dim, dtype, mask) instance is shaped. Host (dispatch, launch) and device (kernel) both
// read it; no other table exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/ptx/mma.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda::sm80 {

struct FwdTileShape {
  int block_m;    // query rows per thread block
  int block_n;    // keys per K/V tile
  int warps;      // each warp owns block_m / warps query rows (16 or 32)
  int kv_stages;  // K/V shared-memory buffers: 2 = double-buffered, 1 = FlashAttention-2's single

  constexpr bool operator==(const FwdTileShape& o) const {
    return block_m == o.block_m && block_n == o.block_n && warps == o.warps && kv_stages == o.kv_stages;
  }
  constexpr bool operator!=(const FwdTileShape& o) const { return !(*this == o); }
};

// A GPU is "big_smem" when a block may opt in to at least this much shared memory (H100/H200:
// 227 KB; A100: 163 KB; Ada: 99 KB). Shapes for such GPUs may use up to this much.
inline constexpr std::size_t kFwdBigSmemBytes = 192 * 1024;

// Chosen for H100/H200 (and valid on A100: every shape's shared memory is ≤ 163 KB unless
// big_smem), after FlashAttention-2's tuned shapes; see docs/kernels-sm80-forward.md. dtype does
// not change the shape today; it is a parameter so that it can. Masking does not change it either
// (a smaller masked D = 128 shape was measured and dropped). `big_smem`: the GPU gives a block
// kFwdBigSmemBytes (see above); a head dim whose big_smem shape differs gets both kernels compiled
// and the launch picks by device.
constexpr FwdTileShape fwd_tile_shape(int head_dim, DType /*dtype*/, bool big_smem) {
  if (head_dim <= 64) return {128, 128, 4, 2};
  // FlashAttention-2's shape: 64 KB, single-buffered K/V, 2 blocks per SM on H100/H200 and A100
  // (double-buffered, 96 KB, measured 1–4 % slower at 512–4k on the H200).
  if (head_dim <= 128) return {128, 64, 4, 1};
  if (head_dim <= 192) return {128, 64, 8, 2};
  // H100/H200: two independent blocks of 4 warps per SM (96 KB each), FlashAttention-2's own choice
  // there (ncu of PyTorch's flash kernel: Flash_fwd_kernel_traits<256, 64, 64, 4>): one block's
  // barriers and loads are covered by the other's math. A100 (164 KB per SM) fits one such block
  // per SM, so it keeps the 8-warp 128-row block.
  if (big_smem) return {64, 64, 4, 1};
  return {128, 64, 8, 1};
}

// Whether instance D has a second, big_smem-only shape (and so a second kernel).
constexpr bool fwd_has_big_smem_shape(int head_dim, DType dtype) {
  return fwd_tile_shape(head_dim, dtype, true) != fwd_tile_shape(head_dim, dtype, false);
}

template <class Tag>
constexpr DType dtype_of() {
  return std::is_same_v<Tag, ptx::BF16> ? DType::bf16 : DType::f16;
}

template <class Tag_, int kHeadDim_, bool kMasked_, bool kBigSmem_ = false, bool kPaged_ = false,
          bool kSlopeVaries_ = false>
struct FwdTraits {
  using Tag = Tag_;                       // ptx::F16 or ptx::BF16
  static constexpr int kHeadDim = kHeadDim_;  // instance head dim D (tiles are D wide; d ≤ D runs here)
  static constexpr bool kMasked = kMasked_;   // causal / local window: block skipping + element masks
  static constexpr bool kBigSmem = kBigSmem_; // the shape for GPUs with kFwdBigSmemBytes per block
  static constexpr bool kPaged = kPaged_;     // K/V in block-table pages (common/paged_rows.cuh's PagedRows)
  // Calls whose score transform's slope varies (the soft cap: common/scores.cuh's score_slope_varies)
  // run on kernels of their own (kSlopeVaries; fwd_launch.cuh), the masked kernel of the common shape
  // (fwd_plan.cu keeps them off big_smem). The others compile without such transforms' code in their
  // key loop (two MUFU and a clamp per score: 29 % of the loop's instructions at D = 128, never
  // executed), except D = 256 without a mask, whose loop ptxas schedules better with it (H100, sm_90a
  // image: without it −4 % there, +1 / +2 / +2 % at D = 64 / 128 / 256 masked;
  // docs/kernels-sm80-forward.md).
  static constexpr bool kSlopeVaries = kSlopeVaries_;
  static constexpr bool kEveryTransform = kSlopeVaries || (kHeadDim == 256 && !kMasked);
  static_assert(!kSlopeVaries || (kMasked && !kBigSmem), "such calls run on the masked kernel of the common shape");
  static constexpr FwdTileShape kShape = fwd_tile_shape(kHeadDim, dtype_of<Tag>(), kBigSmem);

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
  static_assert(kSmemBytes <= (kBigSmem ? kFwdBigSmemBytes : std::size_t{163} * 1024));
};

}  // namespace flashattn::cuda::sm80
