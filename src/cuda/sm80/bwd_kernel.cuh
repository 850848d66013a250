// The sm80 backward main kernel (FlashAttention-2's design): a thread block owns one key block
// (block_n keys of one kv head of one sequence), keeps K and V in shared memory and dK, dV in
// registers, and loops over the query heads of its GQA group and, for each, over the query blocks
// that see its keys. Per query block it recomputes the probabilities and accumulates:
//   S  = Q·Kᵀ                         (recomputed scores)
//   P  = exp2(S·scale·log2e − LSE·log2e)   (masked entries −inf → 0; softcap: cap·tanh first)
//   dV += Pᵀ·dO
//   dP = dO·Vᵀ
//   dS = P ∘ (dP − D),   D = rowsum(dO ∘ O) from the preprocess   (softcap: ∘ (1 − tanh²))
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
// Split tail (bwd_params.cuh): the grid's last, partial wave runs as parts of blocks, in a second
// kernel with the same body (bwd_tail_kernel, at the end of this file).
//
// Deterministic mode: the dQ additions of the key blocks into one query tile happen in a fixed
// key-block order. counters[hq][query tile] counts the key blocks done; a key block waits (thread
// 0 spins, then the block barrier) until the counter equals its position in that order, adds, and
// bumps it with a release after the next barrier. The order is ascending key blocks, except for
// masks with a right edge (causal, local), where it is descending and the grid starts from the
// last key block: a key block's first query tiles (on the diagonal) are then visited by no higher
// block, so blocks start without waiting, where ascending order would park every block on its
// first tile until key block 0 had walked down to it. Either way the blocks a block waits on have
// lower block indices, so they started first: every wait is on a block that is running or done.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/ld_acquire.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/red.cuh"
#include "cuda/sm80/bwd_gemm.cuh"
#include "cuda/sm80/bwd_params.cuh"
#include "cuda/sm80/bwd_tile.cuh"
#include "cuda/sm80/hooks.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/tile_io.cuh"
#include "cuda/sm80/warp_gemm.cuh"

namespace flashattn::cuda::sm80 {

// Everything compile-time about one instance: the tile, the warp tiles of each product, and the
// shared-memory carve-up.
template <int kHeadDim, bool kBigSmem>
struct BwdShape {
  static constexpr BwdTile kTile = bwd_tile(kHeadDim, kBigSmem);
  static constexpr int kD = kHeadDim, kBM = kTile.block_m, kBN = kTile.block_n, kStages = kTile.stages;
  using TileQ = SmemTile<kBM, kD>;   // Q, dO
  using TileK = SmemTile<kBN, kD>;   // K, V; dK, dV in the epilogue
  using TileP = SmemTile<kBM, kBN>;  // P, dS

  // S, dP [kBM × kBN]: warp (wm, wn) = (warp % kWmS, warp / kWmS) owns a kTmS × kTnS tile.
  static constexpr int kWmS = kTile.warps_m_sdp, kWnS = kBwdWarps / kWmS;
  static constexpr int kTmS = kBM / kWmS, kTnS = kBN / kWnS;
  static constexpr int kMtS = kTmS / 16, kNtS = kTnS / 8;
  // dK, dV [kBN × kD]: warp (wn, wd) = (warp % kWnKV, warp / kWnKV).
  static constexpr int kWnKV = kTile.warps_n_dkv, kWdKV = kBwdWarps / kWnKV;
  static constexpr int kTnKV = kBN / kWnKV, kTdKV = kD / kWdKV;
  static constexpr int kMtKV = kTnKV / 16, kNtKV = kTdKV / 8;
  // dQ [kBM × kD]: warp (wm, wd) = (warp % kWmQ, warp / kWmQ).
  static constexpr int kWmQ = kTile.warps_m_dq, kWdQ = kBwdWarps / kWmQ;
  static constexpr int kTmQ = kBM / kWmQ, kTdQ = kD / kWdQ;
  static constexpr int kMtQ = kTmQ / 16, kNtQ = kTdQ / 8;

