// The tile loop's vector math (tile_math.hpp), one source compiled per instruction set: GCC's
// target_clones emits an AVX-512, an AVX2 + FMA and a baseline body of each function and an ifunc
// resolver that picks one when the library is loaded. The inline helpers they call (exp_poly,
// tanh_poly) are inlined into each clone, so they vectorize at that clone's width. Every loop runs
// along a tile row (the queries), in the same order on every clone: the clones differ in vector
// width and FMA contraction only, and a given machine always takes the same one.
#include "cpu/tile_math.hpp"

#include <cmath>
#include <limits>

#include "cpu/convert.hpp"
#include "cpu/row_ops.hpp"
#include "cpu/score.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define FLASHATTN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define FLASHATTN_F16C 1
#include <immintrin.h>
#else
#define FLASHATTN_CLONES
#define FLASHATTN_F16C 0
#endif

namespace flashattn::cpu {
namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}

FLASHATTN_CLONES
void finish_scores(float* st, int64_t keys, int64_t queries, const ScoreTransform& transform) {
  transform.for_each_form([&](auto score) {
    for (int64_t j = 0; j < keys; ++j) {
      float* __restrict row = st + j * kBlockM;
      for (int64_t i = 0; i < queries; ++i) row[i] = score(row[i]);
    }
  });
}

FLASHATTN_CLONES
void fold_scores(float* st, int64_t keys, int64_t queries, float* running_max, float* running_sum, float* acc_t,
                 int64_t dv) {
  float m_new[kBlockM], shift[kBlockM], rescale[kBlockM], block_sum[kBlockM];
  for (int64_t i = 0; i < queries; ++i) m_new[i] = running_max[i];
  // NaN scores are ignored by the max (they still propagate through exp and the sum).
  for (int64_t j = 0; j < keys; ++j) {
    const float* __restrict row = st + j * kBlockM;
    for (int64_t i = 0; i < queries; ++i) m_new[i] = row[i] > m_new[i] ? row[i] : m_new[i];
  }
  for (int64_t i = 0; i < queries; ++i) {
    // A query that has seen no key yet has m = −inf; shifting by 0 instead keeps exp(−inf − (−inf))
    // = NaN out: its masked scores give P = exp(−inf) = 0 and its (zero) state rescales by 0.
    shift[i] = m_new[i] == -kInf ? 0.f : m_new[i];
    rescale[i] = exp_nonpositive(running_max[i] - shift[i]);
    block_sum[i] = 0.f;
  }
  for (int64_t j = 0; j < keys; ++j) {
    float* __restrict row = st + j * kBlockM;
    for (int64_t i = 0; i < queries; ++i) {
      const float p = exp_nonpositive(row[i] - shift[i]);
      row[i] = p;
      block_sum[i] += p;
    }
  }
  int moved = 0;  // rows whose max rose: only then is the accumulator rescaled (else by exactly 1)
  for (int64_t i = 0; i < queries; ++i) {
    moved |= m_new[i] != running_max[i];
    running_sum[i] = running_sum[i] * rescale[i] + block_sum[i];
    running_max[i] = m_new[i];
  }
  if (!moved) return;
  for (int64_t c = 0; c < dv; ++c) {
    float* __restrict acc_row = acc_t + c * kBlockM;
    for (int64_t i = 0; i < queries; ++i) acc_row[i] *= rescale[i];
  }
}

FLASHATTN_CLONES
void finish_output(const float* acc_t, int64_t dv, int64_t queries, const float* running_max,
                   const float* running_sum, float* out, float* lse) {
  float inv_sum[kBlockM];
  for (int64_t i = 0; i < queries; ++i) inv_sum[i] = running_sum[i] == 0.f ? 0.f : 1.f / running_sum[i];
  for (int64_t i = 0; i < queries; ++i) {
    float* __restrict out_row = out + i * dv;
    const bool fully_masked = running_sum[i] == 0.f;
    for (int64_t c = 0; c < dv; ++c) out_row[c] = fully_masked ? 0.f : acc_t[c * kBlockM + i] * inv_sum[i];
  }
  if (lse == nullptr) return;
  for (int64_t i = 0; i < queries; ++i)
    lse[i] = running_sum[i] == 0.f ? kInf : running_max[i] + std::log(running_sum[i]);
}

FLASHATTN_CLONES
void fold_score_rows(float* s, int64_t rows, int64_t keys, float* running_max, float* running_sum, float* acc,
                     int64_t dv) {
  for (int64_t i = 0; i < rows; ++i) {
    float* __restrict row = s + i * kBlockN;
    const float block_max = row_max(row, keys);  // NaN scores ignored, as in fold_scores
    const float m_new = block_max > running_max[i] ? block_max : running_max[i];
    const float shift = m_new == -kInf ? 0.f : m_new;  // no key seen yet: exp(−inf − 0) = 0, not NaN
    const float rescale = exp_nonpositive(running_max[i] - shift);
    for (int64_t j = 0; j < keys; ++j) row[j] = exp_nonpositive(row[j] - shift);
    running_sum[i] = running_sum[i] * rescale + row_sum(row, keys);
    if (m_new != running_max[i]) scale_row(acc + i * dv, dv, rescale);  // else by exactly 1
    running_max[i] = m_new;
  }
}

