// The sm90 backward's main kernel for head dim 256 (docs/kernels-sm90-backward.md): the key side
// split by columns instead of keys. At D = 256 the narrow kernel's 64 keys per warpgroup would hold
// 256 floats of dK and dV per thread; here a CTA owns 64 keys and warpgroup w the columns
// [128w, 128w + 128) of their dK and dV (64 + 64 floats a thread), as FlashAttention-3 splits its
// dK/dV tile at this head dim. Per step (64 query rows of one query head):
//
//   Sᵀ[:, q_w] = K·Q[q_w]ᵀ,  dPᵀ[:, q_w] = V·dO[q_w]ᵀ    (SS; q_w: this warpgroup's 32 of the queries)
//   Pᵀ, dSᵀ of those columns                            → shared memory, [key][query] each
//   ── both warpgroups' halves stored (named barrier) ──
//   dV[:, c_w] += Pᵀ·dO[:, c_w],  dK[:, c_w] += dSᵀ·Q[:, c_w]     (SS: A the stored tiles, K-major)
//   dQ[:, c_w]  = dS·K[:, c_w]                          (SS: dS as the MN-major view of dSᵀ), red.add
//   ── both warpgroups done with P, dS and the stage (named barrier): the next loads may land ──
//
// Q and dO (32 KB each per step) go through two TMA stages; the loads of step k + 2 are issued after
// step k's last barrier, a whole step ahead of their use. Rows past a sequence, and key blocks in
// parts (kParts), as in bwd_kernel.cuh.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/barrier.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/red.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm90/bwd_tile.cuh"

namespace flashattn::cuda::sm90 {

// 64 keys, the columns split between the warpgroups; two stages of Q and dO. The two [key][query]
// tiles hold Pᵀ (BwdSmem::ds(0)) and dSᵀ (ds(1)).
template <class TagT, int kHeadDim>
struct BwdWideTraits : BwdLayout<TagT, kHeadDim, kWarpgroupRows, 2> {
  static constexpr int kHalf = kHeadDim / 2;  // columns of dK, dV and dQ per warpgroup
  static constexpr int kQueries = 64 / 2;     // columns of Sᵀ and dPᵀ per warpgroup: half the step's rows
  static_assert(kHalf % kSwizzleCols == 0, "each warpgroup's columns are whole 64-column chunks");
};

// The end of a step: both warpgroups are done with Pᵀ, dSᵀ and the stage (bwd_tile.cuh has 1 and 2).
inline constexpr uint32_t kStepEndBarrier = 3;

template <class Traits>
struct BwdWideMainloop : BwdLoads<Traits> {
  using Tag = typename Traits::Tag;
  static constexpr ptx::Swizzle kSw = ptx::Swizzle::b128;
  static constexpr int kP = 0, kDS = 1;  // BwdSmem::ds(): the Pᵀ and dSᵀ tiles
  static constexpr int kHalfChunks = Traits::kHalf / kSwizzleCols;  // a warpgroup's 64-column chunks
  using BwdLoads<Traits>::sm;
  using BwdLoads<Traits>::p;
  using BwdLoads<Traits>::kb;
  int wg, row0, g, t;  // row0 = 16 · (warp in the warpgroup): its rows of a 64-row accumulator (keys; dQ: queries)

  // acc = (K or V)·(this warpgroup's 32 rows of Q or dO)ᵀ: its columns of Sᵀ or dPᵀ, all 64 keys.
  __device__ __forceinline__ void issue_transposed_scores(float (&acc)[Traits::kQueries / 2], uint32_t rows_tile,
                                                          uint32_t step_tile) const {
    const uint64_t desc_a = ptx::wgmma_desc_k_major(rows_tile, kSw);
    const uint64_t desc_b = ptx::wgmma_desc_k_major(step_tile + wg * Traits::kQueries * kSwizzleRowBytes, kSw);
#pragma unroll
    for (int ks = 0; ks < Traits::kD / 16; ++ks) {
      const uint64_t a = ptx::wgmma_desc_advance(desc_a, k_step_bytes(ks, Traits::kKVChunkBytes));
      const uint64_t b = ptx::wgmma_desc_advance(desc_b, k_step_bytes(ks, Traits::kQChunkBytes));
      ptx::wgmma_ss<Traits::kQueries, Tag>(acc, a, b, ks > 0);
    }
    ptx::wgmma_commit();
  }

  // acc += (Pᵀ or dSᵀ, the stored [key][query] tile: K-major A, k over the 64 queries)·(dO or Q)[:, this
  // warpgroup's columns] (MN-major B: its two 64-column chunks of the stage).
  __device__ __forceinline__ void issue_key_side(float (&acc)[Traits::kHalf / 2], int tile, uint32_t step_tile) const {
    const uint64_t desc_a = ptx::wgmma_desc_k_major(sm.ds(tile), kSw);
    const uint32_t columns = wg * kHalfChunks * Traits::kQChunkBytes;
    const uint64_t desc_b = ptx::wgmma_desc_mn_major(step_tile + columns, kSw, Traits::kQChunkBytes);
#pragma unroll
    for (int kk = 0; kk < Traits::kBlockM / 16; ++kk) {
      ptx::wgmma_ss<Traits::kHalf, Tag, ptx::Major::K, ptx::Major::MN>(
          acc, ptx::wgmma_desc_advance(desc_a, 32 * kk), ptx::wgmma_desc_advance(desc_b, kk * 16 * kSwizzleRowBytes),
          true);
    }
  }

