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
// global stores; LSE (natural log) per row when requested. Block → work: scheduler.cuh. Loads and
// the pipeline's waits: fwd_loads.cuh.
//
// The pieces, as they run: fwd_kernel (which rows, keys, tiles; O and the softmax state; then the
// epilogue) → fwd_mainloop (the key blocks, last to first) → attend_key_block (one key block:
// compute_scores, score_hook, OnlineSoftmax::update, probability_hook, accumulate_pv).
//
// Register tiles (O, the softmax state, S, P's A fragments) are declared in fwd_kernel, in this
// order, and the pieces take them by reference. Declared inside an inlined piece, a tile's storage
// is hoisted ahead of the kernel's, which renumbers the loop's registers: different PTX, and ptxas
// then allocates and schedules differently (different SASS; docs/kernels-sm80-forward.md).
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
#include "cuda/sm80/fwd_loads.cuh"
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

// A warp's ldmatrix addresses: its Q rows (A of S = Q·Kᵀ), K (B of S) and V (B of O += P·V). V's
// ldmatrix.trans lane pattern is Q's (row lane % 16, chunk lane / 16) on a tile as wide, and
// warp_row0 is a multiple of 8 (same swizzle): V's addresses are Q's plus a warp-uniform offset,
// which saves the registers of a third address set.
template <class Traits>
struct FwdWarpOperands {
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  static_assert(QTile::kChunksPerRow == KVTile::kChunksPerRow && Traits::kRowsPerWarp % 8 == 0);

  LdsmAddr<QTile> q;
  LdsmAddr<KVTile> k;
  uint32_t v_from_q;  // V's stage 0 minus Q's
};

// The register tiles of a warp, by name (FwdTraits: kMTiles m-tiles of 16 rows).
template <class Traits>
using FwdO = float[Traits::kMTiles][Traits::kDTiles][4];  // O (unnormalized until finalize)
template <class Traits>
using FwdS = float[Traits::kMTiles][Traits::kNTiles][4];  // S, then P in place
template <class Traits>
using FwdPA = uint32_t[Traits::kMTiles][Traits::kPVSteps][4];  // P as 16-bit A fragments of P·V

