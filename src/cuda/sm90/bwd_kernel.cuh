// The sm90 backward's main kernel (docs/kernels-sm90-backward.md): one CTA per key block of 128 keys
// (and kv head, sequence), dK and dV in registers over every query block of every query head of the
// kv head's group, wgmma for all five products. Two warpgroups, 64 keys each. Per step (a query
// block of one query head: 64 rows at D = 128, 128 at D = 64), with Q, dO, LSE·log2e and D of the
// step in shared memory:
//
//   Sᵀ  = K_w·Qᵀ,  dPᵀ = V_w·dOᵀ                 (SS; this warpgroup's keys as the M dimension)
//   Pᵀ  = exp2(Sᵀ·scale·log2e − LSE·log2e)       (masked where the tile straddles the mask;
//   dSᵀ = Pᵀ∘(dPᵀ − D)                            soft cap: bwd_tile.cuh's BwdScoreTile)
//                                                 dSᵀ → shared memory, [key][query]
//   dV += Pᵀ·dO,  dK += dSᵀ·Q                     (RS: Pᵀ and dSᵀ from registers, as the forward's P)
//   ── both warpgroups' dSᵀ stored (named barrier) ──
//   dQ part w = dS·K                              (SS: dS as the MN-major A operand, k over all 128
//                                                 keys; part w of the step's dQ: D = 128 its columns
//                                                 64w.., D = 64 its queries 64w..), red.add into the
//                                                 fp32 accumulator (row-major rows of the workspace,
//                                                 bwd_params.cuh; the postprocess scales)
//
// kParts: the instance whose key blocks run in parts (the plan's bwd_parts; blockIdx.y = part), each
// over a range of the group's query heads, their dK and dV summed in fp32 (add_key_side_part).
//
// The queries' side is the transposed one (FlashAttention-3's): the wgmma accumulator of Sᵀ has the
// keys as rows, so P and dS feed dV and dK from registers with no shuffle, and the key-side sums
// stay in registers. Thread 0 issues the loads of a step two steps ahead (three stages, each freed by
// the named barrier of the step in between): the TMA boxes of Q and dO and bulk copies of the step's
// LSE and D rows, all on the stage's barrier.
//
// Rows past a sequence: keys past seqlen_k are masked (P = 0) and query rows past seqlen_q have
// LSE = +inf in the workspace (P = 0); their rows of K, V, Q and dO must also be zeros, or else
// 0 · NaN would reach dQ, dK and dV. Padded batches: TMA fills them with zeros (the maps end at the
// sequence). Varlen (the maps over the packed tensors): a box may run into the next sequence or
// into packed rows of none, so they are zeroed in shared memory (bwd_tile.cuh's zero_key_tail,
// zero_query_tail).
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

// Two warpgroups of 64 keys each, three stages of Q and dO. A step's query rows: 64 at D = 128; 128
// at D = 64, so that a step is as much work as D = 128's (Sᵀ and dPᵀ of 64 keys × 128 queries, 64
// floats a thread each, the same register peak with half of dK and dV) for the same barrier and
// waits (FlashAttention-3's 128 × 128 tile at this head dim).
template <class TagT, int kHeadDim>
struct BwdTraits : BwdLayout<TagT, kHeadDim, 2 * kWarpgroupRows, 3, kHeadDim == 64 ? 128 : 64> {
  using Layout = BwdLayout<TagT, kHeadDim, 2 * kWarpgroupRows, 3, kHeadDim == 64 ? 128 : 64>;
  // dQ = dS·K over all 128 keys, so each element of the accumulator gets one fp32 addition per key
  // block (those additions in L2, not their issue, are what dQ costs: kernels-sm80-backward.md). The
  // step's dQ (kBlockM × D) is two 64 × 64 parts, one per warpgroup (32 floats a thread): D = 128
  // splits the columns (K's chunk w), D = 64 the queries (dSᵀ's chunk w).
  static constexpr int kDqColChunks = kHeadDim / kSwizzleCols;
  static_assert(Layout::kBlockM / kSwizzleCols * kDqColChunks == 2, "dQ is two 64 x 64 parts, one per warpgroup");
  static constexpr int kDqCols = kSwizzleCols;
};

template <class Traits>
struct BwdMainloop : BwdLoads<Traits> {
  using Tag = typename Traits::Tag;
  static constexpr ptx::Swizzle kSw = ptx::Swizzle::b128;
  static constexpr int kN = Traits::kBlockM;  // columns of Sᵀ and dPᵀ: the step's queries

  using BwdLoads<Traits>::sm;
  using BwdLoads<Traits>::p;
  using BwdLoads<Traits>::kb;
  using BwdLoads<Traits>::tid;
  int wg, row0, g, t;  // row0: this warp's first key row within the CTA's block
  // The loads of step k + kAhead are issued before step k's dV/dK products are waited for, so the
  // ring holds one stage more than that distance (the wide kernel loads after its step-end barrier).
  static_assert(Traits::kStages >= BwdLoads<Traits>::kAhead + 1);

