// What every role of the sm90 forward kernel agrees on: the instance's traits (from the tile table of
// fwd_shape.hpp), the kernel's params, the tile a CTA owns (which rows, which keys, the mask), and
// where Q, the K/V ring and the mbarriers live in shared memory.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/fast_divmod.cuh"
#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/sm90/fwd_shape.hpp"

namespace flashattn::cuda::sm90 {

// What the kernel reads besides the tensor maps (Q, K, V: fwd_launch.cuh builds them).
struct FwdKernelParams {
  const int32_t* cu_seqlens_q;  // varlen (device arrays, [batch + 1]), else null
  const int32_t* cu_seqlens_k;
  void* out;
  float* lse;  // null: not requested
  int64_t o_batch_stride, o_row_stride, o_head_stride;  // elements
  int64_t lse_batch_stride, lse_head_stride;
  int batch;
  int seqlen_q, seqlen_k;          // padded: the lengths; varlen: the maxima (0 when K has no rows)
  int hdim_v;                      // columns of O written (≤ D)
  int num_m_blocks;                // ceil(seqlen_q / block_m)
  int num_tiles;                   // num_m_blocks·heads_q·batch; the (persistent) grid walks them
  // The divisors of the tile order (tile_coordinates below, which every consumer thread and the
  // producer runs per tile), as FastDivmod: ≥ 1 even where there are no tiles (fwd_launch.cuh).
  FastDivmod heads_q, group_size;      // group_size = heads_q / heads_kv
  FastDivmod section_heads;            // (batch, head) pairs per section of the tile order
  FastDivmod last_section_heads;       // pairs in the last section (1 .. section_heads)
  FastDivmod section_tiles;            // num_m_blocks · section_heads
  int* tile_counter;               // dynamic schedule: tiles handed out past the first wave (zeroed
                                   // before the launch); null: static stride (TileScheduler)
  int window_left, window_right;   // clamped (mask.cuh); < 0 unbounded; masked instances only
  ScoreTransform scores;
  // Paged K/V (paged prefill; null: packed or padded keys): key t of sequence b is row t % page_size
  // of pool page block_table[b·block_table_batch_stride + t / page_size], clamped to [0, last_page]
  // (common/paged_rows.cuh); seqlen_k is then at most the table's capacity. The K and V maps are
  // over the pools {d, page_size, heads_kv, num_pages} (fwd_maps.hpp).
  const int32_t* block_table;
  int64_t block_table_batch_stride;
  FastDivmod page_size;
  int last_page;
};

template <class TagT, int kHeadDim, bool kMaskedT, bool kTallT = false, bool kPagedT = false>
struct FwdTraits {
  using Tag = TagT;
  static constexpr FwdShape kShape = fwd_shape(kHeadDim, kMaskedT, kTallT);
  // Paged K/V (p.block_table; fwd_producer.cuh's load_paged_rows): kernels of their own (the masked
  // tile, fwd_launch.hpp), so that the others keep their code; the producer warp shares the pages.
  static constexpr bool kPaged = kPagedT;
  static_assert(!kPaged || kMaskedT, "paged calls run on the masked tile");
  static constexpr int kD = kHeadDim, kBlockM = kShape.block_m(), kBlockN = kShape.block_n;
  static constexpr int kConsumers = kShape.consumers, kStages = kShape.stages;
  static constexpr int kThreads = kShape.threads(), kConsumerThreads = kConsumers * kWarpgroupThreads;
  static constexpr bool kMasked = kMaskedT;  // causal or window: the mask may cut any tile
  static constexpr bool kTall = kTallT;      // the three-consumer masked tile (fwd_shape)
  // Ping-pong: the consumers take turns issuing their two products, so one's softmax runs under the
  // other's matmuls (FlashAttention-3 does it up to D = 128; at D = 256 the products are long
  // enough to hide the softmax of the same warpgroup).
  static constexpr bool kPingPong = kHeadDim <= 128;
  static constexpr int kChunks = kShape.chunks();
  static constexpr uint32_t kQChunkBytes = kBlockM * kSwizzleRowBytes;   // 64 columns of Q
  static constexpr uint32_t kKVChunkBytes = kBlockN * kSwizzleRowBytes;  // 64 columns of K or V
  static constexpr uint32_t kQBytes = kShape.q_bytes();
  static constexpr uint32_t kKVBytes = kShape.kv_tile_bytes();
  static constexpr uint32_t kKOffset = kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKVBytes;
  static_assert(kHeadDim % kSwizzleCols == 0 && kBlockN % 16 == 0 && kBlockN <= 256 && kHeadDim <= 256);
  static_assert(kQChunkBytes % kSwizzleAtomBytes == 0 && kKVChunkBytes % kSwizzleAtomBytes == 0);
  static_assert(kConsumers >= 2 && kConsumers <= 3, "named barrier ids below assume 2 or 3 consumers");
};

// Named barriers (0 is __syncthreads, unused after the roles split).
inline constexpr uint32_t kTurnBarrier = 1;      // + consumer: its turn to issue (ping-pong)
inline constexpr uint32_t kVTailBarrier = 4;     // every consumer: the varlen V tail is zeroed

// The tile of one CTA: query block m0 of (batch, head), the key blocks it visits, from the last to
// the first (the ones that need element masks come first). Loop index i is key block n_end − 1 − i.
struct FwdTile {
  int batch, head, head_kv, m0;
  SeqLens seq;
  Mask mask;
  int n_end, n_blocks;
  int tma_batch, q_row, k_row;  // TMA coordinates: varlen rows are packed rows of the one "batch" 0;
                                // paged keys: k_row 0 (a key's row is found through its page)
  bool zero_v_tail;             // varlen: V rows of the first block loaded past seqlen_k are zeroed