  static_assert(kTile.head_dim == kHeadDim, "no tile for this head dim");
  static_assert(kBM % kWmS == 0 && kBN % kWnS == 0 && kTmS % 16 == 0 && kTnS % 16 == 0, "S warp tile");
  static_assert(kBN % kWnKV == 0 && kD % kWdKV == 0 && kTnKV % 16 == 0 && kTdKV % 16 == 0, "dK/dV warp tile");
  static_assert(kBM % kWmQ == 0 && kD % kWdQ == 0 && kTmQ % 16 == 0 && kTdQ % 16 == 0, "dQ warp tile");
  static_assert(kBM % 4 == 0 && kBM / 2 <= kBwdThreads, "LSE/D rows load as 16-byte chunks, one per thread");

  // Shared memory, in bytes from the (128-byte aligned) base.
  static constexpr int kRowBytes = kBM * 4;
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + TileK::kBytes;
  static constexpr int kOffQ = kOffV + TileK::kBytes;
  static constexpr int kOffDo = kOffQ + kStages * TileQ::kBytes;
  static constexpr int kOffP = kOffDo + kStages * TileQ::kBytes;
  static constexpr int kOffDs = kOffP + TileP::kBytes;
  static constexpr int kOffLse = kOffDs + TileP::kBytes;
  static constexpr int kOffDsum = kOffLse + kStages * kRowBytes;
  static constexpr int kSmemBytes = kOffDsum + kStages * kRowBytes;
  static_assert(kSmemBytes == kTile.smem_bytes(), "bwd_tile's smem_bytes and the carve-up disagree");
};

// The query-side tiles of one loop step: query head hq, the query block at row m0, the workspace row
// of its first row (hq·R + ws_row0 + m0: LSE and D rows, the dq_accum tile at ws_row·D, the
// deterministic counter at ws_row / block_m) and the global addresses of its Q and dO tiles. The
// loop advances it by additions (step_after in the kernel); ncu had shown two integer divisions and
// ~100 uniform instructions of index and 64-bit address arithmetic per step when every step was
// decoded from its number.
struct BwdStep {
  int hq, m0;
  int64_t ws_row;
  const uint16_t* q;
  const uint16_t* dout;
};

// The highest key block that visits the query tile at m0 under a right-bounded mask, consistent
// with Mask::m_block_begin (key block n visits it only if n·bn ≤ m0 + bm − 1 + diag + right) and
// m_block_end (monotone in n, so if key block n visits the tile, every key block up to this one
// does). Only called for tiles some key block visits, so the division sees a non-negative value.
__device__ __forceinline__ int last_key_block_visiting(const Mask& mask, int m0, int bm, int bn) {
  return imin(ceil_div(mask.seqlen_k, bn) - 1, (m0 + bm - 1 + mask.diag() + mask.right) / bn);
}

// Split tail epilogue (bwd_params.cuh) of one part of split key block `tail`: adds this part's
// dK·scale and dV (the mma accumulators of the dK/dV warp tiles, kMt × kNt C fragments at (row0,
// col0)) into the fp32 sums tail_dkv[tail] ([2][block_n][head_dim], row-major), then counts the part
// done. The part that finishes last (block-uniform answer) reads the sums back as 16-bit values into
// the K and V tiles in shared memory, for the regular stores, and returns true; the others return
// false and are done. Release/acquire as CUDA's threadFenceReduction: every thread's reds, a fence,
// the barrier, then one thread's counter atomic; the last one fences before the sums are read, from
// L2 (ld.global.cg: this block never cached them). s_last: one int of shared memory nobody else uses
// now.
template <class Elem, class TileK, int kMt, int kNt>
__device__ bool reduce_split_part(const BwdKernelParams& p, int tail, int parts, const float (&acc_dk)[kMt][kNt][4],
                                  const float (&acc_dv)[kMt][kNt][4], int row0, int col0, unsigned char* s_k,
                                  unsigned char* s_v, int* s_last) {
  constexpr int kRows = TileK::kRows, kCols = TileK::kCols;
  float* sum_dk = p.tail_dkv + int64_t{tail} * 2 * kRows * kCols;
  float* sum_dv = sum_dk + kRows * kCols;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kMt; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kNt; ++ni) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int at = (row0 + 16 * mi + 8 * half + g) * kCols + col0 + 8 * ni + 2 * t;
        ptx::red_add_v2_f32(sum_dk + at, acc_dk[mi][ni][2 * half] * p.scale, acc_dk[mi][ni][2 * half + 1] * p.scale);
        ptx::red_add_v2_f32(sum_dv + at, acc_dv[mi][ni][2 * half], acc_dv[mi][ni][2 * half + 1]);
      }
    }
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    *s_last = atomicAdd(p.tail_done + tail, 1) == parts - 1;
    __threadfence();
  }
  __syncthreads();
  if (!*s_last) return false;
  for (int i = threadIdx.x; i < kRows * kCols / 2; i += kBwdThreads) {
    const int r = i / (kCols / 2), c = i % (kCols / 2) * 2;
    const float2 k2 = __ldcg(reinterpret_cast<const float2*>(sum_dk + r * kCols + c));
    const float2 v2 = __ldcg(reinterpret_cast<const float2*>(sum_dv + r * kCols + c));
    *reinterpret_cast<uint32_t*>(s_k + TileK::elem_offset(r, c)) = ptx::pack2<Elem>(k2.x, k2.y);
    *reinterpret_cast<uint32_t*>(s_v + TileK::elem_offset(r, c)) = ptx::pack2<Elem>(v2.x, v2.y);
  }
  return true;
}