// S = Q·K_nᵀ for this warp's rows, K_n in stage buffer `stage`.
template <class Traits>
__device__ __forceinline__ void compute_scores(FwdS<Traits>& s, const FwdWarpOperands<Traits>& ops, int stage) {
#pragma unroll
  for (int mi = 0; mi < Traits::kMTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < Traits::kNTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[mi][ni][c] = 0.f;
  gemm_ss<typename Traits::Tag, typename Traits::QTile, typename Traits::KVTile, Traits::kMTiles, Traits::kNTiles,
          Traits::kQKSteps>(s, ops.q, ops.k, stage * Traits::KVTile::kBytes);
}

// O += P·V_n, V_n in stage buffer `stage`, P straight from registers: converted to 16-bit A
// fragments in pa (the C layout of two n-tiles is the A layout of one k-step).
template <class Traits>
__device__ __forceinline__ void accumulate_pv(FwdO<Traits>& acc, FwdPA<Traits>& pa, const FwdS<Traits>& s,
                                              const FwdWarpOperands<Traits>& ops, int stage) {
  accumulator_to_a_fragments<typename Traits::Tag>(pa, s);
  gemm_rs<typename Traits::Tag, typename Traits::QTile, Traits::kMTiles, Traits::kDTiles, Traits::kPVSteps>(
      acc, pa, ops.q, ops.v_from_q + stage * Traits::KVTile::kBytes);
}

// Key block n of the main loop, between the pipeline's two barriers (fwd_loads.cuh): S = Q·K_nᵀ →
// score hook → online softmax (rescales O) → probability hook → O += P·V_n.
template <class Traits>
__device__ __forceinline__ void attend_key_block(FwdO<Traits>& acc, OnlineSoftmax<Traits::kMTiles>& softmax,
                                                 FwdS<Traits>& s, FwdPA<Traits>& pa, int n, bool has_next,
                                                 int stage, const FwdLoads<Traits>& load,
                                                 const FwdWarpOperands<Traits>& ops, const ScoreTransform& scores,
                                                 const Mask& mask, int m0, int warp_row0, int lane) {
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  load.wait_k(n, has_next, stage);
  compute_scores<Traits>(s, ops, stage);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // The sm_80 image keeps every transform's code in every kernel: without it ptxas spilled more at
  // D = 64 there (64 against 28 bytes, masked), and no A100 was at hand to time it.
  constexpr bool kEveryTransform = true;
#else
  constexpr bool kEveryTransform = Traits::kEveryTransform;
#endif
  score_hook<kBlockM, kBlockN, kEveryTransform>(s, scores, mask, m0, n, warp_row0, 0, lane);
  softmax.update(s, acc, scores.exp_mult);
  probability_hook(s, m0 + warp_row0, n * kBlockN, lane);
  load.wait_v(n, has_next, stage);
  accumulate_pv<Traits>(acc, pa, s, ops, stage);
}

// The main loop: key blocks [n_begin, n_end), last to first (the blocks that need element masks
// come first), after the prologue's loads.
template <class Traits>
__device__ __forceinline__ void fwd_mainloop(FwdO<Traits>& acc, OnlineSoftmax<Traits::kMTiles>& softmax,
                                             FwdS<Traits>& s, FwdPA<Traits>& pa, int n_begin, int n_end,
                                             const FwdLoads<Traits>& load, const FwdWarpOperands<Traits>& ops,
                                             const ScoreTransform& scores, const Mask& mask, int m0, int warp_row0,
                                             int lane) {
  int stage = 0;
  for (int n = n_end - 1; n >= n_begin; --n) {
    attend_key_block<Traits>(acc, softmax, s, pa, n, n > n_begin, stage, load, ops, scores, mask, m0, warp_row0, lane);
    if constexpr (Traits::kStages == 2) stage ^= 1;
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) fwd_kernel(const __grid_constant__ FwdKernelParams p) {
#if FLASHATTN_PTX_SM80
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kMTiles = Traits::kMTiles, kDTiles = Traits::kDTiles;

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int warp_row0 = warp * Traits::kRowsPerWarp;  // this warp's first row within the block

  // ---- which rows, keys and mask (scheduler.cuh, common/mask.cuh) -------------------------------
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

  // ---- where the tiles are: global rows, shared buffers, the warp's ldmatrix addresses -----------
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
  const FwdWarpOperands<Traits> ops{ldsm_a_addr<QTile>(s_q, warp_row0, lane), ldsm_b_addr<KVTile>(s_k, 0, lane),
                                    s_v - (s_q + warp_row0 * QTile::kChunksPerRow * kChunkBytes)};
  [[maybe_unused]] PagedRows k_pages{}, v_pages{};
  if constexpr (Traits::kPaged) {  // the sequence's block-table row; seq.k_offset is not used (keys are not packed)
    const int32_t* table = p.block_table + ix.batch * p.block_table_batch_stride;
    k_pages = PagedRows{head_kv * p.k_head_stride, p.k_row_stride, p.k_batch_stride, table, p.page_size, p.last_page};
    v_pages = PagedRows{head_kv * p.v_head_stride, p.v_row_stride, p.v_batch_stride, table, p.page_size, p.last_page};
  }
  const FwdLoads<Traits> load{p, seq, k_head, v_head, s_k, s_v, tid, k_pages, v_pages};

  // ---- the register tiles (in this order: see the header), the main loop --------------------------
  FwdO<Traits> acc;
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int di = 0; di < kDTiles; ++di)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][di][c] = 0.f;
  OnlineSoftmax<kMTiles> softmax;
  softmax.init();
  const ScoreTransform scores = p.scores;
  FwdS<Traits> s;
  FwdPA<Traits> pa;

  if (n_begin < n_end) {  // else no key is visible: O = 0, LSE = +inf
    load.prologue(s_q, q_head, m0, n_end - 1);
    fwd_mainloop<Traits>(acc, softmax, s, pa, n_begin, n_end, load, ops, scores, mask, m0, warp_row0, lane);
  }

  // ---- epilogue: O / ℓ and the LSE, stored ---------------------------------------------------------
  float lse[kMTiles][2];
  softmax.finalize(acc, scores.exp_mult, lse);
  fwd_epilogue<Traits>(p, smem, acc, lse, ix.batch, ix.head, seq, m0, warp_row0, lane, tid);
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm80 forward kernel needs sm_80");
#endif
}

}  // namespace flashattn::cuda::sm80