  __device__ int key_block(int i) const { return n_end - 1 - i; }
  // Whether anything is loaded: rows of this sequence, and keys they see (else out 0, lse +inf, or
  // nothing at all past a varlen sequence's end).
  __device__ bool has_rows() const { return m0 < seq.seqlen_q; }
  __device__ bool loads() const { return has_rows() && n_blocks > 0; }
};

// The order of the tiles: the (batch, head) pairs in sections of p.section_heads consecutive ones
// (sized by the host so that a section's K and V fit in L2 together); within a section, query
// blocks from the last (the longest under a causal mask) to the first, each over the section's
// heads. With sections of one head this is head by head, longest block first.
//
// Which tiles a CTA takes (TileScheduler): the grid is persistent (one CTA per SM, or fewer when
// there are fewer tiles), and CTA c starts with tile c. After that:
//   - static (p.tile_counter null): tiles c + G, c + 2G, ... (G = gridDim.x), where every tile does
//     the same work: padded batches without a mask;
//   - dynamic: the next tile is G + atomicAdd(counter, 1), so whichever CTA finishes first takes
//     the next longest tile (FlashAttention-3's scheduler), where tiles differ (causal or local
//     masks, varlen). A static stride was 1.7× imbalanced there (docs/kernels-sm90-forward.md).
// The producer's thread schedules and hands each tile index to the consumers through a two-slot
// ring in shared memory (FwdSmem: tile_full/tile_empty); a tile index ≥ num_tiles ends the CTA.
//
// tile_coordinates: where tile `tile` lies in that order. Its divisions are multiplications
// (FastDivmod): D = 64's short tiles are issue-bound, and four integer divisions were ~90 of the
// ~200 instructions per warp that worked out a tile (ncu, hdim 64 causal 512; the change measured
// +2–4 % at 512–1k, docs/kernels-sm90-forward.md). Except in the tall tile, where with them its key
// loop ran 1.5–2.5 % slower at 4k–16k (as many instructions, scheduled otherwise; not understood)
// and its tiles are long enough that the divisions do not count.
struct TileCoordinates {
  int batch, head, head_kv, m_block;
};

template <class Traits>
__device__ __forceinline__ TileCoordinates tile_coordinates(const FwdKernelParams& p, int tile) {
  TileCoordinates c;
  const int pairs = p.batch * p.heads_q.divisor, section_heads = p.section_heads.divisor;
  if constexpr (Traits::kTall) {
    const int per_section = p.num_m_blocks * section_heads;
    const int section = tile / per_section, first = section * section_heads;
    const int heads_here = min(section_heads, pairs - first);
    const int r = tile - section * per_section;
    c.m_block = p.num_m_blocks - 1 - r / heads_here;
    const int pair = first + r % heads_here;
    c.head = pair % p.heads_q.divisor;
    c.batch = pair / p.heads_q.divisor;
    c.head_kv = c.head / p.group_size.divisor;
  } else {
    const int section = p.section_tiles.quotient(tile), first = section * section_heads;
    const int r = tile - section * p.section_tiles.divisor;
    const bool full = first + section_heads <= pairs;  // else the last section, with fewer heads
    const int r_block = full ? p.section_heads.quotient(r) : p.last_section_heads.quotient(r);
    c.m_block = p.num_m_blocks - 1 - r_block;
    const int pair = first + (r - r_block * (full ? section_heads : p.last_section_heads.divisor));
    c.batch = p.heads_q.quotient(pair);
    c.head = pair - c.batch * p.heads_q.divisor;
    c.head_kv = p.group_size.quotient(c.head);
  }
  return c;
}

template <class Traits>
__device__ __forceinline__ FwdTile fwd_tile(const FwdKernelParams& p, int tile) {
  FwdTile t;
  const TileCoordinates c = tile_coordinates<Traits>(p, tile);
  t.batch = c.batch;
  t.head = c.head;
  t.head_kv = c.head_kv;
  t.m0 = c.m_block * Traits::kBlockM;
  const bool varlen = p.cu_seqlens_q != nullptr;
  t.seq = seq_lens(t.batch, p.cu_seqlens_q, p.cu_seqlens_k, p.seqlen_q, p.seqlen_k);
  t.mask.seqlen_q = t.seq.seqlen_q;
  t.mask.seqlen_k = t.seq.seqlen_k;
  t.mask.left = Traits::kMasked ? p.window_left : -1;
  t.mask.right = Traits::kMasked ? p.window_right : -1;
  const int n_begin = t.mask.n_block_begin(t.m0, Traits::kBlockN);
  t.n_end = t.mask.n_block_end(t.m0, Traits::kBlockM, Traits::kBlockN);
  t.n_blocks = t.n_end > n_begin ? t.n_end - n_begin : 0;
  t.tma_batch = varlen ? 0 : t.batch;  // the plan refuses 2^31 packed rows or more
  t.q_row = static_cast<int>(t.seq.q_offset) + t.m0;
  t.k_row = Traits::kPaged ? 0 : static_cast<int>(t.seq.k_offset);
  t.zero_v_tail = varlen && t.n_blocks > 0 && t.seq.seqlen_k - (t.n_end - 1) * Traits::kBlockN < Traits::kBlockN;
  return t;
}

// Shared memory of one CTA: Q, then the K stages, then the V stages, every tile on a swizzle atom;
// and the mbarriers: Q full/empty, per stage K full/empty and V full/empty, and per tile slot
// full/empty (the slots hold the tile indices the producer hands to the consumers). A "full" barrier
// completes when the producer's TMA bytes have landed; an "empty" one when every consumer warp has
// finished the products that read the buffer (Q: the tile's last Q·Kᵀ, so the next tile's Q loads
// while the consumers finish the last P·V and the epilogue).
template <class Traits>
struct FwdSmem {
  static constexpr int kTileSlots = 2;
  static constexpr int kBarriers = 2 + 4 * Traits::kStages + 2 * kTileSlots;
  unsigned char* base;  // generic address of Q
  uint32_t q;           // shared-window address of Q
  uint32_t bars;        // shared-window address of the barrier array
  int* tile_slots;      // [kTileSlots]

