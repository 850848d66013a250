// The sm80 backward's per-step helpers on a warp's tiles: the LSE/D rows and P/dS addresses that
// S → P → dS use (written out in bwd_kernel.cuh's loop), dV += Pᵀ·dO and dK += dSᵀ·Q.
#pragma once

#include <cstdint>

#include "cuda/sm80/bwd_gemm.cuh"
#include "cuda/sm80/bwd_shape.cuh"
#include "cuda/sm80/warp_gemm.cuh"

namespace flashattn::cuda::sm80 {

// The lane's rows of a per-row fp32 vector in shared memory (LSE·log2e or D), read as one batch
// before the loop that uses them: one exposed shared-memory latency instead of one per row.
template <class Sh>
__device__ __forceinline__ void load_rows(float (&dst)[Sh::kMtS][2], const float* src, int s_row0, int g) {
#pragma unroll
  for (int mi = 0; mi < Sh::kMtS; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) dst[mi][half] = src[s_row0 + 16 * mi + 8 * half + g];
  }
}

// Byte offset in P's (and dS's) tile of the lane's column pair of n-tile ni in row r.
template <class Sh>
__device__ __forceinline__ uint32_t p_offset(int r, int ni, int s_col0, int t) {
  return Sh::TileP::elem_offset(r, s_col0 + 8 * ni + 2 * t);
}

// dV += Pᵀ·dO, P and dO from shared memory.
template <class Elem, class Sh>
__device__ __forceinline__ void accumulate_dv(float (&acc_dv)[Sh::kMtKV][Sh::kNtKV][4], uint32_t s_p, uint32_t s_do,
                                              const BwdWarpTiles& w, int lane) {
  gemm_atb<Elem, typename Sh::TileP, typename Sh::TileQ, Sh::kMtKV, Sh::kNtKV, Sh::kBM / 16>(acc_dv, s_p, w.kv_row0,
                                                                                             s_do, w.kv_col0, lane);
}

// dK += dSᵀ·Q, dS and Q from shared memory (dK is scaled once, in the epilogue).
template <class Elem, class Sh>
__device__ __forceinline__ void accumulate_dk(float (&acc_dk)[Sh::kMtKV][Sh::kNtKV][4], uint32_t s_ds, uint32_t s_q,
                                              const BwdWarpTiles& w, int lane) {
  gemm_atb<Elem, typename Sh::TileP, typename Sh::TileQ, Sh::kMtKV, Sh::kNtKV, Sh::kBM / 16>(acc_dk, s_ds, w.kv_row0,
                                                                                             s_q, w.kv_col0, lane);
}

}  // namespace flashattn::cuda::sm80
