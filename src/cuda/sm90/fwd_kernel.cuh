// The sm90 forward kernel, step 1 of the plan (docs/kernels-sm90.md, "forward, step 1"): TMA and
// mbarriers for the loads, wgmma for both products, no warp specialization yet.
//
// A CTA owns block_m = 128 query rows of one (batch, head): warpgroup w owns rows 64w .. 64w + 63
// (wgmma's M), and within it warp v rows 16v .. 16v + 15. Thread 0 issues every TMA load: Q once,
// then K and V blocks of block_n keys into a 2-stage ring, from the last key block to the first
// (the blocks that need element masks come first, as in sm80). Per key block, in each warpgroup:
//   wait K_n → S = Q·K_nᵀ (wgmma SS: Q and K K-major) → score transform, mask (common/mask.cuh,
//   only where the tile straddles a mask edge or the sequence end) → online softmax (running max
//   m, sum ℓ; O rescaled by exp2((m_old − m_new)·scale·log2 e)) → P packed from the S accumulator
//   into A fragments (no shuffle for 16-bit types, ptx/wgmma.cuh) → wait V_n → O += P·V_n (wgmma
//   RS, V the MN-major B operand) → __syncthreads (both warpgroups are done with the stage) →
//   thread 0 refills the stage with block n − 2.
// Epilogue: O / ℓ straight from the accumulator fragments to global memory (32-bit stores of column
// pairs), LSE = m·scale + log ℓ (natural) per row; fully masked rows: out 0, lse +inf.
//
// The wgmma accumulator of one warp has the m16n8 C layout of mma.sync (ptx/wgmma.cuh), so the
// fragment-level score transform, mask and online softmax of the sm80 kernels (sm80/hooks.cuh,
// sm80/softmax.cuh, namespace flashattn::cuda) apply unchanged, on the accumulator viewed as
// [1][N / 8][4].
//
// Padded batches: keys past seqlen_k are never read from memory: the tensor maps end at seqlen_k
// (TMA fills zeros), and the mask sets their scores to −inf.
//
// Varlen batches (cu_seqlens): the maps are over the packed tensors (rank 4 with one "batch"), and
// sequence b's rows start at cu_seqlens[b] (common/seqlen.cuh, the sm80 kernels' rules). A box of
// rows may then run past the sequence: into the next one, into packed rows of no sequence, or past
// the tensor's end (zero-filled). What keeps those rows out of the output:
//   - Q rows ≥ seqlen_q(b): each output row depends on its own Q row only; they are never stored
//     (O and LSE), and blocks with m0 ≥ seqlen_q(b) exit at once (the grid covers max_seqlen_q);
//   - K rows ≥ seqlen_k(b): the mask overwrites their scores with −inf whatever they hold (NaN too),
//     so P is exactly 0 there;
//   - V rows ≥ seqlen_k(b): P = 0 does not help (0 · NaN = NaN in P·V), so the rows of the sequence's
//     last key block past seqlen_k(b) are zeroed in shared memory before the first P·V (generic
//     stores, fence.proxy.async, barrier: the only such block is the first one loaded).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm80/hooks.cuh"
#include "cuda/sm80/softmax.cuh"
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
  int batch, heads_q, group_size;  // group_size = heads_q / heads_kv
  int seqlen_q, seqlen_k;          // padded: the lengths; varlen: the maxima (0 when K has no rows)
  int hdim_v;                      // columns of O written (≤ D)
  int num_m_blocks;                // ceil(seqlen_q / block_m); the grid is num_m_blocks·heads_q·batch
  int window_left, window_right;   // clamped (mask.cuh); < 0 unbounded; masked instances only
  ScoreTransform scores;
};

