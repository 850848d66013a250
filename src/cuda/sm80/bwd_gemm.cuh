// The backward's warp-level products beyond warp_gemm.cuh's gemm_ss (C += A·Bᵀ, used for
// S = Q·Kᵀ and dP = dO·Vᵀ), and its accumulator store. Operands come from swizzled shared tiles
// (smem_tile.cuh) through ldmatrix; fragment layouts are those of ptx/mma.cuh
// (g = lane / 4, t = lane % 4):
//
//   gemm_atb  C += Aᵀ·B   A stored [k][m], B stored [k][n]: dV += Pᵀ·dO and dK += dSᵀ·Q, with P, dS
//                         stored [query][key] and dO, Q stored [query][d].
//   gemm_ab   C += A·B    A stored [m][k], B stored [k][n]: dQ = dS·K, K stored [key][d].
//
// ldmatrix.x4 lane patterns (lane l addresses one 16-byte row of matrix i = l / 8):
//   A stored [k][m], .trans, for the m-tile at m0, k-step kk:
//       row 16kk + l % 8 + 8·(l / 16), columns m0 + 8·((l / 8) % 2) ..
//       matrices (k 0-7, m 0-7), (k 0-7, m 8-15), (k 8-15, m 0-7), (k 8-15, m 8-15); .trans hands
//       lane l column g (= m) at rows 2t, 2t+1 (= k) of each: A[g][2t..], A[g+8][2t..], A[g][2t+8..],
//       A[g+8][2t+8..] = a[0..3].
//   A stored [m][k], non-trans: warp_gemm.cuh's ldsm_a_addr pattern.
//   B stored [k][n], .trans, for n-tiles n0, n0 + 8, k-step kk: warp_gemm.cuh's ldsm_bt_addr
//       pattern (row 16kk + l % 16, columns n0 + 8·(l / 16) ..): r[0], r[1] = B[2t.., 2t+8..][n0 + g],
//       r[2], r[3] the same for n0 + 8.
// The lane's column offset (a warp's m0 or n0, any multiple of 8) goes into LdsmAddr's chunk_lane:
// its per-lane bases absorb any chunk, and at() adds only compile-time multiples of the swizzle
// period.
#pragma once

#include <cstdint>

#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/warp_gemm.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/mma.cuh"

namespace flashattn::cuda::sm80 {

// x, hidden from the optimizer (an empty asm that "may change" it; no instruction is emitted).
// Lane-derived shared-memory addresses computed from the result inside the main loop are
// recomputed there (a few integer ops per use) instead of being hoisted out of the loop into
// dozens of registers that the loop, holding dK and dV, cannot spare.
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}
template <class T>
__device__ __forceinline__ T* opaque(T* x) {
  asm volatile("" : "+l"(x));
  return x;
}

// k-step kk of gemm_atb: C[mi][ni] += Σ_{k in 16kk ..} A(k, 16mi ..)·B(k, 8ni ..).
template <class Tag, class ATile, class BTile, int kMTiles, int kNTiles>
__device__ __forceinline__ void gemm_atb_step(float (&acc)[kMTiles][kNTiles][4], const LdsmAddr<ATile>& a_addr,
                                              const LdsmAddr<BTile>& b_addr, int kk) {
  uint32_t a[kMTiles][4];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) ptx::ldmatrix_x4_trans(a[mi], a_addr.at(16 * kk, 2 * mi));
  mma_k_step<Tag>(acc, a, [&](int np, uint32_t(&b)[4]) { ptx::ldmatrix_x4_trans(b, b_addr.at(16 * kk, 2 * np)); });
}

// The lane's ldmatrix.trans addresses of gemm_atb's A (k-major, columns a_col0 ..) and B operands.
template <class ATile>
__device__ __forceinline__ LdsmAddr<ATile> atb_a_addr(uint32_t a_tile, int a_col0, int lane) {
  return LdsmAddr<ATile>(a_tile, lane % 8 + 8 * (lane / 16), a_col0 / kChunkElems + (lane / 8) % 2);
}
template <class BTile>
__device__ __forceinline__ LdsmAddr<BTile> atb_b_addr(uint32_t b_tile, int b_col0, int lane) {
  return LdsmAddr<BTile>(b_tile, lane % 16, b_col0 / kChunkElems + lane / 16);
}

// C[mi][ni] += Σ_k A(k, a_col0 + 16mi ..)·B(k, b_col0 + 8ni ..) over k = 0 .. 16·kKSteps.
template <class Tag, class ATile, class BTile, int kMTiles, int kNTiles, int kKSteps>
__device__ __forceinline__ void gemm_atb(float (&acc)[kMTiles][kNTiles][4], uint32_t a_tile, int a_col0,
                                         uint32_t b_tile, int b_col0, int lane) {
  const LdsmAddr<ATile> a_addr = atb_a_addr<ATile>(a_tile, a_col0, lane);
  const LdsmAddr<BTile> b_addr = atb_b_addr<BTile>(b_tile, b_col0, lane);
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) gemm_atb_step<Tag>(acc, a_addr, b_addr, kk);
}

template <class Tag, class ATile, class BTile, int kMTiles, int kNTiles, int kKSteps>
__device__ __forceinline__ void gemm_ab(float (&acc)[kMTiles][kNTiles][4], uint32_t a_tile, int a_row0,
                                        uint32_t b_tile, int b_col0, int lane) {
  const LdsmAddr<ATile> a_addr = ldsm_a_addr<ATile>(a_tile, a_row0, lane);
  const LdsmAddr<BTile> b_addr = atb_b_addr<BTile>(b_tile, b_col0, lane);  // B stored [k][n], as gemm_atb's
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    uint32_t a[kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) ptx::ldmatrix_x4(a[mi], a_addr.at(16 * mi, 2 * kk));
    mma_k_step<Tag>(acc, a, [&](int np, uint32_t(&b)[4]) { ptx::ldmatrix_x4_trans(b, b_addr.at(16 * kk, 2 * np)); });
  }
}

}  // namespace flashattn::cuda::sm80
