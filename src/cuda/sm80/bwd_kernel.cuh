// The sm80 backward main kernel (FlashAttention-2's design): a thread block owns one key block
// (block_n keys of one kv head of one sequence), keeps K and V in shared memory and dK, dV in
// registers, and loops over the query heads of its GQA group and, for each, over the query blocks
// that see its keys. Per query block it recomputes the probabilities and accumulates:
//   S  = Q·Kᵀ                         (recomputed scores)
//   P  = exp2(S·scale·log2e − LSE·log2e)   (masked entries −inf → 0; the score transform first)
//   dV += Pᵀ·dO
//   dP = dO·Vᵀ
//   dS = P ∘ (dP − D),   D = rowsum(dO ∘ O) from the preprocess   (∘ the transform's slope where it
//                                                                    varies: common/scores.cuh)
//   dQ += dS·K   → added into the fp32 workspace with red.global.add (scaled in the postprocess)
//   dK += dSᵀ·Q
// and finally writes dK·scale and dV once. P and dS go through shared memory (16-bit): the
// transposed products need them as A operands, read back with ldmatrix.trans.
//
// Barriers per query block: one after the loads land (top), one after P and dS are stored.
// Double-buffered (stages = 2): the next query block's Q, dO, LSE and D are issued right after
// the top barrier and land during this block's math. Single-buffered (stages = 1): dO, LSE, D
// reload after dV (one more barrier), Q after dK (one more).
//
// Split (bwd_params.cuh): the grid's last, partial wave, or under a mask every block of a grid whose
// longest block outlasts an SM's share, runs as parts of blocks, in a second kernel with the same
// body (bwd_tail_kernel, at the end of this file).
//
// Deterministic mode (a fixed order of the dQ additions per query tile): bwd_dq.cuh.
//
// Pieces: bwd_shape.cuh (tile, warp tiles, smem carve-up), scheduler.cuh (grid block → key block;
// the step order), bwd_loads.cuh (tile loads; when the next step's go out), hooks.cuh (score and
// probability hooks), bwd_step.cuh (P of a column pair; the dV, dK products), bwd_dq.cuh (dQ
// product and reds, deterministic order), bwd_epilogue.cuh (dK, dV stores, split-tail sums).
// The step loop, S, the loops over P and dS stay written out in bwd_block_part: every function
// boundary tried around them changed the PTX (renumbered registers or moved instructions) and, at
// some head dim, the SASS (docs/kernels-sm80-backward.md, "Where the pieces are").
#pragma once

#include <cstdint>

#include "cuda/common/mask.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/red.cuh"
#include "cuda/sm80/bwd_dq.cuh"
#include "cuda/sm80/bwd_epilogue.cuh"
#include "cuda/sm80/bwd_gemm.cuh"
#include "cuda/sm80/bwd_loads.cuh"
#include "cuda/sm80/bwd_pair.cuh"
#include "cuda/sm80/bwd_params.cuh"
#include "cuda/sm80/bwd_shape.cuh"
#include "cuda/sm80/bwd_step.cuh"
#include "cuda/sm80/hooks.cuh"
#include "cuda/sm80/scheduler.cuh"
#include "cuda/sm80/warp_gemm.cuh"

namespace flashattn::cuda::sm80 {

// Which steps of which grid block a thread block runs (bwd_params.cuh's TailSegment), asked once
// before the step loop and again for the epilogue (`again`: from an opaque block index, so that
// it is recomputed there rather than kept live across the loop; at 255 registers that spilled 28 B
// at hdim 128). WholeBlock (bwd_main_kernel): grid block blockIdx.x, all its steps, constants that
// fold away, so none of the split code is in the main kernel.
struct WholeBlock {
  int grid_block;

  __device__ __forceinline__ TailSegment segment(bool /*again*/) const { return TailSegment{grid_block, {}}; }
};
// bwd_tail_kernel's: part blockIdx.x mod split_parts of grid block split_first + blockIdx.x /
// split_parts, or where kSpans and split_span > 0 the segment order.segment[blockIdx.x].
template <bool kSpans>
struct TailPart {
  const BwdKernelParams& p;
  const TailOrder& order;

