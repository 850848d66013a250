// dQ summed over a pair of key blocks (BwdTile::pair_dq; sm_90+). Without it every key block adds
// its dS·K into the fp32 workspace with red.global.add, and those additions in L2 cost the hdim-256
// backward ~20 % of its time (docs/kernels-sm80-backward.md). Here key blocks 2c and 2c + 1 of one
// head run as a cluster of two CTAs (rank r = the block's parity) that walk the same query tiles in
// the same order (under a mask, those either block sees: the score hook masks the other's extra
// tiles whole, so they add nothing). Per step, after dS is in shared memory:
//
//   dV += Pᵀ·dO; then this CTA's P buffer is free: arrive at the cluster barrier (p_free)
//   dK += dSᵀ·Q                                   (hides the partner's arrival)
//   wait at the cluster barrier; send dS into the partner's P buffer (st.async, completing the
//       partner's mbarrier: 8 KB at hdim 256)
//   dQ_r  = dS_own · K_own[:, half r]              (hides the transfer)
//   wait on the own mbarrier (the partner's dS has landed in the P buffer)
//   dQ_r += dS_partner · K_partner[:, half r]      (K_partner's half r loaded once, before the loop)
//   red.global.add dQ_r                            (half the head dim: half the reds)
//
// The P buffer is rewritten by the next step's P only after this CTA's next top barrier, which all
// its warps pass after their reads of the partner's dS; the partner writes into it only after this
// CTA's next arrival, which comes after the next dV. The dQ warp tiles of the unpaired kernel
// (bwd_shape.cuh) are cut in column halves, so the workspace layout (DqLayout) and the postprocess
// are the same.
#pragma once

#include <cstdint>

#include "cuda/common/mask.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/sm80/bwd_dq.cuh"
#include "cuda/sm80/bwd_gemm.cuh"
#include "cuda/sm80/bwd_params.cuh"
#include "cuda/sm80/bwd_shape.cuh"
#include "cuda/sm80/kv_rows.cuh"
#include "cuda/sm80/tile_io.cuh"

namespace flashattn::cuda::sm80 {

template <class Sh>
struct PairDq {
  using TileKHalf = typename Sh::TileKHalf;
  static constexpr int kHalf = Sh::kD / 2;

  uint32_t s_base;  // shared memory, carved up by Sh (only an address: the unpaired kernels keep nothing)

  // This CTA's rank in the pair: its half of the head dim.
  __device__ __forceinline__ static uint32_t rank() { return ptx::cluster_ctarank(); }
  // This CTA's mbarrier: the partner's dS of the current step has landed.
  __device__ __forceinline__ uint32_t bar() const { return s_base + Sh::kOffPairBar; }

  // The query tiles the pair walks: those either key block sees (under a mask the other block's
  // extra tiles are all masked for this one: P = 0 and dS = 0 there, nothing added).
  __device__ __forceinline__ static int m_begin(const Mask& mask, int n_block) {
    return imin(mask.m_block_begin(n_block * Sh::kBN, Sh::kBM), mask.m_block_begin((n_block ^ 1) * Sh::kBN, Sh::kBM));
  }
  __device__ __forceinline__ static int m_end(const Mask& mask, int n_block) {
    return imax(mask.m_block_end(n_block * Sh::kBN, Sh::kBN, Sh::kBM),
                mask.m_block_end((n_block ^ 1) * Sh::kBN, Sh::kBN, Sh::kBM));
  }

