// The sm80 forward's tile loads (cp.async, zero-filled past the sequence and head dim) and the K/V
// pipeline of its key loop: which tile is waited for and which is issued at each of the two
// barriers of a key block (fwd_kernel.cuh's header draws both pipelines).
#pragma once

#include <cstdint>

#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/sm80/fwd_params.cuh"
#include "cuda/sm80/kv_rows.cuh"
#include "cuda/sm80/tile_io.cuh"

namespace flashattn::cuda::sm80 {

// cp.async tile loads of a whole block. TileIO's cheap path (one pointer per thread, stepped, at a
// fixed swizzle) needs each step to cover a multiple of 8 rows; a block too small for that at this
// tile width (D = 256 with 4 warps: 4 rows per step) loads as a block of twice its size, each thread
// playing threads t and t + kThreads, instead of computing an address per chunk (which spilled).
template <class Tile, int kThreads>
struct FwdTileLoader {
  static constexpr int kPlays =
      !TileIO<Tile, kThreads>::kFixedColumn && TileIO<Tile, 2 * kThreads>::kFixedColumn ? 2 : 1;
  using IO = TileIO<Tile, kPlays * kThreads>;

  __device__ __forceinline__ static void load_async_or_zero(uint32_t smem, const void* gmem, int64_t row_stride,
                                                            int rows_valid, int cols_valid, int tid) {
    IO::load_async_or_zero(smem, gmem, row_stride, rows_valid, cols_valid, tid);
    if constexpr (kPlays == 2) {
      IO::load_async_or_zero(smem, gmem, row_stride, rows_valid, cols_valid, tid + kThreads);
    }
  }
  template <class RowOffset>
  __device__ __forceinline__ static void load_rows_async_or_zero(uint32_t smem, const void* gmem, const RowOffset& row_offset,
                                                                 int rows_valid, int cols_valid, int tid) {
    IO::load_rows_async_or_zero(smem, gmem, row_offset, rows_valid, cols_valid, tid);
    if constexpr (kPlays == 2) IO::load_rows_async_or_zero(smem, gmem, row_offset, rows_valid, cols_valid, tid + kThreads);
  }
};

// The loads of one thread block: its Q tile once, then key block n's K or V tile into a stage
// buffer, in the pipeline's order.
template <class Traits>
struct FwdLoads {
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  using LoadQ = FwdTileLoader<QTile, Traits::kThreads>;
  using LoadKV = FwdTileLoader<KVTile, Traits::kThreads>;
  static constexpr int kBlockN = Traits::kBlockN, kStages = Traits::kStages;

  const FwdKernelParams& p;
  const SeqLens& seq;
  const char* k_head;  // key row 0 of this sequence and kv head
  const char* v_head;
  uint32_t s_k, s_v;   // the K and V stage buffers in shared memory
  int tid;
  PagedRows k_pages, v_pages;  // paged instances: this sequence's pages of K and V

  // Issues the cp.async copies of key block n (K or V) into a stage buffer.
  __device__ __forceinline__ void k(int n, int stage) const {
    block(k_head, p.k_row_stride, k_pages, p.k, s_k + stage * KVTile::kBytes, n, p.hdim_qk);
  }
  __device__ __forceinline__ void v(int n, int stage) const {
    block(v_head, p.v_row_stride, v_pages, p.v, s_v + stage * KVTile::kBytes, n, p.hdim_v);
  }

  // Key block n of one side: rows one stride apart from `head` (packed or padded K/V), or from the
  // page pool (paged instances): when the page size is a multiple of the block's, one page holds the
  // whole block and its rows are one stride apart; else each row is found on its own page.
  __device__ __forceinline__ void block(const char* head, int64_t row_stride, const PagedRows& pages,
                                        const void* pool, uint32_t smem, int n, int cols) const {
    if constexpr (!Traits::kPaged) {
      LoadKV::load_async_or_zero(smem, head + static_cast<int64_t>(n) * kBlockN * row_stride * kElemBytes, row_stride,
                                 seq.seqlen_k - n * kBlockN, cols, tid);
    } else {
      const int key0 = n * kBlockN, rows_valid = seq.seqlen_k - key0;
      if (pages.page_size.divisor % kBlockN == 0) {
        LoadKV::load_async_or_zero(smem, static_cast<const char*>(pool) + pages.offset(key0) * kElemBytes,
                                   pages.row_stride, rows_valid, cols, tid);
      } else {
        const auto row_offset = [&](int row) { return pages.offset(key0 + row); };
        LoadKV::load_rows_async_or_zero(smem, pool, row_offset, rows_valid, cols, tid);
      }
    }
  }

  // Before the key loop: Q (rows from m0 of q_head) and the first key block n's K, and with two
  // stages its V, as separate cp.async groups.
  __device__ __forceinline__ void prologue(uint32_t s_q, const char* q_head, int m0, int n) const {
    LoadQ::load_async_or_zero(s_q, q_head + static_cast<int64_t>(m0) * p.q_row_stride * kElemBytes, p.q_row_stride,
                              seq.seqlen_q - m0, p.hdim_qk, tid);
    k(n, 0);
    ptx::cp_async_commit();
    if constexpr (kStages == 2) {
      v(n, 0);
      ptx::cp_async_commit();
    }
  }

  // First barrier of key block n: K_n has landed and every warp is done with the buffers about to
  // be refilled; then the next copy goes out (K_{n-1} with two stages, V_n with one).
  __device__ __forceinline__ void wait_k(int n, bool has_next, int stage) const {
    if constexpr (kStages == 2) {
      ptx::cp_async_wait<1>();
      __syncthreads();
      if (has_next) k(n - 1, stage ^ 1);
      ptx::cp_async_commit();
    } else {
      ptx::cp_async_wait<0>();
      __syncthreads();
      v(n, 0);
      ptx::cp_async_commit();
    }
  }

  // Second barrier: V_n has landed and every warp is done reading K_n (and V_{n+1}); then V_{n-1}
  // with two stages, K_{n-1} with one.
  __device__ __forceinline__ void wait_v(int n, bool has_next, int stage) const {
    if constexpr (kStages == 2) {
      ptx::cp_async_wait<1>();
      __syncthreads();
      if (has_next) v(n - 1, stage ^ 1);
      ptx::cp_async_commit();
    } else {
      ptx::cp_async_wait<0>();
      __syncthreads();
      if (has_next) {
        k(n - 1, 0);
        ptx::cp_async_commit();
      }
    }
  }
};

}  // namespace flashattn::cuda::sm80