  __device__ __forceinline__ TailSegment segment(bool again) const {
    const unsigned j = again ? static_cast<unsigned>(opaque(static_cast<int>(blockIdx.x))) : blockIdx.x;
    if (kSpans && p.split_span > 0) return tail_segment(p, order.segment[j] / 2, order.segment[j] % 2);
    const int parts = p.split_parts;
    return TailSegment{static_cast<int>(p.split_first + j / parts), BwdStepRange{static_cast<int>(j % parts), parts}};
  }
};

// The work of one thread block: the steps part.segment().range of grid block
// part.segment().grid_block. bwd_main_kernel runs whole blocks; bwd_tail_kernel the split tail's
// parts and segments. kSlopeVaries:
// score_slope_varies(p.scores) (common/scores.cuh): acc_s keeps the scores, and dS recomputes P and
// takes the slope from them. kPair: this block is one of a cluster pair that sums dQ over both key
// blocks before adding it (bwd_pair.cuh; whole blocks only).
template <class Elem, int kHeadDim, bool kBigSmem, bool kSlopeVaries, bool kOrderedSums, bool kPair, class Part>
__device__ __forceinline__ void bwd_block_part(const BwdKernelParams& p, const Part& part) {
  using Sh = BwdShape<kHeadDim, kBigSmem>;
  using TileQ = typename Sh::TileQ;
  using TileK = typename Sh::TileK;
  using TileP = typename Sh::TileP;
  constexpr int kD = Sh::kD, kBM = Sh::kBM, kBN = Sh::kBN, kStages = Sh::kStages;

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const KeyBlockOrder key_order = key_block_order(p);
  const BwdBlockIndex ix = bwd_block_index<Sh::kTile.longest_first>(p, part.segment(false).grid_block, key_order);
  const int n_block = ix.n_block, h_kv = ix.h_kv, b = ix.b;
  const SeqLens seq = seq_lens(b, p.cu_seqlens_q, p.cu_seqlens_k, p.seqlen_q, p.seqlen_k);
  const int n0 = n_block * kBN;
  if (n0 >= seq.seqlen_k) return;

  const Mask mask{seq.seqlen_q, seq.seqlen_k, p.window_left, p.window_right};
  // Paired, both key blocks walk the query tiles either of them sees (bwd_pair.cuh).
  const int m_begin = kPair ? PairDq<Sh>::m_begin(mask, n_block) : mask.m_block_begin(n0, kBM);
  const int num_m = imax(0, (kPair ? PairDq<Sh>::m_end(mask, n_block) : mask.m_block_end(n0, kBN, kBM)) - m_begin);
  // This block's (query head, query block) pairs, query blocks fastest: pairs [first_step,
  // first_step + steps) of the key block's num_m · group (all of them unless split; in
  // bwd_main_kernel the range is a constant and this folds to 0 and num_m · group).
  const BwdStepRange range = part.segment(false).range;
  const int first_step = range.first(int64_t{num_m} * p.group);
  const int steps = range.stop(int64_t{num_m} * p.group) - first_step;
  const int64_t ws_row0 = ws_row_start(b, seq.q_offset, p.cu_seqlens_q != nullptr, p.seqlen_q, kBM);

  const uint32_t s_base = ptx::smem_addr(smem);
  const uint32_t s_k = s_base + Sh::kOffK, s_v = s_base + Sh::kOffV;
  const uint32_t s_p = s_base + Sh::kOffP, s_ds = s_base + Sh::kOffDs;

  // Warp tile origins of the three kinds of product.
  const BwdWarpTiles w{(warp % Sh::kWmS) * Sh::kTmS,   (warp / Sh::kWmS) * Sh::kTnS,
                       (warp % Sh::kWnKV) * Sh::kTnKV, (warp / Sh::kWnKV) * Sh::kTdKV,
                       (warp % Sh::kWmQ) * Sh::kTmQ,   (warp / Sh::kWmQ) * Sh::kTdQ};

  float acc_dk[Sh::kMtKV][Sh::kNtKV][4] = {};
  float acc_dv[Sh::kMtKV][Sh::kNtKV][4] = {};

  const int m_start = m_begin * kBM, m_stop = (m_begin + num_m) * kBM;
  const BwdStepOrder<kBM> order{p, b, seq, ws_row0, m_start, m_stop};
  const BwdLoads<Sh> load{p, seq, s_base, tid};
  const DqLane<Sh> dq{DqLane<Sh>::index(w, lane / 4, lane % 4)};

  const PairDq<Sh> pair{s_base};
  if constexpr (kPair) pair.setup(p, seq, b, h_kv, n_block, tid);  // before K and V: same commit group

  if (steps > 0) {
    load.kv(b, h_kv, n0);
    BwdStep step = order.at(h_kv * p.group + first_step / num_m, m_start + first_step % num_m * kBM);
    load.q(step, 0);
    load.dout(step, 0);
    ptx::cp_async_commit();

    for (int it = 0; it < steps; ++it) {
      const int stage = kStages == 2 ? it % 2 : 0;
      const bool has_next = it + 1 < steps;
      const int m0 = step.m0;
      const uint32_t s_q = s_base + Sh::kOffQ + stage * TileQ::kBytes;
      const uint32_t s_do = s_base + Sh::kOffDo + stage * TileQ::kBytes;
      const float* s_lse = reinterpret_cast<const float*>(smem + Sh::kOffLse + stage * Sh::kRowBytes);
      const float* s_dsum = reinterpret_cast<const float*>(smem + Sh::kOffDsum + stage * Sh::kRowBytes);

      ptx::cp_async_wait<0>();
      __syncthreads();  // this step's tiles landed; last step's readers of every buffer are done
      const int lane = Sh::kTile.remat_lane ? opaque(threadIdx.x % 32) : threadIdx.x % 32;  // see opaque()
      const int g = lane / 4, t = lane % 4;
      if (p.deterministic && it > 0 && tid == 0) {
        ptx::red_release_add_s32(dq_tile_counter<kBM>(p.counters, order.ws_row_before(step)), 1);  // the last step's
      }
      load.next_step_ahead(order, step, has_next, stage);

      // ---- S = Q·Kᵀ, then P = exp2(score − LSE·log2e) ------------------------------------------
      float acc_s[Sh::kMtS][Sh::kNtS][4] = {};
      gemm_ss<Elem, TileQ, TileK, Sh::kMtS, Sh::kNtS, kD / 16>(acc_s, ldsm_a_addr<TileQ>(s_q, w.s_row0, lane),
                                                               ldsm_b_addr<TileK>(s_k, w.s_col0, lane), 0);
      // The score hook: scores as the forward sees them (the transform of common/scores.cuh; a plain
      // scale is folded into the exp2 below), then the mask on boundary tiles. Where the transform's
      // slope varies, acc_s keeps these log2-domain scores, and dS recomputes P and the slope from them.
      // The other kernel leaves such transforms' code out.
      score_hook<kBM, kBN, kSlopeVaries>(acc_s, p.scores, mask, m0, n_block, w.s_row0, w.s_col0, lane);
      const float exp_mult = p.scores.exp_mult;
      // The lane's LSE·log2e rows (and below, D) are read as one batch before the loop (load_rows).
      float lse_r[Sh::kMtS][2], dsum_r[Sh::kMtS][2];
      load_rows<Sh>(lse_r, s_lse, w.s_row0, g);
#pragma unroll
      for (int mi = 0; mi < Sh::kMtS; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int ni = 0; ni < Sh::kNtS; ++ni)
            recompute_p<Elem, Sh, kSlopeVaries>(&acc_s[mi][ni][2 * half], exp_mult, lse_r[mi][half], smem, m0, n0, mi,
                                                half, ni, w, g, t);

      // ---- dP = dO·Vᵀ, then dS = P ∘ (dP − D) ---------------------------------------------------
      {
        float acc_dp[Sh::kMtS][Sh::kNtS][4] = {};
        gemm_ss<Elem, TileQ, TileK, Sh::kMtS, Sh::kNtS, kD / 16>(acc_dp, ldsm_a_addr<TileQ>(s_do, w.s_row0, lane),
                                                                 ldsm_b_addr<TileK>(s_v, w.s_col0, lane), 0);
        load_rows<Sh>(dsum_r, s_dsum, w.s_row0, g);
#pragma unroll
        for (int mi = 0; mi < Sh::kMtS; ++mi) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = w.s_row0 + 16 * mi + 8 * half + g;
            const float dsum = dsum_r[mi][half];
            const float lse = kSlopeVaries ? lse_r[mi][half] : 0.f;
#pragma unroll
            for (int ni = 0; ni < Sh::kNtS; ++ni) {
              float ds[2];
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const float x = acc_s[mi][ni][2 * half + e];
                const float prob = kSlopeVaries ? ptx::exp2_approx(x - lse) : x;
                ds[e] = prob * (acc_dp[mi][ni][2 * half + e] - dsum);
                if constexpr (kSlopeVaries) ds[e] *= p.score_slope.at(x);
              }
              *reinterpret_cast<uint32_t*>(smem + Sh::kOffDs + p_offset<Sh>(r, ni, w.s_col0, t)) = ptx::pack2<Elem>(ds[0], ds[1]);
            }
          }
        }
      }

