// Online softmax over mma accumulator tiles (C layout of ptx/mma.cuh: each thread holds, for each
// 16-row m-tile, two rows — g and g + 8 — and in each 8-column n-tile two columns of them; a row is
// spread over the 4 threads of a quad, so row reductions are two xor-shuffles).
//
// Scores arrive in units where `score · exp_mult` is the logit in base 2 (exp_mult = softmax_scale·
// log2(e) when the scores are raw dot products, 1 when the caller already scaled them). Per row the
// state is the running max m (score units) and a running sum ℓ of exp2(score·exp_mult − m·exp_mult);
// ℓ is kept per thread (its own columns) and summed over the quad only once, at the end.
//
// −inf handling (masked scores): while a row has seen only −inf, m = −inf and the exponent offset is
// taken as 0, so p = exp2(−inf) = 0 and the rescale factor exp2(−inf − 0) = 0: never −inf − (−inf).
// A row that stays fully masked ends with ℓ = 0: out = 0 and lse = +inf.
#pragma once

#include <cstdint>

#include "cuda/common/scores.cuh"
#include "cuda/ptx/math.cuh"

namespace flashattn::cuda {

inline constexpr unsigned kFullWarp = 0xffffffffu;

// Max / sum over the 4 threads of a quad (lanes 4g .. 4g + 3), result in all four.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFullWarp, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFullWarp, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(kFullWarp, x, 1);
  return x + __shfl_xor_sync(kFullWarp, x, 2);
}

