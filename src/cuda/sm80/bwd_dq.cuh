// The sm80 backward's dQ accumulation: dQ = dS·K of one step added into the fp32 workspace with
// red.global.add (accumulate_dq), the deterministic mode's fixed order of those additions per
// query tile (wait_dq_turn), and the conversion of the finished tiles (convert_finished_dq).
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
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/atom.cuh"
#include "cuda/ptx/block_index.cuh"
#include "cuda/ptx/ld_acquire.cuh"
#include "cuda/ptx/red.cuh"
#include "cuda/sm80/bwd_dq_store.cuh"
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

// Adds a warp's dQ tile (C fragments) at dq_lane, the lane's first element; kAllColumns: every
// column is below hdim_qk, else the n-tiles at or past cols_left are skipped.
template <class Sh, bool kAllColumns>
__device__ __forceinline__ void red_dq_tile(float* dq_lane, const float (&acc_dq)[Sh::kMtQ][Sh::kNtQ][4],
                                            int cols_left) {
  constexpr DqLayout kDq = DqLane<Sh>::layout();
#pragma unroll
  for (int mi = 0; mi < Sh::kMtQ; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int ni = 0; ni < Sh::kNtQ; ++ni) {
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

// Adds this step's dQ tile (the warp's dS·K, C fragments) into the workspace tile at row ws_row.
// Columns at or past hdim_qk (a multiple of 8: whole n-tiles) are zero and not added.
template <class Sh>
__device__ __forceinline__ void add_dq(const BwdKernelParams& p, const float (&acc_dq)[Sh::kMtQ][Sh::kNtQ][4],
                                       int64_t ws_row, const DqLane<Sh>& dq, const BwdWarpTiles& w, int g, int t) {
  // This lane's first element; every other one is a compile-time offset from it.
  float* dq_lane = opaque(p.dq_accum + ws_row * Sh::kD + dq.at(w, g, t));
  const int cols_left = p.hdim_qk - w.q_col0;
  if (cols_left >= Sh::kTdQ) {
    red_dq_tile<Sh, true>(dq_lane, acc_dq, cols_left);  // the common case: no per-add branch
  } else {
    red_dq_tile<Sh, false>(dq_lane, acc_dq, cols_left);
  }
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

// dq_in_main: after its last step, the block counts itself on the counter of every query tile it
// added into; the block that brings a tile's count to the number of key blocks visiting it (every
// other has added) scales that tile's dQ and stores dq, while the sums are still in L2. This
// replaces the postprocess kernel: its launch, and its read of the whole accumulator from HBM.
// Release and acquire: the block barrier orders every thread's reds before the counting threads'
// acq_rel adds (CUTLASS's semaphore, and the deterministic mode here, rely on the same), and the
// converting threads read after the counting thread's acquire and a barrier.
// Called by the kernels after bwd_block_part, it finds the block's steps again from the block index
// (kParts: the split tail's block, part blockIdx mod split_parts of a grid block; else a whole one),
// as bwd_block_part did: (query head, query block) pairs, query blocks fastest. Nothing of the loop
// stays alive for it: handed over from the loop, those values cost the hdim 128 loop ~13 % more
// instructions and the kernel 4–16 % (H100); as a call, ~9 % and spills. kBwdThreads tiles at a
// time, a flag each in shared memory (the P tile's, free after the loop).
template <class Elem, class Sh, bool kParts>
__device__ __forceinline__ void convert_finished_dq(const BwdKernelParams& p) {
  constexpr int kBM = Sh::kBM, kBN = Sh::kBN;
  constexpr DqLayout kDq = DqLane<Sh>::layout();
  extern __shared__ __align__(128) unsigned char smem[];
  int* s_flags = reinterpret_cast<int*>(smem + Sh::kOffP);
  const int block = ptx::block_index_x();  // read again, not kept from the kernel's start
  const int grid_block = kParts ? p.split_first + block / p.split_parts : block;
  const int part = kParts ? block % p.split_parts : 0, parts = kParts ? p.split_parts : 1;
  const BwdBlockIndex ix = bwd_block_index<Sh::kTile.longest_first>(p, grid_block, key_block_order(p));
  const SeqLens seq = seq_lens(ix.b, p.cu_seqlens_q, p.cu_seqlens_k, p.seqlen_q, p.seqlen_k);
  const int n0 = ix.n_block * kBN;
  if (n0 >= seq.seqlen_k) return;
  const Mask mask{seq.seqlen_q, seq.seqlen_k, p.window_left, p.window_right};
  const int m_begin = mask.m_block_begin(n0, kBM);
  const int num_m = imax(0, mask.m_block_end(n0, kBN, kBM) - m_begin);
  const int first_step = static_cast<int>(int64_t{num_m} * p.group * part / parts);
  const int steps = static_cast<int>(int64_t{num_m} * p.group * (part + 1) / parts) - first_step;
  const int64_t ws_row0 = ws_row_start(ix.b, seq.q_offset, p.cu_seqlens_q != nullptr, p.seqlen_q, kBM);
  const int tid = threadIdx.x;
  for (int done = 0; done < steps; done += kBwdThreads) {
    __syncthreads();  // every thread's reds issued (first round); the flags read (later rounds)
    if (done + tid < steps) {
      const int pair = first_step + done + tid;
      const int hq = ix.h_kv * p.group + pair / num_m, m0 = (m_begin + pair % num_m) * kBM;
      const int64_t ws_row = hq * p.ws_rows + ws_row0 + m0;
      const int visitors = mask.key_blocks_visiting(m0, kBM, kBN);
      s_flags[tid] = ptx::atom_add_acq_rel_s32(p.counters + ws_row / kBM, 1) == visitors - 1;
    }
    __syncthreads();
    for (int i = 0; i < imin(kBwdThreads, steps - done); ++i) {
      if (!s_flags[i]) continue;  // block-uniform
      const int pair = first_step + done + i;
      const int hq = ix.h_kv * p.group + pair / num_m, m0 = (m_begin + pair % num_m) * kBM;
      const int64_t ws_row = hq * p.ws_rows + ws_row0 + m0;
      uint16_t* dst = static_cast<uint16_t*>(p.dq) +
                      gmem_offset(ix.b, seq.q_offset + m0, hq, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride);
      store_dq_tile<Elem, dq_red_width(Sh::kTile), kBwdThreads>(kDq, p.dq_accum + ws_row * Sh::kD, dst, p.dq_row_stride,
                                                               kBM, imin(kBM, seq.seqlen_q - m0), p.hdim_qk / 8, p.scale);
    }
  }
}

}  // namespace flashattn::cuda::sm80