      wait_dq_turn<kBM, kBN>(p, mask, ix, key_order, m0, step.ws_row, tid);
      __syncthreads();  // P and dS visible to all warps

      // ---- dV += Pᵀ·dO --------------------------------------------------------------------------
      accumulate_dv<Elem, Sh>(acc_dv, s_p, s_do, w, lane);
      load.next_dout_after_dv(order, step, has_next);

      if constexpr (kPair) {
        // ---- paired (bwd_pair.cuh): dK first, while the partner finishes its dV; then dS swapped
        // and dQ of both key blocks for this CTA's half of the head dim ---------------------------
        pair.p_free(acc_dv);
        accumulate_dk<Elem, Sh>(acc_dk, s_ds, s_q, w, lane);
        load.next_q_after_dk(order, step, has_next);
        pair.send_ds(smem, tid);
        pair.template accumulate_dq<Elem>(p, step.ws_row, it, warp, lane);
      } else {
        // ---- dQ += dS·K, into the fp32 workspace (acc_dq declared here: inside, the PTX changed) --
        {
          float acc_dq[Sh::kMtQ][Sh::kNtQ][4] = {};
          accumulate_dq<Elem, Sh>(acc_dq, p, s_ds, s_k, step.ws_row, dq, w, lane);
        }

        // ---- dK += dSᵀ·Q ------------------------------------------------------------------------
        accumulate_dk<Elem, Sh>(acc_dk, s_ds, s_q, w, lane);
        load.next_q_after_dk(order, step, has_next);
      }
      if (has_next) step = order.after(step);  // recomputed rather than kept from the loads above: fewer live registers
    }
    if (p.deterministic) {
      __syncthreads();  // every thread's dQ additions of the last step come before the release
      if (tid == 0) ptx::red_release_add_s32(dq_tile_counter<kBM>(p.counters, step.ws_row), 1);  // the last step's
    }
  }

  if constexpr (kPair) pair.leave_arrive();
  const TailSegment segment = part.segment(true);
  bwd_epilogue<Elem, Sh, kOrderedSums>(p, ix, seq, n0, acc_dk, acc_dv, w, smem, segment.grid_block, segment.range.parts,
                                       lane, tid);
  if constexpr (kPair) pair.leave_wait();
}

