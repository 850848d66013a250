// The sm80 backward's tile loads (cp.async, zero-filled past the sequence and head dim): K and V once
// per block, and per step the Q tile and the dO tile with its LSE·log2e and D rows; when the next
// step's tiles are issued (the pipeline of bwd_kernel.cuh's header).
#pragma once

#include <cstdint>

#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/sm80/bwd_params.cuh"
#include "cuda/sm80/bwd_tile.cuh"
#include "cuda/sm80/kv_rows.cuh"
#include "cuda/sm80/scheduler.cuh"
#include "cuda/sm80/tile_io.cuh"

namespace flashattn::cuda::sm80 {

template <class Sh>
struct BwdLoads {
  using TileQ = typename Sh::TileQ;
  using TileK = typename Sh::TileK;

  const BwdKernelParams& p;
  const SeqLens& seq;
  uint32_t s_base;  // shared memory, carved up by Sh
  int tid;

  // K and V of the key block at n0 of kv head h_kv, through the K/V addressing seam (kv_rows.cuh).
  __device__ __forceinline__ void kv(int b, int h_kv, int n0) const {
    const uint16_t* k_src = static_cast<const uint16_t*>(p.k) +
                            gmem_offset(b, seq.k_offset + n0, h_kv, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
    const uint16_t* v_src = static_cast<const uint16_t*>(p.v) +
                            gmem_offset(b, seq.k_offset + n0, h_kv, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
    TileIO<TileK, kBwdThreads>::load_async_or_zero(s_base + Sh::kOffK, k_src, p.k_row_stride, seq.seqlen_k - n0,
                                                   p.hdim_qk, tid);
    TileIO<TileK, kBwdThreads>::load_async_or_zero(s_base + Sh::kOffV, v_src, p.v_row_stride, seq.seqlen_k - n0,
                                                   p.hdim_v, tid);
  }
  // Q tile of step s into stage `stage`.
  __device__ __forceinline__ void q(const BwdStep& s, int stage) const {
    TileIO<TileQ, kBwdThreads>::load_async_or_zero(s_base + Sh::kOffQ + stage * TileQ::kBytes, s.q, p.q_row_stride,
                                                   seq.seqlen_q - s.m0, p.hdim_qk, tid);
  }
  // dO tile, LSE·log2e and D rows of step s into stage `stage`.
  __device__ __forceinline__ void dout(const BwdStep& s, int stage) const {
    TileIO<TileQ, kBwdThreads>::load_async_or_zero(s_base + Sh::kOffDo + stage * TileQ::kBytes, s.dout,
                                                   p.do_row_stride, seq.seqlen_q - s.m0, p.hdim_v, tid);
    constexpr int kChunks = Sh::kBM / 4;  // 16-byte chunks of one fp32 row vector
    if (tid < kChunks) {
      ptx::cp_async_16(s_base + Sh::kOffLse + stage * Sh::kRowBytes + tid * 16, p.lse_log2 + s.ws_row + tid * 4);
    } else if (tid < 2 * kChunks) {
      const int c = tid - kChunks;
      ptx::cp_async_16(s_base + Sh::kOffDsum + stage * Sh::kRowBytes + c * 16, p.dsum + s.ws_row + c * 4);
    }
  }

  // The next step's tiles, in the pipeline's order. Double-buffered (stages = 2): its Q, dO and rows
  // into the other stage, issued right after this step's top barrier, to land during this step's
  // math. Single-buffered (stages = 1): its dO and rows once every warp is done with them (after
  // dV), its Q once every warp is done with Q (after dK).
  __device__ __forceinline__ void next_step_ahead(const BwdStepOrder<Sh::kBM>& order, const BwdStep& s, bool has_next,
                                                  int stage) const {
    if (Sh::kStages == 2 && has_next) {
      const BwdStep next = order.after(s);
      q(next, stage ^ 1);
      dout(next, stage ^ 1);
      ptx::cp_async_commit();
    }
  }
  __device__ __forceinline__ void next_dout_after_dv(const BwdStepOrder<Sh::kBM>& order, const BwdStep& s,
                                                     bool has_next) const {
    if constexpr (Sh::kStages == 1) {
      if (has_next) {
        __syncthreads();  // everyone is done with dO, LSE and D
        dout(order.after(s), 0);
        ptx::cp_async_commit();
      }
    }
  }
  __device__ __forceinline__ void next_q_after_dk(const BwdStepOrder<Sh::kBM>& order, const BwdStep& s,
                                                  bool has_next) const {
    if constexpr (Sh::kStages == 1) {
      if (has_next) {
        __syncthreads();  // everyone is done with Q
        q(order.after(s), 0);
        ptx::cp_async_commit();
      }
    }
  }
};

}  // namespace flashattn::cuda::sm80
