// Element-wise and reduction helpers over one row of a float tile, written so that g++ -O3
// vectorizes them without -ffast-math: exp and tanh the vectorizer can inline (the std:: ones are
// libm calls), and max / sum reductions over fixed lanes (a plain `sum += x[j]` is not vectorized,
// because that would reassociate the sum). Lane order is fixed, so results do not depend on
// threads or machine.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace flashattn::cpu {

// exp(x) for float, within 2 ulp on [−86.5, 88.7], for x ≤ log(FLT_MAX) = 88.72 (the softmax's
// x = score − row max ≤ 0, −inf and NaN included): exp(x < −86.5) = 0 (the true value is below
// 3e-38, nothing next to a softmax's max term of 1), exp(NaN) = NaN. Cody–Waite reduction
// x = n·ln2 + r, |r| ≤ ln2/2, Cephes' degree-6 polynomial for exp(r), 2^n built in the exponent
// bits. n is rounded by the 1.5·2²³ trick, never by a float→int conversion (undefined for NaN).
inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;       // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi exact in 10 bits
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5·2²³: adding it rounds to an integer in the low bits
  constexpr float kMinArg = -86.5f;           // keeps 2^(n−1) a normal float
  const float xc = x < kMinArg ? kMinArg : x;
  const float t = xc * kLog2e + kRoundMagic;
  const float n = t - kRoundMagic;
  uint32_t t_bits;
  std::memcpy(&t_bits, &t, 4);
  const uint32_t n_bits = t_bits - 0x4b400000u;  // n as a two's-complement integer (bits of kRoundMagic)
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  // 2^n as 2·2^(n−1): n = 128 (x near log(FLT_MAX)) still has a finite exponent field.
  const uint32_t half_scale_bits = (n_bits + 126u) << 23;
  float half_scale;
  std::memcpy(&half_scale, &half_scale_bits, 4);
  const float y = p * half_scale * 2.f;
  return x < kMinArg ? 0.f : y;
}

// exp(x) for every float: exp_nonpositive's value up to log(FLT_MAX), +inf above it (the overflow
// branch the softmax's argument never needs).
inline float exp_poly(float x) {
  constexpr float kMaxArg = 88.72283f;  // log(FLT_MAX)
  const float y = exp_nonpositive(x > kMaxArg ? kMaxArg : x);
  return x > kMaxArg ? std::numeric_limits<float>::infinity() : y;
}

// tanh(x) for float, within 3 ulp, vectorizable like exp_poly (score.hpp's cap runs it on every score).
// Cephes' scheme: an odd polynomial below |x| = 0.625, where 1 − 2/(e^{2|x|} + 1) would cancel,
// and that formula above it (→ ±1 as e^{2|x|} overflows). Both are computed and one selected.
inline float tanh_poly(float x) {
  constexpr float kPolyBound = 0.625f;
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float near_zero = p * z * x + x;
  const float far = std::copysign(1.f - 2.f / (exp_poly(2.f * ax) + 1.f), x);
  return ax < kPolyBound ? near_zero : far;
}

constexpr int kLanes = 16;  // one 512-bit (or two 256-bit) vectors of partial results

// max_j x[j]; NaN entries are ignored here (they still propagate through exp and the row sum),
// −inf when n = 0 or every entry is −inf.
inline float row_max(const float* __restrict x, int64_t n) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  for (; j < n; ++j) lane[0] = x[j] > lane[0] ? x[j] : lane[0];
  float m = lane[0];
  for (int l = 1; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
  return m;
}

// Σ_j x[j], summed in kLanes fixed partial sums (also a little more accurate than one running sum).
inline float row_sum(const float* __restrict x, int64_t n) {
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += x[j + l];
  for (; j < n; ++j) lane[0] += x[j];
  float s = 0.f;
  for (int l = 0; l < kLanes; ++l) s += lane[l];
  return s;
}

// Σ_j x[j]·y[j] in the same fixed lanes.
inline float row_dot(const float* __restrict x, const float* __restrict y, int64_t n) {
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += x[j + l] * y[j + l];
  for (; j < n; ++j) lane[0] += x[j] * y[j];
  float s = 0.f;
  for (int l = 0; l < kLanes; ++l) s += lane[l];
  return s;
}

// x[j] = exp(x[j] − shift).
inline void exp_shifted(float* __restrict x, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) x[j] = exp_poly(x[j] - shift);
}

// x[j] *= factor.
inline void scale_row(float* __restrict x, int64_t n, float factor) {
  for (int64_t j = 0; j < n; ++j) x[j] *= factor;
}

}  // namespace flashattn::cpu