FLASHATTN_CLONES
void finish_rows(float* acc, int64_t dv, int64_t rows, const float* running_max, const float* running_sum,
                 float* lse) {
  for (int64_t i = 0; i < rows; ++i) {
    const bool fully_masked = running_sum[i] == 0.f;
    const float inv_sum = fully_masked ? 0.f : 1.f / running_sum[i];
    float* __restrict out_row = acc + i * dv;
    for (int64_t c = 0; c < dv; ++c) out_row[c] = fully_masked ? 0.f : out_row[c] * inv_sum;
    if (lse != nullptr) lse[i] = fully_masked ? kInf : running_max[i] + std::log(running_sum[i]);
  }
}

FLASHATTN_CLONES
void probs_and_dscores(float* st, float* dpt, int64_t keys, int64_t queries, const float* lse, const float* delta,
                       const ScoreChain& score_chain) {
  const ScoreChain chain = score_chain;
  for (int64_t j = 0; j < keys; ++j) {
    float* __restrict s_row = st + j * kBlockM;
    float* __restrict ds_row = dpt + j * kBlockM;
    for (int64_t i = 0; i < queries; ++i) {
      const float s = s_row[i];
      const bool visible = s != -kInf;
      const float prob = visible ? exp_poly(s - lse[i]) : 0.f;
      s_row[i] = prob;
      ds_row[i] = prob * (ds_row[i] - delta[i]) * chain(visible ? s : 0.f);
    }
  }
}

FLASHATTN_CLONES
void transpose_into_tile_loops(float* dst, const float* src, int64_t ld, int64_t queries, int64_t cols) {
  for (int64_t i = 0; i < queries; ++i) {
    const float* __restrict row = src + i * ld;
    for (int64_t c = 0; c < cols; ++c) dst[c * kBlockM + i] = row[c];
  }
}

FLASHATTN_CLONES
void sum_transposed_tiles(float* dst, int64_t ld, const float* const* parts, int64_t n_parts, int64_t queries,
                          int64_t cols) {
  for (int64_t i = 0; i < queries; ++i) {
    float* __restrict row = dst + i * ld;
    for (int64_t c = 0; c < cols; ++c) {
      float sum = parts[0][c * kBlockM + i];
      for (int64_t s = 1; s < n_parts; ++s) sum += parts[s][c * kBlockM + i];
      row[c] = sum;
    }
  }
}

namespace {
// float_to_bf16 (convert.hpp) without a branch, so that the loops below vectorize: NaN stays a quiet
// NaN, everything else rounds to nearest even.
inline uint32_t bf16_bits(float f) {
  const uint32_t u = float_to_bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded;
}
}  // namespace

FLASHATTN_CLONES
void round_tile_bf16(uint16_t* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols,
                     int64_t cols_even) {
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* __restrict out = dst + r * ldd;
    const float* __restrict in = src + r * lds;
    for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<uint16_t>(bf16_bits(in[c]));
    for (int64_t c = cols; c < cols_even; ++c) out[c] = 0;
  }
}

FLASHATTN_CLONES
void pack_pairs_bf16(uint32_t* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r += 2) {
    uint32_t* __restrict out = dst + r / 2 * ldd;
    const float* __restrict even = src + r * lds;
    if (r + 1 < rows) {
      const float* __restrict odd = even + lds;
      for (int64_t c = 0; c < cols; ++c) out[c] = bf16_bits(even[c]) | bf16_bits(odd[c]) << 16;
    } else {
      for (int64_t c = 0; c < cols; ++c) out[c] = bf16_bits(even[c]);
    }
  }
}

FLASHATTN_CLONES
void interleave_bf16(uint32_t* dst, const uint16_t* even, const uint16_t* odd, int64_t n) {
  if (odd == nullptr) {
    for (int64_t c = 0; c < n; ++c) dst[c] = even[c];
    return;
  }
  for (int64_t c = 0; c < n; ++c) dst[c] = even[c] | uint32_t{odd[c]} << 16;
}

FLASHATTN_CLONES
void widen_bf16(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dst[c] = bf16_to_float(src[c]);
}

namespace {
FLASHATTN_CLONES
void widen_f16_loop(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dst[c] = f16_to_float(src[c]);
}

#if FLASHATTN_F16C
// The CPU's own conversion, eight halves an instruction (VCVTPH2PS: exact, subnormal halves too,
// whatever MXCSR.DAZ says; a signaling NaN comes out quiet, the one difference from f16_to_float).
__attribute__((target("avx,f16c"))) void widen_f16_f16c(float* dst, const uint16_t* src, int64_t n) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    _mm256_storeu_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c))));
  widen_f16_loop(dst + c, src + c, n - c);
}
#endif
}  // namespace

void widen_f16(float* dst, const uint16_t* src, int64_t n) {
#if FLASHATTN_F16C
  static const bool f16c = __builtin_cpu_supports("f16c");
  if (f16c) {
    widen_f16_f16c(dst, src, n);
    return;
  }
#endif
  widen_f16_loop(dst, src, n);
}

const char* tile_math_isa() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
  if (__builtin_cpu_supports("x86-64-v4")) return "x86-64-v4";
  if (__builtin_cpu_supports("x86-64-v3")) return "x86-64-v3";
#endif
  return "baseline";
}

}  // namespace flashattn::cpu
