// The sm80 forward kernel (FlashAttention-2 design, mma.sync / ldmatrix / cp.async).
//
// A thread block owns kBlockM query rows of one (batch, head); warp w owns rows
// [w·kRowsPerWarp, (w + 1)·kRowsPerWarp) of them. Q is loaded once into shared memory. K and V tiles
// of kBlockN keys stream through shared memory with cp.async, from the last key block to the first
// (so the blocks that need element masks come first and the rest run unmasked). Per key block:
//   S = Q·Kᵀ (gemm_ss, fp32 in registers) → score hook (hooks.cuh: scale / soft cap, then the mask
//   only on blocks that straddle a mask edge or the sequence end) → online softmax update
//   (softmax.cuh: running max, rescale of O and ℓ, P = exp2) → probability hook (identity) → P to
//   16-bit A fragments → O += P·V (gemm_rs).
// Epilogue (epilogue.cuh): O / ℓ → 16-bit → shared memory (reusing Q's bytes) → coalesced 16-byte
// global stores; LSE (natural log) per row when requested. Block → work: scheduler.cuh.
//
// Pipeline (kStages = 2, double-buffered K and V; each wait also orders the buffer reuse):
//   prologue: [Q, K_0] [V_0]
//   iteration i:  wait K_i, sync | issue K_{i+1} | S = Q·K_iᵀ, softmax
//                 wait V_i, sync | issue V_{i+1} | O += P·V_i
// kStages = 1 (FlashAttention-2's order, one buffer each):
//   prologue: [Q, K_0]
//   iteration i:  wait K_i, sync | issue V_i     | S = Q·K_iᵀ, softmax
//                 wait V_i, sync | issue K_{i+1} | O += P·V_i
#pragma once

#include <cstdint>