template <class TagT, int kHeadDim, bool kMaskedT>
struct FwdTraits {
  using Tag = TagT;
  static constexpr FwdShape kShape = fwd_shape(kHeadDim);
  static constexpr int kD = kHeadDim, kBlockM = kShape.block_m, kBlockN = kShape.block_n;
  static constexpr int kThreads = kShape.threads();
  static constexpr bool kMasked = kMaskedT;  // causal or window: the mask may cut any tile
  static constexpr int kChunks = kShape.chunks();
  static constexpr uint32_t kQChunkBytes = kBlockM * kSwizzleRowBytes;   // 64 columns of Q
  static constexpr uint32_t kKVChunkBytes = kBlockN * kSwizzleRowBytes;  // 64 columns of K or V
  static constexpr uint32_t kQBytes = kShape.q_bytes();
  static constexpr uint32_t kKVBytes = kShape.kv_tile_bytes();
  static constexpr uint32_t kKOffset = kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kFwdStages * kKVBytes;
  static_assert(kHeadDim % kSwizzleCols == 0 && kBlockN % 16 == 0 && kBlockN <= 256 && kHeadDim <= 256);
  static_assert(kQChunkBytes % kSwizzleAtomBytes == 0 && kKVChunkBytes % kSwizzleAtomBytes == 0);
};