  // Before the loop (every thread of both CTAs): the mbarrier, and the partner's K rows, this CTA's
  // half of the columns, into the cp.async group of K and V (committed by the caller).
  __device__ __forceinline__ void setup(const BwdKernelParams& p, const SeqLens& seq, int b, int h_kv, int n_block,
                                        int tid) const {
    if (tid == 0) {
      ptx::mbarrier_init(bar(), 1);
      ptx::fence_mbarrier_init();
    }
    const int n0 = (n_block ^ 1) * Sh::kBN;
    const uint16_t* k_src = static_cast<const uint16_t*>(p.k) + rank() * kHalf +
                            gmem_offset(b, seq.k_offset + n0, h_kv, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
    TileIO<TileKHalf, kBwdThreads>::load_async_or_zero(s_base + Sh::kOffKPair, k_src, p.k_row_stride,
                                                       seq.seqlen_k - n0, p.hdim_qk - static_cast<int>(rank()) * kHalf,
                                                       tid);
    ptx::cluster_arrive();  // the partner may use this CTA's mbarrier from here on
    ptx::cluster_wait();
  }

  // After dV (acc_dv its products): this CTA's P buffer may take the partner's dS. The arrival is
  // relaxed (a release arrival costs every warp a MEMBAR.GPU behind the last step's reds: 8–12 %
  // slower, measured) and made to wait for the products instead: it issues after a branch on one
  // element of every accumulator tile, which needs the last mma of each, and an mma issues only
  // once its operands (P, read by ldmatrix) are in registers. So no read of the buffer is in flight
  // when the partner may write it.
  template <int kMt, int kNt>
  __device__ __forceinline__ void p_free(const float (&acc_dv)[kMt][kNt][4]) const {
    uint32_t products = 0;
#pragma unroll
    for (int mi = 0; mi < kMt; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNt; ++ni) products ^= __float_as_uint(acc_dv[mi][ni][0]);
    if (products == 0x7fc00001u) asm volatile("membar.cta;\n" ::: "memory");  // any outcome is harmless
    ptx::cluster_arrive_relaxed();
  }

  // Once the partner's P buffer is free: this CTA's dS tile into it (16 bytes per thread and
  // chunk), and this CTA's own mbarrier told to expect the partner's.
  __device__ __forceinline__ void send_ds(const unsigned char* smem, int tid) const {
    ptx::cluster_wait();
    if (tid == 0) ptx::mbarrier_arrive_expect_tx(bar(), Sh::TileP::kBytes);
    const uint32_t peer = rank() ^ 1u;
    const uint32_t dst = ptx::mapa_shared_cluster(s_base + Sh::kOffP, peer);
    const uint32_t peer_bar = ptx::mapa_shared_cluster(bar(), peer);
#pragma unroll
    for (int off = tid * 16; off < Sh::TileP::kBytes; off += kBwdThreads * 16) {
      const uint4 v = *reinterpret_cast<const uint4*>(smem + Sh::kOffDs + off);
      ptx::st_async_v4(dst + off, v.x, v.y, v.z, v.w, peer_bar);
    }
  }

  // This warp's dQ tile of the pair: rows row0 .., columns col0 .. (of the whole head dim).
  __device__ __forceinline__ int row0(int warp) const { return warp % Sh::kWmQ * Sh::kTmQ; }
  __device__ __forceinline__ int col0(int warp) const {
    const int wd = warp / Sh::kWmQ % (Sh::kWdQ / 2), half = warp / (kBwdWarps / 2);
    return (static_cast<int>(rank()) * (Sh::kWdQ / 2) + wd) * Sh::kTdQ + half * Sh::kTdQPair;
  }

  // dQ of this step for this CTA's half: dS·K of both key blocks, added into the workspace tile at
  // ws_row. `it` is the step's index (the mbarrier's phase).
  template <class Elem>
  __device__ __forceinline__ void accumulate_dq(const BwdKernelParams& p, int64_t ws_row, int it, int warp,
                                                int lane) const {
    float acc_dq[Sh::kMtQ][Sh::kNtQPair][4] = {};
    const int r0 = row0(warp), c0 = col0(warp);
    gemm_ab<Elem, typename Sh::TileP, typename Sh::TileK, Sh::kMtQ, Sh::kNtQPair, Sh::kBN / 16>(
        acc_dq, s_base + Sh::kOffDs, r0, s_base + Sh::kOffK, c0, lane);
    ptx::mbarrier_wait(bar(), static_cast<uint32_t>(it) & 1u);
    gemm_ab<Elem, typename Sh::TileP, TileKHalf, Sh::kMtQ, Sh::kNtQPair, Sh::kBN / 16>(
        acc_dq, s_base + Sh::kOffP, r0, s_base + Sh::kOffKPair, c0 - static_cast<int>(rank()) * kHalf, lane);
    constexpr DqLayout kDq = DqLane<Sh>::layout();
    add_dq_tile<Sh, Sh::kMtQ, Sh::kNtQPair>(p, acc_dq, ws_row, kDq.index(r0 + lane / 4, c0 + 2 * (lane % 4)), c0);
  }

  // After the loop: arrive, so that neither CTA leaves while the other may still use it...
  __device__ __forceinline__ void leave_arrive() const { ptx::cluster_arrive(); }
  // ... and, after the epilogue, wait for the partner.
  __device__ __forceinline__ void leave_wait() const { ptx::cluster_wait(); }
};

}  // namespace flashattn::cuda::sm80
