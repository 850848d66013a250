// Tile shapes of the decode attention kernel (attend_kernel.cuh): the one place that says how a
// (dtype, head dim, cache layout) instance is shaped. Host (plan, launch) and device both read it.
//
// Decode is bound by reading K and V once: the tile is kBlockM = 16 packed query rows (the heads
// of a kv group × the few query tokens; one mma row tile), and the four warps split each block of
// kBlockN keys between them (16 keys each), so the whole block shares every K/V byte it loads.
// kStages blocks of K and V are in flight per thread block, so that several loads per SM are
// always outstanding; the warps merge their partial softmax states at the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/ptx/mma.cuh"
#include "cuda/sm80/smem_tile.cuh"

namespace flashattn::cuda::decode {

struct DecodeShape {
  int block_n;  // keys per K/V block (16 per warp)
  int stages;   // K/V blocks in flight
};

// D = 256 keeps two stages (64 KB each); smaller head dims take three.
// Measured on the H200 (bench/decode_sweep.py): 4 stages at D = 128 (one block per SM) were 1–5 %
// slower contiguous and up to 40 % slower paged than 3 (two blocks per SM).
constexpr DecodeShape decode_shape(int head_dim) { return head_dim <= 128 ? DecodeShape{64, 3} : DecodeShape{64, 2}; }

// How the attention kernel moves K/V into shared memory (attend_kernel.cuh):
//   cp_async: every thread copies 16-byte chunks of several rows into swizzled tiles (every arch);
//   tma: a fifth warp, the producer, issues 64-column boxes of the caches' tensor maps (a contiguous
//     block: one box per panel and side; a paged block: one per page and panel) into 128-byte-swizzled
//     panel tiles (sm_90 images only);
//   producer_cp_async: a producer warpgroup beside the four attending warps copies the rows as
//     cp_async does, each thread arriving on the stage's full mbarrier when its copies have landed
//     (sm_90 images only: the waits are sm_90's mbarrier forms).
// The two producer kinds hand the stages to the attending warps through full/empty mbarriers per
// stage, so no attending warp issues a load or waits at a block-wide barrier per key block.
enum class AttendLoads { cp_async = 0, tma = 1, producer_cp_async = 2 };
inline constexpr int kAttendLoadsKinds = 3;

template <class Tag_, int kHeadDim_, bool kPaged_, AttendLoads kLoads_ = AttendLoads::cp_async>
struct DecodeTraits {
  using Tag = Tag_;
  static constexpr int kHeadDim = kHeadDim_;  // instance head dim D (d ≤ D runs here, zero-filled)
  static constexpr bool kPaged = kPaged_;     // block-table pages, else one contiguous row per sequence
  static constexpr AttendLoads kLoads = kLoads_;
  static constexpr bool kTma = kLoads == AttendLoads::tma;
  static constexpr bool kProducerCopies = kLoads == AttendLoads::producer_cp_async;
  static constexpr bool kWarpSpecialized = kLoads != AttendLoads::cp_async;
  static constexpr DecodeShape kShape = decode_shape(kHeadDim);

  static constexpr int kWarps = 4;                 // the warps that attend (consumers, with a producer)
  static constexpr int kThreads = 32 * kWarps;
  // The producer beside them: one warp issuing TMA boxes, or a warpgroup issuing cp.async (as many
  // threads as attend, so each copies what an attending thread copies on cp_async).
  static constexpr int kProducerThreads = kTma ? 32 : kProducerCopies ? kThreads : 0;
  static constexpr int kLaunchThreads = kThreads + kProducerThreads;
  static constexpr int kBlockM = 16;                    // packed query rows per thread block
  static constexpr int kBlockN = kShape.block_n;        // keys per K/V block
  static constexpr int kKeysPerWarp = kBlockN / kWarps; // one warp's slice of a key block
  static constexpr int kStages = kShape.stages;
  static constexpr int kNTiles = kKeysPerWarp / 8;  // 8-key n-tiles of a warp's S
  static constexpr int kDTiles = kHeadDim / 8;      // 8-column n-tiles of O
  static constexpr int kQKSteps = kHeadDim / 16;
  static constexpr int kPVSteps = kKeysPerWarp / 16;
  static_assert(kKeysPerWarp % 16 == 0, "a warp's keys are whole 16-key mma k-steps of P·V");