  // dq = dS·K[:, this warpgroup's columns]: dSᵀ [key][query] read as the MN-major A operand (M = the
  // 64 queries), K's chunks as the MN-major B operand; k over the 64 keys.
  __device__ __forceinline__ void issue_dq(float (&dq)[Traits::kHalf / 2]) const {
    const uint64_t desc_a = ptx::wgmma_desc_mn_major(sm.ds(kDS), kSw, Traits::kDsBytes);
    const uint32_t columns = wg * kHalfChunks * Traits::kKVChunkBytes;
    const uint64_t desc_b = ptx::wgmma_desc_mn_major(sm.k() + columns, kSw, Traits::kKVChunkBytes);
#pragma unroll
    for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) {
      ptx::wgmma_ss<Traits::kHalf, Tag, ptx::Major::MN, ptx::Major::MN>(
          dq, ptx::wgmma_desc_advance(desc_a, kk * 16 * kSwizzleRowBytes),
          ptx::wgmma_desc_advance(desc_b, kk * 16 * kSwizzleRowBytes), kk > 0);
    }
  }

  // The step's elementwise view (bwd_tile.cuh): this warp's 16 keys, this warpgroup's 32 queries.
  __device__ BwdScoreTile score_tile(int k, BwdStep at) const {
    return BwdLoads<Traits>::score_tile(k, at, row0, wg * Traits::kQueries, g, t);
  }
  // This warpgroup's columns of Pᵀ or dSᵀ (its fragment as `frag` maps it) into the 128B-swizzled
  // [key][query] tile.
  __device__ __forceinline__ void store_tile(const BwdScoreTile& frag, const float (&x)[Traits::kQueries / 2],
                                             int tile) const {
    store_fragment<Tag, Traits::kQueries, Traits::kDsChunkBytes>(frag, x,
                                                                 sm.generic + Traits::kDS + tile * Traits::kDsBytes);
  }

  // red.add of this warpgroup's dQ columns into the step's accumulator rows.
  __device__ __forceinline__ void add_dq(const float (&dq)[Traits::kHalf / 2], BwdStep at) const {
    add_dq_fragment<Traits::kD, Traits::kHalf>(p, kb.ws_row(p, at) + row0 + g, wg * Traits::kHalf, t,
                                               dq);
  }
};

template <class Traits, bool kParts>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    bwd_kernel_wide(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                    const __grid_constant__ BwdKernelParams p) {
#if FLASHATTN_PTX_SM90A
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[1 + Traits::kStages];
  const BwdSmem<Traits> sm = BwdSmem<Traits>::over(smem_raw, bars);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  const BwdKeyBlock kb = bwd_key_block<Traits, kParts>(p);
  if (!kb.has_keys()) return;  // varlen: past this sequence's keys (the grid covers the longest)
  const int wg = tid / kWarpgroupThreads, row0 = (tid % kWarpgroupThreads / 32) * 16;
  const BwdWideMainloop<Traits> ml{{sm, p, &tm_q, &tm_do, kb, tid}, wg, row0, lane / 4, lane % 4};

  ml.start(&tm_k, &tm_v);
  constexpr int kAhead = BwdLoads<Traits>::kAhead;

  float dk[Traits::kHalf / 2], dv[Traits::kHalf / 2];
#pragma unroll
  for (int i = 0; i < Traits::kHalf / 2; ++i) dk[i] = dv[i] = 0.f;
  const float mult = p.scale * kLog2e;

  BwdStep at = kb.step(0, Traits::kBlockM), ahead = kb.step(kAhead, Traits::kBlockM);  // steps k, k + kAhead
  for (int k = 0; k < kb.steps; ++k) {
    const int s = k % Traits::kStages;
    ml.wait_step(k, at);
    float st[Traits::kQueries / 2], dpt[Traits::kQueries / 2];
    ptx::wgmma_fence();
    ml.issue_transposed_scores(st, sm.k(), sm.q(s));
    ml.issue_transposed_scores(dpt, sm.v(), sm.dout(s));
    const BwdScoreTile frag = ml.score_tile(k, at);
    frag.gradients_of_scores(st, dpt, p.scores, mult);
    ml.store_tile(frag, st, BwdWideMainloop<Traits>::kP);
    ml.store_tile(frag, dpt, BwdWideMainloop<Traits>::kDS);
    ptx::fence_proxy_async_shared_cta();  // the generic stores, before wgmma reads them
    ptx::named_barrier_sync(kDsBarrier, Traits::kThreads);

    float dq[Traits::kHalf / 2];
    ptx::wgmma_fence_operand(dv);
    ptx::wgmma_fence_operand(dk);
    ptx::wgmma_fence();
    ml.issue_key_side(dv, BwdWideMainloop<Traits>::kP, sm.dout(s));
    ml.issue_key_side(dk, BwdWideMainloop<Traits>::kDS, sm.q(s));
    ml.issue_dq(dq);
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_operand(dq);
    ptx::wgmma_fence_operand(dv);
    ptx::wgmma_fence_operand(dk);
    ml.wait_dq_turn(at);
    if (p.deterministic) __syncthreads();
    ml.add_dq(dq, at);  // the warpgroups' columns are disjoint: no order between them
    // Both warpgroups are past this step's products (and its dQ additions): the stage and the two
    // tiles are free, and the dQ turn may pass on.
    ptx::named_barrier_sync(kStepEndBarrier, Traits::kThreads);
    ml.pass_dq_turn(at);
    if (tid == 0 && k + kAhead < kb.steps) ml.load_step(k + kAhead, ahead);
    at = kb.after(at, Traits::kBlockM);
    ahead = kb.after(ahead, Traits::kBlockM);
  }
  __syncthreads();  // both warpgroups' last products (which read K and V) are waited for
  finish_key_block<Traits, kParts, Traits::kHalf>(p, kb, sm, row0, wg * Traits::kHalf, lane, tid, dk, dv);
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm90 backward kernel needs sm_90a");
#endif
}

}  // namespace flashattn::cuda::sm90