  // ---- the products -----------------------------------------------------------------------------
  // acc = (this warpgroup's 64 rows of `rows_tile`)·(stage tile)ᵀ: Sᵀ (K, Q) or dPᵀ (V, dO).
  __device__ __forceinline__ void issue_transposed_scores(float (&acc)[kN / 2], uint32_t rows_tile,
                                                          uint32_t step_tile) const {
    const uint64_t desc_a = ptx::wgmma_desc_k_major(rows_tile + wg * kWarpgroupRows * kSwizzleRowBytes, kSw);
    const uint64_t desc_b = ptx::wgmma_desc_k_major(step_tile, kSw);
#pragma unroll
    for (int ks = 0; ks < Traits::kD / 16; ++ks) {
      ptx::wgmma_ss<kN, Tag>(acc, ptx::wgmma_desc_advance(desc_a, k_step_bytes(ks, Traits::kKVChunkBytes)),
                             ptx::wgmma_desc_advance(desc_b, k_step_bytes(ks, Traits::kQChunkBytes)), ks > 0);
    }
    ptx::wgmma_commit();
  }

  // acc += A·(stage tile), A the packed Pᵀ or dSᵀ (k-dim: the step's queries); the stage tile (dO or
  // Q) is the MN-major B operand, as V in the forward's P·V.
  __device__ __forceinline__ void issue_key_side(float (&acc)[Traits::kD / 2], const uint32_t (&a)[kN / 16][4],
                                                 uint32_t step_tile) const {
    const uint64_t desc_b = ptx::wgmma_desc_mn_major(step_tile, kSw, Traits::kQChunkBytes);
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      ptx::wgmma_rs<Traits::kD, Tag, ptx::Major::MN>(
          acc, a[kk], ptx::wgmma_desc_advance(desc_b, kk * 16 * kSwizzleRowBytes), true);
    }
  }

  // This warpgroup's part of the step's dQ: its query chunk (64 queries) and column chunk (64
  // columns); the side with two chunks is split.
  __device__ int dq_query_chunk() const { return Traits::kDqColChunks == 1 ? wg : 0; }
  __device__ int dq_col_chunk() const { return Traits::kDqColChunks == 1 ? 0 : wg; }

  // This warpgroup's dQ part: dS [key][query] as the MN-major A operand (M = its 64 queries, one
  // chunk of dSᵀ), K as the MN-major B operand (its 64-column chunk); k over all 128 keys.
  __device__ __forceinline__ void issue_dq(float (&dq)[Traits::kDqCols / 2], int buf) const {
    const uint64_t desc_a =
        ptx::wgmma_desc_mn_major(sm.ds(buf) + dq_query_chunk() * Traits::kDsChunkBytes, kSw, Traits::kDsChunkBytes);
    const uint64_t desc_b =
        ptx::wgmma_desc_mn_major(sm.k() + dq_col_chunk() * Traits::kKVChunkBytes, kSw, Traits::kKVChunkBytes);
#pragma unroll
    for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) {
      ptx::wgmma_ss<Traits::kDqCols, Tag, ptx::Major::MN, ptx::Major::MN>(
          dq, ptx::wgmma_desc_advance(desc_a, kk * 16 * kSwizzleRowBytes),
          ptx::wgmma_desc_advance(desc_b, kk * 16 * kSwizzleRowBytes), kk > 0);
    }
    ptx::wgmma_commit();
  }

  // ---- the elementwise part (bwd_tile.cuh's BwdScoreTile) ----------------------------------------
  __device__ BwdScoreTile score_tile(int k, BwdStep at) const {
    return BwdLoads<Traits>::score_tile(k, at, row0, 0, g, t);
  }

  // Columns 16kk .. 16kk + 15 of an accumulator, packed pairwise: the A fragment of k-step kk.
  __device__ __forceinline__ static void pack(uint32_t (&a)[kN / 16][4], const float (&x)[kN / 2]) {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[kk][r] = ptx::pack2<Tag>(x[8 * kk + 2 * r], x[8 * kk + 2 * r + 1]);
    }
  }

  // dSᵀ (this warp's fragment as `frag` maps it) into the 128B-swizzled [key][query] tile (a row: the
  // key's 64 queries, 128 bytes).
  __device__ __forceinline__ void store_ds(const BwdScoreTile& frag, const float (&ds)[kN / 2], int buf) const {
    store_fragment<Tag, kN, Traits::kDsChunkBytes>(frag, ds, sm.generic + Traits::kDS + buf * Traits::kDsBytes);
  }

  // red.add of this warpgroup's dQ part into the step's accumulator rows (the accumulator's rows:
  // this warp's 16 of the part's 64 queries).
  __device__ __forceinline__ void add_dq(const float (&dq)[Traits::kDqCols / 2], BwdStep at) const {
    const int64_t row = kb.ws_row(p, at) + dq_query_chunk() * kSwizzleCols + row0 % kWarpgroupRows + g;
    add_dq_fragment<Traits::kD, Traits::kDqCols>(p, row, dq_col_chunk() * Traits::kDqCols, t, dq);
  }
};

