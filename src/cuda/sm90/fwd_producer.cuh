// The producer of the sm90 forward: one thread issues every TMA load of a tile. Q once; then K of
// block i before V of block i − 1, the order in which the consumers need them (they start S(i) =
// Q·K_iᵀ before O += P(i−1)·V_{i−1}: fwd_consumer.cuh). Each stage is refilled as soon as every
// consumer warp has released it ("empty"), so loads run ahead by the depth of the ring.
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

template <class Traits>
__device__ __forceinline__ void load_tile(const FwdSmem<Traits>& sm, const FwdTile& t, const CUtensorMap* tm_q,
                          const CUtensorMap* tm_k, const CUtensorMap* tm_v) {
  using R = Ring<Traits>;
  if (t.n_blocks == 0) return;  // the consumers write out 0, lse +inf without waiting for anything
  ptx::tma_prefetch_descriptor(tm_k);
  ptx::tma_prefetch_descriptor(tm_v);
  load_rows<Traits>(sm.q, Traits::kQChunkBytes, Traits::kQBytes, tm_q, sm.q_full(), t.q_row, t.head, t.tma_batch);
  auto load_k = [&](int i) {
    ptx::mbarrier_wait(sm.k_empty(R::stage(i)), R::empty_parity(i));
    load_rows<Traits>(sm.k_tile(R::stage(i)), Traits::kKVChunkBytes, Traits::kKVBytes, tm_k, sm.k_full(R::stage(i)),
                      t.k_row + t.key_block(i) * Traits::kBlockN, t.head_kv, t.tma_batch);
  };
  auto load_v = [&](int i) {
    ptx::mbarrier_wait(sm.v_empty(R::stage(i)), R::empty_parity(i));
    load_rows<Traits>(sm.v_tile(R::stage(i)), Traits::kKVChunkBytes, Traits::kKVBytes, tm_v, sm.v_full(R::stage(i)),
                      t.k_row + t.key_block(i) * Traits::kBlockN, t.head_kv, t.tma_batch);
  };
  load_k(0);
  for (int i = 1; i < t.n_blocks; ++i) {
    load_k(i);
    load_v(i - 1);
  }
  load_v(t.n_blocks - 1);
}

}  // namespace flashattn::cuda::sm90