// Whole key blocks: grid block blockIdx.x (with a split tail, the grid is the first split_first).
// kPair: launched in clusters of two (bwd_pair.cuh); compiled for sm_90+ only (the host launches it
// only where the kernel's PTX is).
template <class Elem, int kHeadDim, bool kBigSmem, bool kSlopeVaries, bool kPair = false>
__global__ void __launch_bounds__(kBwdThreads, 1) bwd_main_kernel(const __grid_constant__ BwdKernelParams p) {
  // The split tail's parts (bwd_tail_kernel, launched next as a programmatic dependent) may take
  // each SM as soon as this grid's block there finishes, as if they were this grid's own last wave.
  ptx::griddep_launch_dependents();
  if constexpr (!kPair) {
    bwd_block_part<Elem, kHeadDim, kBigSmem, kSlopeVaries, false, false>(p, WholeBlock{static_cast<int>(blockIdx.x)});
  } else {
#if FLASHATTN_PTX_SM90
    bwd_block_part<Elem, kHeadDim, kBigSmem, kSlopeVaries, false, true>(p, WholeBlock{static_cast<int>(blockIdx.x)});
#endif
  }
}

// The split tail (bwd_params.cuh): block j is part j mod split_parts of grid block split_first +
// j / split_parts, or with split_span the segment order.segment[j] (TailOrder: longest first). One
// segment per block: a block that ran both segments of a span (a loop, or the body twice) made ptxas
// spill 20-290 B in the step loop at 255 registers. A separate kernel, so that the split code (setup,
// fp32 reduction) leaves the main kernel's register allocation and schedule alone: at hdim 256 (255
// registers) it cost 1.5 % there when compiled into it (docs/kernels-sm80-backward.md).
// kOrderedSums: deterministic mode, whose parts keep their dK/dV sums apart (bwd_epilogue.cuh) and
// whose split is always equal parts; its own kernel, so that the other keeps its registers (the
// sums' code spilled 32 B into the loop at hdim 128 when both were in one).
template <class Elem, int kHeadDim, bool kBigSmem, bool kOrderedSums>
__global__ void __launch_bounds__(kBwdThreads, 1)
    bwd_tail_kernel(const __grid_constant__ BwdKernelParams p, const __grid_constant__ TailOrder order) {
  bwd_block_part<Elem, kHeadDim, kBigSmem, false, kOrderedSums, false>(p, TailPart<!kOrderedSums>{p, order});
  // Complete only after the main kernel has (it may still run when this grid starts): the stream's
  // next work (the postprocess reads dQ) then sees both grids' writes.
  ptx::griddep_wait();
}

}  // namespace flashattn::cuda::sm80