template <int kMTiles>
struct OnlineSoftmax {
  float row_max[kMTiles][2];  // running max m per row (score units)
  float row_sum[kMTiles][2];  // running ℓ per row, this thread's columns only

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        row_max[mi][half] = -kInfinity;
        row_sum[mi][half] = 0.f;
      }
    }
  }

  // Takes the next score tile of these rows: updates m, rescales ℓ and the output accumulator `acc`
  // by exp2((m_old − m_new)·exp_mult), and turns `s` into unnormalized probabilities in place.
  template <int kNTiles, int kDTiles>
  __device__ __forceinline__ void update(float (&s)[kMTiles][kNTiles][4], float (&acc)[kMTiles][kDTiles][4],
                                         float exp_mult) {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float offset;
        const float rescale = raise_max(s, mi, half, exp_mult, &offset);
#pragma unroll
        for (int di = 0; di < kDTiles; ++di) {
          acc[mi][di][2 * half] *= rescale;
          acc[mi][di][2 * half + 1] *= rescale;
        }
        exponentiate_row(s, mi, half, exp_mult, offset, rescale);
      }
    }
  }

  // update() in two halves, for a kernel whose product into the accumulator is still in flight
  // while it exponentiates the next tile (sm90): exponentiate() updates m and ℓ and gives the factor
  // by which each row of the accumulator must still be rescaled; rescale_rows() applies it.
  // kChains: the row max and sum of a long tile row (sm90: up to 176 keys, 44 per thread) as that
  // many interleaved partial chains, combined at the end, so that neither is one chain of dependent
  // instructions (the max is the same whatever the order; the sum rounds in another order).
  template <int kChains = 1, int kNTiles>
  __device__ __forceinline__ void exponentiate(float (&s)[kMTiles][kNTiles][4], float exp_mult,
                                               float (&rescale)[kMTiles][2]) {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float offset;
        rescale[mi][half] = raise_max<kChains>(s, mi, half, exp_mult, &offset);
        exponentiate_row<kChains>(s, mi, half, exp_mult, offset, rescale[mi][half]);
      }
    }
  }

  template <int kDTiles>
  __device__ __forceinline__ static void rescale_rows(float (&acc)[kMTiles][kDTiles][4],
                                                     const float (&rescale)[kMTiles][2]) {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int di = 0; di < kDTiles; ++di) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          acc[mi][di][2 * half] *= rescale[mi][half];
          acc[mi][di][2 * half + 1] *= rescale[mi][half];
        }
      }
    }
  }

  // Row (mi, half): the new running max over the tile; returns the rescale factor of the old state
  // and sets the exponent offset (base 2) of the new one.
  template <int kChains = 1, int kNTiles>
  __device__ __forceinline__ float raise_max(const float (&s)[kMTiles][kNTiles][4], int mi, int half,
                                             float exp_mult, float* offset) {
    float part[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) part[c] = c == 0 ? row_max[mi][half] : -kInfinity;
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni) {
      part[ni % kChains] = fmaxf(part[ni % kChains], fmaxf(s[mi][ni][2 * half], s[mi][ni][2 * half + 1]));
    }
    float m = combine<kChains>(part, [](float a, float b) { return fmaxf(a, b); });
    m = quad_max(m);
    *offset = m == -kInfinity ? 0.f : m * exp_mult;
    const float rescale = ptx::exp2_approx(row_max[mi][half] * exp_mult - *offset);
    row_max[mi][half] = m;
    return rescale;
  }

  // Row (mi, half): scores to unnormalized probabilities in place, ℓ rescaled and summed.
  template <int kChains = 1, int kNTiles>
  __device__ __forceinline__ void exponentiate_row(float (&s)[kMTiles][kNTiles][4], int mi, int half,
                                                   float exp_mult, float offset, float rescale) {
    float part[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) part[c] = c == 0 ? row_sum[mi][half] * rescale : 0.f;
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = ptx::exp2_approx(fmaf(s[mi][ni][2 * half + e], exp_mult, -offset));
        s[mi][ni][2 * half + e] = p;
        part[(2 * ni + e) % kChains] += p;
      }
    }
    row_sum[mi][half] = combine<kChains>(part, [](float a, float b) { return a + b; });
  }

  // part[0] op part[1] op ... as a balanced tree (pairs, then pairs of pairs).
  template <int kChains, class Op>
  __device__ __forceinline__ static float combine(float (&part)[kChains], Op op) {
#pragma unroll
    for (int width = 1; width < kChains; width *= 2) {
#pragma unroll
      for (int c = 0; c + width < kChains; c += 2 * width) part[c] = op(part[c], part[c + width]);
    }
    return part[0];
  }

  // Row (mi, half) at the end of the key loop: *inv = 1/ℓ (0 for a fully masked row), by which the
  // accumulator is multiplied, and *lse, its log-sum-exp (natural log; +inf for a fully masked row;
  // a NaN anywhere in the row stays NaN, ℓ = NaN not being 0).
  __device__ __forceinline__ void row_scale(int mi, int half, float exp_mult, float* inv, float* lse) const {
    const float sum = quad_sum(row_sum[mi][half]);
    const bool empty = sum == 0.f;
    *inv = empty ? 0.f : 1.f / sum;
    *lse = empty ? kInfinity : (row_max[mi][half] * exp_mult + log2f(sum)) * kLn2;
  }

  // row_scale of every row, for a kernel whose last product into the accumulator is still in flight
  // (sm90: computed under the last P·V, FlashAttention-3's order; rescale_rows applies inv after).
  __device__ __forceinline__ void row_scales(float exp_mult, float (&inv)[kMTiles][2], float (&lse)[kMTiles][2]) const {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) row_scale(mi, half, exp_mult, &inv[mi][half], &lse[mi][half]);
    }
  }

  // End of the key loop: normalizes `acc` by ℓ and gives each row's log-sum-exp in lse[mi][half]
  // (row_scale), row by row.
  template <int kDTiles>
  __device__ __forceinline__ void finalize(float (&acc)[kMTiles][kDTiles][4], float exp_mult,
                                           float (&lse)[kMTiles][2]) {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float inv;
        row_scale(mi, half, exp_mult, &inv, &lse[mi][half]);
#pragma unroll
        for (int di = 0; di < kDTiles; ++di) {
          acc[mi][di][2 * half] *= inv;
          acc[mi][di][2 * half + 1] *= inv;
        }
      }
    }
  }
};

}  // namespace flashattn::cuda
