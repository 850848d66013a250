// The producer of the sm90 forward: one thread schedules the CTA's tiles (TileScheduler) and issues
// every TMA load. Per tile, K of its first block and Q once; then K of block i before V of block
// i − 1, the order in which the consumers need them (they start S(i) = Q·K_iᵀ before
// O += P(i−1)·V_{i−1}: fwd_consumer.cuh). Each buffer is refilled as soon as every consumer warp has
// released it ("empty"), so loads run ahead by the depth of the ring, and into the next tile while
// the consumers finish the current one.
#pragma once

#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm90/fwd_tile.cuh"

namespace flashattn::cuda::sm90 {

// A tile of `rows` rows × D columns at (row, head, batch): D / 64 boxes of 64 columns, one per
// swizzle chunk, completing on `bar` with the tile's bytes.
template <class Traits>
__device__ __forceinline__ void load_rows(uint32_t dst, uint32_t chunk_bytes, uint32_t bytes, const CUtensorMap* map,
                                          uint32_t bar, int row, int head, int batch) {
  ptx::mbarrier_arrive_expect_tx(bar, bytes);
#pragma unroll
  for (int c = 0; c < Traits::kChunks; ++c) {
    ptx::tma_load(dst + c * chunk_bytes, map, bar, c * kSwizzleCols, row, head, batch);
  }
}

// One tile: K of its first block, Q once the consumers are done with the previous tile's Q (K
// first: its stage frees before Q's buffer, which is released after the previous tile's last
// Q·Kᵀ), then the other blocks.
template <class Traits>
__device__ __forceinline__ void load_tile(const FwdSmem<Traits>& sm, const FwdTile& t, const TileCursor& at,
                                          const CUtensorMap* tm_q, const CUtensorMap* tm_k, const CUtensorMap* tm_v) {
  if (!t.loads()) return;  // the consumers write out 0, lse +inf (or nothing) without waiting
  const Ring<Traits::kStages> ring{at.loads};
  auto load_k = [&](int i) {
    ptx::mbarrier_wait(sm.k_empty(ring.stage(i)), ring.empty_parity(i));
    load_rows<Traits>(sm.k_tile(ring.stage(i)), Traits::kKVChunkBytes, Traits::kKVBytes, tm_k,
                      sm.k_full(ring.stage(i)), t.k_row + t.key_block(i) * Traits::kBlockN, t.head_kv, t.tma_batch);
  };
  auto load_v = [&](int i) {
    ptx::mbarrier_wait(sm.v_empty(ring.stage(i)), ring.empty_parity(i));
    load_rows<Traits>(sm.v_tile(ring.stage(i)), Traits::kKVChunkBytes, Traits::kKVBytes, tm_v,
                      sm.v_full(ring.stage(i)), t.k_row + t.key_block(i) * Traits::kBlockN, t.head_kv, t.tma_batch);
  };
  load_k(0);
  ptx::mbarrier_wait(sm.q_empty(), (at.q_tiles & 1) ^ 1);
  load_rows<Traits>(sm.q, Traits::kQChunkBytes, Traits::kQBytes, tm_q, sm.q_full(), t.q_row, t.head, t.tma_batch);
  for (int i = 1; i < t.n_blocks; ++i) {
    load_k(i);
    load_v(i - 1);
  }
  load_v(t.n_blocks - 1);
}

// Every tile of this CTA, as the scheduler hands them out; each tile index goes to the consumers
// before its loads (the one past the last tells them to stop).
template <class Traits>
__device__ __forceinline__ void load_tiles(const FwdSmem<Traits>& sm, const FwdKernelParams& p, const CUtensorMap* tm_q,
                                           const CUtensorMap* tm_k, const CUtensorMap* tm_v) {
  ptx::tma_prefetch_descriptor(tm_q);
  ptx::tma_prefetch_descriptor(tm_k);
  ptx::tma_prefetch_descriptor(tm_v);
  const TileScheduler<Traits> scheduler{sm, p};
  TileCursor at;
  for (int j = 0, tile = scheduler.first();; ++j) {
    scheduler.publish(j, tile);
    if (tile >= p.num_tiles) break;
    const FwdTile t = fwd_tile<Traits>(p, tile);
    load_tile(sm, t, at, tm_q, tm_k, tm_v);
    at.advance(t);
    // After the tile's loads are issued: the producer then waits for a free stage anyway, which
    // hides the counter's latency (and nothing stays live across the loads: 32 registers here).
    tile = scheduler.next(tile);
  }
}

}  // namespace flashattn::cuda::sm90