  using QTile = SmemTile<kBlockM, kHeadDim>;
  using KVTile = std::conditional_t<kTma, PanelSmemTile<kBlockN, kHeadDim>, SmemTile<kBlockN, kHeadDim>>;
  // A K/V block load: thread t moves chunk column t % kChunksPerRow of rows t / kChunksPerRow + i·kLoadRowStep.
  static constexpr int kLoadRowStep = kThreads / KVTile::kChunksPerRow;
  static constexpr int kLoadRows = kBlockN / kLoadRowStep;
  static_assert(kThreads % KVTile::kChunksPerRow == 0 && kBlockN % kLoadRowStep == 0, "threads cover whole rows");

  // Paged caches: the element offsets of a key block's rows, K's and V's, one per row and side, in a
  // ring of kStages blocks (attend_kernel.cuh's PagedRowOffsets). Thread t computes row
  // t % kBlockN of side t / kBlockN; a loading thread reads its kLoadRows rows as consecutive words.
  // And the block-table entries those offsets come from, copied in (cp.async) kStages − 1 blocks
  // before they are staged: a ring of kStages blocks of one int32 per row and side.
  // A producer warpgroup stages the offsets too, into the same ring, from entries it reads itself.
  static constexpr bool kStagedOffsets = kPaged && !kTma;
  static constexpr bool kEntryRing = kPaged && kLoads == AttendLoads::cp_async;
  static constexpr std::size_t kRowOffsetsBytes = kStagedOffsets ? std::size_t{kStages} * 2 * kBlockN * sizeof(int64_t) : 0;
  static constexpr std::size_t kEntriesBytes = kEntryRing ? std::size_t{kStages} * 2 * kBlockN * sizeof(int32_t) : 0;
  static_assert(!kStagedOffsets || kThreads == 2 * kBlockN, "one thread per row and side stages the row offsets");
  // With a producer: two mbarriers per stage, full (TMA: the producer arrives, the boxes count their
  // bytes; producer_cp_async: every producer thread, once its copies landed) and empty (every
  // attending thread arrives once it has read the stage).
  static constexpr std::size_t kBarriersBytes = kWarpSpecialized ? std::size_t{kStages} * 2 * 8 : 0;
  // TMA: the K/V panels must start at multiples of 1024 bytes (the swizzle atom); the kernel rounds
  // the dynamic shared memory's base up, which may take up to this much more.
  static constexpr std::size_t kAlignSlack = kTma ? 1024 : 0;

  // Shared storage: Q | K stages | V stages | row offsets (paged, cp.async kinds) | table entries
  // (paged, cp_async) | stage mbarriers (with a producer). After the key loop the K/V stages hold the
  // warps' fp32 partial outputs and row statistics for the merge (kMergeBytes ≤ their size).
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQOffset + QTile::kBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * KVTile::kBytes;
  static constexpr uint32_t kRowOffsetsOffset = kVOffset + kStages * KVTile::kBytes;
  static constexpr uint32_t kEntriesOffset = kRowOffsetsOffset + kRowOffsetsBytes;
  static constexpr uint32_t kBarriersOffset = (kEntriesOffset + kEntriesBytes + 7) / 8 * 8;
  static constexpr std::size_t kSmemBytes = kBarriersOffset + kBarriersBytes + kAlignSlack;
  static_assert(!kTma || kKOffset % 1024 == 0, "K/V panels at multiples of 1024 bytes");
  static constexpr std::size_t kMergeOutBytes = std::size_t{kWarps} * kBlockM * kHeadDim * 4;
  static constexpr std::size_t kMergeBytes = kMergeOutBytes + 2 * std::size_t{kWarps} * kBlockM * 4;
  static_assert(kMergeBytes <= 2 * kStages * KVTile::kBytes, "the merge fits in the K/V stages");
};

}  // namespace flashattn::cuda::decode
