// The score tile both directions start from: S = Q·Kᵀ·scale, soft-capped, masked with −inf. The
// score-level options (scale, soft cap) are read here and nowhere else on the CPU: by the backend's
// tiles (score_tile, score_chain) and by the reference's scalar rule (ScoreRule).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/bf16_tiles.hpp"
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

// The transform of a dot product x = q·k into a score, applied per element by tile_math.cpp's loops
// (inlined into each of its instruction-set clones): x·scale, or cap·tanh(x·scale / cap) with a cap.
// for_each_form(loop) calls loop(f) with the per-element function of this call's form, so that the
// caller's loop is instantiated once per form with no per-element branch.
struct ScoreTransform {
  float scale, cap, pre;  // pre = scale / cap (cap > 0)

  template <class Loop>
  void for_each_form(Loop&& loop) const {
    if (cap > 0.f) {
      const float c = cap, p = pre;
      loop([c, p](float x) { return c * tanh_poly(x * p); });
    } else {
      const float k = scale;
      loop([k](float x) { return x * k; });
    }
  }
};
inline ScoreTransform score_transform(const AttentionOptions& options) {
  const float scale = softmax_scale(options), cap = options.softcap;
  return {scale, cap, cap > 0.f ? scale / cap : 0.f};
}

// Rows [0, keys) × columns [0, queries) of a transposed tile set to 0, for a product to add into.
inline void clear_tile(float* st, int64_t keys, int64_t queries) {
  for (int64_t j = 0; j < keys; ++j) std::fill(st + j * kBlockM, st + j * kBlockM + queries, 0.f);
}

// st holds the dot products q·k of a tile: transform them into scores, then −inf where masked.
inline void finish_score_tile(float* st, const TileCoords& t, const AttentionOptions& options,
                              const VisibleKeys& mask) {
  finish_scores(st, t.cols, t.rows, score_transform(options));
  for (int64_t j = 0; j < t.cols; ++j) mask.mask_key(st + j * kBlockM, t.key0 + j, t.row0, t.rows);
}

// The score tile, transposed: st[j * kBlockM + i] = score of query row0 + i against key key0 + j:
//   (q_i · k_j) · scale, then softcap · tanh(· / softcap) when softcap > 0, then −inf where masked.
// keys is the key block [cols][d] as stored (read in place: Sᵀ = K·Qᵀ needs no transposed copy of
// K); qt the query block transposed [d][kBlockM].
inline void score_tile(float* st, RowBlock keys, const float* qt, int64_t d, const TileCoords& t,
                       const AttentionOptions& options, const VisibleKeys& mask) {
  clear_tile(st, t.cols, t.rows);
  matmul_acc(st, kBlockM, as_stored(keys.data, keys.ld), qt, kBlockM, t.cols, t.rows, d);
  finish_score_tile(st, t, options, mask);
}

// The same from bf16 operands (bf16_tiles.hpp): the key block as stored and the query block
// transposed in pairs [d / 2][kBlockM].
inline void score_tile_bf16(float* st, Bf16Block keys, const uint32_t* qt_pairs, int64_t d, const TileCoords& t,
                            const AttentionOptions& options, const VisibleKeys& mask) {
  clear_tile(st, t.cols, t.rows);
  matmul_acc_bf16(st, kBlockM, keys.data, keys.ld, qt_pairs, kBlockM, t.cols, t.rows, d);
  finish_score_tile(st, t, options, mask);
}

// The chain rule back through score_tile (tile_math.cpp's probs_and_dscores applies it): d(score)/d(q·k) from the score s it produced (finite:
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