#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/sm80/fwd_params.cuh"
#include "cuda/sm80/epilogue.cuh"
#include "cuda/sm80/fwd_traits.cuh"
#include "cuda/sm80/kv_rows.cuh"
#include "cuda/sm80/scheduler.cuh"
#include "cuda/sm80/hooks.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/tile_io.cuh"
#include "cuda/sm80/warp_gemm.cuh"

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
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) fwd_kernel(const __grid_constant__ FwdKernelParams p) {
#if FLASHATTN_PTX_SM80
  using Tag = typename Traits::Tag;
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  using IOQ = TileIO<QTile, Traits::kThreads>;  // the epilogue's stores
  using LoadQ = FwdTileLoader<QTile, Traits::kThreads>;
  using LoadKV = FwdTileLoader<KVTile, Traits::kThreads>;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kStages = Traits::kStages;
  constexpr int kMTiles = Traits::kMTiles, kNTiles = Traits::kNTiles, kDTiles = Traits::kDTiles;

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int warp_row0 = warp * Traits::kRowsPerWarp;  // this warp's first row within the block

  // ---- which rows, keys and mask ---------------------------------------------------------------
  const FwdBlockIndex ix = fwd_block_index(p);
  const SeqLens seq = seq_lens(ix.batch, p.cu_seqlens_q, p.cu_seqlens_k, p.seqlen_q, p.seqlen_k);
  const int m0 = ix.m_block * kBlockM;
  if (m0 >= seq.seqlen_q) return;  // varlen: past this sequence's end
  Mask mask;
  mask.seqlen_q = seq.seqlen_q;
  mask.seqlen_k = seq.seqlen_k;
  mask.left = Traits::kMasked ? p.window_left : -1;
  mask.right = Traits::kMasked ? p.window_right : -1;
  const int n_begin = mask.n_block_begin(m0, kBlockN);
  const int n_end = mask.n_block_end(m0, kBlockM, kBlockN);

  const int head_kv = ix.head / p.group_size;
  const char* q_head = static_cast<const char*>(p.q) +
                       gmem_offset(ix.batch, seq.q_offset, ix.head, p.q_batch_stride, p.q_row_stride, p.q_head_stride) *
                           kElemBytes;
  // K and V through the K/V addressing seam (kv_rows.cuh): key row 0 of this sequence and kv head.
  const KVRows k_rows{p.k_batch_stride, p.k_row_stride, p.k_head_stride, seq.k_offset};
  const KVRows v_rows{p.v_batch_stride, p.v_row_stride, p.v_head_stride, seq.k_offset};
  const char* k_head = static_cast<const char*>(p.k) + k_rows.offset(ix.batch, head_kv, 0) * kElemBytes;
  const char* v_head = static_cast<const char*>(p.v) + v_rows.offset(ix.batch, head_kv, 0) * kElemBytes;

  const uint32_t s_q = ptx::smem_addr(smem) + Traits::kQOffset;
  const uint32_t s_k = ptx::smem_addr(smem) + Traits::kKOffset;
  const uint32_t s_v = ptx::smem_addr(smem) + Traits::kVOffset;
  const LdsmAddr<QTile> q_frag = ldsm_a_addr<QTile>(s_q, warp_row0, lane);
  const LdsmAddr<KVTile> k_frag = ldsm_b_addr<KVTile>(s_k, 0, lane);
  // V's ldmatrix.trans lane pattern is Q's (row lane % 16, chunk lane / 16) on a tile as wide, and
  // warp_row0 is a multiple of 8 (same swizzle): V's addresses are Q's plus a warp-uniform offset,
  // which saves the registers of a third address set.
  static_assert(QTile::kChunksPerRow == KVTile::kChunksPerRow && Traits::kRowsPerWarp % 8 == 0);
  const uint32_t v_from_q = s_v - (s_q + warp_row0 * QTile::kChunksPerRow * kChunkBytes);

  // Issues the cp.async copies of key block n (K or V) into a stage buffer.
  auto load_k = [&](int n, int stage) {
    LoadKV::load_async_or_zero(s_k + stage * KVTile::kBytes, k_head + static_cast<int64_t>(n) * kBlockN * p.k_row_stride * kElemBytes,
                     p.k_row_stride, seq.seqlen_k - n * kBlockN, p.hdim_qk, tid);
  };
  auto load_v = [&](int n, int stage) {
    LoadKV::load_async_or_zero(s_v + stage * KVTile::kBytes, v_head + static_cast<int64_t>(n) * kBlockN * p.v_row_stride * kElemBytes,
                     p.v_row_stride, seq.seqlen_k - n * kBlockN, p.hdim_v, tid);
  };

  float acc[kMTiles][kDTiles][4];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int di = 0; di < kDTiles; ++di)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][di][c] = 0.f;
  OnlineSoftmax<kMTiles> softmax;
  softmax.init();
  const ScoreTransform scores = p.scores;

  // ---- main loop over key blocks, last to first ---------------------------------------------------
  if (n_begin < n_end) {
    LoadQ::load_async_or_zero(s_q, q_head + static_cast<int64_t>(m0) * p.q_row_stride * kElemBytes, p.q_row_stride,
                    seq.seqlen_q - m0, p.hdim_qk, tid);
    load_k(n_end - 1, 0);
    ptx::cp_async_commit();
    if constexpr (kStages == 2) {
      load_v(n_end - 1, 0);
      ptx::cp_async_commit();
    }

    int stage = 0;
    for (int n = n_end - 1; n >= n_begin; --n) {
      const bool has_next = n > n_begin;
      // K_n has landed (and every warp is done with the buffers about to be refilled).
      if constexpr (kStages == 2) {
        ptx::cp_async_wait<1>();
        __syncthreads();
        if (has_next) load_k(n - 1, stage ^ 1);
        ptx::cp_async_commit();
      } else {
        ptx::cp_async_wait<0>();
        __syncthreads();
        load_v(n, 0);
        ptx::cp_async_commit();
      }

      // S = Q·K_nᵀ for this warp's rows.
      float s[kMTiles][kNTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
          for (int c = 0; c < 4; ++c) s[mi][ni][c] = 0.f;
      gemm_ss<Tag, QTile, KVTile, kMTiles, kNTiles, Traits::kQKSteps>(s, q_frag, k_frag, stage * KVTile::kBytes);

      // The score hook (hooks.cuh's score_hook), written out: as a call it changes the PTX at D = 64, 192.
      transform_scores(s, scores);
      if (mask.tile_needs_mask(m0, kBlockM, n * kBlockN, kBlockN)) {
        mask_accumulator(s, mask, m0 + warp_row0, n * kBlockN, lane);
      }
      softmax.update(s, acc, scores.exp_mult);
      probability_hook(s, m0 + warp_row0, n * kBlockN, lane);

      // V_n has landed (and every warp is done reading K_n / V_{n+1}).
      if constexpr (kStages == 2) {
        ptx::cp_async_wait<1>();
        __syncthreads();
        if (has_next) load_v(n - 1, stage ^ 1);
        ptx::cp_async_commit();
      } else {
        ptx::cp_async_wait<0>();
        __syncthreads();
        if (has_next) {
          load_k(n - 1, 0);
          ptx::cp_async_commit();
        }
      }

      // O += P·V_n, P straight from registers.
      uint32_t pa[kMTiles][Traits::kPVSteps][4];
      accumulator_to_a_fragments<Tag>(pa, s);
      gemm_rs<Tag, QTile, kMTiles, kDTiles, Traits::kPVSteps>(acc, pa, q_frag, v_from_q + stage * KVTile::kBytes);
      if constexpr (kStages == 2) stage ^= 1;
    }
  }

  float lse[kMTiles][2];
  softmax.finalize(acc, scores.exp_mult, lse);
  fwd_epilogue<Traits>(p, smem, acc, lse, ix.batch, ix.head, seq, m0, warp_row0, lane, tid);
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm80 forward kernel needs sm_80");
#endif
}

}  // namespace flashattn::cuda::sm80