  __device__ uint32_t k_tile(int stage) const { return q + Traits::kKOffset + stage * Traits::kKVBytes; }
  __device__ uint32_t v_tile(int stage) const { return q + Traits::kVOffset + stage * Traits::kKVBytes; }
  __device__ uint32_t q_full() const { return bars; }
  __device__ uint32_t q_empty() const { return bars + 8; }
  __device__ uint32_t k_full(int stage) const { return bars + 8 * (2 + stage); }
  __device__ uint32_t k_empty(int stage) const { return bars + 8 * (2 + Traits::kStages + stage); }
  __device__ uint32_t v_full(int stage) const { return bars + 8 * (2 + 2 * Traits::kStages + stage); }
  __device__ uint32_t v_empty(int stage) const { return bars + 8 * (2 + 3 * Traits::kStages + stage); }
  __device__ uint32_t tile_full(int slot) const { return bars + 8 * (2 + 4 * Traits::kStages + slot); }
  __device__ uint32_t tile_empty(int slot) const { return bars + 8 * (2 + 4 * Traits::kStages + kTileSlots + slot); }

  // Thread 0, before the roles split (then a __syncthreads).
  __device__ void init_barriers() const {
    constexpr uint32_t kConsumerWarps = Traits::kConsumerThreads / 32;
    ptx::mbarrier_init(q_full(), 1);
    ptx::mbarrier_init(q_empty(), kConsumerWarps);
#pragma unroll
    for (int s = 0; s < Traits::kStages; ++s) {
      ptx::mbarrier_init(k_full(s), 1);
      ptx::mbarrier_init(v_full(s), 1);
      ptx::mbarrier_init(k_empty(s), kConsumerWarps);
      ptx::mbarrier_init(v_empty(s), kConsumerWarps);
    }
#pragma unroll
    for (int s = 0; s < kTileSlots; ++s) {
      ptx::mbarrier_init(tile_full(s), 1);
      ptx::mbarrier_init(tile_empty(s), Traits::kConsumerThreads);  // every reader arrives
    }
    ptx::fence_mbarrier_init();
  }
};

// A ring of kDepth buffers guarded by full/empty mbarriers: use number base + i goes to buffer
// (base + i) % kDepth in its ((base + i) / kDepth)-th round. The consumers wait for that round's
// phase of "full"; the producer, before refilling, for the previous round's phase of "empty" (on a
// fresh barrier the phase before the first counts as complete). The K/V ring (kStages) runs on
// across the tiles of a CTA: key block i of a tile is load base + i, base the loads of the CTA's
// earlier tiles. Q is a ring of one stage counted in tiles that load; the tile slots
// (TileScheduler) one of two counted in tiles.
template <int kDepth>
struct Ring {
  int base;
  __device__ int stage(int i) const { return (base + i) % kDepth; }
  __device__ uint32_t full_parity(int i) const { return ((base + i) / kDepth) & 1; }
  __device__ uint32_t empty_parity(int i) const { return full_parity(i) ^ 1; }
};

// Where a CTA is in its sequence of tiles: the next ring position and the tiles that loaded Q.
struct TileCursor {
  int loads = 0;    // K/V blocks loaded so far (the ring's base for the next tile)
  int q_tiles = 0;  // tiles that loaded Q so far (Q's phase)