// The accumulator of a wgmma of N columns (N/2 floats) seen as mma C tiles [1][N/8][4].
template <int R>
__device__ __forceinline__ float (&as_c_tiles(float (&d)[R]))[1][R / 4][4] {
  return *reinterpret_cast<float(*)[1][R / 4][4]>(&d);
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ FwdKernelParams p) {
#if FLASHATTN_PTX_SM90A
  using Tag = typename Traits::Tag;
  constexpr int kD = Traits::kD, kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kChunks = Traits::kChunks;
  constexpr ptx::Swizzle kSw = ptx::Swizzle::b128;

  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[1 + 2 * kFwdStages];  // Q, K stages, V stages: "full" barriers
  const uint32_t smem_base =
      (ptx::smem_addr(smem_raw) + kSwizzleAtomBytes - 1) / kSwizzleAtomBytes * kSwizzleAtomBytes;
  const uint32_t s_q = smem_base, s_k = smem_base + Traits::kKOffset, s_v = smem_base + Traits::kVOffset;
  const uint32_t bar_q = ptx::smem_addr(&bars[0]);
  auto bar_k = [&](int stage) { return ptx::smem_addr(&bars[1 + stage]); };
  auto bar_v = [&](int stage) { return ptx::smem_addr(&bars[1 + kFwdStages + stage]); };

  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  const int wg = tid / kWarpgroupThreads, warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int row0 = wg * kWarpgroupRows + warp_in_wg * 16;  // this warp's first row within the block

  // ---- which rows, keys and mask: query blocks of one head consecutive (K/V stay in L2), the
  // longest (last) query block first (causal).
  const int bid = static_cast<int>(blockIdx.x);
  const int m_block = p.num_m_blocks - 1 - bid % p.num_m_blocks;
  const int head = (bid / p.num_m_blocks) % p.heads_q;
  const int batch = bid / p.num_m_blocks / p.heads_q;
  const int head_kv = head / p.group_size;
  const int m0 = m_block * kBlockM;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const SeqLens seq = seq_lens(batch, p.cu_seqlens_q, p.cu_seqlens_k, p.seqlen_q, p.seqlen_k);
  if (m0 >= seq.seqlen_q) return;  // varlen: past this sequence's end (an empty one: every block)
  // TMA coordinates: varlen rows are packed rows (32-bit: the plan refuses 2^31 rows or more) of the
  // one "batch" 0.
  const int tma_batch = varlen ? 0 : batch;
  const int q_row0 = static_cast<int>(seq.q_offset) + m0, k_row0 = static_cast<int>(seq.k_offset);
  Mask mask;
  mask.seqlen_q = seq.seqlen_q;
  mask.seqlen_k = seq.seqlen_k;
  mask.left = Traits::kMasked ? p.window_left : -1;
  mask.right = Traits::kMasked ? p.window_right : -1;
  const int n_begin = mask.n_block_begin(m0, kBlockN);
  const int n_end = mask.n_block_end(m0, kBlockM, kBlockN);
  const int n_blocks = n_end > n_begin ? n_end - n_begin : 0;
  // Varlen: rows of the first block loaded (the last key block) inside the sequence; V's rows past
  // them are zeroed before use (see the top of this file).
  const int v_tail_rows = seq.seqlen_k - (n_end - 1) * kBlockN;
  const bool zero_v_tail = varlen && n_blocks > 0 && v_tail_rows < kBlockN;

  // Block i of the loop is key block n_end − 1 − i, in stage i % 2.
  auto load_kv = [&](int i) {
    const int stage = i % kFwdStages, n0 = (n_end - 1 - i) * kBlockN;
    ptx::mbarrier_arrive_expect_tx(bar_k(stage), Traits::kKVBytes);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      ptx::tma_load(s_k + stage * Traits::kKVBytes + c * Traits::kKVChunkBytes, &tm_k, bar_k(stage), c * kSwizzleCols,
                    k_row0 + n0, head_kv, tma_batch);
    }
    ptx::mbarrier_arrive_expect_tx(bar_v(stage), Traits::kKVBytes);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      ptx::tma_load(s_v + stage * Traits::kKVBytes + c * Traits::kKVChunkBytes, &tm_v, bar_v(stage), c * kSwizzleCols,
                    k_row0 + n0, head_kv, tma_batch);
    }
  };

  if (tid == 0) {
#pragma unroll
    for (int i = 0; i < 1 + 2 * kFwdStages; ++i) ptx::mbarrier_init(ptx::smem_addr(&bars[i]), 1);
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (tid == 0 && n_blocks > 0) {
    ptx::tma_prefetch_descriptor(&tm_q);
    ptx::tma_prefetch_descriptor(&tm_k);
    ptx::tma_prefetch_descriptor(&tm_v);
    ptx::mbarrier_arrive_expect_tx(bar_q, Traits::kQBytes);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      ptx::tma_load(s_q + c * Traits::kQChunkBytes, &tm_q, bar_q, c * kSwizzleCols, q_row0, head, tma_batch);
    }
    for (int i = 0; i < kFwdStages && i < n_blocks; ++i) load_kv(i);
  }

  // This warpgroup's Q rows: 64 rows into every chunk. K-step ks (16 columns) is chunk ks / 4,
  // 32·(ks % 4) bytes into its rows (the swizzle is a function of the absolute address).
  const uint64_t desc_q = ptx::wgmma_desc_k_major(s_q + wg * kWarpgroupRows * kSwizzleRowBytes, kSw);
  auto k_step_bytes = [](int ks, uint32_t chunk_bytes) { return (ks / 4) * chunk_bytes + 32 * (ks % 4); };

  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
  OnlineSoftmax<1> softmax;
  softmax.init();
  const ScoreTransform scores = p.scores;

  for (int i = 0; i < n_blocks; ++i) {
    const int n = n_end - 1 - i, stage = i % kFwdStages;
    const uint32_t parity = (i / kFwdStages) % 2;
    if (i == 0) ptx::mbarrier_wait(bar_q, 0);
    ptx::mbarrier_wait(bar_k(stage), parity);

    // S = Q·K_nᵀ: this warpgroup's 64 rows × block_n keys.
    float s[kBlockN / 2];
    const uint64_t desc_k = ptx::wgmma_desc_k_major(s_k + stage * Traits::kKVBytes, kSw);
    ptx::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      ptx::wgmma_ss<kBlockN, Tag>(s, ptx::wgmma_desc_advance(desc_q, k_step_bytes(ks, Traits::kQChunkBytes)),
                                  ptx::wgmma_desc_advance(desc_k, k_step_bytes(ks, Traits::kKVChunkBytes)), ks > 0);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_operand(s);

    auto& s_tiles = as_c_tiles(s);
    transform_scores(s_tiles, scores);
    if (mask.tile_needs_mask(m0, kBlockM, n * kBlockN, kBlockN)) {
      mask_accumulator(s_tiles, mask, m0 + row0, n * kBlockN, lane);
    }
    ptx::wgmma_fence_operand(o);
    softmax.update(s_tiles, as_c_tiles(o), scores.exp_mult);

    // P from the S accumulator: columns 16kk .. 16kk + 15 are the A fragment of k-step kk.
    uint32_t pa[kBlockN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = ptx::pack2<Tag>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
    }

    // O += P·V_n; V is the MN-major B operand: k-step kk is 16 key rows further into every chunk.
    ptx::mbarrier_wait(bar_v(stage), parity);
    if (zero_v_tail && i == 0) {
      // Rows v_tail_rows .. kBlockN − 1 of every 64-column chunk of V (stage 0): whole 128-byte rows,
      // so the swizzle (a permutation of 16-byte units within a row) does not matter.
      constexpr int kUnitsPerRow = kSwizzleRowBytes / 16;
      unsigned char* v_tile = smem_raw + (s_v - ptx::smem_addr(smem_raw));
      const int units = (kBlockN - v_tail_rows) * kUnitsPerRow;
      for (int u = tid; u < kChunks * units; u += Traits::kThreads) {
        const int c = u / units, r = v_tail_rows + (u % units) / kUnitsPerRow, w = u % kUnitsPerRow;
        *reinterpret_cast<uint4*>(v_tile + c * Traits::kKVChunkBytes + r * kSwizzleRowBytes + 16 * w) =
            make_uint4(0, 0, 0, 0);
      }
      ptx::fence_proxy_async_shared_cta();  // the generic stores before wgmma's (async proxy) reads
      __syncthreads();
    }
    const uint64_t desc_v = ptx::wgmma_desc_mn_major(s_v + stage * Traits::kKVBytes, kSw, Traits::kKVChunkBytes);
    ptx::wgmma_fence_operand(o);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      ptx::wgmma_rs<kD, Tag, ptx::Major::MN>(o, pa[kk], ptx::wgmma_desc_advance(desc_v, kk * 16 * kSwizzleRowBytes),
                                             true);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_operand(o);

    // Both warpgroups are done reading this stage: refill it with block i + 2.
    __syncthreads();
    if (tid == 0 && i + kFwdStages < n_blocks) load_kv(i + kFwdStages);
  }

  // ---- epilogue: O / ℓ and the LSE, straight from the fragments ----------------------------------
  float lse[1][2];
  softmax.finalize(as_c_tiles(o), scores.exp_mult, lse);
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = m0 + row0 + 8 * half + g;
    if (row >= seq.seqlen_q) continue;
    uint16_t* out_row = static_cast<uint16_t*>(p.out) + gmem_offset(batch, seq.q_offset + row, head, p.o_batch_stride,
                                                                    p.o_row_stride, p.o_head_stride);
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      const int col = 8 * j + 2 * t;
      const uint32_t pair = ptx::pack2<Tag>(o[4 * j + 2 * half], o[4 * j + 2 * half + 1]);
      if (col + 1 < p.hdim_v) {
        *reinterpret_cast<uint32_t*>(out_row + col) = pair;
      } else if (col < p.hdim_v) {
        out_row[col] = static_cast<uint16_t>(pair & 0xFFFFu);
      }
    }
    if (p.lse != nullptr && t == 0) {
      p.lse[int64_t(batch) * p.lse_batch_stride + int64_t(head) * p.lse_head_stride + seq.q_offset + row] =
          lse[0][half];
    }
  }
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm90 forward kernel needs sm_90a");
#endif
}

}  // namespace flashattn::cuda::sm90
