// The score tile both directions start from: S = Q·Kᵀ·scale, soft-capped, masked with −inf. The
// score-level options (scale, soft cap) are read here and nowhere else on the CPU: by the backend's
// tiles (score_tile, score_chain) and by the reference's scalar rule (ScoreRule).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/mask.hpp"
#include "cpu/matmul.hpp"
#include "cpu/row_ops.hpp"
#include "cpu/tile.hpp"

namespace flashattn::cpu {

// A score tile's place in its sequence: query rows [row0, row0 + rows), keys [key0, key0 + cols).
struct TileCoords {
  int64_t row0, rows;
  int64_t key0, cols;
};

// s[r][c] (leading dimension kBlockN) = score of query row0 + r against key key0 + c:
//   (q_r · k_c) · scale, then softcap · tanh(· / softcap) when softcap > 0, then −inf where masked.
// q is the query tile [rows][d]; kt the transposed key tile [d][kBlockN].
inline void score_tile(float* s, const float* q, const float* kt, int64_t d, const TileCoords& t,
                       const AttentionOptions& options, const VisibleKeys& mask) {
  const float scale = softmax_scale(options), softcap = options.softcap;
  for (int64_t r = 0; r < t.rows; ++r) std::fill(s + r * kBlockN, s + r * kBlockN + t.cols, 0.f);
  matmul_acc(s, kBlockN, as_stored(q, d), kt, kBlockN, t.rows, t.cols, d);
  for (int64_t r = 0; r < t.rows; ++r) {
    float* s_row = s + r * kBlockN;
    if (softcap > 0.f) {
      const float pre = scale / softcap;  // softcap·tanh(x·scale / softcap) in one multiply
      for (int64_t c = 0; c < t.cols; ++c) s_row[c] = softcap * tanh_poly(s_row[c] * pre);
    } else {
      scale_row(s_row, t.cols, scale);
    }
    mask.mask_row(s_row, t.row0 + r, t.key0, t.cols);
  }
}

// The chain rule back through score_tile: d(score)/d(q·k) from the score s it produced (finite:
// callers pass 0 for masked entries, whose gradient is 0 anyway). scale, times 1 − tanh² =
// 1 − (s/softcap)² under softcap (d cap·tanh(x/cap)/dx).
struct ScoreChain {
  float scale, inv_cap;  // inv_cap 0 without softcap: the tanh term vanishes
  float operator()(float s) const {
    const float t = s * inv_cap;
    return (1.f - t * t) * scale;
  }
};
inline ScoreChain score_chain(const AttentionOptions& options) {
  return {softmax_scale(options), options.softcap > 0.f ? 1.f / options.softcap : 0.f};
}

// The same rule on one dot product x = q·k, as the reference states it, in its precision T (double
// for the oracle, float for the same-precision yardstick) with the standard library's tanh:
// S = x·scale, then cap·tanh(S / cap) when cap > 0; *slope = dS/d(x·scale), 1 − tanh² under the
// cap, else 1 (the chain-rule factor of the backward's dS, beside the scale).
template <class T>
struct ScoreRule {
  T scale = 1;
  T cap = 0;  // 0: off

  T operator()(T x, T* slope) const {
    T s = x * scale;
    *slope = 1;
    if (cap > 0) {
      const T t = std::tanh(s / cap);
      *slope = 1 - t * t;
      s = cap * t;
    }
    return s;
  }
};
template <class T>
ScoreRule<T> score_rule(const AttentionOptions& options) {
  return {static_cast<T>(softmax_scale(options)), static_cast<T>(options.softcap)};
}

}  // namespace flashattn::cpu
