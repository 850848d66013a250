// The sm80 backward's math of one step (query block × key block) on a warp's tiles: S = Q·Kᵀ, the
// score hook, P, the probability hook, dP = dO·Vᵀ, dS = P ∘ (dP − D), dV += Pᵀ·dO, dK += dSᵀ·Q.
#pragma once

#include <cstdint>

#include "cuda/common/mask.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/sm80/bwd_gemm.cuh"
#include "cuda/sm80/bwd_params.cuh"
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

// S = Q·Kᵀ, the score hook, P = exp2(score·exp_mult − LSE·log2e) (masked −inf → 0), the
// probability hook, and P (16-bit) into shared memory for dV. acc_s keeps P, or with softcap the
// log2-domain scores (dS recomputes P and tanh from them); lse_r gets the lane's LSE·log2e rows.
template <class Elem, class Sh, bool kSoftcap>
__device__ __forceinline__ void bwd_probabilities(float (&acc_s)[Sh::kMtS][Sh::kNtS][4], float (&lse_r)[Sh::kMtS][2],
                                                  const BwdKernelParams& p, const Mask& mask, int m0, int n0,
                                                  uint32_t s_q, uint32_t s_k, const float* s_lse, unsigned char* smem,
                                                  const BwdWarpTiles& w, int lane, int g, int t) {
  gemm_ss<Elem, typename Sh::TileQ, typename Sh::TileK, Sh::kMtS, Sh::kNtS, Sh::kD / 16>(
      acc_s, ldsm_a_addr<typename Sh::TileQ>(s_q, w.s_row0, lane), ldsm_b_addr<typename Sh::TileK>(s_k, w.s_col0, lane),
      0);
  // Scores as the forward sees them: plain (scale folded into the exp2 below), prescaled or soft-capped.
  score_hook<Sh::kBM, Sh::kBN>(acc_s, p.scores, mask, m0, n0, w.s_row0, w.s_col0, lane);
  const float exp_mult = p.scores.exp_mult;
  load_rows<Sh>(lse_r, s_lse, w.s_row0, g);
#pragma unroll
  for (int mi = 0; mi < Sh::kMtS; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = w.s_row0 + 16 * mi + 8 * half + g;
      const float neg_lse = -lse_r[mi][half];
#pragma unroll
      for (int ni = 0; ni < Sh::kNtS; ++ni) {
        float* x = &acc_s[mi][ni][2 * half];
        float p0 = ptx::exp2_approx(fmaf(x[0], exp_mult, neg_lse));
        float p1 = ptx::exp2_approx(fmaf(x[1], exp_mult, neg_lse));
        probability_hook(p0, p1, m0 + r, n0 + w.s_col0 + 8 * ni + 2 * t);
        if constexpr (!kSoftcap) {
          x[0] = p0;
          x[1] = p1;
        }
        *reinterpret_cast<uint32_t*>(smem + Sh::kOffP + p_offset<Sh>(r, ni, w.s_col0, t)) = ptx::pack2<Elem>(p0, p1);
      }
    }
  }
}

// dP = dO·Vᵀ, then dS = P ∘ (dP − D) [softcap: ∘ (1 − tanh²)] (16-bit) into shared memory for dQ and dK.
template <class Elem, class Sh, bool kSoftcap>
__device__ __forceinline__ void bwd_dscores(const float (&acc_s)[Sh::kMtS][Sh::kNtS][4],
                                            const float (&lse_r)[Sh::kMtS][2], const BwdKernelParams& p,
                                            uint32_t s_do, uint32_t s_v, const float* s_dsum, unsigned char* smem,
                                            const BwdWarpTiles& w, int lane, int g, int t) {
  float acc_dp[Sh::kMtS][Sh::kNtS][4] = {};
  gemm_ss<Elem, typename Sh::TileQ, typename Sh::TileK, Sh::kMtS, Sh::kNtS, Sh::kD / 16>(
      acc_dp, ldsm_a_addr<typename Sh::TileQ>(s_do, w.s_row0, lane),
      ldsm_b_addr<typename Sh::TileK>(s_v, w.s_col0, lane), 0);
  float dsum_r[Sh::kMtS][2];
  load_rows<Sh>(dsum_r, s_dsum, w.s_row0, g);
#pragma unroll
  for (int mi = 0; mi < Sh::kMtS; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = w.s_row0 + 16 * mi + 8 * half + g;
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
        *reinterpret_cast<uint32_t*>(smem + Sh::kOffDs + p_offset<Sh>(r, ni, w.s_col0, t)) =
            ptx::pack2<Elem>(ds[0], ds[1]);
      }
    }
  }
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
