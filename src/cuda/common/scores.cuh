// What happens to a score tile between QKᵀ and the mask: the softmax scale and the soft cap.
//   plain    (scale > 0, no cap): scores stay raw dot products; the softmax folds the scale into its
//            exp2 as exp_mult = scale·log2(e) (one FFMA per element, no extra multiply).
//   prescale (scale ≤ 0, no cap): s ← s·scale·log2(e), exp_mult = 1. A non-positive scale would
//            flip the order the running max relies on (and 0·(−inf) is NaN), so such scores are
//            scaled before the mask instead.
//   softcap  (cap > 0): s ← cap·log2(e)·tanh(s·scale / cap), exp_mult = 1 — flash-attn's
//            cap·tanh(S/cap) on the scaled scores, before masking.
// The mode is a run-time argument: one uniform branch per tile. A kernel that runs only transforms
// of constant slope (a scale) may leave the others' code out (transform_scores<false>). This file
// holds the rule: the transform, its application to a register tile of scores, and its slope for
// the backward. It is the one place the CUDA kernels read the score-level options; they see only
// ScoreTransform.
#pragma once

#include <cstdint>

#include "flashattn/flashattn.hpp"
#include "cuda/ptx/math.cuh"

namespace flashattn::cuda {

// Scores and softmax work in base 2 (exp2, log2-domain logits); the LSE the kernels store is natural.
inline constexpr float kLog2e = 1.4426950408889634f;  // log2(e)
inline constexpr float kLn2 = 0.6931471805599453f;    // ln(2)
inline constexpr float kInfinity = __builtin_huge_valf();

enum class ScoreMode : int { plain = 0, prescale = 1, softcap = 2 };

struct ScoreTransform {
  ScoreMode mode = ScoreMode::plain;
  float in_mult = 1.f;   // prescale: scale·log2(e); softcap: scale / cap
  float out_mult = 1.f;  // softcap: cap·log2(e)
  float exp_mult = 1.f;  // for OnlineSoftmax: plain: scale·log2(e); else 1
};

// The host side: the transform for a given softmax scale and soft cap (0: off).
inline ScoreTransform make_score_transform(float softmax_scale, float softcap) {
  ScoreTransform t;
  if (softcap > 0.f) {
    t.mode = ScoreMode::softcap;
    t.in_mult = softmax_scale / softcap;
    t.out_mult = softcap * kLog2e;
  } else if (softmax_scale <= 0.f) {
    t.mode = ScoreMode::prescale;
    t.in_mult = softmax_scale * kLog2e;
  } else {
    t.exp_mult = softmax_scale * kLog2e;
  }
  return t;
}

// From the normalized options (softmax_scale set by validation): the one place the CUDA launchers
// read the score-level options.
inline ScoreTransform make_score_transform(const AttentionOptions& options) {
  return make_score_transform(options.softmax_scale.value_or(1.f), options.softcap);
}

// Largest exponent (base 2) tanh_accurate feeds to exp2: beyond it tanh is 1 in fp32 anyway, and the
// reciprocal below stays finite.
inline constexpr float kTanhMaxExp2 = 64.f;

// tanh(x) = 1 − 2 / (2^(2x·log2 e) + 1): one ex2 and one fast reciprocal. Absolute error ~3e-7
// (tanh.approx.f32 has ~2^-11 relative error, which a soft cap of 30–50 would turn into 1e-2 of
// logit error). Saturates to ±1; NaN stays NaN.
__device__ __forceinline__ float tanh_accurate(float x) {
  float z = 2.f * kLog2e * x;
  z = z > kTanhMaxExp2 ? kTanhMaxExp2 : z;
  return 1.f - __fdividef(2.f, ptx::exp2_approx(z) + 1.f);
}

// Applies the transform to a register tile of scores (any layout: it is elementwise).
// kSlopeVaries false: the caller's kernel runs only transforms of constant slope (its host side chose
// the kernel by score_slope_varies), so the others' code is left out of it (the soft cap's: two MUFU
// and a clamp per score, which would sit unused in the kernel's key loop).
template <bool kSlopeVaries = true, int kMTiles, int kNTiles>
__device__ __forceinline__ void transform_scores(float (&s)[kMTiles][kNTiles][4], const ScoreTransform& t) {
  if (kSlopeVaries && t.mode == ScoreMode::softcap) {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[mi][ni][c] = t.out_mult * tanh_accurate(s[mi][ni][c] * t.in_mult);
  } else if (t.mode == ScoreMode::prescale) {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[mi][ni][c] *= t.in_mult;
  }
}

// The backward's dS = P∘(dP − D) is the gradient of the transformed scores; back through the
// transform it takes the transform's slope. The scale's (and prescale's) is a constant, applied to
// dK and dQ at the end; the soft cap's, 1 − tanh², varies per score, so the backward keeps the
// scores (not P) to compute it and recomputes P from them (all such modes have exp_mult = 1). The
// kernels specialize on this at compile time, so that constant-slope runs pay nothing for it.
__host__ __device__ inline bool score_slope_varies(const ScoreTransform& t) { return t.mode == ScoreMode::softcap; }
// The same from the options: the host side's choice of a kernel with or without such code.
inline bool score_slope_varies(const AttentionOptions& options) { return score_slope_varies(make_score_transform(options)); }

// The varying slope (where score_slope_varies) at a log2-domain score x as the kernels keep it: the
// soft cap's x = cap·log2(e)·tanh(u) gives tanh(u) = x·inv_cap_log2 and slope 1 − tanh²(u); masked
// scores (−inf) clamp to tanh = −1, slope 0.
struct ScoreSlope {
  float inv_cap_log2 = 0.f;  // 1 / (cap·log2 e)

  __device__ __forceinline__ float at(float x) const {
    const float th = fmaxf(x * inv_cap_log2, -1.f);
    return fmaf(-th, th, 1.f);
  }
};

// A raw score through a transform whose slope varies (score_slope_varies), with that slope, in one
// pass: for a backward that holds S and dP in registers together (sm90), where ScoreSlope would
// recompute the slope from the kept score. x is log2-domain, as transform_scores leaves it.
struct SlopedScore {
  float x, slope;
};

__device__ __forceinline__ SlopedScore sloped_score(float s, const ScoreTransform& t) {
  const float th = tanh_accurate(s * t.in_mult);
  return {t.out_mult * th, fmaf(-th, th, 1.f)};
}

inline ScoreSlope make_score_slope(const ScoreTransform& t) {
  ScoreSlope slope;
  if (t.mode == ScoreMode::softcap) slope.inv_cap_log2 = 1.f / t.out_mult;
  return slope;
}

}  // namespace flashattn::cuda