  __device__ void advance(const FwdTile& t) {
    if (!t.loads()) return;
    loads += t.n_blocks;
    ++q_tiles;
  }
};

// The tile sequence of a CTA (see "Which tiles a CTA takes" above). The producer's thread calls
// publish() per tile, the consumers take() it: tile j of the CTA goes through slot j % 2, whose
// full/empty phases count the CTA's tiles like a ring of two stages.
template <class Traits>
struct TileScheduler {
  const FwdSmem<Traits>& sm;
  const FwdKernelParams& p;
  static constexpr int kSlots = FwdSmem<Traits>::kTileSlots;

  __device__ int first() const { return static_cast<int>(blockIdx.x); }
  // The tile after `tile`; dynamic: a new one from the counter.
  __device__ int next(int tile) const {
    return p.tile_counter != nullptr ? static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1)
                                     : tile + static_cast<int>(gridDim.x);
  }
  // Producer, tile j of the CTA: once every consumer thread has read slot j % 2's previous tile.
  __device__ void publish(int j, int tile) const {
    const Ring<kSlots> tiles{0};
    const int slot = tiles.stage(j);
    ptx::mbarrier_wait(sm.tile_empty(slot), tiles.empty_parity(j));
    sm.tile_slots[slot] = tile;
    ptx::mbarrier_arrive(sm.tile_full(slot));  // release: the slot's store is visible to the waiters
  }
  // Consumer thread, tile j of the CTA: waits for its index, reads it and hands the slot back (each
  // reader arrives itself, so its read is ordered before the producer's next write of the slot).
  __device__ int take(int j) const {
    const Ring<kSlots> tiles{0};
    const int slot = tiles.stage(j);
    ptx::mbarrier_wait(sm.tile_full(slot), tiles.full_parity(j));
    const int tile = sm.tile_slots[slot];
    ptx::mbarrier_arrive(sm.tile_empty(slot));
    return tile;
  }
};

}  // namespace flashattn::cuda::sm90