// The work of one thread block: part `part` of `parts` (consecutive ranges of the loop steps) of
// grid block `grid_block`. bwd_main_kernel runs whole blocks (part 0 of 1, compile-time constants,
// so none of the split code is in it); bwd_tail_kernel the split tail's parts.
template <class Elem, int kHeadDim, bool kBigSmem, bool kSoftcap>
__device__ __forceinline__ void bwd_block_part(const BwdKernelParams& p, const int grid_block, const int part,
                                               const int parts) {
  using Sh = BwdShape<kHeadDim, kBigSmem>;
  using TileQ = typename Sh::TileQ;
  using TileK = typename Sh::TileK;
  using TileP = typename Sh::TileP;
  constexpr int kD = Sh::kD, kBM = Sh::kBM, kBN = Sh::kBN, kStages = Sh::kStages;

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // grid_block = n + num_n_blocks · (kv head + heads_kv · b): key blocks fastest, so the blocks
  // reading one head's Q and dO run together. Key block n_block = n, lowest first (the longest
  // causal ones first); deterministic with a right-bounded mask: n_block = last − n (see the top).
  const bool descending = p.deterministic && p.window_right >= 0;
  int bid = grid_block;
  const int n_block = descending ? p.num_n_blocks - 1 - bid % p.num_n_blocks : bid % p.num_n_blocks;
  bid /= p.num_n_blocks;
  const int h_kv = bid % p.heads_kv;
  const int b = bid / p.heads_kv;
  const SeqLens seq = seq_lens(b, p.cu_seqlens_q, p.cu_seqlens_k, p.seqlen_q, p.seqlen_k);
  const int n0 = n_block * kBN;
  if (n0 >= seq.seqlen_k) return;

  const Mask mask{seq.seqlen_q, seq.seqlen_k, p.window_left, p.window_right};
  const int m_begin = mask.m_block_begin(n0, kBM);
  const int num_m = imax(0, mask.m_block_end(n0, kBN, kBM) - m_begin);
  // This block's (query head, query block) pairs, query blocks fastest: pairs [first_step,
  // first_step + steps) of the key block's num_m · group (all of them unless split; in
  // bwd_main_kernel part = 0 and parts = 1 are constants and this folds to 0 and num_m · group).
  const int first_step = static_cast<int>(int64_t{num_m} * p.group * part / parts);
  const int steps = static_cast<int>(int64_t{num_m} * p.group * (part + 1) / parts) - first_step;
  const int64_t ws_row0 = ws_row_start(b, seq.q_offset, p.cu_seqlens_q != nullptr, p.seqlen_q, kBM);

  const uint32_t s_base = ptx::smem_addr(smem);
  const uint32_t s_k = s_base + Sh::kOffK, s_v = s_base + Sh::kOffV;
  const uint32_t s_p = s_base + Sh::kOffP, s_ds = s_base + Sh::kOffDs;

  // Warp tile origins of the three kinds of product.
  const int s_row0 = (warp % Sh::kWmS) * Sh::kTmS, s_col0 = (warp / Sh::kWmS) * Sh::kTnS;
  const int kv_row0 = (warp % Sh::kWnKV) * Sh::kTnKV, kv_col0 = (warp / Sh::kWnKV) * Sh::kTdKV;
  const int q_row0 = (warp % Sh::kWmQ) * Sh::kTmQ, q_col0 = (warp / Sh::kWmQ) * Sh::kTdQ;

  float acc_dk[Sh::kMtKV][Sh::kNtKV][4] = {};
  float acc_dv[Sh::kMtKV][Sh::kNtKV][4] = {};

  // Step (query head hq, query block at m0), built from scratch; step_after(s) is the next one:
  // the next query block of the same head, or the first of the next head of the group.
  const int m_start = m_begin * kBM, m_stop = (m_begin + num_m) * kBM;
  const auto step_at = [&](int hq, int m0) {
    BwdStep s;
    s.hq = hq;
    s.m0 = m0;
    s.ws_row = hq * p.ws_rows + ws_row0 + m0;
    s.q = static_cast<const uint16_t*>(p.q) +
          gmem_offset(b, seq.q_offset + m0, hq, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
    s.dout = static_cast<const uint16_t*>(p.dout) +
             gmem_offset(b, seq.q_offset + m0, hq, p.do_batch_stride, p.do_row_stride, p.do_head_stride);
    return s;
  };
  const auto step_after = [&](BwdStep s) {
    if (s.m0 + kBM >= m_stop) return step_at(s.hq + 1, m_start);
    s.m0 += kBM;
    s.ws_row += kBM;
    s.q += kBM * p.q_row_stride;
    s.dout += kBM * p.do_row_stride;
    return s;
  };
  const auto counter_of = [&](const BwdStep& s) { return p.counters + s.ws_row / kBM; };
  // The workspace row of the step before s (for its deterministic-mode counter), from s alone.
  const auto ws_row_before = [&](const BwdStep& s) {
    return s.m0 == m_start ? s.ws_row - p.ws_rows + (m_stop - m_start) - kBM : s.ws_row - kBM;
  };
  // Q tile of step s into stage `stage`.
  const auto load_q = [&](const BwdStep& s, int stage) {
    TileIO<TileQ, kBwdThreads>::load_async_or_zero(s_base + Sh::kOffQ + stage * TileQ::kBytes, s.q, p.q_row_stride,
                                                   seq.seqlen_q - s.m0, p.hdim_qk, tid);
  };
  // dO tile, LSE·log2e and D rows of step s into stage `stage`.
  const auto load_do = [&](const BwdStep& s, int stage) {
    TileIO<TileQ, kBwdThreads>::load_async_or_zero(s_base + Sh::kOffDo + stage * TileQ::kBytes, s.dout,
                                                   p.do_row_stride, seq.seqlen_q - s.m0, p.hdim_v, tid);
    constexpr int kChunks = kBM / 4;  // 16-byte chunks of one fp32 row vector
    if (tid < kChunks) {
      ptx::cp_async_16(s_base + Sh::kOffLse + stage * Sh::kRowBytes + tid * 16, p.lse_log2 + s.ws_row + tid * 4);
    } else if (tid < 2 * kChunks) {
      const int c = tid - kChunks;
      ptx::cp_async_16(s_base + Sh::kOffDsum + stage * Sh::kRowBytes + c * 16, p.dsum + s.ws_row + c * 4);
    }
  };
  // dQ's accumulator tile is in fragment order (DqLayout): this lane's first element is at
  // kDq.index(q_row0 + g, q_col0 + 2t), its element (16mi + 8half, 8ni) at kDq.index(16mi + 8half,
  // 8ni) from there. The lane's part is held across the loop where lane values are rematerialized
  // anyway (remat_lane tiles) and recomputed per step elsewhere: each choice is the spill-free one.
  constexpr DqLayout kDq(Sh::kTile, dq_red_width(Sh::kTile));
  const int dq_lane_held = kDq.index(q_row0 + lane / 4, q_col0 + 2 * (lane % 4));

  if (steps > 0) {
    const uint16_t* k_src = static_cast<const uint16_t*>(p.k) +
                            gmem_offset(b, seq.k_offset + n0, h_kv, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
    const uint16_t* v_src = static_cast<const uint16_t*>(p.v) +
                            gmem_offset(b, seq.k_offset + n0, h_kv, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
    TileIO<TileK, kBwdThreads>::load_async_or_zero(s_k, k_src, p.k_row_stride, seq.seqlen_k - n0, p.hdim_qk, tid);
    TileIO<TileK, kBwdThreads>::load_async_or_zero(s_v, v_src, p.v_row_stride, seq.seqlen_k - n0, p.hdim_v, tid);
    BwdStep step = step_at(h_kv * p.group + first_step / num_m, m_start + first_step % num_m * kBM);
    load_q(step, 0);
    load_do(step, 0);
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
      if (p.deterministic && it > 0 && tid == 0) ptx::red_release_add_s32(p.counters + ws_row_before(step) / kBM, 1);
      if (kStages == 2 && has_next) {
        const BwdStep next = step_after(step);
        load_q(next, stage ^ 1);
        load_do(next, stage ^ 1);
        ptx::cp_async_commit();
      }

      // ---- S = Q·Kᵀ, then P = exp2(score − LSE·log2e) ------------------------------------------
      float acc_s[Sh::kMtS][Sh::kNtS][4] = {};
      gemm_ss<Elem, TileQ, TileK, Sh::kMtS, Sh::kNtS, kD / 16>(acc_s, ldsm_a_addr<TileQ>(s_q, s_row0, lane),
                                                               ldsm_b_addr<TileK>(s_k, s_col0, lane), 0);
      // Scores as the forward sees them: plain (scale folded into the exp2 below), prescaled
      // (scale ≤ 0) or soft-capped (cap·log2e·tanh); with softcap acc_s keeps these log2-domain
      // scores, and dS recomputes P and tanh from them.
      transform_scores(acc_s, p.scores);
      if (mask.tile_needs_mask(m0, kBM, n0, kBN)) mask_accumulator(acc_s, mask, m0 + s_row0, n0 + s_col0, lane);
      const float exp_mult = p.scores.exp_mult;
      // The lane's LSE·log2e rows (and below, D) are read as one batch before the loop that uses
      // them, not one shared load per row inside it: one exposed shared-memory latency instead of
      // one per row (measured +1…+7 %, most at hdim 64, where a warp's S tile has 64 rows).
      float lse_r[Sh::kMtS][2], dsum_r[Sh::kMtS][2];
      const auto load_rows = [&](float(&dst)[Sh::kMtS][2], const float* src) {
#pragma unroll
        for (int mi = 0; mi < Sh::kMtS; ++mi) {
#pragma unroll
          for (int half = 0; half < 2; ++half) dst[mi][half] = src[s_row0 + 16 * mi + 8 * half + g];
        }
      };
      load_rows(lse_r, s_lse);
      // Byte offset in P's (and dS's) tile of this lane's column pair of n-tile ni in row r.
      const auto p_offset = [&](int r, int ni) -> uint32_t { return TileP::elem_offset(r, s_col0 + 8 * ni + 2 * t); };
#pragma unroll
      for (int mi = 0; mi < Sh::kMtS; ++mi) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = s_row0 + 16 * mi + 8 * half + g;
          const float neg_lse = -lse_r[mi][half];
#pragma unroll
          for (int ni = 0; ni < Sh::kNtS; ++ni) {
            float* x = &acc_s[mi][ni][2 * half];
            const float p0 = ptx::exp2_approx(fmaf(x[0], exp_mult, neg_lse));
            const float p1 = ptx::exp2_approx(fmaf(x[1], exp_mult, neg_lse));
            if constexpr (!kSoftcap) {
              x[0] = p0;
              x[1] = p1;
            }
            *reinterpret_cast<uint32_t*>(smem + Sh::kOffP + p_offset(r, ni)) = ptx::pack2<Elem>(p0, p1);
          }
        }
      }

      // ---- dP = dO·Vᵀ, then dS = P ∘ (dP − D) ---------------------------------------------------
      {
        float acc_dp[Sh::kMtS][Sh::kNtS][4] = {};
        gemm_ss<Elem, TileQ, TileK, Sh::kMtS, Sh::kNtS, kD / 16>(acc_dp, ldsm_a_addr<TileQ>(s_do, s_row0, lane),
                                                                 ldsm_b_addr<TileK>(s_v, s_col0, lane), 0);
        load_rows(dsum_r, s_dsum);
#pragma unroll
        for (int mi = 0; mi < Sh::kMtS; ++mi) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = s_row0 + 16 * mi + 8 * half + g;
            const float dsum = dsum_r[mi][half];
            const float lse = kSoftcap ? lse_r[mi][half] : 0.f;
#pragma unroll
            for (int ni = 0; ni < Sh::kNtS; ++ni) {
              float ds[2];
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const float x = acc_s[mi][ni][2 * half + e];
                const float prob = kSoftcap ? ptx::exp2_approx(x - lse) : x;
                ds[e] = prob * (acc_dp[mi][ni][2 * half + e] - dsum);
                if constexpr (kSoftcap) {
                  // d(cap·tanh(u))/du = cap·(1 − tanh²); masked scores (−inf) give tanh = −1 → 0.
                  const float th = fmaxf(x * p.inv_cap_log2, -1.f);
                  ds[e] *= fmaf(-th, th, 1.f);
                }
              }
              *reinterpret_cast<uint32_t*>(smem + Sh::kOffDs + p_offset(r, ni)) = ptx::pack2<Elem>(ds[0], ds[1]);
            }
          }
        }
      }

      if (p.deterministic && tid == 0) {
        // Our turn for this query tile: every key block before us in the order has added.
        const int32_t turn = descending ? last_key_block_visiting(mask, m0, kBM, kBN) - n_block
                                        : n_block - mask.n_block_begin(m0, kBN);
        const int32_t* counter = counter_of(step);
        while (ptx::ld_acquire_s32(counter) != turn) {
        }
      }
      __syncthreads();  // P and dS visible to all warps

      // ---- dV += Pᵀ·dO --------------------------------------------------------------------------
      gemm_atb<Elem, TileP, TileQ, Sh::kMtKV, Sh::kNtKV, kBM / 16>(acc_dv, s_p, kv_row0, s_do, kv_col0, lane);
      if constexpr (kStages == 1) {
        if (has_next) {
          __syncthreads();  // everyone is done with dO, LSE and D
          load_do(step_after(step), 0);
          ptx::cp_async_commit();
        }
      }

      // ---- dQ += dS·K, into the fp32 workspace ---------------------------------------------------
      {
        float acc_dq[Sh::kMtQ][Sh::kNtQ][4] = {};
        gemm_ab<Elem, TileP, TileK, Sh::kMtQ, Sh::kNtQ, kBN / 16>(acc_dq, s_ds, q_row0, s_k, q_col0, lane);
        // This lane's first element; every other one is a compile-time offset from it. Columns at
        // or past hdim_qk (a multiple of 8: whole n-tiles) are zero and not added.
        float* dq_lane = opaque(p.dq_accum + step.ws_row * kD +
                               (Sh::kTile.remat_lane ? dq_lane_held : kDq.index(q_row0 + g, q_col0 + 2 * t)));
        const int cols_left = p.hdim_qk - q_col0;
        const auto add_dq = [&](auto all_columns) {
#pragma unroll
          for (int mi = 0; mi < Sh::kMtQ; ++mi) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
#pragma unroll
              for (int ni = 0; ni < Sh::kNtQ; ++ni) {
                if (!decltype(all_columns)::value && 8 * ni >= cols_left) continue;
                const float* c = acc_dq[mi][ni];
                if constexpr (dq_red_width(Sh::kTile) == 4) {  // one red per C fragment (both halves)
                  if (half == 0) ptx::red_add_v4_f32(dq_lane + kDq.index(16 * mi, 8 * ni), c[0], c[1], c[2], c[3]);
                } else {
                  ptx::red_add_v2_f32(dq_lane + kDq.index(16 * mi + 8 * half, 8 * ni), c[2 * half], c[2 * half + 1]);
                }
              }
            }
          }
        };
        if (cols_left >= Sh::kTdQ) {
          add_dq(std::true_type{});  // the common case: no per-add branch
        } else {
          add_dq(std::false_type{});
        }
      }

      // ---- dK += dSᵀ·Q --------------------------------------------------------------------------
      gemm_atb<Elem, TileP, TileQ, Sh::kMtKV, Sh::kNtKV, kBM / 16>(acc_dk, s_ds, kv_row0, s_q, kv_col0, lane);
      if constexpr (kStages == 1) {
        if (has_next) {
          __syncthreads();  // everyone is done with Q
          load_q(step_after(step), 0);
          ptx::cp_async_commit();
        }
      }
      if (has_next) step = step_after(step);  // recomputed rather than kept from the loads above: fewer live registers
    }
    if (p.deterministic) {
      __syncthreads();  // every thread's dQ additions of the last step come before the release
      if (tid == 0) ptx::red_release_add_s32(counter_of(step), 1);  // the last step's
    }
  }

  // ---- epilogue: dK·scale and dV, through shared memory (K, V's space) for coalesced stores -------
  __syncthreads();  // every warp is done reading K and V
  if (parts == 1) {
    store_accumulator<Elem, TileK>(smem + Sh::kOffK, acc_dk, kv_row0, kv_col0, lane, p.scale);
    store_accumulator<Elem, TileK>(smem + Sh::kOffV, acc_dv, kv_row0, kv_col0, lane, 1.f);
  } else if (!reduce_split_part<Elem, TileK>(p, grid_block - p.split_first, parts, acc_dk, acc_dv, kv_row0, kv_col0,
                                               smem + Sh::kOffK, smem + Sh::kOffV,
                                               reinterpret_cast<int*>(smem + Sh::kOffLse))) {
    return;  // another part of this key block finishes it (the LSE rows are not read after the loop)
  }
  __syncthreads();
  uint16_t* dk_dst = static_cast<uint16_t*>(p.dk) +
                     gmem_offset(b, seq.k_offset + n0, h_kv, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride);
  uint16_t* dv_dst = static_cast<uint16_t*>(p.dv) +
                     gmem_offset(b, seq.k_offset + n0, h_kv, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride);
  TileIO<TileK, kBwdThreads>::store(dk_dst, p.dk_row_stride, seq.seqlen_k - n0, p.hdim_qk, smem + Sh::kOffK, tid);
  TileIO<TileK, kBwdThreads>::store(dv_dst, p.dv_row_stride, seq.seqlen_k - n0, p.hdim_v, smem + Sh::kOffV, tid);
}

