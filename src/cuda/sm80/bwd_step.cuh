// The sm80 backward's per-step pieces on a warp's tiles: the LSE/D rows and P/dS addresses, P of one
// column pair (recompute_p; the loops over the tile, S before it and dS after it are written out in
// bwd_kernel.cuh's loop: see its header), dV += Pᵀ·dO and dK += dSᵀ·Q. (dQ: bwd_dq.cuh.)
#pragma once

#include <cstdint>

#include "cuda/ptx/math.cuh"
#include "cuda/sm80/bwd_gemm.cuh"
#include "cuda/sm80/bwd_shape.cuh"
#include "cuda/sm80/hooks.cuh"
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

// P = exp2(score·exp_mult − LSE·log2e) of one column pair of the warp's S tile (m-tile mi, row half
// `half`, n-tile ni; the row's LSE·log2e is lse), from the hooked scores at x, through the
// probability hook, to shared memory (16-bit) for dV += Pᵀ·dO. x then holds P, except where the
// transform's slope varies (kSlopeVaries): there it keeps the scores, from which dS recomputes P.
template <class Elem, class Sh, bool kSlopeVaries>
__device__ __forceinline__ void recompute_p(float* x, float exp_mult, float lse, unsigned char* smem, int m0, int n0,
                                            int mi, int half, int ni, const BwdWarpTiles& w, int g, int t) {
  const int r = w.s_row0 + 16 * mi + 8 * half + g;
  const float neg_lse = -lse;
  float p0 = ptx::exp2_approx(fmaf(x[0], exp_mult, neg_lse));
  float p1 = ptx::exp2_approx(fmaf(x[1], exp_mult, neg_lse));
  probability_hook(p0, p1, m0 + r, n0 + w.s_col0 + 8 * ni + 2 * t);
  if constexpr (!kSlopeVaries) {
    x[0] = p0;
    x[1] = p1;
  }
  *reinterpret_cast<uint32_t*>(smem + Sh::kOffP + p_offset<Sh>(r, ni, w.s_col0, t)) = ptx::pack2<Elem>(p0, p1);
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
