// The score tile both directions start from: S = Q·Kᵀ·scale, soft-capped, masked with −inf.
#pragma once

#include <algorithm>
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
inline void score_tile(float* s, const float* q, const float* kt, int64_t d, const TileCoords& t, float scale,
                       float softcap, const VisibleKeys& mask) {
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

}  // namespace flashattn::cpu