// Whole key blocks: grid block blockIdx.x (with a split tail, the grid is the first split_first).
template <class Elem, int kHeadDim, bool kBigSmem, bool kSoftcap>
__global__ void __launch_bounds__(kBwdThreads, 1) bwd_main_kernel(const __grid_constant__ BwdKernelParams p) {
  // The split tail's parts (bwd_tail_kernel, launched next as a programmatic dependent) may take
  // each SM as soon as this grid's block there finishes, as if they were this grid's own last wave.
  ptx::griddep_launch_dependents();
  bwd_block_part<Elem, kHeadDim, kBigSmem, kSoftcap>(p, blockIdx.x, 0, 1);
}

// The split tail (bwd_params.cuh): block j is part j mod split_parts of grid block split_first +
// j / split_parts. A separate kernel, so that the split code (setup, fp32 reduction) leaves the main
// kernel's register allocation and schedule alone: at hdim 256 (255 registers) it cost 1.5 % there
// when compiled into it (docs/kernels-sm80-backward.md).
template <class Elem, int kHeadDim, bool kBigSmem>
__global__ void __launch_bounds__(kBwdThreads, 1) bwd_tail_kernel(const __grid_constant__ BwdKernelParams p) {
  const int parts = p.split_parts;
  bwd_block_part<Elem, kHeadDim, kBigSmem, false>(p, p.split_first + blockIdx.x / parts, blockIdx.x % parts, parts);
  // Complete only after the main kernel has (it may still run when this grid starts): the stream's
  // next work (the postprocess reads dQ) then sees both grids' writes.
  ptx::griddep_wait();
}

}  // namespace flashattn::cuda::sm80
