// The sm80 backward's dQ accumulation: dQ = dS·K of one step added into the fp32 workspace with
// red.global.add (accumulate_dq), and the deterministic mode's fixed order of those additions per
// query tile (wait_dq_turn).
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

#include "cuda/common/mask.cuh"
#include "cuda/ptx/ld_acquire.cuh"
#include "cuda/ptx/red.cuh"
#include "cuda/sm80/bwd_gemm.cuh"
#include "cuda/sm80/bwd_params.cuh"
#include "cuda/sm80/bwd_shape.cuh"
#include "cuda/sm80/scheduler.cuh"

namespace flashattn::cuda::sm80 {

// The deterministic counter of the query tile whose first workspace row is ws_row.
template <int kBM>
__device__ __forceinline__ int32_t* dq_tile_counter(int32_t* counters, int64_t ws_row) {
  return counters + ws_row / kBM;
}

// Deterministic mode, thread 0: waits until every key block before this one in the order has added
// into the query tile at m0 (workspace row ws_row). The block barrier after it holds the others.
template <int kBM, int kBN>
__device__ __forceinline__ void wait_dq_turn(const BwdKernelParams& p, const Mask& mask, const BwdBlockIndex& ix,
                                             KeyBlockOrder key_order, int m0, int64_t ws_row, int tid) {
  if (p.deterministic && tid == 0) {
    const int32_t turn = key_order == KeyBlockOrder::descending ? mask.last_n_block_visiting(m0, kBM, kBN) - ix.n_block
                                       : ix.n_block - mask.n_block_begin(m0, kBN);
    const int32_t* counter = dq_tile_counter<kBM>(p.counters, ws_row);
    while (ptx::ld_acquire_s32(counter) != turn) {
    }
  }
}

// The dQ accumulator tile is in fragment order (DqLayout): this lane's first element is at
// kDq.index(q_row0 + g, q_col0 + 2t), its element (16mi + 8half, 8ni) at kDq.index(16mi + 8half,
// 8ni) from there. The lane's part is held across the loop where lane values are rematerialized
// anyway (remat_lane tiles) and recomputed per step elsewhere: each choice is the spill-free one.
template <class Sh>
struct DqLane {
  int held;

  static constexpr DqLayout layout() { return DqLayout(Sh::kTile, dq_red_width(Sh::kTile)); }
  __device__ __forceinline__ static int index(const BwdWarpTiles& w, int g, int t) {
    constexpr DqLayout kDq = layout();
    return kDq.index(w.q_row0 + g, w.q_col0 + 2 * t);
  }
  __device__ __forceinline__ int at(const BwdWarpTiles& w, int g, int t) const {
    return Sh::kTile.remat_lane ? held : index(w, g, t);
  }
};

// Adds a warp's dQ tile (kMt × kNt C fragments, inside one DqLayout warp tile) at dq_lane, the
// lane's first element; kAllColumns: every column is below hdim_qk, else the n-tiles at or past
// cols_left are skipped.
template <class Sh, int kMt, int kNt, bool kAllColumns>
__device__ __forceinline__ void red_dq_tile(float* dq_lane, const float (&acc_dq)[kMt][kNt][4], int cols_left) {
  constexpr DqLayout kDq = DqLane<Sh>::layout();
#pragma unroll
  for (int mi = 0; mi < kMt; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int ni = 0; ni < kNt; ++ni) {
        if (!kAllColumns && 8 * ni >= cols_left) continue;
        const float* c = acc_dq[mi][ni];
        if constexpr (dq_red_width(Sh::kTile) == 4) {  // one red per C fragment (both halves)
          if (half == 0) ptx::red_add_v4_f32(dq_lane + kDq.index(16 * mi, 8 * ni), c[0], c[1], c[2], c[3]);
        } else {
          ptx::red_add_v2_f32(dq_lane + kDq.index(16 * mi + 8 * half, 8 * ni), c[2 * half], c[2 * half + 1]);
        }
      }
    }
  }
}

// Adds a warp's dQ tile (its dS·K, C fragments; columns col0 .. col0 + 8·kNt of the head dim) into the
// workspace tile at row ws_row; lane_at: the DqLayout index of the lane's first element. Columns at or
// past hdim_qk (a multiple of 8: whole n-tiles) are zero and not added.
template <class Sh, int kMt, int kNt>
__device__ __forceinline__ void add_dq_tile(const BwdKernelParams& p, const float (&acc_dq)[kMt][kNt][4],
                                            int64_t ws_row, int lane_at, int col0) {
  // This lane's first element; every other one is a compile-time offset from it.
  float* dq_lane = opaque(p.dq_accum + ws_row * Sh::kD + lane_at);
  const int cols_left = p.hdim_qk - col0;
  if (cols_left >= 8 * kNt) {
    red_dq_tile<Sh, kMt, kNt, true>(dq_lane, acc_dq, cols_left);  // the common case: no per-add branch
  } else {
    red_dq_tile<Sh, kMt, kNt, false>(dq_lane, acc_dq, cols_left);
  }
}

// The unpaired kernel's: the warp's dQ tile of the block (bwd_shape.cuh).
template <class Sh>
__device__ __forceinline__ void add_dq(const BwdKernelParams& p, const float (&acc_dq)[Sh::kMtQ][Sh::kNtQ][4],
                                       int64_t ws_row, const DqLane<Sh>& dq, const BwdWarpTiles& w, int g, int t) {
  add_dq_tile<Sh, Sh::kMtQ, Sh::kNtQ>(p, acc_dq, ws_row, dq.at(w, g, t), w.q_col0);
}

// dQ += dS·K for this step: the warp's dQ tile (acc_dq, zero on entry) from dS and K in shared
// memory, added into the fp32 workspace tile at row ws_row (scaled in the postprocess).
template <class Elem, class Sh>
__device__ __forceinline__ void accumulate_dq(float (&acc_dq)[Sh::kMtQ][Sh::kNtQ][4], const BwdKernelParams& p,
                                              uint32_t s_ds, uint32_t s_k, int64_t ws_row, const DqLane<Sh>& dq,
                                              const BwdWarpTiles& w, int lane) {
  gemm_ab<Elem, typename Sh::TileP, typename Sh::TileK, Sh::kMtQ, Sh::kNtQ, Sh::kBN / 16>(acc_dq, s_ds, w.q_row0, s_k,
                                                                                         w.q_col0, lane);
  add_dq<Sh>(p, acc_dq, ws_row, dq, w, lane / 4, lane % 4);
}

}  // namespace flashattn::cuda::sm80
