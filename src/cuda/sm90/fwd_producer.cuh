// The producer of the sm90 forward: one thread schedules the CTA's tiles (TileScheduler) and issues
// every TMA load (in the paged kernels its warp follows it and shares the page boxes). Per tile, K
// of its first block and Q once; then K of block i before V of block i − 1, the order in which the
// consumers need them (they start S(i) = Q·K_iᵀ before O += P(i−1)·V_{i−1}: fwd_consumer.cuh).
// Each buffer is refilled as soon as every consumer warp has released it ("empty"), so loads run
// ahead by the depth of the ring, and into the next tile while the consumers finish the current one.
// Paged K/V (paged prefill) come from their pool pages, one box per page that the block touches
// (load_paged_rows).
#pragma once

#include "cuda/common/paged_rows.cuh"
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

// Paged K/V: the block of kBlockN keys from key `key0` of the tile's sequence, as boxes of
// `box` = min(page_size, kBlockN) rows (the map's box height), one per page the block touches,
// each at its rows' place in the tile: the plan takes page sizes that are multiples of 16 (a box
// starts on a swizzle atom) and divide kBlockN or are multiples of it (a box never straddles a page).
// The producer warp shares the boxes: lane j reads table entry j and issues box j (at most
// kBlockN / 16 = 8 lanes), after lane 0 has told the barrier the block's bytes (every box is
// whole, so they are the unpaged block's). The page and the row come from common/paged_rows.cuh's
// PagedRows (entries clamped into the pool, so a bad table reads a wrong page of the pool, never
// memory outside it); keys past the sequence (whose length the launch caps at the table row's
// capacity) are never looked up: page 0 stands in for them (the consumers mask those keys' scores
// and zero those V rows).
template <class Traits>
__device__ __forceinline__ void load_paged_rows(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                                const FwdKernelParams& p, const FwdTile& t, int key0, int lane) {
  if (lane == 0) ptx::mbarrier_arrive_expect_tx(bar, Traits::kKVBytes);
  __syncwarp();
  const int box = min(p.page_size.divisor, Traits::kBlockN), first = lane * box;
  if (first >= Traits::kBlockN) return;
  const PagedRows pages{0, 0, 0, p.block_table + t.batch * p.block_table_batch_stride, p.page_size, p.last_page};
  const int key = key0 + first;  // a page's first key, or (pages holding blocks) the block's
  const int page = key < t.seq.seqlen_k ? pages.page_of(key) : 0;
#pragma unroll
  for (int c = 0; c < Traits::kChunks; ++c) {
    ptx::tma_load(dst + c * Traits::kKVChunkBytes + first * kSwizzleRowBytes, map, bar, c * kSwizzleCols,
                  pages.row_of(key), t.head_kv, page);
  }
}

// K or V of key block `n` of the tile: a block of the (packed or padded) tensor, or of the pages.
template <class Traits>
__device__ __forceinline__ void load_key_block(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                               const FwdKernelParams& p, const FwdTile& t, int n, int lane) {
  const int key0 = n * Traits::kBlockN;
  if constexpr (Traits::kPaged) {
    load_paged_rows<Traits>(dst, map, bar, p, t, key0, lane);
  } else {
    load_rows<Traits>(dst, Traits::kKVChunkBytes, Traits::kKVBytes, map, bar, t.k_row + key0, t.head_kv, t.tma_batch);
  }
}

// One tile: K of its first block, Q once the consumers are done with the previous tile's Q (K
// first: its stage frees before Q's buffer, which is released after the previous tile's last
// Q·Kᵀ), then the other blocks.
template <class Traits>
__device__ __forceinline__ void load_tile(const FwdSmem<Traits>& sm, const FwdKernelParams& p, const FwdTile& t,
                                          const TileCursor& at, const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                          const CUtensorMap* tm_v, int lane) {
  if (!t.loads()) return;  // the consumers write out 0, lse +inf (or nothing) without waiting
  const Ring<Traits::kStages> ring{at.loads};
  auto load_k = [&](int i) {
    ptx::mbarrier_wait(sm.k_empty(ring.stage(i)), ring.empty_parity(i));
    load_key_block<Traits>(sm.k_tile(ring.stage(i)), tm_k, sm.k_full(ring.stage(i)), p, t, t.key_block(i), lane);
  };
  auto load_v = [&](int i) {
    ptx::mbarrier_wait(sm.v_empty(ring.stage(i)), ring.empty_parity(i));
    load_key_block<Traits>(sm.v_tile(ring.stage(i)), tm_v, sm.v_full(ring.stage(i)), p, t, t.key_block(i), lane);
  };
  load_k(0);
  if (!Traits::kPaged || lane == 0) {
    ptx::mbarrier_wait(sm.q_empty(), (at.q_tiles & 1) ^ 1);
    load_rows<Traits>(sm.q, Traits::kQChunkBytes, Traits::kQBytes, tm_q, sm.q_full(), t.q_row, t.head, t.tma_batch);
  }
  for (int i = 1; i < t.n_blocks; ++i) {
    load_k(i);
    load_v(i - 1);
  }
  load_v(t.n_blocks - 1);
}

// Every tile of this CTA, as the scheduler hands them out; each tile index goes to the consumers
// before its loads (the one past the last tells them to stop). Run by one thread, or for the paged
// kernels by the producer warp (`lane`), whose lane 0 schedules, hands out the tiles and loads Q,
// every lane following the same tiles (the index broadcast from lane 0) to share the page boxes.
template <class Traits>
__device__ __forceinline__ void load_tiles(const FwdSmem<Traits>& sm, const FwdKernelParams& p, const CUtensorMap* tm_q,
                                           const CUtensorMap* tm_k, const CUtensorMap* tm_v, int lane) {
  const bool leader = !Traits::kPaged || lane == 0;
  if (leader) {
    ptx::tma_prefetch_descriptor(tm_q);
    ptx::tma_prefetch_descriptor(tm_k);
    ptx::tma_prefetch_descriptor(tm_v);
  }
  const TileScheduler<Traits> scheduler{sm, p};
  TileCursor at;
  for (int j = 0, tile = scheduler.first();; ++j) {
    if (leader) scheduler.publish(j, tile);
    if (tile >= p.num_tiles) break;
    const FwdTile t = fwd_tile<Traits>(p, tile);
    load_tile(sm, p, t, at, tm_q, tm_k, tm_v, lane);
    at.advance(t);
    // After the tile's loads are issued: the producer then waits for a free stage anyway, which
    // hides the counter's latency (and nothing stays live across the loads: 32 registers here).
    if constexpr (Traits::kPaged) {
      tile = __shfl_sync(0xffffffffu, leader ? scheduler.next(tile) : 0, 0);
    } else {
      tile = scheduler.next(tile);
    }
  }
}

}  // namespace flashattn::cuda::sm90