template <class Traits, bool kParts>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    bwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
               const __grid_constant__ BwdKernelParams p) {
#if FLASHATTN_PTX_SM90A
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[1 + Traits::kStages];
  const BwdSmem<Traits> sm = BwdSmem<Traits>::over(smem_raw, bars);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  const BwdKeyBlock kb = bwd_key_block<Traits, kParts>(p);
  if (!kb.has_keys()) return;  // varlen: past this sequence's keys (the grid covers the longest)
  // The warpgroup taken from lane 0, so that ptxas knows it warp-uniform and may keep it, and the
  // descriptors made of it, in uniform registers (CUTLASS's canonical_warp_group_idx does the same):
  // with the four-column dQ reductions, +2-4 % at D = 128 and +1-2 % at D = 64 on the H100.
  const int wg = __shfl_sync(0xffffffffu, tid / kWarpgroupThreads, 0);
  const int row0 = wg * kWarpgroupRows + (tid % kWarpgroupThreads / 32) * 16;
  const BwdMainloop<Traits> ml{{sm, p, &tm_q, &tm_do, kb, tid}, wg, row0, lane / 4, lane % 4};

  ml.start(&tm_k, &tm_v);
  constexpr int kAhead = BwdLoads<Traits>::kAhead;

  float dk[Traits::kD / 2], dv[Traits::kD / 2];
#pragma unroll
  for (int i = 0; i < Traits::kD / 2; ++i) dk[i] = dv[i] = 0.f;
  const float mult = p.scale * kLog2e;  // S → log2-domain logits (plain or prescaled: P's formula is the same)

  BwdStep at = kb.step(0, Traits::kBlockM), ahead = kb.step(kAhead, Traits::kBlockM);  // steps k, k + kAhead
  for (int k = 0; k < kb.steps; ++k) {
    const int s = k % Traits::kStages, buf = k & 1;
    ml.wait_step(k, at);
    float st[BwdMainloop<Traits>::kN / 2], dpt[BwdMainloop<Traits>::kN / 2];
    ptx::wgmma_fence();
    ml.issue_transposed_scores(st, sm.k(), sm.q(s));
    ml.issue_transposed_scores(dpt, sm.v(), sm.dout(s));
    const BwdScoreTile frag = ml.score_tile(k, at);
    frag.gradients_of_scores(st, dpt, p.scores, mult);

    uint32_t pa[BwdMainloop<Traits>::kN / 16][4], da[BwdMainloop<Traits>::kN / 16][4];
    BwdMainloop<Traits>::pack(pa, st);
    BwdMainloop<Traits>::pack(da, dpt);
    ml.store_ds(frag, dpt, buf);
    ptx::wgmma_fence_operand(dv);
    ptx::wgmma_fence_operand(dk);
    ptx::wgmma_fence();
    ml.issue_key_side(dv, pa, sm.dout(s));
    ml.issue_key_side(dk, da, sm.q(s));
    ptx::wgmma_commit();

    ptx::fence_proxy_async_shared_cta();  // dSᵀ's generic stores, before wgmma reads them
    ptx::named_barrier_sync(kDsBarrier, Traits::kThreads);
    // Every thread is past step k − 1's last wait: stage (k + 2) % 3 is free.
    if (tid == 0 && k + kAhead < kb.steps) ml.load_step(k + kAhead, ahead);

    float dq[Traits::kDqCols / 2];
    ptx::wgmma_fence();
    ml.issue_dq(dq, buf);
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_operand(dq);
    ptx::wgmma_fence_operand(dv);
    ptx::wgmma_fence_operand(dk);
    ml.wait_dq_turn(at);
    if (p.deterministic) __syncthreads();
    ml.add_dq(dq, at);
    if (p.deterministic) {
      __syncthreads();  // every thread's additions before the release
      ml.pass_dq_turn(at);
    }
    at = kb.after(at, Traits::kBlockM);
    ahead = kb.after(ahead, Traits::kBlockM);
  }
  __syncthreads();  // both warpgroups' last products (which read K and V) are waited for
  finish_key_block<Traits, kParts, Traits::kD>(p, kb, sm, row0, 0, lane, tid, dk, dv);
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm90 backward kernel needs sm_90a");
#endif
}

}  // namespace flashattn::cuda::sm90
