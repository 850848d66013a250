// Rotary position embedding on a float row (the KV-cache call's q and appended keys): pairs of
// entries (x0, x1) of the first rotary_dim ones turn by the angle of position `pos`:
//   x0' = x0·cos − x1·sin,  x1' = x0·sin + x1·cos,  cos/sin = tables[pos][pair].
// Interleaved pairs are (0, 1), (2, 3), ...; half-split (GPT-NeoX) pairs are (i, i + rotary_dim/2).
#pragma once

#include <cstdint>

#include "backend/params.hpp"
#include "cpu/tile.hpp"

namespace flashattn::cpu {

struct Rotary {
  const void* cos;  // [seqlen_rotary][rotary_dim / 2] of dtype, rows row_stride apart
  const void* sin;
  DType dtype;
  int64_t row_stride, rotary_dim;
  bool interleaved;

  static Rotary of(const KVCacheParams& p) {
    return {p.rotary_cos, p.rotary_sin, p.dtype, p.rotary_row_stride, p.rotary_dim, p.rotary_interleaved};
  }
  int64_t pairs() const { return rotary_dim / 2; }
};

// x[0, rotary_dim) rotated to position pos; `angles` is scratch of rotary_dim floats.
inline void rotate_row(float* x, const Rotary& r, int64_t pos, float* angles) {
  const int64_t half = r.pairs();
  float* cos = angles;
  float* sin = angles + half;
  load_row(cos, r.cos, r.dtype, pos * r.row_stride, half);
  load_row(sin, r.sin, r.dtype, pos * r.row_stride, half);
  for (int64_t i = 0; i < half; ++i) {
    float& x0 = r.interleaved ? x[2 * i] : x[i];
    float& x1 = r.interleaved ? x[2 * i + 1] : x[i + half];
    const float a = x0, b = x1;
    x0 = a * cos[i] - b * sin[i];
    x1 = a * sin[i] + b * cos[i];
  }
}

}  // namespace flashattn::cpu
